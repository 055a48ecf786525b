// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The authenticated handshake every libddp connection starts with (store and transport alike).
//
// Mutual challenge-response over a per-job secret; the secret never crosses the wire:
//   server -> client  Hello  {magic, version, role, server_rank, server_nonce}
//   client -> server  Auth   {magic, version, role, client_rank, stream, client_nonce,
//                             HMAC(token, "client" | role | nonces | ranks | stream)}
//   server -> client  Accept {magic, HMAC(token, "server" | role | nonces | ranks | stream)}
// Every field is checked before anything else is read; a wrong magic, version, role or MAC ends
// the connection. Fresh nonces on both sides make a recorded exchange useless to replay.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ddp::auth {

inline constexpr uint32_t kMagic = 0x31504444;  // "DDP1" little-endian
inline constexpr uint16_t kVersion = 1;
inline constexpr size_t kNonceSize = 32;
inline constexpr size_t kMacSize = 32;

enum class Role : uint16_t { kStore = 1, kTransport = 2 };

using Nonce = std::array<uint8_t, kNonceSize>;
using Mac = std::array<uint8_t, kMacSize>;

struct Hello {
  Role role;
  int32_t server_rank;
  Nonce nonce;
};
struct Auth {
  Role role;
  int32_t client_rank;
  uint16_t stream;
  Nonce nonce;
  Mac mac;
};

inline constexpr size_t kHelloSize = 4 + 2 + 2 + 4 + kNonceSize;
inline constexpr size_t kAuthSize = 4 + 2 + 2 + 4 + 2 + 2 + kNonceSize + kMacSize;
inline constexpr size_t kAcceptSize = 4 + kMacSize;

std::string EncodeHello(const Hello& hello);
absl::StatusOr<Hello> DecodeHello(absl::string_view bytes, Role expected_role);
std::string EncodeAuth(const Auth& auth);
absl::StatusOr<Auth> DecodeAuth(absl::string_view bytes, Role expected_role);
std::string EncodeAccept(const Mac& mac);
absl::StatusOr<Mac> DecodeAccept(absl::string_view bytes);

Mac ClientMac(absl::string_view token, const Hello& hello, int32_t client_rank, uint16_t stream,
              const Nonce& client_nonce);
Mac ServerMac(absl::string_view token, const Hello& hello, const Auth& auth);
bool MacEqual(const Mac& a, const Mac& b);
absl::StatusOr<Nonce> NewNonce();

// Blocking versions over a connected socket, for the rendezvous store (the transport runs the
// same exchange non-blocking inside its progress loop). Both fail by `deadline`.
absl::Status ServerHandshake(int fd, absl::string_view token, Role role, int32_t server_rank,
                             absl::Time deadline, Auth* client);
absl::Status ClientHandshake(int fd, absl::string_view token, Role role, int32_t client_rank,
                             uint16_t stream, absl::Time deadline, Hello* server);

// Reads/writes exactly `n` bytes, polling until `deadline` (InfiniteFuture(): none). The
// deadline holds only on a non-blocking socket: on a blocking one recv/send itself may wait for
// ever (a peer whose host vanished without a reset).
absl::Status ReadFull(int fd, void* data, size_t n, absl::Time deadline);
absl::Status WriteFull(int fd, const void* data, size_t n, absl::Time deadline);

}  // namespace ddp::auth
