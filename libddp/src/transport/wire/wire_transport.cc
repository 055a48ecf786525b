// WireTransport: the message protocol, segmentation, progress and shutdown over a Wire.
#include "transport/wire/wire_transport.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/thread_priority.h"
#include "common/wait.h"

namespace ddp::transport::wire {
namespace {

// Control message layout (little endian, as every supported platform is):
//   u8 kind, u8 flags, u16 0, u32 segment size (kMessage), u64 sequence, then by kind:
//   kMessage: u64 tag, 16-byte descriptor, u64 length, u64 first data tag, [inline payload]
//   kAbort, kBye: a notice (notice.h)
//   kClearToSend: u64 first data tag (the receiver has posted the data receives)
// Heartbeats and aborts take effect on arrival; the others in sequence order.
enum Kind : uint8_t { kMessage = 1, kHeartbeat = 2, kBye = 3, kAbort = 4, kClearToSend = 5 };
constexpr uint8_t kInlineFlag = 1;
constexpr uint8_t kWaitingFlag = 2;
constexpr size_t kPrefix = 16;
constexpr size_t kSequenceAt = 8;  // stored as the message is posted
constexpr size_t kMessageHeader = kPrefix + 8 + 16 + 8 + 8;
// How many polls a settling wire gets to hand over what it already holds.
constexpr int kSettlePolls = 64;
// Yields before a waiting caller sleeps, where ranks outnumber CPUs (WireConfig::oversubscribed):
// between these bounds, by what the last waits found (WireTransport::yield_budget_).
constexpr int kMinYields = 16;
constexpr int kMaxYields = 1800;
// The progress thread's idle rounds, and shutdown's waits for goodbyes and for the wire to drain:
// a few yields, then sleeps from 10 us doubling to 0.5 ms between polls.
constexpr Backoff::Policy kIdleBackoff{0, 4, absl::Microseconds(10), absl::Microseconds(500)};
// Control messages overtake one another only on a wire without ordering (libfabric RDM), and
// only by what their sender has in flight at once. A peer this far ahead of its own sequence,
// or whose early messages hold this much, is broken or hostile: it fails instead of growing the
// map without bound.
constexpr uint64_t kMaxEarlyAhead = uint64_t{1} << 16;
constexpr size_t kMaxEarlyBytes = size_t{64} << 20;

// The fields every control message starts with (kPrefix bytes).
struct ControlPrefix {
  Kind kind = kMessage;
  uint8_t flags = 0;
  uint32_t segment = 0;
  uint64_t seq = 0;
};

// A control message's prefix, with room for `total` bytes in all; the sequence number is stored
// when it is posted (PostControlLocked).
std::string Prefix(Kind kind, uint8_t flags, size_t total, uint32_t segment = 0) {
  std::string m;
  m.reserve(total);
  ByteWriter w(&m);
  w.Put(kind);
  w.Put(flags);
  w.Put(uint16_t{0});
  w.Put(segment);
  w.Put(uint64_t{0});
  return m;
}

// False when the message is shorter than a prefix.
bool ReadPrefix(ByteReader& in, ControlPrefix* prefix) {
  uint16_t zero = 0;
  return in.Get(&prefix->kind) && in.Get(&prefix->flags) && in.Get(&zero) &&
         in.Get(&prefix->segment) && in.Get(&prefix->seq);
}

size_t Segments(size_t bytes, size_t max) { return bytes == 0 ? 1 : (bytes + max - 1) / max; }

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

CoreConfig Core(const WireConfig& c) {
  CoreConfig core;
  core.rank = c.rank;
  core.size = c.size;
  core.job_ranks = c.ranks;
  core.timeout = c.timeout;
  core.kind = c.kind;
  core.waiting_group = c.waiting_group;
  return core;
}

}  // namespace

// Marks the time spent inside the wire's library, for the watchdog.
struct WireTransport::WireCall {
  explicit WireCall(WireTransport* t) : t_(t) { t_->wire_call_since_ns_.store(NowNs()); }
  ~WireCall() { t_->wire_call_since_ns_.store(0); }
  WireTransport* t_;
};

absl::StatusOr<std::unique_ptr<WireTransport>> WireTransport::Create(WireConfig config,
                                                                     std::unique_ptr<Wire> wire) {
  if (config.size < 1 || config.rank < 0 || config.rank >= config.size) {
    return absl::InvalidArgumentError("wire transport: bad rank or size");
  }
  if (wire->max_control_bytes() < kMessageHeader + kMaxNoticeBytes || wire->max_data_bytes() == 0) {
    return absl::InternalError(absl::StrCat(wire->Name(), ": message limits too small"));
  }
  config.inline_bytes = std::min(config.inline_bytes, wire->max_control_bytes() - kMessageHeader);
  config.hosts.resize(static_cast<size_t>(config.size));
  std::unique_ptr<WireTransport> t(new WireTransport(std::move(config), std::move(wire)));
  t->SetHosts(t->config_.hosts);
  if (!t->config_.background_threads) return t;
  t->thread_ = std::thread([p = t.get()] { p->Run(); });
  // Its own thread: the progress thread may be the one stuck inside the library.
  t->watchdog_ = std::thread([p = t.get()] {
    NameThisThread("ddp-watchdog");
    std::unique_lock<std::mutex> lock(p->watchdog_mu_);
    while (!p->watchdog_stop_) {
      p->watchdog_cv_.wait_for(lock, std::chrono::milliseconds(500));
      if (!p->watchdog_stop_) p->Watchdog();
    }
  });
  return t;
}

WireTransport::WireTransport(WireConfig config, std::unique_ptr<Wire> wire)
    : PeerTransport(Core(config)),
      config_(std::move(config)),
      wire_name_(wire->Name()),
      wire_(std::move(wire)),
      peers_(static_cast<size_t>(config_.size)),
      heard_ns_(new std::atomic<int64_t>[static_cast<size_t>(config_.size)]),
      yield_budget_(kMinYields, kMaxYields) {
  for (int r = 0; r < config_.size; ++r) heard_ns_[static_cast<size_t>(r)].store(NowNs());
}

WireTransport::~WireTransport() {
  Shutdown().IgnoreError();
  if (thread_.joinable()) thread_.join();
  {
    std::lock_guard<std::mutex> lock(watchdog_mu_);
    watchdog_stop_ = true;
  }
  watchdog_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

void WireTransport::RememberMemory(const void* data, size_t bytes) {
  std::lock_guard<std::mutex> lock(progress_mu_);
  wire_->Remember(data, bytes);
}

void WireTransport::ForgetMemory(const void* data) {
  std::lock_guard<std::mutex> lock(progress_mu_);
  wire_->Forget(data);
}

void WireTransport::Wake() {
  {
    std::lock_guard<std::mutex> lock(park_mu_);
    kicked_ = true;
  }
  park_cv_.notify_one();
}

// ---- posting ----------------------------------------------------------------------------------

void WireTransport::PostControlLocked(int peer, std::string message) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  // Heartbeats and aborts act on arrival and take no sequence number.
  const auto kind = static_cast<Kind>(message[0]);
  const bool sequenced = kind != kHeartbeat && kind != kAbort;
  StoreAt(&message, kSequenceAt, sequenced ? p.next_control_seq++ : ~uint64_t{0});
  absl::Status s;
  {
    WireCall call(this);
    s = wire_->PostControl(peer, std::move(message));
  }
  if (!s.ok()) PeerFailedLocked(peer, PeerError(peer, absl::StatusCode::kUnavailable, s.message()));
}

void WireTransport::StartWaiting(int peer) {
  if (peers_[static_cast<size_t>(peer)].waiting_ops++ == 0) live(peer).last_progress = absl::Now();
}

RequestPtr WireTransport::Isend(int peer, uint64_t tag, const Descriptor& descriptor,
                                const void* data, size_t bytes) {
  auto request = std::make_shared<Request>();
  {
    std::lock_guard<std::mutex> lock(progress_mu_);
    if (RequestPtr refused = Refused(peer, "send to")) return refused;
    Peer& p = peers_[static_cast<size_t>(peer)];
    const bool inline_payload = bytes <= config_.inline_bytes;
    // A larger payload follows as data messages of up to `max` bytes, tagged from `first` on.
    const size_t max = inline_payload ? 0 : wire_->max_data_bytes();
    const size_t n = inline_payload ? 0 : Segments(bytes, max);
    const uint64_t first = inline_payload ? 0 : p.next_data_tag;
    p.next_data_tag += n;
    std::string m =
        Prefix(kMessage, inline_payload ? kInlineFlag : 0,
               kMessageHeader + (inline_payload ? bytes : 0), static_cast<uint32_t>(max));
    ByteWriter w(&m);
    w.Put(tag);
    w.Put(descriptor.bytes);
    w.Put(static_cast<uint64_t>(bytes));
    w.Put(first);
    if (inline_payload) {
      if (bytes > 0) m.append(static_cast<const char*>(data), bytes);
      PostControlLocked(peer, std::move(m));
      // The payload was copied: the caller's buffer is free at once.
      if (RequestPtr refused = Refused(peer, "send to")) return refused;
      request->Complete(absl::OkStatus());
      return request;
    }
    PostControlLocked(peer, std::move(m));
    if (RequestPtr refused = Refused(peer, "send to")) return refused;
    const uint64_t token = next_token_++;
    Pending& op = pending_[token];
    op.request = request;
    op.peer = peer;
    op.remaining = n;
    op.data = static_cast<const char*>(data);
    op.bytes = bytes;
    op.segment = max;
    op.first = first;
    StartWaiting(peer);
    if (wire_->eager_data()) {
      PostSegments(token, op);
    } else {
      p.awaiting_cts[first] = token;
    }
  }
  Wake();
  return request;
}

RequestPtr WireTransport::Irecv(int peer, uint64_t tag, const Descriptor& descriptor, void* data,
                                size_t bytes) {
  auto request = std::make_shared<Request>();
  {
    std::lock_guard<std::mutex> lock(progress_mu_);
    if (RequestPtr refused = Refused(peer, "receive from")) return refused;
    Peer& p = peers_[static_cast<size_t>(peer)];
    PostedRecv op{request, tag, descriptor, static_cast<char*>(data), bytes};
    if (std::optional<Header> h = p.matcher.TakeEarly(tag)) {
      StartWaiting(peer);
      Match(peer, std::move(op), *std::move(h));
      return request;
    }
    if (peer_state(peer) == PeerState::kLeft) return Completed(LeftError(peer));
    if (auto conflict = GroupConflict(peer, p.matcher, tag, descriptor, /*arriving=*/false)) {
      request->Complete(*conflict);
      PeerFailedLocked(peer, *conflict);
      return request;
    }
    if (!IsNotificationTag(tag)) StartWaiting(peer);
    p.matcher.Post(std::move(op));
  }
  Wake();
  return request;
}

void WireTransport::PostSegments(uint64_t token, Pending& op) {
  for (size_t i = 0; i < op.remaining && !failed(); ++i) {
    const size_t len = std::min(op.segment, op.bytes - i * op.segment);
    absl::Status s;
    {
      WireCall call(this);
      s = wire_->PostSend(op.peer, op.first + i, op.data + i * op.segment, len, token);
    }
    if (!s.ok()) {
      FailLocked(absl::UnavailableError(
          absl::StrCat(wire_name_, ": posting a send to ", PeerName(op.peer), ": ", s.message())));
      return;
    }
    ++op.in_wire;
  }
}

// A header met its receive: copy the inline payload or post the data receives.
void WireTransport::Match(int peer, PostedRecv op, Header h) {
  absl::Status bad;
  if (!(h.descriptor_ == op.descriptor)) {
    bad = Disagreement(peer, op.descriptor, h.descriptor_);
  } else if (h.bytes_ != op.bytes) {
    bad = LengthMismatch(peer, h.bytes_, op.bytes, op.descriptor);
  } else if (!h.has_inline && (h.segment == 0 || h.segment > wire_->max_data_bytes())) {
    // Segments as the sender cut them (ranks may have different limits configured).
    bad = PeerError(peer, absl::StatusCode::kInvalidArgument,
                    absl::StrCat("sends messages of up to ", h.segment,
                                 " bytes but this rank takes at most ", wire_->max_data_bytes(),
                                 " (set DDP_OFI_MAX_MESSAGE_BYTES alike on every rank)"));
  }
  if (!bad.ok()) {
    PeerFailedLocked(peer, bad);  // first: the request's waiter may check health() at once
    CompleteRecv(peer, op.request, bad);
    return;
  }
  if (h.has_inline) {
    if (op.bytes > 0) std::memcpy(op.data, h.payload.data(), op.bytes);
    CompleteRecv(peer, op.request, absl::OkStatus());
    return;
  }
  const size_t max = h.segment;
  const size_t n = Segments(op.bytes, max);
  const uint64_t token = next_token_++;
  Pending& pending = pending_[token];
  pending.request = op.request;
  pending.peer = peer;
  pending.receive = true;
  pending.remaining = n;
  for (size_t i = 0; i < n && !failed(); ++i) {
    const size_t len = std::min(max, op.bytes - i * max);
    absl::Status s;
    {
      WireCall call(this);
      s = wire_->PostRecv(peer, h.data_tag + i, op.data + i * max, len, token);
    }
    if (!s.ok()) {
      FailLocked(absl::UnavailableError(absl::StrCat(wire_name_, ": posting a receive from ",
                                                     PeerName(peer), ": ", s.message())));
      return;
    }
    ++pending.in_wire;
  }
  if (!wire_->eager_data() && !failed()) {
    std::string cts = Prefix(kClearToSend, 0, kPrefix + 8);
    ByteWriter(&cts).Put(h.data_tag);
    PostControlLocked(peer, std::move(cts));
  }
}

void WireTransport::CompleteRecv(int peer, const RequestPtr& request, absl::Status status) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  if (p.waiting_ops > 0) --p.waiting_ops;
  live(peer).last_progress = absl::Now();
  request->Complete(std::move(status));
}

