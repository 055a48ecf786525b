// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Test data generation and reference checks.
#include "support/data.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "reduce/reduce.h"

namespace ddp::testing {
namespace {

uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

uint64_t Bits(const DataGen& g, int rank, size_t i) {
  return Mix(g.seed ^ Mix(g.call * 0x100000001B3ULL + static_cast<uint64_t>(rank) * 0x9E37ULL) ^
             (static_cast<uint64_t>(i) * 0xD6E8FEB86659FD93ULL));
}

bool IsFloat(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 ||
         t == DataType::kBFloat16;
}

// Rounds v to what `type` can hold (the stored input is exactly this value).
double RoundTo(DataType type, double v) {
  switch (type) {
    case DataType::kFloat32:
      return static_cast<float>(v);
    case DataType::kFloat16:
      return reduce::HalfToFloat(reduce::FloatToHalf(static_cast<float>(v)));
    case DataType::kBFloat16:
      return reduce::BFloat16ToFloat(reduce::FloatToBFloat16(static_cast<float>(v)));
    default:
      return v;
  }
}

double FloatInput(const DataGen& g, DataType type, ReduceOp op, int rank, size_t i) {
  const uint64_t b = Bits(g, rank, i);
  const double u = static_cast<double>(b >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
  double v;
  if (op == ReduceOp::kProduct) {
    v = (0.5 + 1.5 * u) * ((b & 1) ? -1.0 : 1.0);
  } else {
    v = 2.0 * u - 1.0;
  }
  return RoundTo(type, v);
}

int64_t IntInput(const DataGen& g, DataType type, ReduceOp op, int rank, size_t i) {
  const uint64_t b = Bits(g, rank, i);
  auto range = [&](int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) + 1;
    return static_cast<int64_t>(static_cast<uint64_t>(lo) + b % span);
  };
  const bool sum = op == ReduceOp::kSum || op == ReduceOp::kAverage;
  switch (type) {
    case DataType::kInt8:
      return sum ? range(-16, 15) : op == ReduceOp::kProduct ? range(-3, 3) : range(-128, 127);
    case DataType::kUInt8:
      return sum ? range(0, 31) : op == ReduceOp::kProduct ? range(0, 3) : range(0, 255);
    case DataType::kInt32:
      return sum                        ? range(-(1 << 24), 1 << 24)
             : op == ReduceOp::kProduct ? range(-3, 3)
                                        : range(INT32_MIN, INT32_MAX);
    default:
      return sum                        ? range(-(int64_t{1} << 40), int64_t{1} << 40)
             : op == ReduceOp::kProduct ? range(-3, 3)
                                        : range(-(int64_t{1} << 62), int64_t{1} << 62);
  }
}

void StoreFloat(DataType type, void* buf, size_t i, double v) {
  char* p = static_cast<char*>(buf);
  switch (type) {
    case DataType::kFloat32: {
      const float f = static_cast<float>(v);
      std::memcpy(p + i * 4, &f, 4);
      break;
    }
    case DataType::kFloat64:
      std::memcpy(p + i * 8, &v, 8);
      break;
    case DataType::kFloat16: {
      const uint16_t h = reduce::FloatToHalf(static_cast<float>(v));
      std::memcpy(p + i * 2, &h, 2);
      break;
    }
    default: {
      const uint16_t h = reduce::FloatToBFloat16(static_cast<float>(v));
      std::memcpy(p + i * 2, &h, 2);
    }
  }
}

double LoadFloat(DataType type, const void* buf, size_t i) {
  const char* p = static_cast<const char*>(buf);
  switch (type) {
    case DataType::kFloat32: {
      float f;
      std::memcpy(&f, p + i * 4, 4);
      return f;
    }
    case DataType::kFloat64: {
      double d;
      std::memcpy(&d, p + i * 8, 8);
      return d;
    }
    case DataType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, p + i * 2, 2);
      return reduce::HalfToFloat(h);
    }
    default: {
      uint16_t h;
      std::memcpy(&h, p + i * 2, 2);
      return reduce::BFloat16ToFloat(h);
    }
  }
}

void StoreInt(DataType type, void* buf, size_t i, int64_t v) {
  char* p = static_cast<char*>(buf);
  switch (type) {
    case DataType::kInt8: {
      const auto x = static_cast<int8_t>(v);
      std::memcpy(p + i, &x, 1);
      break;
    }
    case DataType::kUInt8: {
      const auto x = static_cast<uint8_t>(v);
      std::memcpy(p + i, &x, 1);
      break;
    }
    case DataType::kInt32: {
      const auto x = static_cast<int32_t>(v);
      std::memcpy(p + i * 4, &x, 4);
      break;
    }
    default:
      std::memcpy(p + i * 8, &v, 8);
  }
}

int64_t LoadInt(DataType type, const void* buf, size_t i) {
  const char* p = static_cast<const char*>(buf);
  switch (type) {
    case DataType::kInt8: {
      int8_t x;
      std::memcpy(&x, p + i, 1);
      return x;
    }
    case DataType::kUInt8: {
      uint8_t x;
      std::memcpy(&x, p + i, 1);
      return x;
    }
    case DataType::kInt32: {
      int32_t x;
      std::memcpy(&x, p + i * 4, 4);
      return x;
    }
    default: {
      int64_t x;
      std::memcpy(&x, p + i * 8, 8);
      return x;
    }
  }
}

