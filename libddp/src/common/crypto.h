// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Crypto primitives for the authenticated handshake: SHA-256, HMAC-SHA256, constant-time compare
// and kernel randomness. The hashing and the MAC are OpenSSL's libcrypto (the library users
// trust, using the CPU's SHA instructions); peers prove they know the job token by MACing fresh
// nonces, so the token itself never crosses the wire.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ddp::crypto {

inline constexpr size_t kSha256DigestBytes = 32;

using Digest = std::array<uint8_t, kSha256DigestBytes>;

// SHA-256 (FIPS 180-4) fed in pieces, for messages assembled from several fields.
class Sha256Hasher {
 public:
  Sha256Hasher();
  ~Sha256Hasher();
  Sha256Hasher(const Sha256Hasher&) = delete;
  Sha256Hasher& operator=(const Sha256Hasher&) = delete;

  void Update(absl::Span<const uint8_t> data);
  void Update(absl::string_view data);

  // Returns the digest of everything passed to Update() and resets the hasher, so it can be
  // reused for a new message.
  Digest Finish();

 private:
  void Reset();

  struct Context;  // libcrypto's EVP_MD_CTX, kept out of this header
  Context* context_;
};

Digest Sha256(absl::Span<const uint8_t> data);

// HMAC-SHA256 (RFC 2104). Keys longer than the 64-byte block are hashed first, as the RFC says.
Digest HmacSha256(absl::string_view key, absl::Span<const uint8_t> message);

// True when a and b hold the same bytes. The time taken depends only on the lengths, never on
// where the contents differ, so a MAC check does not leak how much of a forgery was right.
// Different lengths compare unequal (lengths are not secret).
bool ConstantTimeEqual(absl::Span<const uint8_t> a, absl::Span<const uint8_t> b);

// Fills `out` from the kernel CSPRNG (getrandom(2)); blocks only until the pool is initialised
// at boot. An error Status if the kernel refuses.
absl::Status RandomBytes(absl::Span<uint8_t> out);

// Lowercase hexadecimal, two characters per byte.
std::string ToHex(absl::Span<const uint8_t> data);

}  // namespace ddp::crypto
