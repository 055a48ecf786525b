// Crypto primitives for the authenticated handshake: SHA-256, HMAC-SHA256, constant-time compare
// and kernel randomness. Written here so libddp needs no OpenSSL; peers prove they know the job
// token by MACing fresh nonces, so the token itself never crosses the wire.
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
inline constexpr size_t kSha256BlockBytes = 64;

using Digest = std::array<uint8_t, kSha256DigestBytes>;

// SHA-256 (FIPS 180-4) fed in pieces, for messages assembled from several fields.
class Sha256Hasher {
 public:
  Sha256Hasher();

  void Update(absl::Span<const uint8_t> data);
  void Update(absl::string_view data);

  // Returns the digest of everything passed to Update() and resets the hasher, so it can be
  // reused for a new message.
  Digest Finish();

 private:
  void Reset();
  void CompressBlock(const uint8_t* block);

  std::array<uint32_t, 8> state_{};
  std::array<uint8_t, kSha256BlockBytes> buffer_{};
  size_t buffered_ = 0;       // Bytes waiting in buffer_ for a full block.
  uint64_t total_bytes_ = 0;  // Message length so far; the padding encodes it in bits.
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
