// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// bf16, fp16 and blockwise int8 (codec.h).
//
// Every loop runs over a whole block of kBlock values through __restrict pointers: GCC at -O2
// vectorizes only loops with a compile-time trip count and no runtime alias check (the reduction
// kernels' rule, reduce/isa/kernels.inc). A ragged tail goes through zero-padded stack copies.
#include "compress/codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "reduce/half.h"

namespace ddp::compress {
namespace {

namespace half = reduce::internal;
constexpr size_t kBlock = kInt8Block;
using half::BitCast;

// ---- bf16 and fp16 ----

template <uint16_t (*kNarrow)(float), float (*kWiden)(uint16_t)>
[[gnu::always_inline]] inline void NarrowBlock(const float* __restrict x, uint16_t* __restrict h,
                                               float* __restrict residual) {
  for (size_t i = 0; i < kBlock; ++i) h[i] = kNarrow(x[i]);
  if (residual == nullptr) return;
  for (size_t i = 0; i < kBlock; ++i) residual[i] += FiniteOrZero(x[i] - kWiden(h[i]));
}

template <float (*kWiden)(uint16_t), bool kAdd>
[[gnu::always_inline]] inline void WidenBlock(const uint16_t* __restrict h, float* __restrict y) {
  for (size_t i = 0; i < kBlock; ++i) y[i] = kAdd ? y[i] + kWiden(h[i]) : kWiden(h[i]);
}

template <Codec kId, uint16_t (*kNarrow)(float), float (*kWiden)(uint16_t)>
class Half final : public Coder {
 public:
  Codec id() const override { return kId; }
  size_t EncodedBytes(size_t count) const override { return count * 2; }

  void Encode(const float* in, size_t count, uint8_t* out, float* residual) const override {
    auto* h = reinterpret_cast<uint16_t*>(out);
    const size_t full = count - count % kBlock;
    for (size_t i = 0; i < full; i += kBlock) {
      NarrowBlock<kNarrow, kWiden>(in + i, h + i, residual == nullptr ? nullptr : residual + i);
    }
    const size_t rest = count - full;
    if (rest == 0) return;
    float x[kBlock] = {};
    float lost[kBlock] = {};
    uint16_t tail[kBlock];
    std::memcpy(x, in + full, rest * sizeof(float));
    NarrowBlock<kNarrow, kWiden>(x, tail, lost);
    std::memcpy(h + full, tail, rest * sizeof(uint16_t));
    if (residual == nullptr) return;
    for (size_t i = 0; i < rest; ++i) residual[full + i] += lost[i];
  }

  void Decode(const uint8_t* in, size_t count, float* out) const override {
    Widen<false>(in, count, out);
  }
  void DecodeAdd(const uint8_t* in, size_t count, float* out) const override {
    Widen<true>(in, count, out);
  }

