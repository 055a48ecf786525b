// SHA-256, HMAC-SHA256, constant-time compare and getrandom(2), without OpenSSL.
#include "common/crypto.h"

#include <sys/random.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ddp::crypto {
namespace {

// FIPS 180-4 section 4.2.2: first 32 bits of the fractional parts of the cube roots of the
// first 64 primes.
constexpr std::array<uint32_t, 64> kRoundConstants = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

// FIPS 180-4 section 5.3.3: first 32 bits of the fractional parts of the square roots of the
// first 8 primes.
constexpr std::array<uint32_t, 8> kInitialState = {
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

uint32_t LoadBigEndian32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) << 24 | static_cast<uint32_t>(p[1]) << 16 |
         static_cast<uint32_t>(p[2]) << 8 | static_cast<uint32_t>(p[3]);
}

void StoreBigEndian32(uint32_t value, uint8_t* p) {
  p[0] = static_cast<uint8_t>(value >> 24);
  p[1] = static_cast<uint8_t>(value >> 16);
  p[2] = static_cast<uint8_t>(value >> 8);
  p[3] = static_cast<uint8_t>(value);
}

absl::Span<const uint8_t> AsBytes(absl::string_view text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

// Clears key-derived bytes before their stack slots are reused, so the job token's HMAC pads do
// not linger in memory (or in a core dump). The volatile stores cannot be optimised away as dead.
void SecureZero(absl::Span<uint8_t> bytes) {
  volatile uint8_t* p = bytes.data();
  for (size_t i = 0; i < bytes.size(); ++i) p[i] = 0;
}

}  // namespace

Sha256Hasher::Sha256Hasher() { Reset(); }

void Sha256Hasher::Reset() {
  state_ = kInitialState;
  buffered_ = 0;
  total_bytes_ = 0;
}

void Sha256Hasher::Update(absl::string_view data) { Update(AsBytes(data)); }

void Sha256Hasher::Update(absl::Span<const uint8_t> data) {
  // An empty span may carry a null pointer, which memcpy must not see even with size 0.
  if (data.empty()) return;
  const uint8_t* p = data.data();
  size_t remaining = data.size();
  total_bytes_ += remaining;

  if (buffered_ > 0) {
    const size_t take = std::min(remaining, kSha256BlockBytes - buffered_);
    std::memcpy(buffer_.data() + buffered_, p, take);
    buffered_ += take;
    p += take;
    remaining -= take;
    if (buffered_ < kSha256BlockBytes) return;
    CompressBlock(buffer_.data());
    buffered_ = 0;
  }
  // Whole blocks are compressed straight from the caller's memory, skipping the copy.
  for (; remaining >= kSha256BlockBytes; p += kSha256BlockBytes, remaining -= kSha256BlockBytes) {
    CompressBlock(p);
  }
  if (remaining > 0) {
    std::memcpy(buffer_.data(), p, remaining);
    buffered_ = remaining;
  }
}

Digest Sha256Hasher::Finish() {
  // Padding: a 1 bit, zeros up to 56 mod 64 bytes, then the message length in bits as a 64-bit
  // big-endian integer. The length is taken before the padding itself is counted by Update().
  const uint64_t bit_length = total_bytes_ * 8;
  std::array<uint8_t, kSha256BlockBytes> padding{};
  padding[0] = 0x80;
  const size_t padding_bytes = buffered_ < 56 ? 56 - buffered_ : 120 - buffered_;
  Update(absl::MakeConstSpan(padding.data(), padding_bytes));
  std::array<uint8_t, 8> length{};
  StoreBigEndian32(static_cast<uint32_t>(bit_length >> 32), length.data());
  StoreBigEndian32(static_cast<uint32_t>(bit_length), length.data() + 4);
  Update(length);

  Digest digest;
  for (size_t i = 0; i < state_.size(); ++i) StoreBigEndian32(state_[i], digest.data() + 4 * i);
  Reset();
  return digest;
}

