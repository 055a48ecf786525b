// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// TcpTransport: construction, the progress loop, waiting, failures and goodbyes.
#include "transport/tcp/tcp_transport.h"

#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status.h"
#include "common/thread_priority.h"
#include "common/wait.h"
#include "ddp/errors.h"
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
// longer: sleeping would hand the next event to a thread that must first be scheduled. But a
// wait for data still far away (a slow link, a peer computing) yields for nothing, CPU time
// the busy ranks need: the polling time adapts between these bounds, doubling after a wait that
// ended while polling and falling to a quarter after one that had to sleep (AdaptiveBudget, as the
// shared-memory transport's yields).
constexpr absl::Duration kMinSpinOversubscribed = absl::Microseconds(50);
constexpr absl::Duration kMaxSpinOversubscribed = absl::Milliseconds(1);
// After a caller stops polling (without going to sleep) the background thread stays parked this
// long, so that a loop of short collectives never has it wake up for their events.
constexpr absl::Duration kLinger = absl::Milliseconds(1);
constexpr absl::Duration kFlushOnShutdown = absl::Seconds(10);
// After a failure only the abort notices are worth the wait, and a peer whose link cannot take
// them in this long learns by its own timeout (tests/chaos: a throttled link kept a failed rank
// from exiting for another timeout).
constexpr absl::Duration kFlushAfterFailure = absl::Seconds(2);

CoreConfig Core(const TcpConfig& c) {
  CoreConfig core;
  core.rank = c.rank;
  core.size = c.size;
  core.timeout = c.timeout;
  core.kind = "tcp";
  core.waiting_group = c.waiting_group;
  return core;
}

}  // namespace

// ---- construction, public API -------------------------------------------------------------

TcpTransport::TcpTransport(TcpConfig config)
    : PeerTransport(Core(config)),
      config_(std::move(config)),
      spin_budget_ns_(absl::ToInt64Nanoseconds(kMinSpinOversubscribed),
                      absl::ToInt64Nanoseconds(kMaxSpinOversubscribed)) {}

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
    peer->address = "?";
    t->peers_.push_back(std::move(peer));
  }
  std::vector<std::string> hosts(static_cast<size_t>(c.size), "?");
  hosts[static_cast<size_t>(c.rank)] = c.hostname;
  t->SetHosts(std::move(hosts));
  t->addresses_.assign(static_cast<size_t>(c.size), "?");
  t->thread_ = std::thread([p = t.get()] { p->Run(); });
  return t;
}

TcpTransport::~TcpTransport() { Shutdown().IgnoreError(); }

std::string TcpTransport::listen_address() const {
  return net::JoinHostPort(config_.listen_ip, listen_port_);
}

std::string TcpTransport::PeerDetail(int peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  return addresses_[static_cast<size_t>(peer)];
}

void TcpTransport::Wake() {
  const uint64_t one = 1;
  ssize_t unused = ::write(wake_fd_.get(), &one, sizeof(one));
  (void)unused;
}

RequestPtr TcpTransport::Isend(int peer, uint64_t tag, const Descriptor& descriptor,
                               const void* data, size_t bytes) {
  if (RequestPtr refused = Refused(peer, "send to")) return refused;
  auto request = std::make_shared<Request>();
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
  if (RequestPtr refused = Refused(peer, "send to")) return refused;
  // The caller's thread writes straight away when the stream is idle: no hand-off.
  PostSend(peer, std::move(op));
  return request;
}

RequestPtr TcpTransport::Irecv(int peer, uint64_t tag, const Descriptor& descriptor, void* data,
                               size_t bytes) {
  if (RequestPtr refused = Refused(peer, "receive from")) return refused;
  auto request = std::make_shared<Request>();
  std::lock_guard<std::mutex> engine(engine_mu_);
  if (RequestPtr refused = Refused(peer, "receive from")) return refused;
  PostRecv(peer, PostedRecv{request, tag, descriptor, static_cast<char*>(data), bytes});
  return request;
}

void TcpTransport::PollLocked() {
  epoll_event events[kMaxEvents];
  int n;
  while ((n = ::epoll_wait(epoll_.get(), events, kMaxEvents, 0)) > 0) HandleEvents(events, n);
}

void TcpTransport::Settle() {
  std::lock_guard<std::mutex> engine(engine_mu_);
  PollLocked();
}

