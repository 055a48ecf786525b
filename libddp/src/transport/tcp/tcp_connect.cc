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

absl::Status TcpTransport::AdvanceHandshake(Stream* s) {
  while (true) {
    // Flush what we owe first.
    while (s->hs_out_done < s->hs_out.size()) {
      const ssize_t w = ::send(s->fd.get(), s->hs_out.data() + s->hs_out_done,
                               s->hs_out.size() - s->hs_out_done, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) {
        s->hs_out_done += static_cast<size_t>(w);
        continue;
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return absl::OkStatus();
      return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
    }
    if (s->state == StreamState::kOpen) {
      AttachOpenStream(s);
      return absl::OkStatus();
    }
    // Then read exactly the next message: never more, so no data frame is swallowed.
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
      if (errno == EAGAIN || errno == EWOULDBLOCK) return absl::OkStatus();
      return absl::UnavailableError(absl::StrCat("recv: ", std::strerror(errno)));
    }
    const std::string message = std::move(s->hs_in);
    s->hs_in.clear();
    switch (s->state) {
      case StreamState::kAwaitHello: {  // dialer
        DDP_ASSIGN_OR_RETURN(s->hello, auth::DecodeHello(message, auth::Role::kTransport));
        if (s->hello.server_rank != s->peer) {
          return absl::FailedPreconditionError(absl::StrCat("expected rank ", s->peer, " at ",
                                                            s->remote, " but found rank ",
                                                            s->hello.server_rank));
        }
        DDP_ASSIGN_OR_RETURN(auto nonce, auth::NewNonce());
        const auto stream =
            static_cast<uint16_t>(s->index | (rejoining_ ? kRejoinStream : uint16_t{0}));
        s->auth = auth::Auth{auth::Role::kTransport, config_.rank, stream, nonce, {}};
        s->auth.mac = auth::ClientMac(config_.token, s->hello, config_.rank, stream, nonce);
        s->hs_out = auth::EncodeAuth(s->auth);
        s->hs_out_done = 0;
        s->hs_need = auth::kAcceptSize;
        s->state = StreamState::kAwaitAccept;
        break;
      }
      case StreamState::kAwaitAccept: {  // dialer
        DDP_ASSIGN_OR_RETURN(auth::Mac mac, auth::DecodeAccept(message));
        if (!auth::MacEqual(mac, auth::ServerMac(config_.token, s->hello, s->auth))) {
          return absl::PermissionDeniedError("the peer does not know the job token");
        }
        s->state = StreamState::kOpen;
        break;
      }
      case StreamState::kAwaitAuth: {  // acceptor
        DDP_ASSIGN_OR_RETURN(s->auth, auth::DecodeAuth(message, auth::Role::kTransport));
        const auth::Mac expected = auth::ClientMac(config_.token, s->hello, s->auth.client_rank,
                                                   s->auth.stream, s->auth.nonce);
        if (!auth::MacEqual(expected, s->auth.mac)) {
          return absl::PermissionDeniedError("wrong job token");
        }
        const int peer = s->auth.client_rank;
        const bool rejoin = (s->auth.stream & kRejoinStream) != 0;
        const int index = s->auth.stream & ~kRejoinStream;
        if (peer < 0 || peer >= config_.size || peer == config_.rank ||
            (!rejoin && peer < config_.rank) || index >= config_.streams) {
          return absl::PermissionDeniedError(absl::StrCat("claims to be rank ", peer, " stream ",
                                                          index, ", which cannot dial rank ",
                                                          config_.rank));
        }
        if (rejoin) {
          // A new process for `peer`. Only a job that outlives failed peers takes one back; the
          // old process, if this rank has not seen it fail yet, is failed now (it is gone, or
          // about to be: its rank belongs to the new one).
          if (!IsolatesPeers()) {
            return absl::FailedPreconditionError(absl::StrCat(
                "rank ", peer, " restarted, but this job does not take back restarted ranks"));
          }
          if (peer_state(peer) == PeerState::kAlive) {
            PeerFailedLocked(peer, PeerError(peer, absl::StatusCode::kUnavailable,
                                             "restarted: a new process took its place"));
          }
          if (peer_state(peer) == PeerState::kLeft) {
            return absl::FailedPreconditionError(
                absl::StrCat("rank ", peer, " has shut down; it cannot rejoin"));
          }
        } else if (peer_state(peer) != PeerState::kAlive) {
          return absl::AlreadyExistsError(
              absl::StrCat("rank ", peer, " failed; only a rejoin takes its place"));
        }
        if (peers_[static_cast<size_t>(peer)]->streams[static_cast<size_t>(index)] != nullptr) {
          return absl::AlreadyExistsError(
              absl::StrCat("rank ", peer, " stream ", index, " is already connected"));
        }
        s->peer = peer;
        s->index = index;
        s->hs_out = auth::EncodeAccept(auth::ServerMac(config_.token, s->hello, s->auth));
        s->hs_out_done = 0;
        s->state = StreamState::kOpen;  // once the accept is flushed
        break;
      }
      default:
        return absl::InternalError("bad handshake state");
    }
  }
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