// ---- progress ---------------------------------------------------------------------------------

bool WireTransport::PollOnceLocked() {
  events_.clear();
  absl::Status s;
  {
    WireCall call(this);
    s = wire_->Poll(&events_);
  }
  if (!s.ok()) FailLocked(absl::UnavailableError(absl::StrCat(wire_name_, ": ", s.message())));
  for (Event& e : events_) {
    if (e.kind == Event::Kind::kDone && e.token == 0) {
      // A control message failed: the peer is gone (unless it said goodbye first).
      if (!e.status.ok() && ValidPeer(e.peer) && peer_state(e.peer) == PeerState::kAlive) {
        suspects_.emplace_back(
            e.peer, PeerError(e.peer, absl::StatusCode::kUnavailable,
                              absl::StrCat("sending to it failed: ", e.status.message())));
      }
    } else if (e.kind == Event::Kind::kDone) {
      SegmentsDone(e.token, e.status);
    } else if (ValidPeer(e.peer)) {
      HandleControl(e.peer, std::move(e.payload));
    }
  }
  return !events_.empty();
}

bool WireTransport::ProgressLocked() {
  const bool progressed = PollOnceLocked();
  if (!suspects_.empty()) {
    // A transfer with a peer failed. Before blaming it, take in what the wire already holds: a
    // peer that fails sends its abort, which says why, before it goes (attribution by events).
    for (int i = 0; i < kSettlePolls && PollOnceLocked(); ++i) {
    }
    std::vector<std::pair<int, absl::Status>> suspects;
    suspects.swap(suspects_);
    for (auto& [peer, why] : suspects) {
      if (peer_state(peer) == PeerState::kAlive) PeerFailedLocked(peer, why);
    }
  }
  const absl::Time now = absl::Now();
  DrainLocked(now);
  if (now - last_check_ > absl::Milliseconds(50)) {
    last_check_ = now;
    SendHeartbeats(now);
    CheckDeadlines(now);
  }
  return progressed;
}