void Sha256Hasher::CompressBlock(const uint8_t* block) {
  std::array<uint32_t, 64> w;
  for (size_t i = 0; i < 16; ++i) w[i] = LoadBigEndian32(block + 4 * i);
  for (size_t i = 16; i < 64; ++i) {
    const uint32_t s0 = std::rotr(w[i - 15], 7) ^ std::rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const uint32_t s1 = std::rotr(w[i - 2], 17) ^ std::rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }

  uint32_t a = state_[0];
  uint32_t b = state_[1];
  uint32_t c = state_[2];
  uint32_t d = state_[3];
  uint32_t e = state_[4];
  uint32_t f = state_[5];
  uint32_t g = state_[6];
  uint32_t h = state_[7];
  for (size_t i = 0; i < 64; ++i) {
    const uint32_t sigma1 = std::rotr(e, 6) ^ std::rotr(e, 11) ^ std::rotr(e, 25);
    const uint32_t choose = (e & f) ^ (~e & g);
    const uint32_t t1 = h + sigma1 + choose + kRoundConstants[i] + w[i];
    const uint32_t sigma0 = std::rotr(a, 2) ^ std::rotr(a, 13) ^ std::rotr(a, 22);
    const uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
    const uint32_t t2 = sigma0 + majority;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
  state_[4] += e;
  state_[5] += f;
  state_[6] += g;
  state_[7] += h;
}

Digest Sha256(absl::Span<const uint8_t> data) {
  Sha256Hasher hasher;
  hasher.Update(data);
  return hasher.Finish();
}

Digest HmacSha256(absl::string_view key, absl::Span<const uint8_t> message) {
  // K0: the key zero-padded to one block, or its digest zero-padded when it is longer.
  std::array<uint8_t, kSha256BlockBytes> block_key{};
  if (key.size() > kSha256BlockBytes) {
    Digest key_digest = Sha256(AsBytes(key));
    std::copy(key_digest.begin(), key_digest.end(), block_key.begin());
    SecureZero(absl::MakeSpan(key_digest));
  } else if (!key.empty()) {
    std::memcpy(block_key.data(), key.data(), key.size());
  }

  std::array<uint8_t, kSha256BlockBytes> pad;
  for (size_t i = 0; i < pad.size(); ++i) pad[i] = static_cast<uint8_t>(block_key[i] ^ 0x36);
  Sha256Hasher hasher;
  hasher.Update(pad);
  hasher.Update(message);
  Digest inner = hasher.Finish();

  for (size_t i = 0; i < pad.size(); ++i) pad[i] = static_cast<uint8_t>(block_key[i] ^ 0x5c);
  hasher.Update(pad);
  hasher.Update(inner);
  const Digest mac = hasher.Finish();

  SecureZero(absl::MakeSpan(block_key));
  SecureZero(absl::MakeSpan(pad));
  SecureZero(absl::MakeSpan(inner));
  return mac;
}

bool ConstantTimeEqual(absl::Span<const uint8_t> a, absl::Span<const uint8_t> b) {
  if (a.size() != b.size()) return false;
  // Accumulate every difference and test once at the end: no branch depends on the contents.
  uint8_t difference = 0;
  for (size_t i = 0; i < a.size(); ++i) difference |= static_cast<uint8_t>(a[i] ^ b[i]);
  return difference == 0;
}

absl::Status RandomBytes(absl::Span<uint8_t> out) {
  // getrandom(2) may return fewer bytes than asked (many kernels cap one call at 32 MiB - 1,
  // and a signal can cut a large request short), and fails with EINTR if interrupted before it
  // copied anything; both just mean "call again for the rest".
  size_t filled = 0;
  while (filled < out.size()) {
    const ssize_t n = ::getrandom(out.data() + filled, out.size() - filled, 0);
    if (n < 0) {
      const int error = errno;
      if (error == EINTR) continue;
      return absl::ErrnoToStatus(
          error, absl::StrCat("getrandom failed after ", filled, " of ", out.size(), " bytes"));
    }
    filled += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

std::string ToHex(absl::Span<const uint8_t> data) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex(2 * data.size(), '\0');
  for (size_t i = 0; i < data.size(); ++i) {
    hex[2 * i] = kDigits[data[i] >> 4];
    hex[2 * i + 1] = kDigits[data[i] & 0x0f];
  }
  return hex;
}

}  // namespace ddp::crypto
