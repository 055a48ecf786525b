// WireTransport: matching, segmentation, heartbeats and failures over a Wire.
#include "transport/wire/wire_transport.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "transport/liveness.h"
namespace ddp::transport::wire {
namespace {

// Control message layout (little endian, as every supported platform is):
//   u8 kind, u8 flags, u16 0, u32 segment size (kMessage), u64 sequence, then by kind:
//   kMessage: u64 tag, 16-byte descriptor, u64 length, u64 first data tag, [inline payload]
//   kAbort:   the reason's text
//   kClearToSend: u64 first data tag (the receiver has posted the data receives)
// Heartbeats and aborts take effect on arrival; the others in sequence order.
enum Kind : uint8_t { kMessage = 1, kHeartbeat = 2, kBye = 3, kAbort = 4, kClearToSend = 5 };
constexpr uint8_t kInlineFlag = 1;
constexpr uint8_t kWaitingFlag = 2;
constexpr size_t kPrefix = 16;
constexpr size_t kMessageHeader = kPrefix + 8 + 16 + 8 + 8;

void Put64(std::string& s, size_t at, uint64_t v) { std::memcpy(s.data() + at, &v, 8); }
uint64_t Get64(const std::string& s, size_t at) {
  uint64_t v = 0;
  std::memcpy(&v, s.data() + at, 8);
  return v;
}
void Put32(std::string& s, size_t at, uint32_t v) { std::memcpy(s.data() + at, &v, 4); }
uint32_t Get32(const std::string& s, size_t at) {
  uint32_t v = 0;
  std::memcpy(&v, s.data() + at, 4);
  return v;
}

std::string Prefix(Kind kind, uint8_t flags, size_t total) {
  std::string m(total, '\0');
  m[0] = static_cast<char>(kind);
  m[1] = static_cast<char>(flags);
  return m;
}

uint64_t Group(uint64_t tag) { return tag >> kTagGroupShift; }

size_t Segments(size_t bytes, size_t max) { return bytes == 0 ? 1 : (bytes + max - 1) / max; }

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
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
  if (wire->max_control_bytes() < kMessageHeader + 64 || wire->max_data_bytes() == 0) {
    return absl::InternalError(absl::StrCat(wire->Name(), ": message limits too small"));
  }
  config.inline_bytes = std::min(config.inline_bytes, wire->max_control_bytes() - kMessageHeader);
  config.hosts.resize(static_cast<size_t>(config.size));
  std::unique_ptr<WireTransport> t(new WireTransport(std::move(config), std::move(wire)));
  t->thread_ = std::thread([p = t.get()] { p->Run(); });
  // Its own thread: the progress thread may be the one stuck inside the library.
  t->watchdog_ = std::thread([p = t.get()] {
    std::unique_lock<std::mutex> lock(p->watchdog_mu_);
    while (!p->watchdog_stop_) {
      p->watchdog_cv_.wait_for(lock, std::chrono::milliseconds(500));
      if (!p->watchdog_stop_) p->Watchdog();
    }
  });
  return t;
}

WireTransport::WireTransport(WireConfig config, std::unique_ptr<Wire> wire)
    : config_(std::move(config)),
      wire_name_(wire->Name()),
      wire_(std::move(wire)),
      peers_(static_cast<size_t>(config_.size)),
      left_(static_cast<size_t>(config_.size), false),
      heard_ns_(new std::atomic<int64_t>[static_cast<size_t>(config_.size)]) {
  const absl::Time now = absl::Now();
  for (int r = 0; r < config_.size; ++r) heard_ns_[static_cast<size_t>(r)].store(NowNs());
  for (Peer& p : peers_) {
    p.last_heard = now;
    p.last_progress = now;
  }
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

std::string WireTransport::PeerName(int peer) const {
  if (peer < 0 || peer >= config_.size) return absl::StrCat("rank ", peer, " (not in the job)");
  const int rank = config_.ranks.empty() ? peer : config_.ranks[static_cast<size_t>(peer)];
  return absl::StrCat("rank ", rank, " (", config_.hosts[static_cast<size_t>(peer)], ", ",
                      config_.kind, ")");
}

absl::Status WireTransport::PeerError(int peer, absl::StatusCode code,
                                      absl::string_view what) const {
  return absl::Status(code, absl::StrCat(PeerName(peer), ": ", what));
}

std::string WireTransport::Describe(const Descriptor& descriptor) const {
  DescriptorFormatter formatter;
  {
    std::lock_guard<std::mutex> lock(mu_);
    formatter = formatter_;
  }
  if (formatter) return formatter(descriptor);
  return absl::BytesToHexString(absl::string_view(
      reinterpret_cast<const char*>(descriptor.bytes.data()), descriptor.bytes.size()));
}

void WireTransport::SetDescriptorFormatter(DescriptorFormatter formatter) {
  std::lock_guard<std::mutex> lock(mu_);
  formatter_ = std::move(formatter);
}

absl::Status WireTransport::health() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

bool WireTransport::PeerLeft(int peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  return peer >= 0 && static_cast<size_t>(peer) < left_.size() && left_[static_cast<size_t>(peer)];
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
  Put64(message, 8, sequenced ? p.next_control_seq++ : ~uint64_t{0});
  WireCall call(this);
  absl::Status s = wire_->PostControl(peer, std::move(message));
  if (!s.ok()) FailLocked(PeerError(peer, absl::StatusCode::kUnavailable, s.message()));
}

RequestPtr WireTransport::RefusedLocked(int peer, absl::string_view what) {
  if (peer < 0 || peer >= config_.size || peer == config_.rank) {
    auto request = std::make_shared<Request>();
    request->Complete(absl::InvalidArgumentError(absl::StrCat(what, " invalid peer ", peer)));
    return request;
  }
  if (failed_.load()) {
    auto request = std::make_shared<Request>();
    request->Complete(health());
    return request;
  }
  return nullptr;
}

absl::Status WireTransport::Disagreement(int peer, const Descriptor& mine,
                                         const Descriptor& theirs) const {
  return absl::InvalidArgumentError(absl::StrCat("ranks disagree: rank ", config_.rank,
                                                 " is running ", Describe(mine), " but ",
                                                 PeerName(peer), " is running ", Describe(theirs)));
}

void WireTransport::StartWaiting(Peer& p) {
  if (p.waiting_ops++ == 0) p.last_progress = absl::Now();
}

RequestPtr WireTransport::Isend(int peer, uint64_t tag, const Descriptor& descriptor,
                                const void* data, size_t bytes) {
  auto request = std::make_shared<Request>();
  {
    std::lock_guard<std::mutex> lock(progress_mu_);
    if (RequestPtr refused = RefusedLocked(peer, "send to")) return refused;
    Peer& p = peers_[static_cast<size_t>(peer)];
    if (p.bye) {
      request->Complete(PeerError(peer, absl::StatusCode::kFailedPrecondition,
                                  "has shut down; cannot send to it"));
      return request;
    }
    const bool inline_payload = bytes <= config_.inline_bytes;
    std::string m = Prefix(kMessage, inline_payload ? kInlineFlag : 0,
                           kMessageHeader + (inline_payload ? bytes : 0));
    Put64(m, kPrefix, tag);
    std::memcpy(m.data() + kPrefix + 8, descriptor.bytes.data(), 16);
    Put64(m, kPrefix + 24, bytes);
    if (inline_payload) {
      if (bytes > 0) std::memcpy(m.data() + kMessageHeader, data, bytes);
      PostControlLocked(peer, std::move(m));
      // The payload was copied: the caller's buffer is free at once.
      request->Complete(failed_.load() ? health() : absl::OkStatus());
      return request;
    }
    const size_t max = wire_->max_data_bytes();
    const size_t n = Segments(bytes, max);
    const uint64_t first = p.next_data_tag;
    p.next_data_tag += n;
    Put32(m, 4, static_cast<uint32_t>(max));
    Put64(m, kPrefix + 32, first);
    PostControlLocked(peer, std::move(m));
    if (failed_.load()) {
      request->Complete(health());
      return request;
    }
    const uint64_t token = next_token_++;
    Pending& op = pending_[token];
    op.request = request;
    op.peer = peer;
    op.remaining = n;
    op.data = static_cast<const char*>(data);
    op.bytes = bytes;
    op.segment = max;
    op.first = first;
    StartWaiting(p);
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
    if (RequestPtr refused = RefusedLocked(peer, "receive from")) return refused;
    Peer& p = peers_[static_cast<size_t>(peer)];
    RecvOp op{request, tag, descriptor, static_cast<char*>(data), bytes};
    for (auto it = p.unexpected.begin(); it != p.unexpected.end(); ++it) {
      if (it->tag != tag) continue;
      Header h = std::move(*it);
      p.unexpected.erase(it);
      StartWaiting(p);
      Match(peer, std::move(op), std::move(h));
      return request;
    }
    for (const Header& h : p.unexpected) {
      if (Group(h.tag) == Group(tag) && !(h.descriptor == descriptor)) {
        absl::Status s = Disagreement(peer, descriptor, h.descriptor);
        request->Complete(s);
        FailLocked(s);
        return request;
      }
    }
    if (p.bye) {
      request->Complete(PeerError(peer, absl::StatusCode::kUnavailable,
                                  "has shut down; nothing more will come from it"));
      return request;
    }
    if (!IsNotificationTag(tag)) StartWaiting(p);
    p.posted.push_back(std::move(op));
  }
  Wake();
  return request;
}

void WireTransport::PostSegments(uint64_t token, Pending& op) {
  for (size_t i = 0; i < op.remaining && !failed_.load(); ++i) {
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
void WireTransport::Match(int peer, RecvOp op, Header h) {
  if (!(h.descriptor == op.descriptor)) {
    absl::Status s = Disagreement(peer, op.descriptor, h.descriptor);
    CompleteRecv(peer, op.request, s);
    FailLocked(s);
    return;
  }
  if (h.bytes != op.bytes) {
    absl::Status s = PeerError(peer, absl::StatusCode::kInvalidArgument,
                               absl::StrCat("sent ", h.bytes, " bytes where this rank expects ",
                                            op.bytes, " (", Describe(op.descriptor), ")"));
    CompleteRecv(peer, op.request, s);
    FailLocked(s);
    return;
  }
  if (h.has_inline) {
    if (op.bytes > 0) std::memcpy(op.data, h.payload.data(), op.bytes);
    CompleteRecv(peer, op.request, absl::OkStatus());
    return;
  }
  // Segments as the sender cut them (ranks may have different limits configured).
  const size_t max = h.segment;
  if (max == 0 || max > wire_->max_data_bytes()) {
    absl::Status s =
        PeerError(peer, absl::StatusCode::kInvalidArgument,
                  absl::StrCat("sends messages of up to ", max,
                               " bytes but this rank takes at most ", wire_->max_data_bytes(),
                               " (set DDP_OFI_MAX_MESSAGE_BYTES alike on every rank)"));
    CompleteRecv(peer, op.request, s);
    FailLocked(s);
    return;
  }
  const size_t n = Segments(op.bytes, max);
  const uint64_t token = next_token_++;
  Pending& pending = pending_[token];
  pending.request = op.request;
  pending.peer = peer;
  pending.receive = true;
  pending.remaining = n;
  for (size_t i = 0; i < n && !failed_.load(); ++i) {
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
  if (!wire_->eager_data() && !failed_.load()) {
    std::string cts = Prefix(kClearToSend, 0, kPrefix + 8);
    Put64(cts, kPrefix, h.data_tag);
    PostControlLocked(peer, std::move(cts));
  }
}

void WireTransport::CompleteRecv(int peer, const RequestPtr& request, absl::Status status) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  if (p.waiting_ops > 0) --p.waiting_ops;
  p.last_progress = absl::Now();
  request->Complete(std::move(status));
}

// ---- progress ---------------------------------------------------------------------------------

bool WireTransport::ProgressLocked() {
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
      if (!e.status.ok() && e.peer >= 0 && e.peer < config_.size &&
          !peers_[static_cast<size_t>(e.peer)].bye) {
        FailSoon(PeerError(e.peer, absl::StatusCode::kUnavailable,
                           absl::StrCat("sending to it failed: ", e.status.message())),
                 e.peer);
      }
    } else if (e.kind == Event::Kind::kDone) {
      SegmentsDone(e.token, e.status);
    } else if (e.peer >= 0 && e.peer < config_.size && e.peer != config_.rank) {
      HandleControl(e.peer, std::move(e.payload));
    }
  }
  const absl::Time now = absl::Now();
  if (!soon_.ok() && now >= soon_deadline_) {
    // A peer that said goodbye in the meantime left on purpose: its send failures do not count.
    if (soon_peer_ >= 0 && peers_[static_cast<size_t>(soon_peer_)].bye) {
      soon_ = absl::OkStatus();
      soon_deadline_ = absl::InfiniteFuture();
    } else {
      FailLocked(soon_);
    }
  }
  if (failed_.load()) DrainLocked(now);
  if (now - last_check_ > absl::Milliseconds(50)) {
    last_check_ = now;
    SendHeartbeats(now);
    CheckDeadlines(now);
  }
  return !events_.empty();
}

void WireTransport::SegmentsDone(uint64_t token, const absl::Status& status) {
  auto it = pending_.find(token);
  if (it == pending_.end()) return;  // completed already (the wire was abandoned)
  Pending& op = it->second;
  Peer& p = peers_[static_cast<size_t>(op.peer)];
  p.last_progress = absl::Now();
  if (op.in_wire > 0) --op.in_wire;
  if (status.ok()) {
    if (op.remaining > 0) --op.remaining;
  } else if (op.status.ok()) {
    op.status =
        PeerError(op.peer, absl::StatusCode::kUnavailable,
                  absl::StrCat(op.receive ? "receiving from it failed: " : "sending to it failed: ",
                               status.message()));
  }
  if (failed_.load()) {
    // Complete once the wire has let go of every segment.
    if (op.in_wire == 0) CompletePending(it, health());
    return;
  }
  if (!op.status.ok()) {
    // The transport fails with it shortly (unless the peer's own abort, which says why, comes
    // first); the request completes then.
    FailSoon(op.status, op.peer);
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
  if (now < drain_deadline_) return;
  // The wire did not give everything back in time: make it let go, then complete.
  wire_->Abandon();
  const absl::Status failure = health();
  while (!pending_.empty()) CompletePending(pending_.begin(), failure);
}

void WireTransport::HandleControl(int peer, std::string payload) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  p.last_heard = absl::Now();
  heard_ns_[static_cast<size_t>(peer)].store(NowNs());
  if (payload.size() < kPrefix) {
    FailLocked(PeerError(peer, absl::StatusCode::kInternal, "sent a malformed control message"));
    return;
  }
  const auto kind = static_cast<Kind>(payload[0]);
  if (kind == kHeartbeat) {
    p.remote_waiting = (static_cast<uint8_t>(payload[1]) & kWaitingFlag) != 0;
    return;
  }
  if (kind == kAbort) {
    // At once: a gap in the sequence (a control message lost with the failure) must not hide it.
    FailLocked(PeerError(peer, absl::StatusCode::kAborted,
                         absl::StrCat("aborted the job: ", payload.substr(kPrefix))));
    return;
  }
  const uint64_t seq = Get64(payload, 8);
  if (seq != p.expected_seq) {
    if (seq > p.expected_seq) p.early.emplace(seq, std::move(payload));
    return;
  }
  HandleInOrder(peer, payload);
  ++p.expected_seq;
  for (auto it = p.early.begin(); it != p.early.end() && it->first == p.expected_seq;
       it = p.early.erase(it)) {
    HandleInOrder(peer, it->second);
    ++p.expected_seq;
  }
}

void WireTransport::HandleInOrder(int peer, const std::string& m) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  const auto kind = static_cast<Kind>(m[0]);
  const auto flags = static_cast<uint8_t>(m[1]);
  switch (kind) {
    case kHeartbeat:
    case kAbort:
      return;  // handled on arrival
    case kClearToSend: {
      if (m.size() < kPrefix + 8) {
        FailLocked(PeerError(peer, absl::StatusCode::kInternal, "sent a truncated message"));
        return;
      }
      auto it = p.awaiting_cts.find(Get64(m, kPrefix));
      if (it == p.awaiting_cts.end()) return;  // failed meanwhile
      const uint64_t token = it->second;
      p.awaiting_cts.erase(it);
      auto op = pending_.find(token);
      if (op != pending_.end()) PostSegments(token, op->second);
      return;
    }
    case kBye: {
      p.bye = true;
      {
        std::lock_guard<std::mutex> lock(mu_);
        left_[static_cast<size_t>(peer)] = true;
      }
      for (auto it = p.posted.begin(); it != p.posted.end();) {
        if (!IsNotificationTag(it->tag)) {
          ++it;
          continue;
        }
        it->request->Complete(PeerError(peer, absl::StatusCode::kUnavailable, "has shut down"));
        it = p.posted.erase(it);
      }
      if (!p.posted.empty()) {
        FailLocked(PeerError(peer, absl::StatusCode::kUnavailable,
                             "shut down while this rank still expects data from it"));
      }
      return;
    }
    case kMessage:
      break;
    default:
      FailLocked(PeerError(peer, absl::StatusCode::kInternal, "sent an unknown control message"));
      return;
  }
  if (m.size() < kMessageHeader) {
    FailLocked(PeerError(peer, absl::StatusCode::kInternal, "sent a truncated message header"));
    return;
  }
  Header h;
  h.tag = Get64(m, kPrefix);
  std::memcpy(h.descriptor.bytes.data(), m.data() + kPrefix + 8, 16);
  h.bytes = Get64(m, kPrefix + 24);
  h.data_tag = Get64(m, kPrefix + 32);
  h.segment = Get32(m, 4);
  h.has_inline = (flags & kInlineFlag) != 0;
  if (h.has_inline) {
    if (m.size() != kMessageHeader + h.bytes) {
      FailLocked(PeerError(peer, absl::StatusCode::kInternal, "sent a truncated message"));
      return;
    }
    h.payload = m.substr(kMessageHeader);
  }
  for (auto it = p.posted.begin(); it != p.posted.end(); ++it) {
    if (it->tag != h.tag) continue;
    RecvOp op = std::move(*it);
    p.posted.erase(it);
    if (IsNotificationTag(op.tag)) StartWaiting(p);
    Match(peer, std::move(op), std::move(h));
    return;
  }
  for (const RecvOp& op : p.posted) {
    if (Group(op.tag) == Group(h.tag) && !(op.descriptor == h.descriptor)) {
      FailLocked(Disagreement(peer, op.descriptor, h.descriptor));
      return;
    }
  }
  p.unexpected.push_back(std::move(h));
}

// ---- liveness -----------------------------------------------------------------------------

bool WireTransport::AnyWaiting() const {
  return std::any_of(peers_.begin(), peers_.end(), [this](const Peer& p) { return WaitingOn(p); });
}

void WireTransport::SendHeartbeats(absl::Time now) {
  const absl::Duration interval =
      std::clamp(config_.timeout / 5, absl::Milliseconds(50), absl::Seconds(5));
  if (now - last_heartbeat_ < interval || failed_.load() || bye_sent_) return;
  last_heartbeat_ = now;
  const uint8_t flags = AnyWaiting() ? kWaitingFlag : 0;
  for (int r = 0; r < config_.size; ++r) {
    if (r == config_.rank || peers_[static_cast<size_t>(r)].bye) continue;
    PostControlLocked(r, Prefix(kHeartbeat, flags, kPrefix));
  }
}

void WireTransport::CheckDeadlines(absl::Time now) {
  if (failed_.load()) return;
  for (int r = 0; r < config_.size; ++r) {
    const Peer& p = peers_[static_cast<size_t>(r)];
    if (r == config_.rank || !WaitingOn(p)) continue;
    const absl::Duration silent = now - std::max(p.last_heard, p.last_progress);
    const absl::Duration stalled = now - p.last_progress;
    const std::string blame = Blame(silent, stalled, p.remote_waiting, config_.timeout);
    if (!blame.empty()) {
      FailLocked(PeerError(r, absl::StatusCode::kDeadlineExceeded, blame));
      return;
    }
  }
}

// ---- waiting ----------------------------------------------------------------------------------

absl::Status WireTransport::Wait(Request* request) {
  if (request->Test()) return request->status();
  pollers_.fetch_add(1);
  int idle = 0;
  while (!request->Test()) {
    bool progressed = false;
    if (progress_mu_.try_lock()) {
      progressed = ProgressLocked();
      progress_mu_.unlock();
    }
    if (progressed) {
      idle = 0;
      continue;
    }
    ++idle;
    if (idle < 200) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else if (idle < 2000) {
      sched_yield();
    } else {
      // Long waits (a peer still computing) cost almost nothing.
      std::this_thread::sleep_for(std::chrono::microseconds(std::min(20 * (idle - 1999), 500)));
    }
  }
  pollers_.fetch_sub(1);
  Wake();  // the background thread takes over
  return request->status();
}

void WireTransport::Run() {
  int idle = 0;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) break;
    }
    bool progressed = false;
    if (pollers_.load() == 0 && progress_mu_.try_lock()) {
      progressed = ProgressLocked();
      progress_mu_.unlock();
    }
    if (progressed) {
      idle = 0;
      continue;
    }
    ++idle;
    if (idle < 4) {
      sched_yield();
      continue;
    }
    // Back off to at most 0.5 ms between polls (doorbells and unwaited sends complete here).
    const auto pause = std::chrono::microseconds(std::min(10 << std::min(idle - 4, 10), 500));
    std::unique_lock<std::mutex> lock(park_mu_);
    park_cv_.wait_for(lock, pause, [this] { return kicked_; });
    if (kicked_) idle = 0;
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
      "rank ", config_.rank, ": ", wire_name_, " has not returned from a call for ",
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

