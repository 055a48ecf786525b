// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// bf16, fp16 and blockwise int8 (codec.h).
#include "compress/codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "reduce/reduce.h"

namespace ddp::compress {
namespace {

class Bf16 final : public Coder {
 public:
  Codec id() const override { return Codec::kBf16; }
  size_t EncodedBytes(size_t count) const override { return count * 2; }
  void Encode(const float* in, size_t count, uint8_t* out) const override {
    reduce::FloatsToBFloat16s(in, reinterpret_cast<uint16_t*>(out), count);
  }
  void Decode(const uint8_t* in, size_t count, float* out) const override {
    reduce::BFloat16sToFloats(reinterpret_cast<const uint16_t*>(in), out, count);
  }
};

class Fp16 final : public Coder {
 public:
  Codec id() const override { return Codec::kFp16; }
  size_t EncodedBytes(size_t count) const override { return count * 2; }
  void Encode(const float* in, size_t count, uint8_t* out) const override {
    reduce::FloatsToHalves(in, reinterpret_cast<uint16_t*>(out), count);
  }
  void Decode(const uint8_t* in, size_t count, float* out) const override {
    reduce::HalvesToFloats(reinterpret_cast<const uint16_t*>(in), out, count);
  }
};

// Layout: the blocks' float32 scales, then one int8 per value.
class Int8 final : public Coder {
 public:
  Codec id() const override { return Codec::kInt8; }
  size_t block() const override { return kInt8Block; }
  static size_t Blocks(size_t count) { return (count + kInt8Block - 1) / kInt8Block; }
  size_t EncodedBytes(size_t count) const override { return Blocks(count) * 4 + count; }

  void Encode(const float* in, size_t count, uint8_t* out) const override {
    auto* values = reinterpret_cast<int8_t*>(out + Blocks(count) * 4);
    for (size_t b = 0; b < Blocks(count); ++b) {
      const size_t first = b * kInt8Block;
      const size_t n = std::min(kInt8Block, count - first);
      const float* x = in + first;
      float largest = 0.0f;
      bool finite = true;
      for (size_t i = 0; i < n; ++i) {
        largest = std::max(largest, std::fabs(x[i]));
        finite = finite && std::isfinite(x[i]);
      }
      const float scale = finite ? largest / 127.0f : std::nanf("");
      std::memcpy(out + b * 4, &scale, 4);
      int8_t* q = values + first;
      if (!finite || largest == 0.0f) {
        std::memset(q, 0, n);
        continue;
      }
      const float inverse = 127.0f / largest;
      for (size_t i = 0; i < n; ++i) {
        // nearbyint: ties to even (the default rounding mode); |x * inverse| <= 127 by the scale.
        q[i] = static_cast<int8_t>(std::clamp(std::nearbyint(x[i] * inverse), -127.0f, 127.0f));
      }
    }
  }

  void Decode(const uint8_t* in, size_t count, float* out) const override {
    const auto* values = reinterpret_cast<const int8_t*>(in + Blocks(count) * 4);
    for (size_t b = 0; b < Blocks(count); ++b) {
      const size_t first = b * kInt8Block;
      const size_t n = std::min(kInt8Block, count - first);
      float scale;
      std::memcpy(&scale, in + b * 4, 4);
      for (size_t i = 0; i < n; ++i) out[first + i] = static_cast<float>(values[first + i]) * scale;
    }
  }
};

}  // namespace

const Coder* CoderFor(Codec codec) {
  static const Bf16 bf16;
  static const Fp16 fp16;
  static const Int8 int8;
  switch (codec) {
    case Codec::kBf16:
      return &bf16;
    case Codec::kFp16:
      return &fp16;
    case Codec::kInt8:
      return &int8;
    case Codec::kNone:
    case Codec::kPowerSgd:  // not elementwise: engine/powersgd.h
      break;
  }
  return nullptr;
}

}  // namespace ddp::compress
