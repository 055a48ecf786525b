// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Handshake encoding, MACs and the blocking handshake used by the store.
#include "common/auth.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/bytes.h"
#include "common/crypto.h"
#include "common/status.h"

namespace ddp::auth {
namespace {

// A message's bytes ran out before its last field: unreachable after the size checks, which
// come first and say the same.
absl::Status WrongSize(absl::string_view message) {
  return absl::InternalError(absl::StrCat(message, " has the wrong size"));
}

absl::Status CheckPreamble(ByteReader& r, Role expected_role, absl::string_view message) {
  uint32_t magic = 0;
  if (!r.Get(&magic)) return WrongSize(message);
  if (magic != kMagic) {
    return absl::PermissionDeniedError(absl::StrCat(
        "handshake ", message, ": not a libddp peer (bad magic 0x", absl::Hex(magic), ")"));
  }
  uint16_t version = 0;
  if (!r.Get(&version)) return WrongSize(message);
  if (version != kVersion) {
    return absl::FailedPreconditionError(absl::StrCat("handshake ", message, ": protocol version ",
                                                      version, " but this libddp speaks ",
                                                      kVersion));
  }
  uint16_t role = 0;
  if (!r.Get(&role)) return WrongSize(message);
  if (role != static_cast<uint16_t>(expected_role)) {
    return absl::PermissionDeniedError(absl::StrCat("handshake ", message, ": wrong role ", role));
  }
  return absl::OkStatus();
}

Mac ComputeMac(absl::string_view token, absl::string_view label, Role role, const Nonce& first,
               const Nonce& second, int32_t server_rank, int32_t client_rank, uint16_t stream) {
  std::string message(label);
  ByteWriter w(&message);
  w.Put(static_cast<uint16_t>(role));
  w.Put(first);
  w.Put(second);
  w.Put(server_rank);
  w.Put(client_rank);
  w.Put(stream);
  return crypto::HmacSha256(
      token, absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(message.data()), message.size()));
}

}  // namespace

std::string EncodeHello(const Hello& hello) {
  std::string out;
  ByteWriter w(&out);
  w.Put(kMagic);
  w.Put(kVersion);
  w.Put(static_cast<uint16_t>(hello.role));
  w.Put(hello.server_rank);
  w.Put(hello.nonce);
  return out;
}

absl::StatusOr<Hello> DecodeHello(absl::string_view bytes, Role expected_role) {
  if (bytes.size() != kHelloSize) return WrongSize("hello");
  ByteReader r(bytes);
  DDP_RETURN_IF_ERROR(CheckPreamble(r, expected_role, "hello"));
  Hello hello;
  hello.role = expected_role;
  if (!r.Get(&hello.server_rank) || !r.Get(&hello.nonce)) return WrongSize("hello");
  return hello;
}

std::string EncodeAuth(const Auth& auth) {
  std::string out;
  ByteWriter w(&out);
  w.Put(kMagic);
  w.Put(kVersion);
  w.Put(static_cast<uint16_t>(auth.role));
  w.Put(auth.client_rank);
  w.Put(auth.stream);
  w.Put(uint16_t{0});
  w.Put(auth.nonce);
  w.Put(auth.mac);
  return out;
}

absl::StatusOr<Auth> DecodeAuth(absl::string_view bytes, Role expected_role) {
  if (bytes.size() != kAuthSize) return WrongSize("auth");
  ByteReader r(bytes);
  DDP_RETURN_IF_ERROR(CheckPreamble(r, expected_role, "auth"));
  Auth auth;
  auth.role = expected_role;
  uint16_t reserved = 0;
  if (!r.Get(&auth.client_rank) || !r.Get(&auth.stream) || !r.Get(&reserved) ||
      !r.Get(&auth.nonce) || !r.Get(&auth.mac)) {
    return WrongSize("auth");
  }
  return auth;
}

std::string EncodeAccept(const Mac& mac) {
  std::string out;
  ByteWriter w(&out);
  w.Put(kMagic);
  w.Put(mac);
  return out;
}

absl::StatusOr<Mac> DecodeAccept(absl::string_view bytes) {
  if (bytes.size() != kAcceptSize) return WrongSize("accept");
  ByteReader r(bytes);
  uint32_t magic = 0;
  if (!r.Get(&magic)) return WrongSize("accept");
  if (magic != kMagic) {
    return absl::PermissionDeniedError("handshake accept: not a libddp peer (bad magic)");
  }
  Mac mac;
  if (!r.Get(&mac)) return WrongSize("accept");
  return mac;
}

Mac ClientMac(absl::string_view token, const Hello& hello, int32_t client_rank, uint16_t stream,
              const Nonce& client_nonce) {
  return ComputeMac(token, "ddp-client", hello.role, hello.nonce, client_nonce, hello.server_rank,
                    client_rank, stream);
}