absl::Status TcpTransport::Wait(Request* request) {
  if (request->Test()) return request->status();
  // Drive progress from this thread for a short while: the reply to a small message usually
  // arrives within microseconds, and handling it here saves two thread wake-ups. Meanwhile the
  // background thread stays parked so that the two do not fight over the sockets. With more
  // ranks than cores the peer we wait for may need this core: yield at once.
  pollers_.fetch_add(1);
  caller_sleeping_.store(false);
  const int64_t spin_ns =
      oversubscribed_ ? spin_budget_ns_.value() : absl::ToInt64Nanoseconds(kSpinBeforeSleep);
  const absl::Time spin_until = absl::Now() + absl::Nanoseconds(spin_ns);
  Backoff backoff({oversubscribed_ ? 0 : kPollRoundsBeforeYield, 1 << 30});
  epoll_event events[kMaxEvents];
  while (!request->Test()) {
    if (engine_mu_.try_lock()) {
      const int n = ::epoll_wait(epoll_.get(), events, kMaxEvents, 0);
      if (n > 0) HandleEvents(events, n);
      engine_mu_.unlock();
      if (n > 0) backoff.Reset();
    }
    if (request->Test()) break;
    // Oversubscribed, every round: each yields the core, which may come back a time slice later.
    if ((oversubscribed_ || (backoff.idle_rounds() & 63) == 63) && absl::Now() > spin_until) {
      break;
    }
    backoff.Idle();
  }
  const bool done = request->Test();
  if (oversubscribed_) spin_budget_ns_.Update(spin_ns, /*slept=*/!done);
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
  FailLocked(reason.ok() ? absl::AbortedError("aborted") : reason);
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
  NameThisThread("ddp-tcp");
  ApplyCommThreadNice();
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
        if (!failed()) SendControlFrames(FrameType::kBye, ByeNotice(), -1);
        flush_deadline = absl::Now() + std::min(failed() ? kFlushAfterFailure : kFlushOnShutdown,
                                                config_.timeout);
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
  }
  const bool healthy = !failed();
  RecordFailure(absl::FailedPreconditionError("transport is shut down"));
  FailRequestsLocked(-1, health());
  // Peers that are alive end their side as soon as they read ours; a bound for those that do not.
  CloseStreams(healthy ? absl::Now() + std::min(kFlushOnShutdown, config_.timeout) : absl::Now());
}

// A socket closed with unread data, or one that data reaches after it was closed, answers with a
// reset, and a reset makes the peer's kernel drop what it has received from us but not yet
// handed to its reader: the last messages before our goodbye. So: end our side (FIN after all we
// sent), read and drop what the peers still send until they end theirs, then close.
void TcpTransport::CloseStreams(absl::Time deadline) {
  std::vector<pollfd> open;
  for (auto& s : streams_) {
    if (!s->fd.valid()) continue;
    ::shutdown(s->fd.get(), SHUT_WR);
    open.push_back({s->fd.get(), POLLIN, 0});
  }
  char sink[4096];
  while (!open.empty() && absl::Now() < deadline) {
    if (::poll(open.data(), open.size(), 10) < 0 && errno != EINTR) break;
    for (pollfd& p : open) {
      if (p.revents == 0) continue;
      const ssize_t r = ::recv(p.fd, sink, sizeof(sink), MSG_DONTWAIT);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        p.fd = -1;  // the peer has closed its end too
      }
    }
    open.erase(std::remove_if(open.begin(), open.end(), [](const pollfd& p) { return p.fd < 0; }),
               open.end());
  }
  for (auto& s : streams_) s->fd.Reset();
}

bool TcpTransport::SendsPending() const {
  for (const auto& s : streams_) {
    if (s->state == StreamState::kOpen && !s->sendq.empty()) return true;
  }
  return false;
}

bool TcpTransport::WaitingOn(const Peer& p) const {
  if (p.matcher.ExpectsData()) return true;
  for (const Stream* s : p.streams) {
    if (s == nullptr) continue;
    for (const SendOp& op : s->sendq) {
      if (op.request) return true;
    }
    if (s->in_payload &&
        (s->current.has_value() || (s->current_unexpected && s->current_unexpected->claimed))) {
      return true;
    }
  }
  return false;
}

bool TcpTransport::SendingTo(const Peer& p) const {
  for (const Stream* s : p.streams) {
    if (s == nullptr || s->state != StreamState::kOpen) continue;
    for (const SendOp& op : s->sendq) {
      if (op.request) return true;  // data (a control frame has no request)
    }
    // Bytes in the kernel not yet acknowledged (the heartbeats' own are acknowledged at once
    // on a working network).
    int queued = 0;
    if (::ioctl(s->fd.get(), SIOCOUTQ, &queued) == 0 && queued > 0) return true;
  }
  return false;
}

