// TcpTransport data path: posting, writev batching, framing, tag matching, early messages.
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

uint64_t Group(uint64_t tag) { return tag >> kTagGroupShift; }

}  // namespace

void TcpTransport::OnStreamEvent(Stream* s, uint32_t events) {
  absl::Status status;
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) status = ReadSome(s);
  if (status.ok() && (events & EPOLLOUT) && !s->sendq.empty()) status = WriteSome(s);
  if (!status.ok()) Fail(status);
  UpdateInterest(s);
}

void TcpTransport::PostSend(int peer, SendOp op) {
  Peer& p = *peers_[static_cast<size_t>(peer)];
  if (p.bye) {
    op.request->Complete(
        PeerError(peer, absl::StatusCode::kFailedPrecondition, "has shut down; cannot send to it"));
    return;
  }
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
  MarkBusy(p, absl::Now());
  s->sendq.push_back(std::move(op));
  if (s->sendq.size() == 1) {
    absl::Status status = WriteSome(s);
    if (!status.ok()) Fail(status);
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
      if (peers_[static_cast<size_t>(s->peer)]->bye) return absl::OkStatus();
      return PeerError(s->peer, absl::StatusCode::kUnavailable,
                       absl::StrCat("connection lost while sending (", std::strerror(err),
                                    "); did that process die?"));
    }
    {
      Peer& p = *peers_[static_cast<size_t>(s->peer)];
      p.last_sent = absl::Now();
      // Bytes of a caller's frame leaving count as progress; our own control frames do not.
      if (s->sendq.front().request) p.last_progress = p.last_sent;
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

absl::Status TcpTransport::ReadSome(Stream* s) {
  Peer& p = *peers_[static_cast<size_t>(s->peer)];
  auto closed = [&](int err) -> absl::Status {
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, s->fd.get(), nullptr);
    s->state = StreamState::kClosed;
    if (p.bye && err == 0) return absl::OkStatus();
    if (failed_.load()) return absl::OkStatus();
    if (err != 0) {
      return PeerError(
          s->peer, absl::StatusCode::kUnavailable,
          absl::StrCat("connection lost (", std::strerror(err), "); did that process die?"));
    }
    return PeerError(s->peer, absl::StatusCode::kUnavailable,
                     "closed the connection unexpectedly; did that process die?");
  };
  while (s->state == StreamState::kOpen) {
    if (s->paused) return absl::OkStatus();
    const size_t staged = s->stage_end - s->stage_begin;
    if (!s->in_payload) {
      if (staged < kFrameHeaderSize) {
        bool got, eof;
        int err = 0;
        absl::Status st =
            FillStage(s->fd.get(), s->stage, s->stage_begin, s->stage_end, &got, &eof, &err);
        if (!st.ok() || eof) return closed(err);
        if (!got) return absl::OkStatus();
        p.last_heard = absl::Now();
        continue;
      }
      absl::StatusOr<FrameHeader> h = DecodeFrameHeader(s->stage.data() + s->stage_begin);
      if (!h.ok()) {
        return PeerError(s->peer, absl::StatusCode::kDataLoss,
                         absl::StrCat("sent a bad frame: ", h.status().message()));
      }
      s->stage_begin += kFrameHeaderSize;
      DDP_RETURN_IF_ERROR(OnHeader(s, *h));
      continue;
    }
    if (staged > 0) {
      const size_t n = std::min(staged, s->remaining);
      if (s->target != nullptr) std::memcpy(s->target, s->stage.data() + s->stage_begin, n);
      if (s->target != nullptr) s->target += n;
      s->stage_begin += n;
      s->remaining -= n;
    }
    if (s->remaining == 0) {
      DDP_RETURN_IF_ERROR(FinishMessage(s));
      continue;
    }
    if (s->remaining >= kDirectReadBytes && s->target != nullptr) {
      const ssize_t r = ::recv(s->fd.get(), s->target, s->remaining, MSG_DONTWAIT);
      if (r > 0) {
        s->target += r;
        s->remaining -= static_cast<size_t>(r);
        p.last_heard = p.last_progress = absl::Now();
        continue;
      }
      if (r == 0) return closed(0);
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return absl::OkStatus();
      return closed(errno);
    }
    bool got, eof;
    int err = 0;
    absl::Status st =
        FillStage(s->fd.get(), s->stage, s->stage_begin, s->stage_end, &got, &eof, &err);
    if (!st.ok() || eof) return closed(err);
    if (!got) return absl::OkStatus();
    p.last_heard = p.last_progress = absl::Now();
  }
  return absl::OkStatus();
}

absl::Status TcpTransport::OnHeader(Stream* s, const FrameHeader& h) {
  Peer& p = *peers_[static_cast<size_t>(s->peer)];
  s->header = h;
  switch (h.type) {
    case FrameType::kBye:
      p.bye = true;
      left_[static_cast<size_t>(s->peer)].store(true);
      for (auto it = p.posted.begin(); it != p.posted.end();) {
        if (!IsNotificationTag(it->first)) {
          ++it;
          continue;
        }
        for (RecvOp& op : it->second) {
          op.request->Complete(PeerError(s->peer, absl::StatusCode::kUnavailable, "has shut down"));
        }
        p.posted.erase(it++);
      }
      if (!p.posted.empty()) {
        return PeerError(s->peer, absl::StatusCode::kUnavailable,
                         "shut down while this rank still expects data from it");
      }
      return absl::OkStatus();
    case FrameType::kAbort:
      s->abort_text.assign(h.length, '\0');
      s->target = s->abort_text.data();
      s->remaining = h.length;
      s->in_payload = true;
      return absl::OkStatus();
    case FrameType::kHeartbeat:
      p.remote_waiting = (h.reserved & kWaitingFlag) != 0;
      return absl::OkStatus();
    case FrameType::kData:
      p.last_progress = absl::Now();
      return MatchMessage(s);
  }
  return absl::OkStatus();
}

absl::Status TcpTransport::MatchMessage(Stream* s) {
  const FrameHeader& h = s->header;
  Peer& p = *peers_[static_cast<size_t>(s->peer)];
  auto it = p.posted.find(h.tag);
  if (it != p.posted.end()) {
    RecvOp op = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) p.posted.erase(it);
    if (op.descriptor != h.descriptor || op.bytes != h.length) {
      absl::Status err =
          op.descriptor != h.descriptor
              ? absl::InvalidArgumentError(absl::StrCat(
                    "ranks disagree: rank ", config_.rank, " is running ", Describe(op.descriptor),
                    " but ", PeerName(s->peer), " is running ", Describe(h.descriptor)))
              : PeerError(s->peer, absl::StatusCode::kInvalidArgument,
                          absl::StrCat("sent ", h.length, " bytes where rank ", config_.rank,
                                       " expects ", op.bytes, " in ", Describe(op.descriptor),
                                       " (different counts on different ranks?)"));
      op.request->Complete(err);
      return err;
    }
    s->current = std::move(op);
    s->target = s->current->data;
    s->remaining = h.length;
    s->in_payload = true;
    return absl::OkStatus();
  }
  DDP_RETURN_IF_ERROR(CheckGroupAgreement(s->peer, h.tag, h.descriptor));
  if (h.length <= kEagerLimitBytes && unexpected_bytes_ + h.length <= kUnexpectedCapBytes) {
    auto u = std::make_unique<Unexpected>();
    u->header = h;
    u->payload.reset(new char[std::max<uint64_t>(h.length, 1)]);
    s->current_unexpected = u.get();
    s->target = u->payload.get();
    s->remaining = h.length;
    s->in_payload = true;
    unexpected_bytes_ += h.length;
    p.unexpected[h.tag].push_back(std::move(u));
    return absl::OkStatus();
  }
  // Too large to buffer: leave it in the kernel until its receive is posted (TCP backpressure).
  s->paused = true;
  return absl::OkStatus();
}