void WireTransport::Settle() {
  std::lock_guard<std::mutex> lock(progress_mu_);
  for (int i = 0; i < kSettlePolls && ProgressLocked(); ++i) {
  }
}

void WireTransport::SegmentsDone(uint64_t token, const absl::Status& status) {
  auto it = pending_.find(token);
  if (it == pending_.end()) return;  // completed already (the wire was abandoned)
  Pending& op = it->second;
  live(op.peer).last_progress = absl::Now();
  if (op.in_wire > 0) --op.in_wire;
  if (status.ok()) {
    if (op.remaining > 0) --op.remaining;
  } else if (op.status.ok()) {
    op.status =
        PeerError(op.peer, absl::StatusCode::kUnavailable,
                  absl::StrCat(op.receive ? "receiving from it failed: " : "sending to it failed: ",
                               status.message()));
  }
  if (failed() || peer_state(op.peer) == PeerState::kFailed) {
    // Complete once the wire has let go of every segment.
    if (op.in_wire == 0) CompletePending(it, failed() ? health() : op.status);
    return;
  }
  if (!op.status.ok()) {
    // The peer fails by this (unless its own abort, which says why, comes first: see
    // ProgressLocked); the request completes then.
    suspects_.emplace_back(op.peer, op.status);
    return;
  }
  if (op.remaining == 0) CompletePending(it, absl::OkStatus());
}

