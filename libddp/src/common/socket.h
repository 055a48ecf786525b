// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Thin, Status-returning wrappers over BSD sockets shared by the store and the TCP transport.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ddp::net {

// Owns a file descriptor; closes it on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(Fd&& other) noexcept : fd_(other.Release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = other.Release();
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void Reset();

 private:
  int fd_ = -1;
};

// "host:port", with brackets around IPv6 hosts.
std::string JoinHostPort(absl::string_view host, int port);
absl::Status SplitHostPort(absl::string_view text, std::string* host, int* port);

// Numeric address of `host` (a name or an address literal), IPv4 preferred.
absl::StatusOr<std::string> Resolve(absl::string_view host);

// The address to listen on: that of `iface` when given (DDP_IFACE), otherwise the local
// address the kernel would use to reach `peer_hint` (the rendezvous host); no packet is sent.
absl::StatusOr<std::string> ChooseLocalAddress(absl::string_view iface,
                                               absl::string_view peer_hint);

// A non-blocking listening socket on ip:port (port 0 = any); the chosen port in *bound_port.
absl::StatusOr<Fd> Listen(absl::string_view ip, int port, int* bound_port);

// Blocking connect, retried while the peer is not yet listening, until `deadline`.
absl::StatusOr<Fd> ConnectWithRetry(absl::string_view ip, int port, absl::Time deadline);

// Starts a non-blocking connect; completion is signalled by writability (check SO_ERROR).
absl::StatusOr<Fd> StartConnect(absl::string_view ip, int port);

absl::Status SetNonBlocking(int fd, bool on);
// TCP_NODELAY, keepalive, and (when bytes > 0) SO_SNDBUF/SO_RCVBUF.
absl::Status TuneStream(int fd, int buffer_bytes);
// "ip:port" of the remote end, or "?" when unknown.
std::string PeerAddress(int fd);

}  // namespace ddp::net