Mac ServerMac(absl::string_view token, const Hello& hello, const Auth& auth) {
  return ComputeMac(token, "ddp-server", hello.role, auth.nonce, hello.nonce, hello.server_rank,
                    auth.client_rank, auth.stream);
}

bool MacEqual(const Mac& a, const Mac& b) { return crypto::ConstantTimeEqual(a, b); }

absl::StatusOr<Nonce> NewNonce() {
  Nonce nonce;
  DDP_RETURN_IF_ERROR(crypto::RandomBytes(absl::MakeSpan(nonce)));
  return nonce;
}

namespace {

// poll(2)'s timeout for what is left of a deadline: -1 (none) for an infinite one, else at most
// INT_MAX milliseconds, rounded up so the deadline has passed when it returns.
int PollMillis(absl::Duration left) {
  if (left == absl::InfiniteDuration()) return -1;
  return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, INT_MAX));
}

}  // namespace

absl::Status ReadFull(int fd, void* data, size_t n, absl::Time deadline) {
  auto* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::recv(fd, p + done, n - done, 0);
    if (got > 0) {
      done += static_cast<size_t>(got);
      continue;
    }
    if (got == 0) return absl::UnavailableError("connection closed by peer");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return ErrnoError("recv");
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return absl::DeadlineExceededError("timed out reading");
    pollfd pfd{fd, POLLIN, 0};
    ::poll(&pfd, 1, PollMillis(left));
  }
  return absl::OkStatus();
}

absl::Status WriteFull(int fd, const void* data, size_t n, absl::Time deadline) {
  const auto* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < n) {
    const ssize_t put = ::send(fd, p + done, n - done, MSG_NOSIGNAL);
    if (put > 0) {
      done += static_cast<size_t>(put);
      continue;
    }
    if (put < 0 && errno == EINTR) continue;
    if (put < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return ErrnoError("send");
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return absl::DeadlineExceededError("timed out writing");
    pollfd pfd{fd, POLLOUT, 0};
    ::poll(&pfd, 1, PollMillis(left));
  }
  return absl::OkStatus();
}

absl::Status ServerHandshake(int fd, absl::string_view token, Role role, int32_t server_rank,
                             absl::Time deadline, Auth* client) {
  Hello hello{role, server_rank, {}};
  DDP_ASSIGN_OR_RETURN(hello.nonce, NewNonce());
  const std::string hello_bytes = EncodeHello(hello);
  DDP_RETURN_IF_ERROR(WriteFull(fd, hello_bytes.data(), hello_bytes.size(), deadline));
  std::string auth_bytes(kAuthSize, '\0');
  DDP_RETURN_IF_ERROR(ReadFull(fd, auth_bytes.data(), auth_bytes.size(), deadline));
  DDP_ASSIGN_OR_RETURN(*client, DecodeAuth(auth_bytes, role));
  const Mac expected = ClientMac(token, hello, client->client_rank, client->stream, client->nonce);
  if (!MacEqual(expected, client->mac)) {
    return absl::PermissionDeniedError("handshake: wrong job token");
  }
  const std::string accept = EncodeAccept(ServerMac(token, hello, *client));
  return WriteFull(fd, accept.data(), accept.size(), deadline);
}

absl::Status ClientHandshake(int fd, absl::string_view token, Role role, int32_t client_rank,
                             uint16_t stream, absl::Time deadline, Hello* server) {
  std::string hello_bytes(kHelloSize, '\0');
  DDP_RETURN_IF_ERROR(ReadFull(fd, hello_bytes.data(), hello_bytes.size(), deadline));
  DDP_ASSIGN_OR_RETURN(*server, DecodeHello(hello_bytes, role));
  Auth auth{role, client_rank, stream, {}, {}};
  DDP_ASSIGN_OR_RETURN(auth.nonce, NewNonce());
  auth.mac = ClientMac(token, *server, client_rank, stream, auth.nonce);
  const std::string auth_bytes = EncodeAuth(auth);
  DDP_RETURN_IF_ERROR(WriteFull(fd, auth_bytes.data(), auth_bytes.size(), deadline));
  std::string accept_bytes(kAcceptSize, '\0');
  absl::Status read = ReadFull(fd, accept_bytes.data(), accept_bytes.size(), deadline);
  if (!read.ok()) {
    // A server that rejects us just closes: the likeliest cause is a token mismatch.
    return absl::PermissionDeniedError(absl::StrCat("handshake: the server closed the connection (",
                                                    read.message(),
                                                    "); is DDP_JOB_TOKEN the same on every rank?"));
  }
  DDP_ASSIGN_OR_RETURN(Mac mac, DecodeAccept(accept_bytes));
  if (!MacEqual(mac, ServerMac(token, *server, auth))) {
    return absl::PermissionDeniedError("handshake: the server does not know the job token");
  }
  return absl::OkStatus();
}

}  // namespace ddp::auth