 private:
  template <bool kAdd>
  static void Widen(const uint8_t* in, size_t count, float* out) {
    const auto* h = reinterpret_cast<const uint16_t*>(in);
    const size_t full = count - count % kBlock;
    for (size_t i = 0; i < full; i += kBlock) WidenBlock<kWiden, kAdd>(h + i, out + i);
    const size_t rest = count - full;
    if (rest == 0) return;
    uint16_t tail[kBlock] = {};
    float y[kBlock] = {};
    std::memcpy(tail, h + full, rest * sizeof(uint16_t));
    if (kAdd) std::memcpy(y, out + full, rest * sizeof(float));
    WidenBlock<kWiden, kAdd>(tail, y);
    std::memcpy(out + full, y, rest * sizeof(float));
  }
};

using Bf16 = Half<Codec::kBf16, half::FloatToBFloat16Bits, half::BFloat16BitsToFloat>;
using Fp16 = Half<Codec::kFp16, half::FloatToHalfBits, half::HalfBitsToFloat>;

// ---- int8 ----

// Rounds to the nearest integer, ties to even, for |v| < 2^22: adding 1.5 * 2^23 leaves no
// fraction bits, so the adder rounds (in the default rounding mode), and taking it away is exact.
constexpr float kRoundingBias = 12582912.0f;
// The bits of the smallest magnitude whose 127 / it is finite: 127 / FLT_MAX, rounded up.
constexpr uint32_t kSmallestInvertible = 0x02fe0001u;

// One block's scale and values; its loss added to `residual` where that is not null.
[[gnu::always_inline]] inline float QuantizeBlock(const float* __restrict x, int8_t* __restrict q,
                                                  float* __restrict residual) {
  // The largest magnitude from the bits: those of |x| order as the values do, and a NaN's or an
  // infinity's are above every finite value's.
  uint32_t largest = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    largest = std::max(largest, BitCast<uint32_t>(x[i]) & half::kF32AbsMask);
  }
  if (largest >= half::kF32ExpMask) {  // a NaN or an infinity: NaN throughout, no loss kept
    std::memset(q, 0, kBlock);
    return std::nanf("");
  }
  const float big = BitCast<float>(largest);
  const float scale = big / 127.0f;
  // |x * inverse| <= 127 and a little: it rounds into [-127, 127]. A block too small for its
  // inverse to be finite (its largest under 127 / FLT_MAX, about 3.7e-37) or all zeros sends zeros,
  // and the residual keeps all of it.
  const float inverse = largest < kSmallestInvertible ? 0.0f : 127.0f / big;
  float v[kBlock];
  for (size_t i = 0; i < kBlock; ++i) v[i] = (x[i] * inverse + kRoundingBias) - kRoundingBias;
  for (size_t i = 0; i < kBlock; ++i) q[i] = static_cast<int8_t>(static_cast<int32_t>(v[i]));
  if (residual != nullptr) {
    for (size_t i = 0; i < kBlock; ++i) residual[i] += x[i] - v[i] * scale;  // as Decode gives
  }
  return scale;
}

template <bool kAdd>
[[gnu::always_inline]] inline void DequantizeBlock(const int8_t* __restrict q, float scale,
                                                   float* __restrict y) {
  for (size_t i = 0; i < kBlock; ++i) {
    const float v = static_cast<float>(q[i]) * scale;
    y[i] = kAdd ? y[i] + v : v;
  }
}

// Layout: the blocks' float32 scales, then one int8 per value.
class Int8 final : public Coder {
 public:
  Codec id() const override { return Codec::kInt8; }
  size_t block() const override { return kBlock; }
  static size_t Blocks(size_t count) { return (count + kBlock - 1) / kBlock; }
  size_t EncodedBytes(size_t count) const override { return Blocks(count) * 4 + count; }

  void Encode(const float* in, size_t count, uint8_t* out, float* residual) const override {
    auto* values = reinterpret_cast<int8_t*>(out + Blocks(count) * 4);
    const size_t full = count - count % kBlock;
    for (size_t first = 0; first < full; first += kBlock) {
      const float scale = QuantizeBlock(in + first, values + first,
                                        residual == nullptr ? nullptr : residual + first);
      std::memcpy(out + first / kBlock * 4, &scale, 4);
    }
    const size_t rest = count - full;
    if (rest == 0) return;
    float x[kBlock] = {};
    float lost[kBlock] = {};
    int8_t q[kBlock];
    std::memcpy(x, in + full, rest * sizeof(float));
    const float scale = QuantizeBlock(x, q, lost);
    std::memcpy(out + full / kBlock * 4, &scale, 4);
    std::memcpy(values + full, q, rest);
    if (residual == nullptr) return;
    for (size_t i = 0; i < rest; ++i) residual[full + i] += lost[i];
  }

  void Decode(const uint8_t* in, size_t count, float* out) const override {
    Dequantize<false>(in, count, out);
  }
  void DecodeAdd(const uint8_t* in, size_t count, float* out) const override {
    Dequantize<true>(in, count, out);
  }

 private:
  template <bool kAdd>
  static void Dequantize(const uint8_t* in, size_t count, float* out) {
    const auto* values = reinterpret_cast<const int8_t*>(in + Blocks(count) * 4);
    const size_t full = count - count % kBlock;
    for (size_t first = 0; first < full; first += kBlock) {
      float scale;
      std::memcpy(&scale, in + first / kBlock * 4, 4);
      DequantizeBlock<kAdd>(values + first, scale, out + first);
    }
    const size_t rest = count - full;
    if (rest == 0) return;
    float scale;
    std::memcpy(&scale, in + full / kBlock * 4, 4);
    int8_t q[kBlock] = {};
    float y[kBlock] = {};
    std::memcpy(q, values + full, rest);
    if (kAdd) std::memcpy(y, out + full, rest * sizeof(float));
    DequantizeBlock<kAdd>(q, scale, y);
    std::memcpy(out + full, y, rest * sizeof(float));
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
