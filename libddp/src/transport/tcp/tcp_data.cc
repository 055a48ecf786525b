// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// TcpTransport data path: posting, writev batching, framing, and what the matcher (matcher.h)
// hands back: posted receives filled straight from the socket, early messages buffered or left
// in the kernel.
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status.h"
#include "transport/tcp/tcp_state.h"
#include "transport/tcp/tcp_transport.h"

namespace ddp::transport::tcp {
namespace {

// Payload left to read at or above which we read straight into the destination buffer.
constexpr size_t kDirectReadBytes = 16 << 10;
// Early messages up to this size are buffered; larger ones wait in the kernel until their
// receive is posted and are then read straight into it (buffering them would cost a copy).
constexpr size_t kEagerLimitBytes = 256 << 10;
constexpr size_t kUnexpectedCapBytes = 512 << 20;
constexpr int kMaxIov = 64;

}  // namespace

void TcpTransport::OnStreamEvent(Stream* s, uint32_t events) {
  absl::Status status;
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) status = ReadSome(s);
  if (status.ok() && (events & EPOLLOUT) && !s->sendq.empty()) status = WriteSome(s);
  if (!status.ok()) PeerFailedLocked(s->peer, status);
  UpdateInterest(s);
}

void TcpTransport::PostSend(int peer, SendOp op) {
  Peer& p = *peers_[static_cast<size_t>(peer)];
  // Round-robin over the peer's streams; the receiver matches by tag, not by stream.
  Stream* s = nullptr;
  for (int i = 0; i < config_.streams && s == nullptr; ++i) {
    s = p.streams[static_cast<size_t>(p.next_stream)];
    p.next_stream = (p.next_stream + 1) % config_.streams;
  }
  if (s == nullptr) {
    op.request->Complete(PeerError(peer, absl::StatusCode::kFailedPrecondition, "not connected"));
    return;
  }
  MarkBusy(peer, absl::Now());
  s->sendq.push_back(std::move(op));
  if (s->sendq.size() == 1) {
    absl::Status status = WriteSome(s);
    if (!status.ok()) PeerFailedLocked(peer, status);
  }
  UpdateInterest(s);
}