absl::Status TcpTransport::CheckGroupAgreement(int peer, uint64_t tag,
                                               const Descriptor& descriptor) {
  const Peer& p = *peers_[static_cast<size_t>(peer)];
  const Descriptor* theirs = nullptr;
  const Descriptor* mine = nullptr;
  for (const auto& [t, list] : p.posted) {
    if (Group(t) == Group(tag) && !list.empty() && !(list.front().descriptor == descriptor)) {
      mine = &list.front().descriptor;
      theirs = &descriptor;
    }
  }
  for (const auto& [t, list] : p.unexpected) {
    if (Group(t) == Group(tag) && !list.empty() &&
        !(list.front()->header.descriptor == descriptor)) {
      mine = &descriptor;
      theirs = &list.front()->header.descriptor;
    }
  }
  for (Stream* s : p.streams) {
    if (s != nullptr && s->paused && Group(s->header.tag) == Group(tag) &&
        !(s->header.descriptor == descriptor)) {
      mine = &descriptor;
      theirs = &s->header.descriptor;
    }
  }
  if (mine == nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("ranks disagree: rank ", config_.rank, " is running ", Describe(*mine), " but ",
                   PeerName(peer), " is running ", Describe(*theirs)));
}

absl::Status TcpTransport::FinishMessage(Stream* s) {
  s->in_payload = false;
  s->target = nullptr;
  Peer& p = *peers_[static_cast<size_t>(s->peer)];
  if (s->header.type == FrameType::kAbort) {
    absl::Status aborted = PeerError(s->peer, absl::StatusCode::kAborted,
                                     absl::StrCat("aborted the job: ", s->abort_text));
    Fail(aborted);
    return absl::OkStatus();
  }
  if (s->current) {
    RequestPtr request = std::move(s->current->request);
    s->current.reset();
    request->Complete(absl::OkStatus());
    return absl::OkStatus();
  }
  Unexpected* u = s->current_unexpected;
  s->current_unexpected = nullptr;
  if (u == nullptr) return absl::OkStatus();  // payload of a failed receive, drained
  u->complete = true;
  if (u->claimed) {
    if (u->header.length > 0) std::memcpy(u->claimed->data, u->payload.get(), u->header.length);
    RequestPtr request = std::move(u->claimed->request);
    auto& list = p.unexpected[u->header.tag];
    unexpected_bytes_ -= u->header.length;
    list.erase(std::find_if(list.begin(), list.end(),
                            [u](const std::unique_ptr<Unexpected>& e) { return e.get() == u; }));
    if (list.empty()) p.unexpected.erase(s->header.tag);
    request->Complete(absl::OkStatus());
  }
  return absl::OkStatus();
}