void WireTransport::CompletePending(std::map<uint64_t, Pending>::iterator it, absl::Status status) {
  Pending& op = it->second;
  Peer& p = peers_[static_cast<size_t>(op.peer)];
  if (p.waiting_ops > 0) --p.waiting_ops;
  if (!op.receive) p.awaiting_cts.erase(op.first);
  RequestPtr request = std::move(op.request);
  pending_.erase(it);
  request->Complete(std::move(status));
}

void WireTransport::DrainLocked(absl::Time now) {
  if (pending_.empty()) return;
  if (failed() && now >= drain_deadline_) {
    // The wire did not give everything back in time: make it let go, then complete.
    wire_->Abandon();
    const absl::Status failure = health();
    while (!pending_.empty()) CompletePending(pending_.begin(), failure);
    return;
  }
  // Isolated peers whose operations the wire still holds after the grace: complete them anyway,
  // so that no caller waits forever on a peer that is gone.
  if (now < isolated_drain_) return;
  isolated_drain_ = absl::InfiniteFuture();
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto next = std::next(it);
    const Peer& p = peers_[static_cast<size_t>(it->second.peer)];
    if (now >= p.drain_deadline) {
      CompletePending(
          it, it->second.status.ok() ? absl::UnavailableError("isolated") : it->second.status);
    }
    it = next;
  }
}

