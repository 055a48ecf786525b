// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// TcpTransport connection management: dialing, accepting, the non-blocking handshake.
#include <sched.h>
#include <sys/epoll.h>
#include <sys/socket.h>

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

constexpr size_t kStageBytes = 64 << 10;
// Connections still proving themselves; more than this at once are refused outright.
constexpr size_t kMaxHandshaking = 256;
// Set in a stream's index (covered by the handshake's MAC): the dialer is a failed rank's new
// process, taking its place (Rejoin).
constexpr uint16_t kRejoinStream = 0x8000;

}  // namespace

absl::Status TcpTransport::ConnectAll(const std::vector<std::string>& addresses,
                                      const std::vector<std::string>& hosts, absl::Time deadline) {
  return Connect(addresses, hosts, deadline, false);
}

absl::Status TcpTransport::Rejoin(const std::vector<std::string>& addresses,
                                  const std::vector<std::string>& hosts, absl::Time deadline) {
  SetPeerFailurePolicy(PeerFailurePolicy::kIsolatePeer);
  return Connect(addresses, hosts, deadline, true);
}

absl::Status TcpTransport::Connect(const std::vector<std::string>& addresses,
                                   const std::vector<std::string>& hosts, absl::Time deadline,
                                   bool rejoin) {
  if (addresses.size() != static_cast<size_t>(config_.size) ||
      hosts.size() != static_cast<size_t>(config_.size)) {
    return absl::InvalidArgumentError("ConnectAll: one address and host per rank");
  }
  {
    std::lock_guard<std::mutex> engine(engine_mu_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      addresses_ = addresses;
    }
    SetHosts(hosts);
    connect_deadline_ = deadline;
    rejoining_ = rejoin;
    const long local =
        config_.ranks_on_machine > 0
            ? config_.ranks_on_machine
            : std::count(hosts.begin(), hosts.end(), hosts[static_cast<size_t>(config_.rank)]);
    cpu_set_t cpus;
    const long cores = ::sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    oversubscribed_ = config_.cores_shared.value_or(local > cores);
    for (int r = 0; r < config_.size; ++r) {
      peers_[static_cast<size_t>(r)]->address = addresses[static_cast<size_t>(r)];
    }
    // Lower ranks are dialled, higher ones dial; a rejoining process dials them all.
    for (int r = 0; r < (rejoin ? config_.size : config_.rank); ++r) {
      if (r == config_.rank) continue;
      for (int i = 0; i < config_.streams; ++i) StartDial(r, i);
    }
    if (AllConnected()) {
      std::lock_guard<std::mutex> lock(mu_);
      connected_ = true;
      connect_deadline_ = absl::InfiniteFuture();
    }
  }
  Wake();
  std::unique_lock<std::mutex> lock(mu_);
  // The progress thread enforces the deadline with a precise error; this wait only backs it up.
  connected_cv_.wait_until(lock, absl::ToChronoTime(deadline + absl::Seconds(5)),
                           [&] { return connected_ || failed(); });
  lock.unlock();
  if (failed()) return health();
  if (!connected_) return absl::DeadlineExceededError("timed out connecting to the other ranks");
  return absl::OkStatus();
}

bool TcpTransport::AllConnected() const {
  for (int r = 0; r < config_.size; ++r) {
    // A peer isolated while connecting (a rejoin that cannot reach it) is not waited for.
    if (r == config_.rank || peer_state(r) == PeerState::kFailed) continue;
    for (Stream* s : peers_[static_cast<size_t>(r)]->streams) {
      if (s == nullptr) return false;
    }
  }
  return true;
}

void TcpTransport::StartDial(int peer, int stream_index) {
  const Peer& p = *peers_[static_cast<size_t>(peer)];
  std::string ip;
  int port = 0;
  absl::Status parsed = net::SplitHostPort(p.address, &ip, &port);
  absl::StatusOr<net::Fd> fd =
      parsed.ok() ? net::StartConnect(ip, port) : absl::StatusOr<net::Fd>(parsed);
  if (!fd.ok()) {
    DialFailedLocked(peer, PeerError(peer, absl::StatusCode::kUnavailable,
                                     absl::StrCat("cannot connect: ", fd.status().message())));
    return;
  }
  auto s = std::make_unique<Stream>();
  s->fd = std::move(*fd);
  s->dialer = true;
  s->peer = peer;
  s->index = stream_index;
  s->remote = p.address;
  s->state = StreamState::kConnecting;
  s->deadline = connect_deadline_;
  epoll_event ev{};
  ev.events = EPOLLOUT | EPOLLRDHUP;
  ev.data.ptr = s.get();
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, s->fd.get(), &ev) != 0) {
    FailLocked(ErrnoError("epoll_ctl"));
    return;
  }
  s->watched = ev.events;
  streams_.push_back(std::move(s));
}