void TcpTransport::PostRecv(int peer, RecvOp op) {
  Peer& p = *peers_[static_cast<size_t>(peer)];
  MarkBusy(p, absl::Now());
  auto mismatch = [&](const Descriptor& theirs, uint64_t their_bytes) -> absl::Status {
    if (!(theirs == op.descriptor)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ranks disagree: rank ", config_.rank, " is running ", Describe(op.descriptor), " but ",
          PeerName(peer), " is running ", Describe(theirs)));
    }
    if (their_bytes != op.bytes) {
      return PeerError(peer, absl::StatusCode::kInvalidArgument,
                       absl::StrCat("sent ", their_bytes, " bytes where rank ", config_.rank,
                                    " expects ", op.bytes, " in ", Describe(op.descriptor),
                                    " (different counts on different ranks?)"));
    }
    return absl::OkStatus();
  };
  // 1. It arrived early and was buffered (completely, or still arriving).
  auto it = p.unexpected.find(op.tag);
  if (it != p.unexpected.end()) {
    for (auto uit = it->second.begin(); uit != it->second.end(); ++uit) {
      Unexpected* u = uit->get();
      if (u->claimed) continue;
      absl::Status check = mismatch(u->header.descriptor, u->header.length);
      if (!check.ok()) {
        op.request->Complete(check);
        Fail(check);
        return;
      }
      if (u->complete) {
        if (op.bytes > 0) std::memcpy(op.data, u->payload.get(), op.bytes);
        unexpected_bytes_ -= u->header.length;
        RequestPtr request = std::move(op.request);
        it->second.erase(uit);
        if (it->second.empty()) p.unexpected.erase(it);
        request->Complete(absl::OkStatus());
      } else {
        u->claimed = std::make_unique<RecvOp>(std::move(op));
      }
      return;
    }
  }
  // 2. Its header is waiting at the front of a paused stream.
  for (Stream* s : p.streams) {
    if (s == nullptr || !s->paused || s->header.tag != op.tag) continue;
    absl::Status check = mismatch(s->header.descriptor, s->header.length);
    if (!check.ok()) {
      op.request->Complete(check);
      Fail(check);
      return;
    }
    s->paused = false;
    s->current = std::move(op);
    s->target = s->current->data;
    s->remaining = s->header.length;
    s->in_payload = true;
    absl::Status status = ReadSome(s);
    if (!status.ok()) Fail(status);
    UpdateInterest(s);
    return;
  }
  if (p.bye) {
    op.request->Complete(PeerError(peer, absl::StatusCode::kUnavailable,
                                   "has shut down; nothing more will come from it"));
    return;
  }
  absl::Status agree = CheckGroupAgreement(peer, op.tag, op.descriptor);
  if (!agree.ok()) {
    op.request->Complete(agree);
    Fail(agree);
    return;
  }
  p.posted[op.tag].push_back(std::move(op));
}

}  // namespace ddp::transport::tcp