void WireTransport::HandleControl(int peer, std::string payload) {
  // A failed peer has been dealt with: what it still sends is dropped unread, not judged (and
  // blamed again, an error message built each time) message by message, as a flood would be.
  if (peer_state(peer) == PeerState::kFailed) return;
  Heard(peer, absl::Now());
  heard_ns_[static_cast<size_t>(peer)].store(NowNs());
  ByteReader in(payload);
  ControlPrefix prefix;
  if (!ReadPrefix(in, &prefix)) {
    PeerFailedLocked(
        peer, PeerError(peer, absl::StatusCode::kInternal, "sent a malformed control message"));
    return;
  }
  if (prefix.kind == kHeartbeat) {
    live(peer).remote_waiting = (prefix.flags & kWaitingFlag) != 0;
    return;
  }
  if (prefix.kind == kAbort) {
    // At once: a gap in the sequence (a control message lost with the failure) must not hide it.
    PeerFailedLocked(peer, PeerAborted(peer, absl::string_view(payload).substr(kPrefix)));
    return;
  }
  Peer& p = peers_[static_cast<size_t>(peer)];
  const uint64_t seq = prefix.seq;
  if (seq != p.expected_seq) {
    if (seq < p.expected_seq) return;  // a duplicate of one handled already
    if (seq - p.expected_seq > kMaxEarlyAhead || p.early_bytes + payload.size() > kMaxEarlyBytes) {
      PeerFailedLocked(peer, PeerError(peer, absl::StatusCode::kDataLoss,
                                       absl::StrCat("sent control message ", seq,
                                                    " while this rank expects ", p.expected_seq,
                                                    ", with ", p.early.size(), " (", p.early_bytes,
                                                    " bytes) ahead of it already: out of order "
                                                    "beyond any sender's window")));
      return;
    }
    const size_t bytes = payload.size();
    if (p.early.emplace(seq, std::move(payload)).second) p.early_bytes += bytes;
    return;
  }
  HandleInOrder(peer, payload);
  ++p.expected_seq;
  for (auto it = p.early.begin(); it != p.early.end() && it->first == p.expected_seq;
       it = p.early.erase(it)) {
    p.early_bytes -= it->second.size();
    HandleInOrder(peer, it->second);
    ++p.expected_seq;
  }
}