absl::Status TcpTransport::WriteSome(Stream* s) {
  while (!s->sendq.empty()) {
    iovec iov[kMaxIov];
    int n = 0;
    for (auto it = s->sendq.begin(); it != s->sendq.end() && n + 2 <= kMaxIov; ++it) {
      size_t off = it->written;
      if (off < kFrameHeaderSize) {
        iov[n++] = {it->header + off, kFrameHeaderSize - off};
        off = kFrameHeaderSize;
      }
      const size_t data_off = off - kFrameHeaderSize;
      if (data_off < it->bytes) {
        iov[n++] = {const_cast<char*>(it->data) + data_off, it->bytes - data_off};
      }
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n);
    const ssize_t wrote = ::sendmsg(s->fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (wrote < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return absl::OkStatus();
      const int err = errno;
      if (peer_state(s->peer) == PeerState::kLeft) return absl::OkStatus();
      if (HeardLastWordsOf(s->peer)) return absl::OkStatus();
      return PeerError(s->peer, absl::StatusCode::kUnavailable,
                       absl::StrCat("connection lost while sending (", std::strerror(err),
                                    "); did that process die?"));
    }
    {
      Peer& p = *peers_[static_cast<size_t>(s->peer)];
      p.last_sent = absl::Now();
      // Bytes of a caller's frame leaving count as progress; our own control frames do not.
      if (s->sendq.front().request) live(s->peer).last_progress = p.last_sent;
    }
    auto left = static_cast<size_t>(wrote);
    while (left > 0) {
      SendOp& op = s->sendq.front();
      const size_t need = kFrameHeaderSize + op.bytes - op.written;
      const size_t take = std::min(left, need);
      op.written += take;
      left -= take;
      if (op.written == kFrameHeaderSize + op.bytes) {
        if (op.request) op.request->Complete(absl::OkStatus());
        s->sendq.pop_front();
      }
    }
    // Zero-length frames fully written by a previous partial step.
    while (!s->sendq.empty() &&
           s->sendq.front().written == kFrameHeaderSize + s->sendq.front().bytes) {
      if (s->sendq.front().request) s->sendq.front().request->Complete(absl::OkStatus());
      s->sendq.pop_front();
    }
  }
  return absl::OkStatus();
}

bool TcpTransport::HeardLastWordsOf(int peer) {
  if (failed()) return true;
  if (hearing_last_words_) return false;
  hearing_last_words_ = true;
  // The peer's own streams, and (where a failure of one fails all) everyone else's after them.
  const bool everyone = !IsolatesPeers();
  std::vector<Stream*> open;
  for (auto& s : streams_) {
    if (s->state != StreamState::kOpen || !s->fd.valid()) continue;
    if (everyone || s->peer == peer) open.push_back(s.get());
  }
  std::stable_partition(open.begin(), open.end(),
                        [peer](const Stream* s) { return s->peer == peer; });
  // A reset connection still hands over the bytes that arrived before the reset. Errors here
  // are broken connections themselves: the caller reports its own if nothing better was said.
  bool settled = false;
  for (Stream* s : open) {
    if (s->state == StreamState::kOpen) (void)ReadSome(s);
    UpdateInterest(s);
    if (failed() || peer_state(peer) != PeerState::kAlive) {
      settled = true;
      break;
    }
  }
  hearing_last_words_ = false;
  return settled;
}

// Fills the staging buffer; *got says whether any byte arrived.
static absl::Status FillStage(int fd, std::vector<char>& stage, size_t& begin, size_t& end,
                              bool* got, bool* eof, int* err) {
  *got = false;
  *eof = false;
  if (begin == end) begin = end = 0;
  if (end == stage.size()) {
    std::memmove(stage.data(), stage.data() + begin, end - begin);
    end -= begin;
    begin = 0;
  }
  while (true) {
    const ssize_t r = ::recv(fd, stage.data() + end, stage.size() - end, MSG_DONTWAIT);
    if (r > 0) {
      end += static_cast<size_t>(r);
      *got = true;
      return absl::OkStatus();
    }
    if (r == 0) {
      *eof = true;
      return absl::OkStatus();
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return absl::OkStatus();
    *err = errno;
    return absl::UnavailableError(std::strerror(errno));
  }
}

// A stream's bytes are frames, each read in two phases:
//
//        +--> header: kFrameHeaderSize bytes staged, then OnHeader (a data frame meets its
//        |    posted receive, or a buffer of its own, or waits in the kernel: `paused`)
//        |      |
//        |      v
//        +--- payload: h.length bytes into the target, then FinishMessage
//
// Bytes come through `stage` (one recv brings a header and a small payload together); the rest
// of a large payload goes straight into its target (ReadDirect). ReadSome runs the phases until
// the socket has nothing more, the stream pauses or closes, or an error. Each phase returns
// whether to go on; where not, *result is what ReadSome returns.
absl::Status TcpTransport::ReadSome(Stream* s) {
  absl::Status result;
  while (s->state == StreamState::kOpen && !s->paused) {
    const bool go_on = s->in_payload ? ReadPayload(s, &result) : ReadHeader(s, &result);
    if (!go_on) return result;
  }
  return absl::OkStatus();
}

inline bool TcpTransport::ReadHeader(Stream* s, absl::Status* result) {
  if (s->stage_end - s->stage_begin < kFrameHeaderSize) {
    if (!Refill(s, result)) return false;
    Heard(s->peer, absl::Now());
    return true;
  }
  absl::StatusOr<FrameHeader> h = DecodeFrameHeader(s->stage.data() + s->stage_begin);
  if (!h.ok()) {
    *result = PeerError(s->peer, absl::StatusCode::kDataLoss,
                        absl::StrCat("sent a bad frame: ", h.status().message()));
    return false;
  }
  s->stage_begin += kFrameHeaderSize;
  *result = OnHeader(s, *h);
  return result->ok();
}

inline bool TcpTransport::ReadPayload(Stream* s, absl::Status* result) {
  const size_t staged = s->stage_end - s->stage_begin;
  if (staged > 0) {
    const size_t n = std::min(staged, s->remaining);
    if (s->target != nullptr) std::memcpy(s->target, s->stage.data() + s->stage_begin, n);
    if (s->target != nullptr) s->target += n;
    s->stage_begin += n;
    s->remaining -= n;
  }
  if (s->remaining == 0) {
    *result = FinishMessage(s);
    return result->ok();
  }
  if (s->remaining >= kDirectReadBytes && s->target != nullptr) return ReadDirect(s, result);
  if (!Refill(s, result)) return false;
  Progressed(s->peer, absl::Now());
  return true;
}

inline bool TcpTransport::ReadDirect(Stream* s, absl::Status* result) {
  const ssize_t r = ::recv(s->fd.get(), s->target, s->remaining, MSG_DONTWAIT);
  if (r > 0) {
    s->target += r;
    s->remaining -= static_cast<size_t>(r);
    Progressed(s->peer, absl::Now());
    return true;
  }
  if (r == 0) {
    *result = StreamClosed(s, 0);
    return false;
  }
  if (errno == EINTR) return true;
  if (errno == EAGAIN || errno == EWOULDBLOCK) {
    *result = absl::OkStatus();
    return false;
  }
  *result = StreamClosed(s, errno);
  return false;
}

inline bool TcpTransport::Refill(Stream* s, absl::Status* result) {
  bool got = false;
  bool eof = false;
  int err = 0;
  absl::Status st =
      FillStage(s->fd.get(), s->stage, s->stage_begin, s->stage_end, &got, &eof, &err);
  if (!st.ok() || eof) {
    *result = StreamClosed(s, err);
    return false;
  }
  *result = absl::OkStatus();
  return got;
}

absl::Status TcpTransport::StreamClosed(Stream* s, int err) {
  const int peer = s->peer;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, s->fd.get(), nullptr);
  // The peer ended its side: end ours, so that a peer waiting for that to close goes on.
  if (err == 0) ::shutdown(s->fd.get(), SHUT_WR);
  s->state = StreamState::kClosed;
  if (err == 0 && !s->done && peers_[static_cast<size_t>(peer)]->streams_done > 0) StreamDone(s);
  if (s->done && err == 0) return absl::OkStatus();
  if (peer_state(peer) == PeerState::kLeft && err == 0) return absl::OkStatus();
  if (failed() || peer_state(peer) == PeerState::kFailed) return absl::OkStatus();
  if (HeardLastWordsOf(peer)) return absl::OkStatus();
  if (err != 0) {
    return PeerError(
        peer, absl::StatusCode::kUnavailable,
        absl::StrCat("connection lost (", std::strerror(err), "); did that process die?"));
  }
  return PeerError(peer, absl::StatusCode::kUnavailable,
                   "closed the connection unexpectedly; did that process die?");
}

absl::Status TcpTransport::OnHeader(Stream* s, const FrameHeader& h) {
  s->header = h;
  switch (h.type) {
    case FrameType::kBye:
    case FrameType::kAbort:
      s->notice.assign(h.length, '\0');
      s->target = s->notice.data();
      s->remaining = h.length;
      s->in_payload = true;
      return absl::OkStatus();
    case FrameType::kHeartbeat:
      live(s->peer).remote_waiting = (h.reserved & kWaitingFlag) != 0;
      live(s->peer).remote_sending = (h.reserved & kSendingFlag) != 0;
      return absl::OkStatus();
    case FrameType::kData:
      live(s->peer).last_progress = absl::Now();
      return MatchMessage(s);
  }
  return absl::OkStatus();
}

absl::Status TcpTransport::MatchMessage(Stream* s) {
  const FrameHeader& h = s->header;
  Peer& p = *peers_[static_cast<size_t>(s->peer)];
  if (std::optional<PostedRecv> op = p.matcher.TakePosted(h.tag)) {
    if (op->descriptor != h.descriptor || op->bytes != h.length) {
      absl::Status err = op->descriptor != h.descriptor
                             ? Disagreement(s->peer, op->descriptor, h.descriptor)
                             : LengthMismatch(s->peer, h.length, op->bytes, op->descriptor);
      // The transport's failure first, then the request: its waiter may look at health() at
      // once and must find the failure (the caller's PeerFailedLocked is then a no-op).
      PeerFailedLocked(s->peer, err);
      op->request->Complete(err);
      return err;
    }
    s->current = std::move(op);
    s->target = s->current->data;
    s->remaining = h.length;
    s->in_payload = true;
    return absl::OkStatus();
  }
  if (auto conflict = GroupConflict(s->peer, p.matcher, h.tag, h.descriptor, /*arriving=*/true)) {
    return *conflict;
  }
  if (h.length <= kEagerLimitBytes && unexpected_bytes_ + h.length <= kUnexpectedCapBytes) {
    auto u = std::make_shared<Unexpected>();
    u->length = h.length;
    u->payload.reset(new char[std::max<uint64_t>(h.length, 1)]);
    s->current_unexpected = u;
    s->target = u->payload.get();
    s->remaining = h.length;
    s->in_payload = true;
    unexpected_bytes_ += h.length;
    p.matcher.AddEarly(Early{h, std::move(u), nullptr});
    return absl::OkStatus();
  }
  // Too large to buffer: leave it in the kernel until its receive is posted (TCP backpressure).
  s->paused = true;
  p.matcher.AddEarly(Early{h, nullptr, s});
  return absl::OkStatus();
}

absl::Status TcpTransport::FinishMessage(Stream* s) {
  s->in_payload = false;
  s->target = nullptr;
  if (s->header.type == FrameType::kAbort) {
    PeerFailedLocked(s->peer, PeerAborted(s->peer, s->notice));
    return absl::OkStatus();
  }
  if (s->header.type == FrameType::kBye) {
    peers_[static_cast<size_t>(s->peer)]->bye_notice = std::move(s->notice);
    if (!s->done) StreamDone(s);
    return absl::OkStatus();
  }
  if (s->current) {
    RequestPtr request = std::move(s->current->request);
    s->current.reset();
    request->Complete(absl::OkStatus());
    return absl::OkStatus();
  }
  std::shared_ptr<Unexpected> u = std::move(s->current_unexpected);
  if (u == nullptr) return absl::OkStatus();  // payload of a failed receive, drained
  u->complete = true;
  if (u->claimed) {
    if (u->length > 0) std::memcpy(u->claimed->data, u->payload.get(), u->length);
    ReleaseUnexpected(*u);
    RequestPtr request = std::move(u->claimed->request);
    u->claimed.reset();
    request->Complete(absl::OkStatus());
  }
  return absl::OkStatus();
}

void TcpTransport::StreamDone(Stream* s) {
  Peer& p = *peers_[static_cast<size_t>(s->peer)];
  s->done = true;
  if (++p.streams_done < config_.streams) return;
  PeerLeftLocked(s->peer, p.bye_notice, p.matcher);
}

void TcpTransport::PostRecv(int peer, PostedRecv op) {
  Peer& p = *peers_[static_cast<size_t>(peer)];
  MarkBusy(peer, absl::Now());
  if (std::optional<Early> early = p.matcher.TakeEarly(op.tag)) {
    Claim(peer, *std::move(early), std::move(op));
    return;
  }
  if (peer_state(peer) == PeerState::kLeft) {
    op.request->Complete(LeftError(peer));  // nothing more will come from it
    return;
  }
  if (auto conflict = GroupConflict(peer, p.matcher, op.tag, op.descriptor, /*arriving=*/false)) {
    op.request->Complete(*conflict);
    PeerFailedLocked(peer, *conflict);
    return;
  }
  p.matcher.Post(std::move(op));
}

void TcpTransport::Claim(int peer, const Early& early, PostedRecv op) {
  const FrameHeader& h = early.header;
  if (op.descriptor != h.descriptor || op.bytes != h.length) {
    absl::Status err = op.descriptor != h.descriptor
                           ? Disagreement(peer, op.descriptor, h.descriptor)
                           : LengthMismatch(peer, h.length, op.bytes, op.descriptor);
    PeerFailedLocked(peer, err);  // first: the request's waiter may check health() at once
    op.request->Complete(err);
    return;
  }
  // 1. It arrived early and was buffered: completely, or it is still arriving.
  if (early.buffered != nullptr) {
    Unexpected& u = *early.buffered;
    if (!u.complete) {
      u.claimed = std::move(op);  // FinishMessage completes it
      return;
    }
    if (op.bytes > 0) std::memcpy(op.data, u.payload.get(), op.bytes);
    ReleaseUnexpected(u);
    op.request->Complete(absl::OkStatus());
    return;
  }
  // 2. Its header waits at the front of a paused stream: read the payload straight in.
  Stream* s = early.paused;
  s->paused = false;
  s->current = std::move(op);
  s->target = s->current->data;
  s->remaining = h.length;
  s->in_payload = true;
  absl::Status status = ReadSome(s);
  if (!status.ok()) PeerFailedLocked(peer, status);
  UpdateInterest(s);
}

}  // namespace ddp::transport::tcp
