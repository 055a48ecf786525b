// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Benchmark element values: the generators and the f16/bf16 conversions behind bench_values.h.
#include "bench_values.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace bench {
namespace internal {

// Round to nearest even; values here are small integers, so subnormals simply flush to zero.
uint16_t HalfFromFloat(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs < 0x38800000u) return static_cast<uint16_t>(sign);
  if (abs >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7c00u);
  uint32_t h = (abs - 0x38000000u) >> 13;
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) return (sign ? -1.0f : 1.0f) * std::ldexp(static_cast<float>(mant), -24);
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t BFloat16FromFloat(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace internal

int64_t ReduceInput(Reduction op, int rank, int n, int64_t i) {
  switch (op) {
    case Reduction::kSum:
    case Reduction::kAverage: {
      // 1..4, plus and minus an offset that cancels over each pair of ranks: average is exact.
      const int64_t base = 1 + i % 4;
      if (rank == n - 1 && n % 2 == 1) return base;
      const int64_t offset = (i + rank / 2) % 2;
      return rank % 2 == 0 ? base + offset : base - offset;
    }
    case Reduction::kMin:
    case Reduction::kMax:
      return (i * 3 + rank * 5) % 17;
    case Reduction::kProduct:
      return i % (2 * n) == rank ? 2 : 1;  // at most one 2 per element
  }
  return 0;
}

int64_t ReduceExpected(Reduction op, int n, int64_t i) {
  int64_t acc = ReduceInput(op, 0, n, i);
  for (int r = 1; r < n; ++r) {
    const int64_t v = ReduceInput(op, r, n, i);
    if (op == Reduction::kSum || op == Reduction::kAverage) acc += v;
    if (op == Reduction::kMin) acc = std::min(acc, v);
    if (op == Reduction::kMax) acc = std::max(acc, v);
    if (op == Reduction::kProduct) acc *= v;
  }
  return op == Reduction::kAverage ? acc / n : acc;
}

int64_t RankData(int rank, int64_t i) { return (rank * 7 + i) % 23 + 1; }
int64_t AlltoallData(int src, int dst, int64_t i) { return (src * 5 + dst * 3 + i) % 29 + 1; }

double Tolerance(ValueType type, Reduction op) {
  if (op != Reduction::kAverage) return 0;
  switch (type) {
    case ValueType::kFloat32:
      return std::ldexp(1.0, -23);
    case ValueType::kFloat64:
      return std::ldexp(1.0, -52);
    case ValueType::kFloat16:
      return std::ldexp(1.0, -10);
    case ValueType::kBFloat16:
      return std::ldexp(1.0, -7);
    default:
      return 0;
  }
}

}  // namespace bench