void WireTransport::HandleInOrder(int peer, const std::string& m) {
  if (peer_state(peer) != PeerState::kAlive) return;  // isolated, or left
  Peer& p = peers_[static_cast<size_t>(peer)];
  ByteReader in(m);
  ControlPrefix prefix;
  if (!ReadPrefix(in, &prefix)) return;  // HandleControl refuses such a message before
  switch (prefix.kind) {
    case kHeartbeat:
    case kAbort:
      return;  // handled on arrival
    case kClearToSend: {
      uint64_t first = 0;
      if (!in.Get(&first)) {
        PeerFailedLocked(peer,
                         PeerError(peer, absl::StatusCode::kInternal, "sent a truncated message"));
        return;
      }
      auto it = p.awaiting_cts.find(first);
      if (it == p.awaiting_cts.end()) return;  // failed meanwhile
      const uint64_t token = it->second;
      p.awaiting_cts.erase(it);
      auto op = pending_.find(token);
      if (op != pending_.end()) PostSegments(token, op->second);
      return;
    }
    case kBye:
      PeerLeftLocked(peer, absl::string_view(m).substr(kPrefix), p.matcher);
      return;
    case kMessage:
      break;
    default:
      PeerFailedLocked(
          peer, PeerError(peer, absl::StatusCode::kInternal, "sent an unknown control message"));
      return;
  }
  Header h;
  if (!in.Get(&h.tag_) || !in.Get(&h.descriptor_.bytes) || !in.Get(&h.bytes_) ||
      !in.Get(&h.data_tag)) {
    PeerFailedLocked(
        peer, PeerError(peer, absl::StatusCode::kInternal, "sent a truncated message header"));
    return;
  }
  h.segment = prefix.segment;
  h.has_inline = (prefix.flags & kInlineFlag) != 0;
  if (h.has_inline) {
    if (in.remaining() != h.bytes_) {
      PeerFailedLocked(peer,
                       PeerError(peer, absl::StatusCode::kInternal, "sent a truncated message"));
      return;
    }
    h.payload = m.substr(kMessageHeader);
  }
  if (std::optional<PostedRecv> op = p.matcher.TakePosted(h.tag_)) {
    if (IsNotificationTag(op->tag)) StartWaiting(peer);
    Match(peer, *std::move(op), std::move(h));
    return;
  }
  if (auto conflict = GroupConflict(peer, p.matcher, h.tag_, h.descriptor_, /*arriving=*/true)) {
    PeerFailedLocked(peer, *conflict);
    return;
  }
  p.matcher.AddEarly(std::move(h));
}

// ---- liveness -----------------------------------------------------------------------------

bool WireTransport::AnyWaiting() const {
  return std::any_of(peers_.begin(), peers_.end(), [](const Peer& p) { return p.waiting_ops > 0; });
}

void WireTransport::SendHeartbeats(absl::Time now) {
  const bool waiting = WaitingInGroup(AnyWaiting());  // published at once, sent below
  if (now - last_heartbeat_ < heartbeat_interval() || failed() || bye_sent_) return;
  last_heartbeat_ = now;
  const uint8_t flags = waiting ? kWaitingFlag : 0;
  for (int r = 0; r < config_.size; ++r) {
    if (r == config_.rank || peer_state(r) != PeerState::kAlive) continue;
    PostControlLocked(r, Prefix(kHeartbeat, flags, kPrefix));
  }
}

void WireTransport::CheckDeadlines(absl::Time now) {
  if (failed()) return;
  BlameLocked(now, [this](int r) { return WaitingOn(r); });
}

// ---- waiting ----------------------------------------------------------------------------------

bool WireTransport::TryProgress() {
  if (!progress_mu_.try_lock()) return false;
  const bool progressed = ProgressLocked();
  progress_mu_.unlock();
  return progressed;
}

absl::Status WireTransport::Wait(Request* request) {
  if (request->Test()) return request->status();
  pollers_.fetch_add(1);
  // Long waits (a peer still computing) cost almost nothing: short sleeps between polls.
  // Where ranks outnumber CPUs, a yield gives the core to a rank with work, but a wait for data
  // that is still far away (across a network) yields thousands of times for nothing, CPU time
  // the busy ranks need: the yields before sleeping adapt, doubling after a wait that ended while
  // yielding and shrinking to a quarter after one that had to sleep.
  const bool adapt = config_.oversubscribed;
  const auto yields = static_cast<int>(adapt ? yield_budget_.value() : kMaxYields);
  Backoff backoff({adapt ? 0 : 200, yields, absl::Microseconds(20), absl::Microseconds(500)});
  bool slept = false;
  while (!request->Test()) {
    if (TryProgress()) {
      backoff.Reset();
      continue;
    }
    const absl::Duration sleep = backoff.Idle();
    if (sleep > absl::ZeroDuration()) {
      slept = true;
      absl::SleepFor(sleep);
    }
  }
  if (adapt) yield_budget_.Update(yields, slept);
  pollers_.fetch_sub(1);
  Wake();  // the background thread takes over
  return request->status();
}

