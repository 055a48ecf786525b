// TcpTransport: the progress loop, message matching and the data path.
#include "transport/tcp/tcp_transport.h"

#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status.h"
#include "transport/liveness.h"
#include "transport/tcp/tcp_state.h"

namespace ddp::transport::tcp {
namespace {

constexpr absl::Duration kTick = absl::Milliseconds(100);
constexpr int kMaxEvents = 64;
// How long a waiting caller polls the sockets itself before sleeping until the background
// thread completes its request.
constexpr absl::Duration kSpinBeforeSleep = absl::Microseconds(200);
// Idle polling rounds before each further round also yields the core. Early yielding matters
// when the scheduler has put two ranks on one core (common right after they start): without it
// each exchange costs a full spin budget (measured: 4 KiB allreduce 2 ranks, worst of six runs
// 127 us with 256 rounds, 38 us with 8).
constexpr int kPollRoundsBeforeYield = 8;
// With more ranks than cores, polling yields the core each round, so it can afford to go on
// longer: sleeping would hand the next event to a thread that must first be scheduled.
constexpr absl::Duration kSpinOversubscribed = absl::Milliseconds(1);
// After a caller stops polling (without going to sleep) the background thread stays parked this
// long, so that a loop of short collectives never has it wake up for their events.
constexpr absl::Duration kLinger = absl::Milliseconds(1);
constexpr absl::Duration kFlushOnShutdown = absl::Seconds(10);

}  // namespace

// ---- construction, public API -------------------------------------------------------------

TcpTransport::TcpTransport(TcpConfig config) : config_(std::move(config)) {}

absl::StatusOr<std::unique_ptr<TcpTransport>> TcpTransport::Create(TcpConfig config) {
  if (config.size < 1 || config.rank < 0 || config.rank >= config.size) {
    return absl::InvalidArgumentError("TcpTransport: bad rank/size");
  }
  if (config.streams < 1) config.streams = 1;
  std::unique_ptr<TcpTransport> t(new TcpTransport(std::move(config)));
  const TcpConfig& c = t->config_;
  DDP_ASSIGN_OR_RETURN(t->listener_, net::Listen(c.listen_ip, 0, &t->listen_port_));
  t->epoll_ = net::Fd(::epoll_create1(EPOLL_CLOEXEC));
  if (!t->epoll_.valid()) return ErrnoError("epoll_create1");
  t->wake_fd_ = net::Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!t->wake_fd_.valid()) return ErrnoError("eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = &t->listener_;
  if (::epoll_ctl(t->epoll_.get(), EPOLL_CTL_ADD, t->listener_.get(), &ev) != 0) {
    return ErrnoError("epoll_ctl");
  }
  ev.data.ptr = &t->wake_fd_;
  if (::epoll_ctl(t->epoll_.get(), EPOLL_CTL_ADD, t->wake_fd_.get(), &ev) != 0) {
    return ErrnoError("epoll_ctl");
  }
  for (int r = 0; r < c.size; ++r) {
    auto peer = std::make_unique<Peer>();
    peer->streams.assign(static_cast<size_t>(c.streams), nullptr);
    t->peers_.push_back(std::move(peer));
  }
  t->addresses_.assign(static_cast<size_t>(c.size), "?");
  t->hosts_.assign(static_cast<size_t>(c.size), "?");
  t->hosts_[static_cast<size_t>(c.rank)] = c.hostname;
  t->left_.reset(new std::atomic<bool>[static_cast<size_t>(c.size)]());
  t->thread_ = std::thread([p = t.get()] { p->Run(); });
  return t;
}

TcpTransport::~TcpTransport() { Shutdown().IgnoreError(); }

std::string TcpTransport::listen_address() const {
  return net::JoinHostPort(config_.listen_ip, listen_port_);
}

std::string TcpTransport::PeerName(int peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (peer < 0 || peer >= config_.size) return absl::StrCat("rank ", peer);
  return absl::StrCat("rank ", peer, " (", hosts_[static_cast<size_t>(peer)], ", ",
                      addresses_[static_cast<size_t>(peer)], ")");
}

bool TcpTransport::PeerLeft(int peer) const {
  return peer >= 0 && peer < config_.size && left_[static_cast<size_t>(peer)].load();
}

absl::Status TcpTransport::health() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void TcpTransport::SetDescriptorFormatter(DescriptorFormatter formatter) {
  std::lock_guard<std::mutex> lock(mu_);
  formatter_ = std::move(formatter);
}

void TcpTransport::Wake() {
  const uint64_t one = 1;
  ssize_t unused = ::write(wake_fd_.get(), &one, sizeof(one));
  (void)unused;
}

RequestPtr TcpTransport::Isend(int peer, uint64_t tag, const Descriptor& descriptor,
                               const void* data, size_t bytes) {
  auto request = std::make_shared<Request>();
  if (!ValidPeer(peer)) {
    request->Complete(absl::InvalidArgumentError(absl::StrCat("send to invalid peer ", peer)));
    return request;
  }
  SendOp op;
  op.request = request;
  FrameHeader h;
  h.tag = tag;
  h.length = bytes;
  h.descriptor = descriptor;
  EncodeFrameHeader(h, op.header);
  op.data = static_cast<const char*>(data);
  op.bytes = bytes;
  std::lock_guard<std::mutex> engine(engine_mu_);
  if (failed_.load()) {
    request->Complete(health());
  } else {
    // The caller's thread writes straight away when the stream is idle: no hand-off.
    PostSend(peer, std::move(op));
  }
  return request;
}

RequestPtr TcpTransport::Irecv(int peer, uint64_t tag, const Descriptor& descriptor, void* data,
                               size_t bytes) {
  auto request = std::make_shared<Request>();
  if (!ValidPeer(peer)) {
    request->Complete(absl::InvalidArgumentError(absl::StrCat("receive from invalid peer ", peer)));
    return request;
  }
  std::lock_guard<std::mutex> engine(engine_mu_);
  if (failed_.load()) {
    request->Complete(health());
  } else {
    PostRecv(peer, RecvOp{request, tag, descriptor, static_cast<char*>(data), bytes});
  }
  return request;
}

absl::Status TcpTransport::Wait(Request* request) {
  if (request->Test()) return request->status();
  // Drive progress from this thread for a short while: the reply to a small message usually
  // arrives within microseconds, and handling it here saves two thread wake-ups. Meanwhile the
  // background thread stays parked so that the two do not fight over the sockets.
  pollers_.fetch_add(1);
  caller_sleeping_.store(false);
  const absl::Time spin_until =
      absl::Now() + (oversubscribed_ ? kSpinOversubscribed : kSpinBeforeSleep);
  // With more ranks than cores the peer we wait for may need this core: yield at once.
  const int yield_after = oversubscribed_ ? 0 : kPollRoundsBeforeYield;
  epoll_event events[kMaxEvents];
  int idle_rounds = 0;
  while (!request->Test()) {
    if (engine_mu_.try_lock()) {
      const int n = ::epoll_wait(epoll_.get(), events, kMaxEvents, 0);
      if (n > 0) HandleEvents(events, n);
      engine_mu_.unlock();
      idle_rounds = n > 0 ? 0 : idle_rounds + 1;
    }
    if (request->Test()) break;
    if ((idle_rounds & 63) == 63 && absl::Now() > spin_until) break;
    if (idle_rounds > yield_after) {
      // The peer we wait for may share this core (more ranks than cores): let it run.
      sched_yield();
    } else {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
  }
  const bool done = request->Test();
  last_poll_end_ns_.store(absl::GetCurrentTimeNanos());
  if (!done) caller_sleeping_.store(true);
  if (pollers_.fetch_sub(1) == 1 && !done) {
    // Going to sleep: the background thread must take over at once.
    std::lock_guard<std::mutex> lock(park_mu_);
    park_cv_.notify_one();
  }
  return request->Wait();
}

void TcpTransport::Abort(const absl::Status& reason) {
  std::lock_guard<std::mutex> engine(engine_mu_);
  Fail(reason.ok() ? absl::AbortedError("aborted") : reason);
}

absl::Status TcpTransport::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  Wake();
  {
    std::lock_guard<std::mutex> lock(park_mu_);
    park_cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  return absl::OkStatus();
}

// ---- progress loop ------------------------------------------------------------------------

bool TcpTransport::CallerActive() const {
  if (pollers_.load() > 0) return true;
  if (caller_sleeping_.load()) return false;
  return absl::GetCurrentTimeNanos() - last_poll_end_ns_.load() < absl::ToInt64Nanoseconds(kLinger);
}

void TcpTransport::HandleEvents(const epoll_event* events, int n) {
  for (int i = 0; i < n; ++i) {
    void* ptr = events[i].data.ptr;
    if (ptr == &listener_) {
      AcceptNew();
    } else if (ptr == &wake_fd_) {
      uint64_t value;
      ssize_t unused = ::read(wake_fd_.get(), &value, sizeof(value));
      (void)unused;
    } else {
      auto* s = static_cast<Stream*>(ptr);
      if (s->state == StreamState::kOpen) {
        OnStreamEvent(s, events[i].events);
      } else if (s->state != StreamState::kClosed) {
        OnHandshakeEvent(s, events[i].events);
      }
    }
  }
}

void TcpTransport::Run() {
  epoll_event events[kMaxEvents];
  absl::Time next_tick = absl::Now() + kTick;
  absl::Time flush_deadline = absl::InfiniteFuture();
  bool said_bye = false;
  while (true) {
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping = stopping_;
    }
    if (stopping) {
      std::lock_guard<std::mutex> engine(engine_mu_);
      if (!said_bye) {
        said_bye = true;
        if (!failed_.load()) SendByeFrames();
        flush_deadline = absl::Now() + std::min(kFlushOnShutdown, config_.timeout);
      }
      if (!SendsPending() || absl::Now() > flush_deadline) break;
    }
    // While callers drive progress (polling now, or within the last kLinger and not asleep),
    // stay parked: waking up for their events would only steal their core. Keep ticking.
    while (!stopping && CallerActive()) {
      {
        std::unique_lock<std::mutex> lock(park_mu_);
        park_cv_.wait_for(lock, absl::ToChronoMicroseconds(kLinger));
      }
      const absl::Time now = absl::Now();
      if (now >= next_tick) {
        std::lock_guard<std::mutex> engine(engine_mu_);
        CheckDeadlines(now);
        next_tick = now + kTick;
      }
      std::lock_guard<std::mutex> lock(mu_);
      stopping = stopping_;
    }
    const int n = ::epoll_wait(epoll_.get(), events, kMaxEvents,
                               stopping ? 10 : static_cast<int>(absl::ToInt64Milliseconds(kTick)));
    // Level-triggered: if a caller started polling meanwhile, these events are still pending
    // for it; leave them rather than make it wait for this thread.
    const bool leave_to_caller = pollers_.load() > 0 && !stopping;
    std::lock_guard<std::mutex> engine(engine_mu_);
    if (n > 0 && !leave_to_caller) HandleEvents(events, n);
    const absl::Time now = absl::Now();
    if (now >= next_tick) {
      CheckDeadlines(now);
      next_tick = now + kTick;
    }
  }
  // Anything still pending will never complete now.
  std::lock_guard<std::mutex> engine(engine_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    if (failure_.ok()) {
      failure_ = absl::FailedPreconditionError("transport is shut down");
      failed_.store(true);
    }
  }
  FailAllPending();
  for (auto& s : streams_) {
    if (s->fd.valid()) ::shutdown(s->fd.get(), SHUT_RDWR);
    s->fd.Reset();
  }
}

bool TcpTransport::SendsPending() const {
  for (const auto& s : streams_) {
    if (s->state == StreamState::kOpen && !s->sendq.empty()) return true;
  }
  return false;
}

bool TcpTransport::WaitingOn(const Peer& p) const {
  for (const auto& [tag, ops] : p.posted) {
    if (!ops.empty() && !IsNotificationTag(tag)) return true;
  }
  for (const Stream* s : p.streams) {
    if (s == nullptr) continue;
    for (const SendOp& op : s->sendq) {
      if (op.request) return true;
    }
    if (s->in_payload && s->current.has_value()) return true;
  }
  for (const auto& [tag, list] : p.unexpected) {
    for (const auto& u : list) {
      if (u->claimed) return true;
    }
  }
  return false;
}

void TcpTransport::MarkBusy(Peer& p, absl::Time now) {
  if (!WaitingOn(p)) p.last_progress = now;
}

void TcpTransport::SendHeartbeats(absl::Time now) {
  const absl::Duration interval =
      std::clamp(config_.timeout / 5, absl::Milliseconds(50), absl::Seconds(5));
  bool waiting = false;
  for (const auto& peer : peers_) waiting |= WaitingOn(*peer);
  for (auto& peer : peers_) {
    Stream* s = peer->streams.empty() ? nullptr : peer->streams[0];
    if (s == nullptr || s->state != StreamState::kOpen || peer->bye) continue;
    if (!s->sendq.empty() || now - peer->last_sent < interval) continue;
    SendOp op;
    FrameHeader h;
    h.type = FrameType::kHeartbeat;
    h.reserved = waiting ? kWaitingFlag : 0;
    EncodeFrameHeader(h, op.header);
    s->sendq.push_back(std::move(op));
    peer->last_sent = now;
    absl::Status status = WriteSome(s);
    if (!status.ok()) {
      Fail(status);
      return;
    }
    UpdateInterest(s);
  }
}

void TcpTransport::CheckDeadlines(absl::Time now) {
  // Dials refused because the peer was not listening yet.
  std::vector<Redial> due;
  for (auto it = redials_.begin(); it != redials_.end();) {
    if (it->at <= now) {
      due.push_back(*it);
      it = redials_.erase(it);
    } else {
      ++it;
    }
  }
  for (const Redial& r : due) {
    if (!failed_.load()) StartDial(r.peer, r.index);
  }
  // Handshakes and dials.
  for (auto& s : streams_) {
    if (s->state == StreamState::kOpen || s->state == StreamState::kClosed) continue;
    if (now < s->deadline) continue;
    if (s->dialer) {
      Fail(PeerError(s->peer, absl::StatusCode::kDeadlineExceeded,
                     absl::StrCat("could not connect and authenticate within the start timeout "
                                  "(state ",
                                  static_cast<int>(s->state), ")")));
    } else {
      DropStream(s.get(),
                 absl::DeadlineExceededError("did not authenticate in time (not a libddp peer?)"));
    }
  }
  // Connections that never came.
  if (connect_deadline_ != absl::InfiniteFuture() && now > connect_deadline_ && !AllConnected() &&
      !failed_.load()) {
    std::string missing;
    for (int r = 0; r < config_.size; ++r) {
      if (r == config_.rank) continue;
      const Peer& p = *peers_[static_cast<size_t>(r)];
      if (std::find(p.streams.begin(), p.streams.end(), nullptr) != p.streams.end()) {
        absl::StrAppend(&missing, missing.empty() ? "" : ", ", r, " (", p.host, ")");
      }
    }
    Fail(absl::DeadlineExceededError(
        absl::StrCat("timed out connecting to ranks ", missing,
                     "; are they running, and reachable from this host?")));
  }
  if (failed_.load()) return;
  SendHeartbeats(now);
  // Peers this rank waits on. A peer that sends nothing at all (not even heartbeats) is dead or
  // stopped; one that is alive and not itself waiting has not joined the operation; one that is
  // alive and waiting is blocked behind someone else, whom another rank will name first, so it
  // is only blamed after three timeouts.
  for (int r = 0; r < config_.size; ++r) {
    Peer& p = *peers_[static_cast<size_t>(r)];
    if (!WaitingOn(p)) continue;
    const absl::Duration silent = now - std::max(p.last_heard, p.last_progress);
    const absl::Duration stalled = now - p.last_progress;
    const std::string blame = Blame(silent, stalled, p.remote_waiting, config_.timeout);
    if (!blame.empty()) {
      Fail(PeerError(r, absl::StatusCode::kDeadlineExceeded, blame));
      return;
    }
  }
  // Forget closed handshake-only streams.
  streams_.erase(std::remove_if(streams_.begin(), streams_.end(),
                                [](const std::unique_ptr<Stream>& s) {
                                  return s->state == StreamState::kClosed && s->peer < 0;
                                }),
                 streams_.end());
}

// ---- failure ------------------------------------------------------------------------------

absl::Status TcpTransport::PeerError(int peer, absl::StatusCode code,
                                     absl::string_view what) const {
  return absl::Status(code, absl::StrCat(PeerName(peer), ": ", what));
}

std::string TcpTransport::Describe(const Descriptor& descriptor) const {
  DescriptorFormatter formatter;
  {
    std::lock_guard<std::mutex> lock(mu_);
    formatter = formatter_;
  }
  if (formatter) return formatter(descriptor);
  std::string hex;
  for (uint8_t b : descriptor.bytes) absl::StrAppend(&hex, absl::Hex(b, absl::kZeroPad2));
  return hex;
}

void TcpTransport::Fail(const absl::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return;
    failure_ = status;
    failed_.store(true);
    connected_cv_.notify_all();
  }
  DDP_LOG(kError, "%s", status.ToString());
  FailAllPending();
  SendAbortFrames(status);
}

