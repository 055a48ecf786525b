// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The element-wise operations behind every ReduceOp, shared by the kernels of every ISA.
// Internal linkage throughout, for the reason given at the top of half.h (which provides BitCast).
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "reduce/half.h"

namespace ddp::reduce::internal {
namespace {

template <typename T>
using SameSizeBits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;

// NaN-propagating floating min/max. Ties (a == b) combine the bit patterns, OR for min and AND
// for max, which only matters for -0 vs +0 and makes the result independent of operand order.
// An unordered pair returns the first NaN operand made quiet. No arithmetic is done on the
// NaN path: under -ftrapping-math GCC will not vectorize a loop with conditional float math.
template <typename T, bool kIsMin>
[[gnu::always_inline]] inline T FloatMinMax(T a, T b) {
  using Bits = SameSizeBits<T>;
  constexpr Bits kQuiet = Bits{1} << (std::numeric_limits<T>::digits - 2);
  const Bits a_bits = BitCast<Bits>(a);
  const Bits b_bits = BitCast<Bits>(b);
  const T pick = kIsMin ? (a < b ? a : b) : (a > b ? a : b);
  const T tie = BitCast<T>(kIsMin ? (a_bits | b_bits) : (a_bits & b_bits));
  const T ordered = a == b ? tie : pick;
  const T nan = BitCast<T>((a != a ? a_bits : b_bits) | kQuiet);
  return __builtin_isunordered(a, b) ? nan : ordered;
}

// The second operand of a float sum or product: b, or a itself where a is NaN, so that a NaN a
// makes the result a made quiet whichever operand order the compiler emits. IEEE 754 leaves open
// whose payload the result of NaN + NaN carries (x86 takes the first operand's, and compilers
// swap the operands of + and * freely), and without this the bits would differ between builds.
// With one NaN operand the hardware already returns that one, quieted. Tested with
// __builtin_isunordered: with a != a, GCC turns the select into a branch and no longer
// vectorizes the loop.
template <typename T>
[[gnu::always_inline]] inline T NanSelfOr(T a, T b) {
  return __builtin_isunordered(a, a) ? a : b;
}

// Integer sum and product go through the unsigned type of the same width, where overflow wraps
// instead of being undefined. The narrowing back to a signed type is modular since C++20.
struct Sum {
  template <typename T>
  [[gnu::always_inline]] static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else {
      return a + NanSelfOr(a, b);
    }
  }
};

struct Product {
  template <typename T>
  [[gnu::always_inline]] static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else {
      return a * NanSelfOr(a, b);
    }
  }
};

struct Min {
  template <typename T>
  [[gnu::always_inline]] static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return b < a ? b : a;
    } else {
      return FloatMinMax<T, /*kIsMin=*/true>(a, b);
    }
  }
};

struct Max {
  template <typename T>
  [[gnu::always_inline]] static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return a < b ? b : a;
    } else {
      return FloatMinMax<T, /*kIsMin=*/false>(a, b);
    }
  }
};

}  // namespace
}  // namespace ddp::reduce::internal