void WireTransport::Run() {
  // "ddp-shm", "ddp-mpi", "ddp-ofi": the wire's name up to its details.
  NameThisThread(absl::StrCat("ddp-", wire_name_.substr(0, wire_name_.find(' '))).c_str());
  ApplyCommThreadNice();
  // Backs off to at most 0.5 ms between polls (doorbells and unwaited sends complete here).
  Backoff backoff(kIdleBackoff);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) break;
    }
    // A caller that waits drives progress itself; this thread stays out of its way.
    if (pollers_.load() == 0 && TryProgress()) {
      backoff.Reset();
      continue;
    }
    const absl::Duration sleep = backoff.Idle();
    if (sleep == absl::ZeroDuration()) continue;
    std::unique_lock<std::mutex> lock(park_mu_);
    park_cv_.wait_for(lock, absl::ToChronoMicroseconds(sleep), [this] { return kicked_; });
    if (kicked_) backoff.Reset();
    kicked_ = false;
  }
}

void WireTransport::Watchdog() {
  const int64_t since = wire_call_since_ns_.load();
  if (since == 0 || since != watched_since_ns_) {
    watched_since_ns_ = since;
    watched_ticks_ = 0;
    return;
  }
  // The same call seen on consecutive ticks of this thread (so a process that was stopped, or a
  // machine that slept, does not count the pause).
  ++watched_ticks_;
  const absl::Duration limit = std::max(2 * config_.timeout, absl::Seconds(10));
  if (watched_ticks_ * absl::Milliseconds(500) < limit) return;
  const int64_t now = NowNs();
  std::string silent;
  for (int r = 0; r < config_.size; ++r) {
    const absl::Duration quiet = absl::Nanoseconds(now - heard_ns_[static_cast<size_t>(r)].load());
    if (r != config_.rank && quiet > config_.timeout) {
      absl::StrAppend(&silent, silent.empty() ? "" : ", ", PeerName(r), " silent for ",
                      absl::FormatDuration(absl::Trunc(quiet, absl::Milliseconds(100))));
    }
  }
  const std::string text = absl::StrCat(
      "rank ", JobRank(config_.rank), ": ", wire_name_, " has not returned from a call for ",
      absl::FormatDuration(absl::Trunc(absl::Nanoseconds(now - since), absl::Milliseconds(100))),
      " (2x DDP_TIMEOUT_SECONDS)",
      silent.empty() ? ""
                     : absl::StrCat("; ", silent,
                                    ": it probably died in the middle of a "
                                    "transfer, holding the library's lock"),
      ". The library cannot be made to return, so this process exits (status 1).");
  DDP_LOG(kError, "%s", text);
  std::fprintf(stderr, "ddp: %s\n", text.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

// ---- failure and shutdown -----------------------------------------------------------------

void WireTransport::FailRequestsLocked(int peer, const absl::Status& status) {
  for (int r = 0; r < config_.size; ++r) {
    if (peer >= 0 && r != peer) continue;
    Peer& p = peers_[static_cast<size_t>(r)];
    for (PostedRecv& op : p.matcher.TakeAllPosted()) op.request->Complete(status);
    p.matcher.DropEarly([](const Header&) {});
    p.awaiting_cts.clear();
  }
  // Operations with segments in the wire complete as the wire reports them back (cancelled or
  // finished), or when it is abandoned after a short grace.
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto next = std::next(it);
    if ((peer < 0 || it->second.peer == peer) && it->second.in_wire == 0) {
      CompletePending(it, status);
    } else if (peer >= 0 && it->second.peer == peer) {
      it->second.status = status;
    }
    it = next;
  }
  for (int r = 0; r < config_.size; ++r) {
    if (peer < 0 || r == peer) {
      peers_[static_cast<size_t>(r)].waiting_ops = 0;
    }
  }
}

void WireTransport::FailLocked(const absl::Status& status) {
  if (!RecordFailure(status)) return;
  // Tell the peers why (best effort), then give up on everything in flight.
  if (!bye_sent_) {
    const std::string notice = AbortNotice(status);
    for (int r = 0; r < config_.size; ++r) {
      if (r == config_.rank || peer_state(r) == PeerState::kLeft) continue;
      // A failure to post it finds the transport failed already and changes nothing.
      PostControlLocked(r, Prefix(kAbort, 0, kPrefix) + notice);
    }
  }
  wire_->Cancel();
  FailRequestsLocked(-1, health());
  drain_deadline_ = absl::Now() + absl::Seconds(2);
}

void WireTransport::IsolateLocked(int peer, const absl::Status& status) {
  if (!bye_sent_) PostControlLocked(peer, Prefix(kAbort, 0, kPrefix) + AbortNotice(status));
  wire_->CancelPeer(peer);
  FailRequestsLocked(peer, status);
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  peers_[static_cast<size_t>(peer)].drain_deadline = deadline;
  isolated_drain_ = std::min(isolated_drain_, deadline);
}

void WireTransport::Abort(const absl::Status& reason) {
  std::lock_guard<std::mutex> lock(progress_mu_);
  FailLocked(reason.ok() ? absl::AbortedError("aborted by the application") : reason);
}

absl::Status WireTransport::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return absl::OkStatus();
    stopping_ = true;
  }
  Wake();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(progress_mu_);
  const absl::Time deadline = absl::Now() + std::min(config_.timeout, absl::Seconds(30));
  // Drives the wire until `done` or `until`: for the sends still pending (what the peers wait
  // for) it only yields between polls; after them it sleeps as the progress thread does.
  const auto progress_until = [this](const auto& done, absl::Time until, bool sleep) {
    Backoff backoff(sleep ? kIdleBackoff : Backoff::Policy{0, 1 << 30});
    while (!done() && absl::Now() < until) {
      if (ProgressLocked()) {
        backoff.Reset();
      } else {
        backoff.Wait();
      }
    }
  };
  progress_until(
      [this] {
        return failed() || std::none_of(pending_.begin(), pending_.end(),
                                        [](const auto& kv) { return !kv.second.receive; });
      },
      deadline, /*sleep=*/false);
  if (!failed()) {
    const std::string bye = Prefix(kBye, 0, kPrefix) + ByeNotice();
    for (int r = 0; r < config_.size; ++r) {
      if (r != config_.rank && peer_state(r) != PeerState::kFailed) PostControlLocked(r, bye);
    }
    bye_sent_ = true;
    // Take the peers' goodbyes too when they come soon, so nothing is left in the library's
    // queues (MPI_Finalize wants that), then let the wire finish sending ours.
    const absl::Time grace = std::min(deadline, absl::Now() + absl::Seconds(1));
    const auto all_gone = [this] {
      if (failed()) return true;
      for (int r = 0; r < config_.size; ++r) {
        if (r != config_.rank && peer_state(r) == PeerState::kAlive) return false;
      }
      return true;
    };
    progress_until(all_gone, grace, /*sleep=*/true);
  }
  // After a failure, only the aborts are still worth sending: a dead peer never takes them.
  const absl::Time flush_deadline =
      failed() ? std::min(deadline, absl::Now() + absl::Seconds(2)) : deadline;
  progress_until([this] { return !wire_->Busy(); }, flush_deadline, /*sleep=*/true);
  // Anything still pending now can never complete: cancel it, give the wire a moment to hand
  // the buffers back, then abandon it.
  const absl::Status result = health();
  RecordFailure(absl::FailedPreconditionError("the transport is shut down"));
  const absl::Status closed = health();
  for (Peer& p : peers_) {
    for (PostedRecv& op : p.matcher.TakeAllPosted()) op.request->Complete(closed);
    p.awaiting_cts.clear();
  }
  if (!pending_.empty()) {
    wire_->Cancel();
    progress_until([this] { return pending_.empty(); }, absl::Now() + absl::Seconds(1),
                   /*sleep=*/true);
    if (!pending_.empty()) wire_->Abandon();
    while (!pending_.empty()) CompletePending(pending_.begin(), closed);
  }
  return result;
}

}  // namespace ddp::transport::wire