void WireTransport::FailSoon(const absl::Status& status, int peer) {
  if (!soon_.ok()) return;
  soon_ = status;
  soon_peer_ = peer;
  soon_deadline_ = absl::Now() + absl::Milliseconds(250);
}

void WireTransport::Fail(const absl::Status& status) {
  std::lock_guard<std::mutex> lock(progress_mu_);
  FailLocked(status);
}

void WireTransport::FailLocked(const absl::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return;
    failure_ = status;
    failed_.store(true);
  }
  DDP_LOG(kDebug, "%s transport failed: %s", config_.kind, status.ToString());
  // Tell the peers why (best effort), then give up on everything in flight.
  if (!bye_sent_) {
    for (int r = 0; r < config_.size; ++r) {
      if (r == config_.rank || peers_[static_cast<size_t>(r)].bye) continue;
      // A failure to post it finds the transport failed already and changes nothing.
      PostControlLocked(r,
                        Prefix(kAbort, 0, kPrefix) + std::string(status.message()).substr(0, 4000));
    }
  }
  wire_->Cancel();
  // Receives never matched touched nothing: they complete now. Operations with segments in the
  // wire complete as the wire reports them back (cancelled or finished), or when the wire is
  // abandoned after a short grace.
  for (Peer& p : peers_) {
    for (RecvOp& op : p.posted) op.request->Complete(status);
    p.posted.clear();
    p.awaiting_cts.clear();
  }
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto next = std::next(it);
    if (it->second.in_wire == 0) CompletePending(it, status);
    it = next;
  }
  for (Peer& p : peers_) p.waiting_ops = 0;
  drain_deadline_ = absl::Now() + absl::Seconds(2);
}

