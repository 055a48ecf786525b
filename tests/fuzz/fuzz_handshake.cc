// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness: the authenticated handshake every connection starts with (auth.h), as a
// stranger would drive it. The decoders of each message for both roles, then the whole blocking
// server side (the rendezvous store's) over a socket pair fed the input: it must refuse, never
// crash or accept without the token, and end by its deadline.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/time/clock.h"
#include "common/auth.h"

namespace {

constexpr char kToken[] = "fuzz-job-token-0123456789abcdef";

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddp::auth;
  const absl::string_view in(reinterpret_cast<const char*>(data), size);
  for (Role role : {Role::kStore, Role::kTransport}) {
    if (auto hello = DecodeHello(in, role); hello.ok()) {
      Check(in.size() >= kHelloSize && hello->role == role);
      auto again = DecodeHello(EncodeHello(*hello), role);
      Check(again.ok() && again->server_rank == hello->server_rank && again->nonce == hello->nonce);
    }
    if (auto auth = DecodeAuth(in, role); auth.ok()) {
      Check(in.size() >= kAuthSize && auth->role == role);
      auto again = DecodeAuth(EncodeAuth(*auth), role);
      Check(again.ok() && again->client_rank == auth->client_rank &&
            again->stream == auth->stream && again->mac == auth->mac);
    }
  }
  if (auto accept = DecodeAccept(in); accept.ok()) {
    Check(DecodeAccept(EncodeAccept(*accept)).ok());
  }
  // The server's side against the input as everything the client sends.
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return 0;
  // The Hello (about 44 bytes) fits in the socket's buffer: the server never blocks writing.
  size_t done = 0;
  while (done < size) {
    const ssize_t n = write(fds[1], data + done, size - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  shutdown(fds[1], SHUT_WR);
  Auth client;
  const absl::Status status =
      ServerHandshake(fds[0], kToken, Role::kTransport, 0, absl::Now() + absl::Seconds(5), &client);
  // Without the token, no input can make a valid MAC: the handshake always fails.
  Check(!status.ok());
  close(fds[0]);
  close(fds[1]);
  return 0;
}
