// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// BSD socket helpers.
#include "common/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status.h"
#include "common/wait.h"

namespace ddp::net {
namespace {

absl::Status ToSockaddr(absl::string_view ip, int port, sockaddr_storage* ss, socklen_t* len) {
  std::memset(ss, 0, sizeof(*ss));
  const std::string host(ip);
  auto* v4 = reinterpret_cast<sockaddr_in*>(ss);
  if (::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    *len = sizeof(sockaddr_in);
    return absl::OkStatus();
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(ss);
  if (::inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    *len = sizeof(sockaddr_in6);
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("'", ip, "' is not a numeric IP address"));
}

std::string FromSockaddr(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(sa);
    ::inet_ntop(AF_INET, &v4->sin_addr, buf, sizeof(buf));
    return JoinHostPort(buf, ntohs(v4->sin_port));
  }
  if (sa->sa_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(sa);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, buf, sizeof(buf));
    return JoinHostPort(buf, ntohs(v6->sin6_port));
  }
  return "?";
}

}  // namespace

void Fd::Reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string JoinHostPort(absl::string_view host, int port) {
  if (host.find(':') != absl::string_view::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::Status SplitHostPort(absl::string_view text, std::string* host, int* port) {
  const size_t colon = text.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not host:port"));
  }
  absl::string_view h = text.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  int p = 0;
  if (!absl::SimpleAtoi(text.substr(colon + 1), &p) || p < 0 || p > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' has a bad port"));
  }
  *host = std::string(h);
  *port = p;
  return absl::OkStatus();
}

absl::StatusOr<std::string> Resolve(absl::string_view host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const std::string name(host);
  const int rc = ::getaddrinfo(name.c_str(), nullptr, &hints, &result);
  if (rc != 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot resolve host '", host, "': ", ::gai_strerror(rc)));
  }
  std::string best;
  for (addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    std::string text = FromSockaddr(ai->ai_addr);
    std::string ip;
    int port = 0;
    if (!SplitHostPort(text, &ip, &port).ok()) continue;
    if (ai->ai_family == AF_INET) {
      best = ip;
      break;
    }
    if (best.empty()) best = ip;
  }
  ::freeaddrinfo(result);
  if (best.empty()) return absl::NotFoundError(absl::StrCat("no address for host '", host, "'"));
  return best;
}

absl::StatusOr<std::string> ChooseLocalAddress(absl::string_view iface,
                                               absl::string_view peer_hint) {
  if (!iface.empty()) {
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0) return ErrnoError("getifaddrs");
    std::string found;
    for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
      if (it->ifa_addr == nullptr || iface != it->ifa_name) continue;
      if (it->ifa_addr->sa_family != AF_INET && it->ifa_addr->sa_family != AF_INET6) continue;
      std::string ip;
      int port = 0;
      if (!SplitHostPort(FromSockaddr(it->ifa_addr), &ip, &port).ok()) continue;
      if (it->ifa_addr->sa_family == AF_INET) {
        found = ip;
        break;
      }
      if (found.empty() && ip.rfind("fe80", 0) != 0) found = ip;
    }
    ::freeifaddrs(list);
    if (found.empty()) {
      return absl::NotFoundError(
          absl::StrCat("DDP_IFACE=", iface, ": no such interface with an IP address"));
    }
    return found;
  }
  DDP_ASSIGN_OR_RETURN(std::string peer_ip, Resolve(peer_hint));
  sockaddr_storage ss;
  socklen_t len = 0;
  DDP_RETURN_IF_ERROR(ToSockaddr(peer_ip, 9, &ss, &len));
  // A connected UDP socket asks the routing table for the source address; nothing is sent.
  Fd probe(::socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!probe.valid()) return ErrnoError("socket");
  if (::connect(probe.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    return ErrnoError(absl::StrCat("no route to rendezvous host ", peer_ip));
  }
  sockaddr_storage local{};
  socklen_t local_len = sizeof(local);
  if (::getsockname(probe.get(), reinterpret_cast<sockaddr*>(&local), &local_len) != 0) {
    return ErrnoError("getsockname");
  }
  std::string ip;
  int port = 0;
  DDP_RETURN_IF_ERROR(SplitHostPort(FromSockaddr(reinterpret_cast<sockaddr*>(&local)), &ip, &port));
  return ip;
}

absl::StatusOr<Fd> Listen(absl::string_view ip, int port, int* bound_port) {
  sockaddr_storage ss;
  socklen_t len = 0;
  DDP_RETURN_IF_ERROR(ToSockaddr(ip, port, &ss, &len));
  Fd fd(::socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoError("socket");
  const int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    return ErrnoError(absl::StrCat("bind ", JoinHostPort(ip, port)));
  }
  if (::listen(fd.get(), 1024) != 0) return ErrnoError("listen");
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &bound_len) != 0) {
    return ErrnoError("getsockname");
  }
  std::string host;
  DDP_RETURN_IF_ERROR(
      SplitHostPort(FromSockaddr(reinterpret_cast<sockaddr*>(&bound)), &host, bound_port));
  return fd;
}

absl::StatusOr<Fd> StartConnect(absl::string_view ip, int port) {
  sockaddr_storage ss;
  socklen_t len = 0;
  DDP_RETURN_IF_ERROR(ToSockaddr(ip, port, &ss, &len));
  Fd fd(::socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoError("socket");
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0 && errno != EINPROGRESS) {
    return ErrnoError(absl::StrCat("connect ", JoinHostPort(ip, port)));
  }
  return fd;
}

absl::StatusOr<Fd> ConnectWithRetry(absl::string_view ip, int port, absl::Time deadline) {
  // Retries after sleeps from 10 ms doubling to 0.5 s (a server that is still starting).
  Backoff backoff({0, 0, absl::Milliseconds(10), absl::Milliseconds(500)});
  absl::Status last;
  while (true) {
    absl::StatusOr<Fd> fd = StartConnect(ip, port);
    if (fd.ok()) {
      pollfd pfd{fd->get(), POLLOUT, 0};
      const int64_t wait_ms =
          std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
      const int ready = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(wait_ms, 5000)));
      int err = ETIMEDOUT;
      if (ready > 0) {
        socklen_t len = sizeof(err);
        ::getsockopt(fd->get(), SOL_SOCKET, SO_ERROR, &err, &len);
      }
      if (err == 0) return std::move(*fd);
      last = ErrnoError(absl::StrCat("connect ", JoinHostPort(ip, port)), err);
    } else {
      last = fd.status();
    }
    const absl::Duration sleep = backoff.Idle();
    if (absl::Now() + sleep > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("could not connect to ", JoinHostPort(ip, port), ": ", last.message()));
    }
    absl::SleepFor(sleep);
  }
}

absl::Status SetNonBlocking(int fd, bool on) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0) return ErrnoError("fcntl");
  const int wanted = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (::fcntl(fd, F_SETFL, wanted) != 0) return ErrnoError("fcntl");
  return absl::OkStatus();
}

absl::Status TuneStream(int fd, int buffer_bytes) {
  const int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    return ErrnoError("TCP_NODELAY");
  }
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  if (buffer_bytes > 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof(buffer_bytes));
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof(buffer_bytes));
  }
  return absl::OkStatus();
}

std::string PeerAddress(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return FromSockaddr(reinterpret_cast<sockaddr*>(&ss));
}

}  // namespace ddp::net