void WireTransport::Abort(const absl::Status& reason) {
  Fail(reason.ok() ? absl::AbortedError("aborted by the application") : reason);
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
  auto sends_pending = [this] {
    return std::any_of(pending_.begin(), pending_.end(),
                       [](const auto& kv) { return !kv.second.receive; });
  };
  while (!failed_.load() && sends_pending() && absl::Now() < deadline) {
    if (!ProgressLocked()) sched_yield();
  }
  if (!failed_.load()) {
    for (int r = 0; r < config_.size; ++r) {
      if (r != config_.rank) PostControlLocked(r, Prefix(kBye, 0, kPrefix));
    }
    bye_sent_ = true;
    // Take the peers' goodbyes too when they come soon, so nothing is left in the library's
    // queues (MPI_Finalize wants that), then let the wire finish sending ours.
    const absl::Time grace = std::min(deadline, absl::Now() + absl::Seconds(1));
    auto all_bye = [this] {
      for (int r = 0; r < config_.size; ++r) {
        if (r != config_.rank && !peers_[static_cast<size_t>(r)].bye) return false;
      }
      return true;
    };
    while (!failed_.load() && !all_bye() && absl::Now() < grace) {
      if (!ProgressLocked()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  // After a failure, only the aborts are still worth sending: a dead peer never takes them.
  const absl::Time flush_deadline =
      failed_.load() ? std::min(deadline, absl::Now() + absl::Seconds(2)) : deadline;
  while (wire_->Busy() && absl::Now() < flush_deadline) {
    if (!ProgressLocked()) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  // Anything still pending now can never complete: cancel it, give the wire a moment to hand
  // the buffers back, then abandon it.
  const absl::Status result = health();
  {
    std::lock_guard<std::mutex> state(mu_);
    if (failure_.ok()) {
      failure_ = absl::FailedPreconditionError("the transport is shut down");
      failed_.store(true);
    }
  }
  const absl::Status closed = health();
  for (Peer& p : peers_) {
    for (RecvOp& op : p.posted) op.request->Complete(closed);
    p.posted.clear();
    p.awaiting_cts.clear();
  }
  if (!pending_.empty()) {
    wire_->Cancel();
    const absl::Time drain = absl::Now() + absl::Seconds(1);
    while (!pending_.empty() && absl::Now() < drain) {
      if (!ProgressLocked()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (!pending_.empty()) wire_->Abandon();
    while (!pending_.empty()) CompletePending(pending_.begin(), closed);
  }
  return result;
}

}  // namespace ddp::transport::wire
