// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The elementwise codecs of compressed allreduces (docs/compression.md): float32 values to bytes
// on the wire and back. Each is deterministic (the same bytes for the same values on every
// machine), so that ranks that decode the same bytes hold bitwise identical results.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ddp/types.h"

namespace ddp::compress {

class Coder {
 public:
  virtual ~Coder() = default;
  virtual Codec id() const = 0;
  // Bytes that `count` values take encoded.
  virtual size_t EncodedBytes(size_t count) const = 0;
  // Values are encoded in blocks of this many (int8's scales): a range of values that starts at
  // a multiple of it encodes the same as in the whole array.
  virtual size_t block() const { return 1; }
  // Encodes `count` values. Where `residual` is not null, adds to residual[i] what value i lost
  // (its value less its decoding) in the same pass: error feedback's bookkeeping. A value whose
  // loss is not finite (it was NaN or infinite, or its block was) adds nothing, so that one bad
  // step does not poison the steps after it.
  virtual void Encode(const float* in, size_t count, uint8_t* out, float* residual) const = 0;
  void Encode(const float* in, size_t count, uint8_t* out) const {
    Encode(in, count, out, nullptr);
  }
  virtual void Decode(const uint8_t* in, size_t count, float* out) const = 0;
  // out[i] += the decoding of value i: a sum of encoded contributions without a decoded copy.
  virtual void DecodeAdd(const uint8_t* in, size_t count, float* out) const = 0;
};

// bf16 and fp16: each value rounded to nearest even (fp16: beyond 65504 it is infinity, as a
// cast is). int8: a float32 scale per block of kInt8Block values (its largest magnitude / 127)
// and each value as the nearest multiple of it, ties to even: within scale / 2 of the value; a
// block holding a NaN or an infinity decodes as NaN throughout. Each runs over blocks of 256 values
// in loops the compiler vectorizes (rounding with the 1.5 * 2^23 addition, not a libm call), and
// rounds alike on every machine (no fused multiply-add: the file is built -ffp-contract=off).
inline constexpr size_t kInt8Block = 256;

// A loss to keep in a residual: itself where finite, else 0 (mask arithmetic, which keeps the
// loops that call it free of branches): one bad step reaches that step's result only.
[[gnu::always_inline]] inline float FiniteOrZero(float e) {
  const uint32_t u = __builtin_bit_cast(uint32_t, e);
  const uint32_t finite = 0u - static_cast<uint32_t>((u & 0x7f800000u) != 0x7f800000u);
  return __builtin_bit_cast(float, u& finite);
}
// The elementwise codecs' coders; null for Codec::kNone and Codec::kPowerSgd (not elementwise).
const Coder* CoderFor(Codec codec);

}  // namespace ddp::compress
