// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Benchmark element values: inputs whose collective results are known exactly, and the check of
// results against them. Free of libddp, so that ddp-bench and ddp-mpi-bench check alike.
#ifndef DDP_BENCHMARKS_BENCH_VALUES_H_
#define DDP_BENCHMARKS_BENCH_VALUES_H_

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

namespace bench {

// Element types and reductions, in the benchmarks' own names (ddp-mpi-bench has no libddp).
enum class ValueType { kFloat32, kFloat64, kFloat16, kBFloat16, kInt8, kUInt8, kInt32, kInt64 };
enum class Reduction { kSum, kAverage, kMin, kMax, kProduct };

// Inputs to reductions: small non-negative integers whose reduction over the ranks is exact in
// every type (f16 and bf16 included) and differs from any single rank's input.
int64_t ReduceInput(Reduction op, int rank, int n, int64_t i);
// The reduction of ReduceInput(op, r, n, i) over ranks r = 0..n-1.
int64_t ReduceExpected(Reduction op, int n, int64_t i);

// Element i of what `rank` contributes to allgather and broadcast.
int64_t RankData(int rank, int64_t i);
// Element i of the block that rank `src` sends to rank `dst` in alltoall.
int64_t AlltoallData(int src, int dst, int64_t i);

// Relative error allowed: none, except the division of an average in floating point.
double Tolerance(ValueType type, Reduction op);

// Writes value_at(i), converted to `type`, to elements 0..count-1 of `out`.
template <typename ValueAt>
void StoreValues(ValueType type, void* out, int64_t count, ValueAt value_at);

// How many of elements 0..count-1 of `in` differ from expected_at(i) by more than
// tolerance * expected_at(i).
template <typename ExpectedAt>
int64_t CountWrongValues(ValueType type, double tolerance, const void* in, int64_t count,
                         ExpectedAt expected_at);

// ----------------------------------------------------------------------------- implementation

namespace internal {

struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

uint16_t HalfFromFloat(float f);
float HalfToFloat(uint16_t h);
uint16_t BFloat16FromFloat(float f);

template <typename T>
void Store(T& out, int64_t v) {
  if constexpr (std::is_same_v<T, Half>) {
    out.bits = HalfFromFloat(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    out.bits = BFloat16FromFloat(static_cast<float>(v));
  } else {
    out = static_cast<T>(v);
  }
}

template <typename T>
double Load(const T& in) {
  if constexpr (std::is_same_v<T, Half>) {
    return HalfToFloat(in.bits);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return std::bit_cast<float>(static_cast<uint32_t>(in.bits) << 16);
  } else {
    return static_cast<double>(in);
  }
}

template <typename T>
struct Tag {
  using type = T;
};

template <typename F>
void WithType(ValueType type, F&& f) {
  switch (type) {
    case ValueType::kFloat32:
      return f(Tag<float>{});
    case ValueType::kFloat64:
      return f(Tag<double>{});
    case ValueType::kFloat16:
      return f(Tag<Half>{});
    case ValueType::kBFloat16:
      return f(Tag<BFloat16>{});
    case ValueType::kInt8:
      return f(Tag<int8_t>{});
    case ValueType::kUInt8:
      return f(Tag<uint8_t>{});
    case ValueType::kInt32:
      return f(Tag<int32_t>{});
    case ValueType::kInt64:
      return f(Tag<int64_t>{});
  }
  std::abort();
}

}  // namespace internal

template <typename ValueAt>
void StoreValues(ValueType type, void* out, int64_t count, ValueAt value_at) {
  internal::WithType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* elements = static_cast<T*>(out);
    for (int64_t i = 0; i < count; ++i) internal::Store(elements[i], value_at(i));
  });
}

template <typename ExpectedAt>
int64_t CountWrongValues(ValueType type, double tolerance, const void* in, int64_t count,
                         ExpectedAt expected_at) {
  int64_t wrong = 0;
  internal::WithType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* elements = static_cast<const T*>(in);
    for (int64_t i = 0; i < count; ++i) {
      const double want = static_cast<double>(expected_at(i));
      // Written so that NaN (the poison, in floating types) never matches.
      if (!(std::fabs(internal::Load(elements[i]) - want) <= tolerance * want)) ++wrong;
    }
  });
  return wrong;
}

}  // namespace bench

#endif  // DDP_BENCHMARKS_BENCH_VALUES_H_