void TcpTransport::DialFailedLocked(int peer, const absl::Status& why) {
  if (!rejoining_) {
    FailLocked(why);
    return;
  }
  PeerFailedLocked(peer, why);  // isolated: the rejoin goes on without it
  if (AllConnected()) {
    std::lock_guard<std::mutex> lock(mu_);
    connected_ = true;
    connected_cv_.notify_all();
  }
}

void TcpTransport::AcceptNew() {
  while (true) {
    const int raw = ::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (raw < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // EAGAIN, or out of descriptors: try again on the next event
    }
    net::Fd fd(raw);
    const size_t handshaking = static_cast<size_t>(std::count_if(
        streams_.begin(), streams_.end(),
        [](const std::unique_ptr<Stream>& s) { return s->state == StreamState::kAwaitAuth; }));
    const std::string remote = net::PeerAddress(fd.get());
    if (handshaking >= kMaxHandshaking) {
      DDP_LOG(kWarning, "rejected connection from %s: too many unauthenticated connections",
              remote);
      continue;
    }
    auto hello = auth::NewNonce();
    if (!hello.ok()) {
      FailLocked(hello.status());
      return;
    }
    auto s = std::make_unique<Stream>();
    s->fd = std::move(fd);
    s->remote = remote;
    s->state = StreamState::kAwaitAuth;
    s->deadline = absl::Now() + config_.handshake_timeout;
    s->hello = auth::Hello{auth::Role::kTransport, config_.rank, *hello};
    s->hs_out = auth::EncodeHello(s->hello);
    s->hs_need = auth::kAuthSize;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.ptr = s.get();
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, s->fd.get(), &ev) != 0) continue;
    s->watched = ev.events;
    Stream* raw_stream = s.get();
    streams_.push_back(std::move(s));
    OnHandshakeEvent(raw_stream, EPOLLIN | EPOLLOUT);
  }
}

void TcpTransport::OnHandshakeEvent(Stream* s, uint32_t events) {
  if (s->state == StreamState::kConnecting) {
    if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(s->fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      // The peer may not be listening yet; dial again shortly, until the start deadline.
      ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, s->fd.get(), nullptr);
      s->fd.Reset();
      s->state = StreamState::kClosed;
      const int peer = s->peer;
      s->peer = -1;
      if (absl::Now() + absl::Milliseconds(100) > connect_deadline_) {
        DialFailedLocked(peer, PeerError(peer, absl::StatusCode::kUnavailable,
                                         absl::StrCat("cannot connect: ", std::strerror(err))));
        return;
      }
      redials_.push_back({peer, s->index, absl::Now() + absl::Milliseconds(100)});
      return;
    }
    absl::Status tuned = net::TuneStream(s->fd.get(), config_.socket_buffer_bytes);
    if (!tuned.ok()) {
      FailLocked(tuned);
      return;
    }
    s->state = StreamState::kAwaitHello;
    s->hs_need = auth::kHelloSize;
  }
  absl::Status status = AdvanceHandshake(s);
  if (status.ok()) {
    UpdateInterest(s);
    return;
  }
  if (s->dialer) {
    DialFailedLocked(s->peer,
                     PeerError(s->peer, absl::StatusCode::kPermissionDenied,
                               absl::StrCat("handshake failed: ", status.message(),
                                            " (is DDP_JOB_TOKEN the same on every rank?)")));
  } else {
    DropStream(s, status);
  }
}

// The handshake, in time order; each side's state names the message it awaits (the messages:
// common/auth.h):
//
//   dialer                                      acceptor
//   kConnecting, until connected                kAwaitAuth: sends Hello (a nonce)
//   kAwaitHello: Hello in; sends Auth (a MAC
//     over the nonce, its rank and stream)
//                                               Auth in: checks the MAC and the rank and stream
//                                               claimed (AdmitStream); sends Accept (its MAC)
//   kAwaitAccept: Accept in; checks its MAC
//   kOpen                                       kOpen, once the Accept is flushed
//
// Each turn of the loop flushes what this side owes, attaches the stream once it is open, reads
// exactly the next message (never more: a data frame may follow it in the same segment) and
// hands it to its state's function, which says what to send next and the next state. A socket
// that would block ends the turn with OK: the next event goes on from the same place.
absl::Status TcpTransport::AdvanceHandshake(Stream* s) {
  while (true) {
    DDP_ASSIGN_OR_RETURN(const bool flushed, FlushHandshake(s));
    if (!flushed) return absl::OkStatus();
    if (s->state == StreamState::kOpen) {
      AttachOpenStream(s);
      return absl::OkStatus();
    }
    DDP_ASSIGN_OR_RETURN(const bool complete, ReadHandshakeMessage(s));
    if (!complete) return absl::OkStatus();
    const std::string message = std::move(s->hs_in);
    s->hs_in.clear();
    switch (s->state) {
      case StreamState::kAwaitHello:
        DDP_RETURN_IF_ERROR(OnHello(s, message));
        break;
      case StreamState::kAwaitAccept:
        DDP_RETURN_IF_ERROR(OnAccept(s, message));
        break;
      case StreamState::kAwaitAuth:
        DDP_RETURN_IF_ERROR(OnAuth(s, message));
        break;
      default:
        return absl::InternalError("bad handshake state");
    }
  }
}