std::string TcpTransport::NetworkTrouble(int peer) {
  const Peer& p = *peers_[static_cast<size_t>(peer)];
  // It says it has data for this rank on the way, and none arrives (unless this rank holds its
  // streams back itself: a paused stream waits for a receive to be posted).
  const bool held_back = std::any_of(p.streams.begin(), p.streams.end(),
                                     [](const Stream* s) { return s != nullptr && s->paused; });
  if (live(peer).remote_sending && !held_back) {
    return "it has data for this rank on the way, by its heartbeats, and none arrives";
  }
  for (const Stream* s : p.streams) {
    if (s == nullptr || s->state != StreamState::kOpen) continue;
    tcp_info info{};
    socklen_t len = sizeof info;
    if (::getsockopt(s->fd.get(), IPPROTO_TCP, TCP_INFO, &info, &len) != 0) continue;
    // Unacknowledged segments are the sign: a stopped or busy peer's kernel still acknowledges
    // what arrives (a full receive buffer closes the window instead), so data stays unacknowledged
    // only when the path loses it.
    if (info.tcpi_unacked == 0) continue;
    const absl::Duration since_ack = absl::Milliseconds(info.tcpi_last_ack_recv);
    if (info.tcpi_retransmits == 0 && info.tcpi_backoff == 0 && since_ack <= config_.timeout) {
      continue;
    }
    return absl::StrCat(info.tcpi_unacked, " segments unacknowledged, ", info.tcpi_total_retrans,
                        " retransmitted, the last acknowledgement ",
                        absl::FormatDuration(since_ack), " ago");
  }
  return "";
}

bool TcpTransport::BlameCutOffLocked(absl::Time now) {
  absl::Duration stalled = absl::ZeroDuration();
  for (int r = 0; r < config_.size; ++r) {
    if (r == config_.rank || peer_state(r) != PeerState::kAlive) continue;
    if (WaitingOn(*peers_[static_cast<size_t>(r)])) {
      stalled = std::max(stalled, now - live(r).last_progress);
    }
  }
  if (stalled <= config_.timeout) return false;
  for (int r = 0; r < config_.size; ++r) {
    if (r == config_.rank || peer_state(r) != PeerState::kAlive) continue;
    const std::string trouble = NetworkTrouble(r);
    if (trouble.empty()) continue;
    PeerFailedLocked(r, PeerError(r, absl::StatusCode::kDeadlineExceeded,
                                  CutOffBlame(stalled, trouble, config_.timeout)));
    return true;
  }
  return false;
}

void TcpTransport::MarkBusy(int peer, absl::Time now) {
  if (!WaitingOn(*peers_[static_cast<size_t>(peer)])) live(peer).last_progress = now;
}

void TcpTransport::SendHeartbeats(absl::Time now) {
  // A rank still joining the job (at the store, connecting its other transports, dialling)
  // waits on the others: its peers that have joined must not blame it as alive but not taking
  // part, but the rank it waits for, whose failure its own error will then name (tests/chaos:
  // the rendezvous host dying while ranks meet).
  bool waiting = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    waiting = !connected_;
  }
  for (const auto& peer : peers_) waiting |= WaitingOn(*peer);
  waiting = WaitingInGroup(waiting);
  for (int r = 0; r < config_.size; ++r) {
    Peer& peer = *peers_[static_cast<size_t>(r)];
    Stream* s = peer.streams.empty() ? nullptr : peer.streams[0];
    if (s == nullptr || s->state != StreamState::kOpen || peer_state(r) != PeerState::kAlive) {
      continue;
    }
    if (!s->sendq.empty() || now - peer.last_sent < heartbeat_interval()) continue;
    SendOp op;
    FrameHeader h;
    h.type = FrameType::kHeartbeat;
    h.reserved =
        static_cast<uint16_t>((waiting ? kWaitingFlag : 0) | (SendingTo(peer) ? kSendingFlag : 0));
    EncodeFrameHeader(h, op.header);
    s->sendq.push_back(std::move(op));
    peer.last_sent = now;
    absl::Status status = WriteSome(s);
    if (!status.ok()) {
      PeerFailedLocked(r, status);
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
    if (!failed()) StartDial(r.peer, r.index);
  }
  // Handshakes and dials.
  for (auto& s : streams_) {
    if (s->state == StreamState::kOpen || s->state == StreamState::kClosed) continue;
    if (now < s->deadline) continue;
    if (s->dialer) {
      PeerFailedLocked(s->peer, PeerError(s->peer, absl::StatusCode::kDeadlineExceeded,
                                          absl::StrCat("could not connect and authenticate "
                                                       "within the start timeout (state ",
                                                       static_cast<int>(s->state), ")")));
    } else {
      DropStream(s.get(),
                 absl::DeadlineExceededError("did not authenticate in time (not a libddp peer?)"));
    }
  }
  // Connections that never came.
  if (connect_deadline_ != absl::InfiniteFuture() && now > connect_deadline_ && !AllConnected() &&
      !failed()) {
    std::string missing;
    std::vector<int> ranks;
    for (int r = 0; r < config_.size; ++r) {
      if (r == config_.rank) continue;
      const Peer& p = *peers_[static_cast<size_t>(r)];
      if (std::find(p.streams.begin(), p.streams.end(), nullptr) != p.streams.end()) {
        absl::StrAppend(&missing, missing.empty() ? "" : ", ", PeerName(r));
        ranks.push_back(r);
      }
    }
    const absl::Status late = WithRanks(absl::DeadlineExceededError(absl::StrCat(
                                            "timed out connecting to ", missing,
                                            "; are they running, and reachable from this host?")),
                                        ranks);
    if (rejoining_) {
      for (int r : ranks) DialFailedLocked(r, late);
    } else {
      FailLocked(late);
    }
  }
  if (failed()) return;
  SendHeartbeats(now);
  // Peers this rank waits on: see the blame rule (liveness.h).
  if (BlameLocked(
          now, [this](int r) { return WaitingOn(*peers_[static_cast<size_t>(r)]); },
          [this](int r) { return NetworkTrouble(r); })) {
    return;
  }
  if (BlameCutOffLocked(now)) return;
  // Forget closed handshake-only streams.
  streams_.erase(std::remove_if(streams_.begin(), streams_.end(),
                                [](const std::unique_ptr<Stream>& s) {
                                  return s->state == StreamState::kClosed && s->peer < 0;
                                }),
                 streams_.end());
}