void TcpTransport::FailAllPending() {
  const absl::Status why = health();
  for (auto& peer : peers_) {
    for (auto& [tag, list] : peer->posted) {
      for (RecvOp& op : list) op.request->Complete(why);
    }
    peer->posted.clear();
    for (auto& [tag, list] : peer->unexpected) {
      for (auto& u : list) {
        if (u->claimed) u->claimed->request->Complete(why);
        u->claimed.reset();
      }
    }
  }
  for (auto& s : streams_) {
    if (s->current) {
      s->current->request->Complete(why);
      s->current.reset();
      s->target = nullptr;  // keep draining the payload into nowhere
    }
    // A frame already partly on the wire cannot be finished without the caller's buffer, which
    // the caller may free once its request fails: such a stream can only be cut.
    bool cut = false;
    if (!s->sendq.empty() && s->sendq.front().written > 0 && s->sendq.front().request) {
      cut = true;
    }
    std::deque<SendOp> keep;
    for (SendOp& op : s->sendq) {
      if (op.request) {
        op.request->Complete(why);
      } else if (!cut) {
        keep.push_back(std::move(op));  // our own control frames stay
      }
    }
    s->sendq.swap(keep);
    if (cut && s->fd.valid()) ::shutdown(s->fd.get(), SHUT_RDWR);
  }
}

