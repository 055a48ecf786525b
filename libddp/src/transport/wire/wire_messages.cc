// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// WireTransport's messages: sends and receives posted (a header, inline payload or data messages
// in segments), a header matched with its receive, and the control messages that arrive, taken
// in sequence order.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "transport/wire/control.h"
#include "transport/wire/wire_transport.h"

namespace ddp::transport::wire {
namespace {

// Control messages overtake one another only on a wire without ordering (libfabric RDM), and
// only by what their sender has in flight at once. A peer this far ahead of its own sequence,
// or whose early messages hold this much, is broken or hostile: it fails instead of growing the
// map without bound.
constexpr uint64_t kMaxEarlyAhead = uint64_t{1} << 16;
constexpr size_t kMaxEarlyBytes = size_t{64} << 20;

size_t Segments(size_t bytes, size_t max) { return bytes == 0 ? 1 : (bytes + max - 1) / max; }

}  // namespace

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
      Match(peer, op, *std::move(h));
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
void WireTransport::Match(int peer, const PostedRecv& op, Header h) {
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

// ---- arriving ---------------------------------------------------------------------------------

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

}  // namespace ddp::transport::wire