absl::StatusOr<bool> TcpTransport::FlushHandshake(Stream* s) {
  while (s->hs_out_done < s->hs_out.size()) {
    const ssize_t w = ::send(s->fd.get(), s->hs_out.data() + s->hs_out_done,
                             s->hs_out.size() - s->hs_out_done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      s->hs_out_done += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
  }
  return true;
}

absl::StatusOr<bool> TcpTransport::ReadHandshakeMessage(Stream* s) {
  while (s->hs_in.size() < s->hs_need) {
    char buf[256];
    const size_t want = std::min(sizeof(buf), s->hs_need - s->hs_in.size());
    const ssize_t r = ::recv(s->fd.get(), buf, want, MSG_DONTWAIT);
    if (r > 0) {
      s->hs_in.append(buf, static_cast<size_t>(r));
      continue;
    }
    if (r == 0) return absl::UnavailableError("connection closed during the handshake");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
    return absl::UnavailableError(absl::StrCat("recv: ", std::strerror(errno)));
  }
  return true;
}

absl::Status TcpTransport::OnHello(Stream* s, const std::string& message) {
  DDP_ASSIGN_OR_RETURN(s->hello, auth::DecodeHello(message, auth::Role::kTransport));
  if (s->hello.server_rank != s->peer) {
    return absl::FailedPreconditionError(absl::StrCat("expected rank ", s->peer, " at ", s->remote,
                                                      " but found rank ", s->hello.server_rank));
  }
  DDP_ASSIGN_OR_RETURN(auto nonce, auth::NewNonce());
  const auto stream = static_cast<uint16_t>(s->index | (rejoining_ ? kRejoinStream : uint16_t{0}));
  s->auth = auth::Auth{auth::Role::kTransport, config_.rank, stream, nonce, {}};
  s->auth.mac = auth::ClientMac(config_.token, s->hello, config_.rank, stream, nonce);
  s->hs_out = auth::EncodeAuth(s->auth);
  s->hs_out_done = 0;
  s->hs_need = auth::kAcceptSize;
  s->state = StreamState::kAwaitAccept;
  return absl::OkStatus();
}

absl::Status TcpTransport::OnAccept(Stream* s, const std::string& message) {
  DDP_ASSIGN_OR_RETURN(auth::Mac mac, auth::DecodeAccept(message));
  if (!auth::MacEqual(mac, auth::ServerMac(config_.token, s->hello, s->auth))) {
    return absl::PermissionDeniedError("the peer does not know the job token");
  }
  s->state = StreamState::kOpen;
  return absl::OkStatus();
}

absl::Status TcpTransport::OnAuth(Stream* s, const std::string& message) {
  DDP_ASSIGN_OR_RETURN(s->auth, auth::DecodeAuth(message, auth::Role::kTransport));
  const auth::Mac expected =
      auth::ClientMac(config_.token, s->hello, s->auth.client_rank, s->auth.stream, s->auth.nonce);
  if (!auth::MacEqual(expected, s->auth.mac)) {
    return absl::PermissionDeniedError("wrong job token");
  }
  const int peer = s->auth.client_rank;
  const bool rejoin = (s->auth.stream & kRejoinStream) != 0;
  const int index = s->auth.stream & ~kRejoinStream;
  DDP_RETURN_IF_ERROR(AdmitStream(peer, index, rejoin));
  s->peer = peer;
  s->index = index;
  s->hs_out = auth::EncodeAccept(auth::ServerMac(config_.token, s->hello, s->auth));
  s->hs_out_done = 0;
  s->state = StreamState::kOpen;  // once the accept is flushed
  return absl::OkStatus();
}

absl::Status TcpTransport::AdmitStream(int peer, int index, bool rejoin) {
  if (peer < 0 || peer >= config_.size || peer == config_.rank ||
      (!rejoin && peer < config_.rank) || index >= config_.streams) {
    return absl::PermissionDeniedError(absl::StrCat("claims to be rank ", peer, " stream ", index,
                                                    ", which cannot dial rank ", config_.rank));
  }
  if (rejoin) {
    DDP_RETURN_IF_ERROR(AdmitRejoin(peer));
  } else if (peer_state(peer) != PeerState::kAlive) {
    return absl::AlreadyExistsError(
        absl::StrCat("rank ", peer, " failed; only a rejoin takes its place"));
  }
  if (peers_[static_cast<size_t>(peer)]->streams[static_cast<size_t>(index)] != nullptr) {
    return absl::AlreadyExistsError(
        absl::StrCat("rank ", peer, " stream ", index, " is already connected"));
  }
  return absl::OkStatus();
}

absl::Status TcpTransport::AdmitRejoin(int peer) {
  // A new process for `peer`. Only a job that outlives failed peers takes one back; the old
  // process, if this rank has not seen it fail yet, is failed now (it is gone, or about to be:
  // its rank belongs to the new one).
  if (!IsolatesPeers()) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", peer, " restarted, but this job does not take back restarted ranks"));
  }
  if (peer_state(peer) == PeerState::kAlive) {
    PeerFailedLocked(peer, PeerError(peer, absl::StatusCode::kUnavailable,
                                     "restarted: a new process took its place"));
  }
  if (peer_state(peer) == PeerState::kLeft) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", peer, " has shut down; it cannot rejoin"));
  }
  return absl::OkStatus();
}