void TcpTransport::SendAbortFrames(const absl::Status& reason) {
  const std::string text =
      absl::StrCat(reason.message()).substr(0, static_cast<size_t>(kMaxAbortBytes));
  for (auto& s : streams_) {
    if (s->state != StreamState::kOpen || !s->fd.valid()) continue;
    SendOp op;
    auto owned = std::make_shared<std::string>(text);
    FrameHeader h;
    h.type = FrameType::kAbort;
    h.length = owned->size();
    EncodeFrameHeader(h, op.header);
    op.data = owned->data();
    op.bytes = owned->size();
    op.owned = std::move(owned);
    s->sendq.push_back(std::move(op));
    WriteSome(s.get()).IgnoreError();
    UpdateInterest(s.get());
  }
}

void TcpTransport::SendByeFrames() {
  for (auto& s : streams_) {
    if (s->state != StreamState::kOpen || !s->fd.valid()) continue;
    SendOp op;
    FrameHeader h;
    h.type = FrameType::kBye;
    EncodeFrameHeader(h, op.header);
    s->sendq.push_back(std::move(op));
    absl::Status st = WriteSome(s.get());
    if (!st.ok()) s->sendq.clear();
    UpdateInterest(s.get());
  }
}

}  // namespace ddp::transport::tcp