// ---- failure ------------------------------------------------------------------------------

void TcpTransport::FailLocked(const absl::Status& status) {
  if (!RecordFailure(status)) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    connected_cv_.notify_all();
  }
  DDP_LOG(kError, "%s", status.ToString());
  FailRequestsLocked(-1, health());
  SendControlFrames(FrameType::kAbort, AbortNotice(status), -1);
}

void TcpTransport::IsolateLocked(int peer, const absl::Status& status) {
  FailRequestsLocked(peer, status);
  // Tell it why, if it still listens, then drop its connections.
  SendControlFrames(FrameType::kAbort, AbortNotice(status), peer);
  Peer& p = *peers_[static_cast<size_t>(peer)];
  for (Stream*& s : p.streams) {
    if (s != nullptr) CloseStream(s);
    s = nullptr;
  }
}

void TcpTransport::ReleaseUnexpected(Unexpected& u) {
  if (!u.counted) return;
  u.counted = false;
  unexpected_bytes_ -= u.length;
}

void TcpTransport::FailRequestsLocked(int peer, const absl::Status& why) {
  for (int r = 0; r < config_.size; ++r) {
    if (peer >= 0 && r != peer) continue;
    Peer& p = *peers_[static_cast<size_t>(r)];
    for (PostedRecv& op : p.matcher.TakeAllPosted()) op.request->Complete(why);
    p.matcher.DropEarly([&](Early& e) {
      if (e.buffered) ReleaseUnexpected(*e.buffered);
    });
  }
  for (auto& s : streams_) {
    if (peer >= 0 && s->peer != peer) continue;
    if (s->current) {
      s->current->request->Complete(why);
      s->current.reset();
      s->target = nullptr;  // keep draining the payload into nowhere
    }
    if (s->current_unexpected != nullptr) {
      if (s->current_unexpected->claimed) s->current_unexpected->claimed->request->Complete(why);
      s->current_unexpected->claimed.reset();
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

void TcpTransport::SendControlFrames(FrameType type, const std::string& payload, int peer) {
  auto owned = std::make_shared<std::string>(payload);
  for (auto& s : streams_) {
    if (s->state != StreamState::kOpen || !s->fd.valid()) continue;
    if ((peer >= 0 && s->peer != peer) || peer_state(s->peer) == PeerState::kLeft) continue;
    SendOp op;
    FrameHeader h;
    h.type = type;
    h.length = owned->size();
    EncodeFrameHeader(h, op.header);
    op.data = owned->data();
    op.bytes = owned->size();
    op.owned = owned;
    s->sendq.push_back(std::move(op));
    absl::Status st = WriteSome(s.get());
    if (!st.ok() && type == FrameType::kBye) s->sendq.clear();
    UpdateInterest(s.get());
  }
}

}  // namespace ddp::transport::tcp
