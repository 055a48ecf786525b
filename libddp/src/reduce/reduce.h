// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Element-wise reduction kernels for every DataType x ReduceOp, used by the collectives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "ddp/types.h"

namespace ddp::reduce {

// dst[i] = a[i] (op) b[i] for i < count. dst may be the same pointer as a or b (not a partial
// overlap). kAverage combines like kSum; the collective finishes it with DivideBy. f16 and bf16
// are computed in f32 and rounded to nearest-even once per element. Integer sum and product wrap
// around (two's complement), never undefined behaviour. Min and max propagate NaN; a NaN operand
// makes the result the first NaN operand, made quiet (NaN payloads included).
// The result for given inputs is the same on every machine and every instruction set the kernels
// are built for (no reassociation across elements; see reduce_internal.h).
void Combine(DataType type, ReduceOp op, void* dst, const void* a, const void* b, size_t count);

// The time this thread spends in Combine, for the timeline's split of a collective into its
// reduction and the rest (its transfers and waits): counted only while a CombineTimer lives on
// the thread (the engine's, while it writes a timeline), so that Combine costs no clock read
// otherwise.
class CombineTimer {
 public:
  // [start, end) on std::chrono::steady_clock, in nanoseconds since its epoch, and how much of
  // it this thread spent in Combine (all of it, unless intervals were merged).
  struct Interval {
    int64_t start = 0;
    int64_t end = 0;
    int64_t busy = 0;
  };
  CombineTimer();
  ~CombineTimer();
  CombineTimer(const CombineTimer&) = delete;
  CombineTimer& operator=(const CombineTimer&) = delete;
  // Nanoseconds in Combine on this thread since the timer began.
  int64_t nanos() const;
  // When this thread was in Combine since the timer began, in order: calls less than a
  // microsecond apart are one interval; past kMaxIntervals, the closest ones are merged
  // (MergeToAtMost), so the longest gaps stay gaps.
  const std::vector<Interval>& intervals() const;
  static constexpr size_t kMaxIntervals = 4096;
};

// Merges neighbouring intervals across the smallest gaps until at most `most` (>= 1) remain:
// the `most` - 1 longest gaps are kept. Busy times add up.
void MergeToAtMost(std::vector<CombineTimer::Interval>& intervals, size_t most);

// buf[i] = buf[i] / divisor for i < count (finishes an average). Integers truncate toward zero;
// f16/bf16 divide in f32.
void DivideBy(DataType type, void* buf, size_t count, int64_t divisor);

// dst[i] = src[i] * factor for i < count (dst may equal src). f32 and f16/bf16 multiply in f32,
// f64 in f64. Integers (Horovod's rule): the product in f64, truncated toward zero, saturated at
// the type's limits; a NaN product is 0.
void Scale(DataType type, void* dst, const void* src, size_t count, double factor);

// dst[i] = the identity of `op` (0 for sum/average, 1 for product, the largest value or +inf for
// min, the lowest value or -inf for max): what a rank that has no data contributes.
void FillIdentity(DataType type, ReduceOp op, void* dst, size_t count);

// float32 linear algebra for compression's PowerSGD (compress/lowrank.h), on the same ISA's
// kernels as Combine, r rows of n values at a time (xs and ys: r x n, row-major). Each rounds
// alike on every ISA: the same operations in the same order.
// out[k] = the dot product of x and row k of ys, in 16 partial sums added in order at the end.
void Dots(const float* x, const float* ys, size_t n, size_t r, float* out);
// Row k of ys += a[k] * x (x does not overlap ys).
void Axpys(const float* a, const float* x, float* ys, size_t n, size_t r);
// out = a[0] * row 0 of xs + a[1] * row 1 + ..., added in that order from 0.
void Combination(const float* a, const float* xs, size_t n, size_t r, float* out);

// IEEE binary16 and bfloat16 conversions (round to nearest even, NaN stays NaN).
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float BFloat16ToFloat(uint16_t b);
uint16_t FloatToBFloat16(float f);

// The same conversions over arrays (compiled to vector code).
void FloatsToHalves(const float* in, uint16_t* out, size_t count);
void HalvesToFloats(const uint16_t* in, float* out, size_t count);
void FloatsToBFloat16s(const float* in, uint16_t* out, size_t count);
void BFloat16sToFloats(const uint16_t* in, float* out, size_t count);

}  // namespace ddp::reduce
