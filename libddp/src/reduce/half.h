// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Branchless IEEE binary16 and bfloat16 <-> binary32 conversions, internal to the reduce layer.
//
// They are inline and free of branches and tables so that a loop converting an array compiles to
// vector code; the public HalfToFloat etc. in reduce.h are thin wrappers around these.
//
// Everything here has internal linkage (an unnamed namespace, builtins instead of std::bit_cast),
// because the kernels of isa/ include it into translation units compiled with -mavx2 or
// -mavx512f. An inline function with external linkage compiled there could be the one copy the
// linker keeps for the whole library, and would then run on CPUs without those instructions.
#pragma once

#include <cstdint>

namespace ddp::reduce::internal {
namespace {

// std::bit_cast, which is itself an inline function with external linkage (out of line at -O0).
template <typename To, typename From>
[[gnu::always_inline]] constexpr To BitCast(From from) {
  return __builtin_bit_cast(To, from);
}

inline constexpr uint32_t kF32AbsMask = 0x7fffffffu;
inline constexpr uint32_t kF32ExpMask = 0x7f800000u;
inline constexpr uint32_t kF32QuietBit = 0x00400000u;

// cond ? if_true : if_false as mask arithmetic. A plain ?: lets GCC sink the float arithmetic
// feeding it into a conditional block, which it then refuses to vectorize because of
// -ftrapping-math; with both operands used unconditionally the loop stays branch-free.
inline uint32_t Blend(bool cond, uint32_t if_true, uint32_t if_false) {
  const uint32_t mask = 0u - static_cast<uint32_t>(cond);
  return (if_true & mask) | (if_false & ~mask);
}

// Magic-number method (F. Giesen): shifting the 15 exponent+mantissa bits into float position and
// rebiasing the exponent is exact for normals; a subnormal is renormalised by one float
// subtraction instead of a count-leading-zeros loop. Every case is computed and then selected.
inline float HalfBitsToFloat(uint16_t h) {
  constexpr uint32_t kShiftedExp = 0x7c00u << 13;
  constexpr float kMagic = BitCast<float>(113u << 23);  // 2^-14, smallest normal half.
  const uint32_t h32 = h;
  const uint32_t shifted = (h32 & 0x7fffu) << 13;
  const uint32_t exp = shifted & kShiftedExp;
  const uint32_t rebiased = shifted + ((127u - 15u) << 23);
  // All-ones exponent: rebias once more so it is all-ones in float; NaNs come out quiet.
  const uint32_t quiet = (h32 & 0x3ffu) != 0 ? kF32QuietBit : 0u;
  const uint32_t inf_nan = (rebiased + ((128u - 16u) << 23)) | quiet;
  const uint32_t subnormal = BitCast<uint32_t>(BitCast<float>(rebiased + (1u << 23)) - kMagic);
  uint32_t bits = exp == kShiftedExp ? inf_nan : rebiased;
  bits = Blend(exp == 0, subnormal, bits);
  return BitCast<float>(bits | ((h32 & 0x8000u) << 16));
}

// Round to nearest even. Normals round by adding a bias that carries into the exponent when
// needed (which also turns [65520, 65536) into infinity); subnormals are aligned by adding 0.5 so
// that the float adder does the rounding. NaNs keep the top of their payload and become quiet.
inline uint16_t FloatToHalfBits(float f) {
  constexpr uint32_t kHalfOverflow = (127u + 16u) << 23;  // 2^16: infinity or NaN in half.
  constexpr uint32_t kHalfMinNormal = 113u << 23;         // 2^-14.
  constexpr float kDenormMagic = 0.5f;                    // Puts the half ulp 2^-24 at bit 0.
  const uint32_t u = BitCast<uint32_t>(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & kF32AbsMask;
  // Unsigned wrap-around in the rebias is intended: the value is only selected when a is a half
  // normal, where the result is in range.
  const uint32_t normal = (a + ((15u - 127u) << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  const uint32_t subnormal =
      BitCast<uint32_t>(BitCast<float>(a) + kDenormMagic) - BitCast<uint32_t>(kDenormMagic);
  const uint32_t special = a > kF32ExpMask ? 0x7e00u | ((a >> 13) & 0x3ffu) : 0x7c00u;
  uint32_t bits = Blend(a < kHalfMinNormal, subnormal, normal);
  bits = Blend(a >= kHalfOverflow, special, bits);
  return static_cast<uint16_t>(bits | sign);
}

inline float BFloat16BitsToFloat(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  return BitCast<float>((u & kF32AbsMask) > kF32ExpMask ? u | kF32QuietBit : u);
}

// The exact widening alone: a signaling NaN stays signaling. The kernels use this because every
// operation they apply quiets NaNs by itself (IEEE arithmetic does; FloatMinMax sets the bit),
// and skipping the check makes the bf16 loops about 1.5x faster.
inline float BFloat16BitsToFloatUnquieted(uint16_t b) {
  return BitCast<float>(static_cast<uint32_t>(b) << 16);
}

// Round to nearest even by adding 0x7fff plus the lowest kept bit; a carry out of the mantissa
// bumps the exponent, so the largest values overflow to infinity as they should. NaN is tested
// with a float compare, which is cheaper in vector code than testing the bits.
inline uint16_t FloatToBFloat16Bits(float f) {
  const uint32_t u = BitCast<uint32_t>(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | (kF32QuietBit >> 16);
  return static_cast<uint16_t>(f != f ? quiet_nan : rounded);
}

}  // namespace
}  // namespace ddp::reduce::internal