void TcpTransport::AttachOpenStream(Stream* s) {
  if (s->dialer || s->remote.empty()) s->remote = net::PeerAddress(s->fd.get());
  if (!s->dialer) {
    absl::Status tuned = net::TuneStream(s->fd.get(), config_.socket_buffer_bytes);
    if (!tuned.ok()) {
      FailLocked(tuned);
      return;
    }
  }
  s->stage.resize(kStageBytes);
  s->hs_in.clear();
  s->hs_out.clear();
  s->deadline = absl::InfiniteFuture();
  Peer& p = *peers_[static_cast<size_t>(s->peer)];
  p.streams[static_cast<size_t>(s->index)] = s;
  Heard(s->peer, absl::Now());
  DDP_LOG(kDebug, "connected to rank %d stream %d (%s)", s->peer, s->index, s->remote);
  if (peer_state(s->peer) == PeerState::kFailed &&
      std::find(p.streams.begin(), p.streams.end(), nullptr) == p.streams.end()) {
    // Every stream of a rejoining process is in: the rank is back.
    p.streams_done = 0;
    p.bye_notice.clear();
    p.next_stream = 0;
    {
      // Named from now on by where the new process dialled from (it listens nowhere we know).
      std::lock_guard<std::mutex> lock(mu_);
      addresses_[static_cast<size_t>(s->peer)] = s->remote;
    }
    ReviveLocked(s->peer);
  }
  if (AllConnected()) {
    std::lock_guard<std::mutex> lock(mu_);
    connected_ = true;
    connect_deadline_ = absl::InfiniteFuture();
    connected_cv_.notify_all();
  }
  // Data may already be waiting behind the handshake: read it now rather than on the next event.
  absl::Status status = ReadSome(s);
  if (!status.ok()) PeerFailedLocked(s->peer, status);
}

void TcpTransport::DropStream(Stream* s, const absl::Status& why) {
  DDP_LOG(kWarning, "rejected connection from %s: %s", s->remote, why.message());
  CloseStream(s);
  s->peer = -1;
}

void TcpTransport::CloseStream(Stream* s) {
  if (s->fd.valid()) {
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, s->fd.get(), nullptr);
    ::shutdown(s->fd.get(), SHUT_RDWR);
  }
  s->fd.Reset();
  s->state = StreamState::kClosed;
}

}  // namespace ddp::transport::tcp

namespace ddp::transport::tcp {

void TcpTransport::UpdateInterest(Stream* s) {
  if (!s->fd.valid() || s->state == StreamState::kClosed) return;
  uint32_t want = EPOLLRDHUP;
  switch (s->state) {
    case StreamState::kConnecting:
      want |= EPOLLOUT;
      break;
    case StreamState::kOpen:
      if (!s->paused) want |= EPOLLIN;
      if (!s->sendq.empty()) want |= EPOLLOUT;
      break;
    default:  // handshaking
      want |= EPOLLIN;
      if (s->hs_out_done < s->hs_out.size()) want |= EPOLLOUT;
  }
  if (want == s->watched) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.ptr = s;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, s->fd.get(), &ev) == 0) s->watched = want;
}

}  // namespace ddp::transport::tcp
