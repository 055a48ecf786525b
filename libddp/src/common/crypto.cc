// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// SHA-256 and HMAC-SHA256 through OpenSSL's libcrypto; constant-time compare; getrandom(2).
#include "common/crypto.h"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "absl/strings/str_cat.h"

namespace ddp::crypto {
namespace {

// libcrypto fails a SHA-256 only without memory or with a broken installation (no default
// provider): a handshake that went on would be unauthenticated, so stop loudly instead.
[[noreturn]] void DieOpenSsl(const char* call) {
  char detail[256] = "no detail";
  if (const unsigned long code = ERR_get_error(); code != 0) {  // NOLINT(runtime/int): its type
    ERR_error_string_n(code, detail, sizeof(detail));
  }
  std::fprintf(stderr, "ddp: libcrypto's %s failed: %s\n", call, detail);
  std::abort();
}

void Check(int ok, const char* call) {
  if (ok != 1) DieOpenSsl(call);
}

}  // namespace

struct Sha256Hasher::Context {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
};

Sha256Hasher::Sha256Hasher() : context_(new Context) {
  if (context_->ctx == nullptr) DieOpenSsl("EVP_MD_CTX_new");
  Reset();
}

Sha256Hasher::~Sha256Hasher() {
  EVP_MD_CTX_free(context_->ctx);
  delete context_;
}

void Sha256Hasher::Reset() {
  Check(EVP_DigestInit_ex(context_->ctx, EVP_sha256(), nullptr), "EVP_DigestInit_ex");
}

void Sha256Hasher::Update(absl::Span<const uint8_t> data) {
  if (data.empty()) return;
  Check(EVP_DigestUpdate(context_->ctx, data.data(), data.size()), "EVP_DigestUpdate");
}

void Sha256Hasher::Update(absl::string_view data) {
  Update(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(data.data()), data.size()));
}

Digest Sha256Hasher::Finish() {
  Digest digest{};
  unsigned int length = 0;
  Check(EVP_DigestFinal_ex(context_->ctx, digest.data(), &length), "EVP_DigestFinal_ex");
  if (length != digest.size()) DieOpenSsl("EVP_DigestFinal_ex (length)");
  Reset();
  return digest;
}

Digest Sha256(absl::Span<const uint8_t> data) {
  Digest digest{};
  unsigned int length = 0;
  Check(EVP_Digest(data.data(), data.size(), digest.data(), &length, EVP_sha256(), nullptr),
        "EVP_Digest");
  return digest;
}

Digest HmacSha256(absl::string_view key, absl::Span<const uint8_t> message) {
  Digest mac{};
  unsigned int length = 0;
  // HMAC() with an empty key: a non-null pointer (libcrypto refuses a null one).
  if (key.size() > static_cast<size_t>(std::numeric_limits<int>::max())) DieOpenSsl("HMAC (key)");
  static const uint8_t kNoKey = 0;
  const void* key_data = key.empty() ? &kNoKey : static_cast<const void*>(key.data());
  static const uint8_t kNoMessage = 0;
  const uint8_t* data = message.empty() ? &kNoMessage : message.data();
  if (HMAC(EVP_sha256(), key_data, static_cast<int>(key.size()), data, message.size(), mac.data(),
           &length) == nullptr ||
      length != mac.size()) {
    DieOpenSsl("HMAC");
  }
  return mac;
}

bool ConstantTimeEqual(absl::Span<const uint8_t> a, absl::Span<const uint8_t> b) {
  if (a.size() != b.size()) return false;
  if (a.empty()) return true;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
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