// Two's complement wrap to the width of `type`, as the library's integer kernels do.
int64_t Wrap(DataType type, uint64_t v) {
  switch (type) {
    case DataType::kInt8:
      return static_cast<int8_t>(v);
    case DataType::kUInt8:
      return static_cast<uint8_t>(v);
    case DataType::kInt32:
      return static_cast<int32_t>(v);
    default:
      return static_cast<int64_t>(v);
  }
}

double UnitRoundoff(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return std::ldexp(1.0, -24);
    case DataType::kFloat64:
      return std::ldexp(1.0, -53);
    case DataType::kFloat16:
      return std::ldexp(1.0, -11);
    default:
      return std::ldexp(1.0, -8);
  }
}

}  // namespace

void FillInput(const DataGen& g, DataType type, ReduceOp op, int rank, void* buf, size_t count,
               size_t first) {
  if (IsFloat(type)) {
    for (size_t i = 0; i < count; ++i)
      StoreFloat(type, buf, i, FloatInput(g, type, op, rank, first + i));
  } else {
    for (size_t i = 0; i < count; ++i)
      StoreInt(type, buf, i, IntInput(g, type, op, rank, first + i));
  }
}

absl::Status CheckReduced(const DataGen& g, DataType type, ReduceOp op, int n, const void* out,
                          size_t count, size_t first, const std::string& what) {
  const double u = IsFloat(type) ? UnitRoundoff(type) : 0;
  for (size_t i = 0; i < count; ++i) {
    if (IsFloat(type)) {
      long double acc = op == ReduceOp::kProduct ? 1.0L : 0.0L;
      long double magnitude = 0;
      double mn = std::numeric_limits<double>::infinity();
      double mx = -mn;
      for (int r = 0; r < n; ++r) {
        const double x = FloatInput(g, type, op, r, first + i);
        if (op == ReduceOp::kProduct) {
          acc *= x;
        } else {
          acc += x;
        }
        magnitude += std::fabs(x);
        mn = std::min(mn, x);
        mx = std::max(mx, x);
      }
      double expected = static_cast<double>(acc);
      double tolerance = 0;
      switch (op) {
        case ReduceOp::kSum:
          tolerance = 2.0 * (n + 1) * u * static_cast<double>(magnitude);
          break;
        case ReduceOp::kAverage:
          expected /= n;
          tolerance = 2.0 * (n + 2) * u * static_cast<double>(magnitude) / n;
          break;
        case ReduceOp::kProduct:
          tolerance = 2.0 * (n + 1) * u * std::fabs(expected);
          break;
        case ReduceOp::kMin:
          expected = mn;
          break;
        case ReduceOp::kMax:
          expected = mx;
          break;
      }
      const double got = LoadFloat(type, out, i);
      if (!(std::fabs(got - expected) <= tolerance)) {
        return absl::InternalError(absl::StrCat(what, ": element ", i, " is ", got, ", expected ",
                                                expected, " (tolerance ", tolerance, ")"));
      }
    } else {
      uint64_t acc = op == ReduceOp::kProduct ? 1 : 0;
      int64_t mn = INT64_MAX;
      int64_t mx = INT64_MIN;
      for (int r = 0; r < n; ++r) {
        const int64_t x = IntInput(g, type, op, r, first + i);
        if (op == ReduceOp::kProduct) {
          acc *= static_cast<uint64_t>(x);
        } else {
          acc += static_cast<uint64_t>(x);
        }
        mn = std::min(mn, x);
        mx = std::max(mx, x);
      }
      int64_t expected = Wrap(type, acc);
      if (op == ReduceOp::kAverage) expected /= n;
      if (op == ReduceOp::kMin) expected = mn;
      if (op == ReduceOp::kMax) expected = mx;
      const int64_t got = LoadInt(type, out, i);
      if (got != expected) {
        return absl::InternalError(
            absl::StrCat(what, ": element ", i, " is ", got, ", expected ", expected));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckCopied(const DataGen& g, DataType type, ReduceOp op, int src_rank,
                         const void* out, size_t count, size_t first, const std::string& what) {
  const size_t es = DataTypeSize(type);
  std::vector<char> expected(count * es);
  FillInput(g, type, op, src_rank, expected.data(), count, first);
  if (count > 0 && std::memcmp(expected.data(), out, count * es) != 0) {
    for (size_t i = 0; i < count; ++i) {
      if (std::memcmp(expected.data() + i * es, static_cast<const char*>(out) + i * es, es) != 0) {
        return absl::InternalError(
            absl::StrCat(what, ": element ", i, " differs from rank ", src_rank, "'s input"));
      }
    }
  }
  return absl::OkStatus();
}

void Poison(void* buf, size_t bytes) { std::memset(buf, 0xCD, bytes); }

uint64_t Digest(const void* buf, size_t bytes, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(buf);
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace ddp::testing
