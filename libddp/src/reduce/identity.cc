// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Identity fill: what a rank without data (a joined rank) contributes to a reduction.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "reduce/half.h"
#include "reduce/reduce.h"

namespace ddp::reduce {
namespace {

template <typename T>
void Fill(void* dst, size_t count, T value) {
  T* d = static_cast<T*>(dst);
  for (size_t i = 0; i < count; ++i) d[i] = value;
}

template <typename T>
void FillIntegerIdentity(ReduceOp op, void* dst, size_t count) {
  switch (op) {
    case ReduceOp::kProduct:
      return Fill<T>(dst, count, T{1});
    case ReduceOp::kMin:
      return Fill<T>(dst, count, std::numeric_limits<T>::max());
    case ReduceOp::kMax:
      return Fill<T>(dst, count, std::numeric_limits<T>::lowest());
    default:
      return Fill<T>(dst, count, T{0});
  }
}

float FloatIdentity(ReduceOp op) {
  switch (op) {
    case ReduceOp::kProduct:
      return 1.0f;
    case ReduceOp::kMin:
      return std::numeric_limits<float>::infinity();
    case ReduceOp::kMax:
      return -std::numeric_limits<float>::infinity();
    default:
      return 0.0f;
  }
}

[[noreturn]] void Die(const char* what, DataType type) {
  std::fprintf(stderr, "libddp: %s called with %s\n", what,
               std::string(DataTypeName(type)).c_str());
  std::abort();
}

}  // namespace

void FillIdentity(DataType type, ReduceOp op, void* dst, size_t count) {
  const float f = FloatIdentity(op);
  switch (type) {
    case DataType::kFloat32:
      return Fill<float>(dst, count, f);
    case DataType::kFloat64:
      return Fill<double>(dst, count, static_cast<double>(f));
    case DataType::kFloat16:
      return Fill<uint16_t>(dst, count, internal::FloatToHalfBits(f));
    case DataType::kBFloat16:
      return Fill<uint16_t>(dst, count, internal::FloatToBFloat16Bits(f));
    case DataType::kInt8:
      return FillIntegerIdentity<int8_t>(op, dst, count);
    case DataType::kUInt8:
      return FillIntegerIdentity<uint8_t>(op, dst, count);
    case DataType::kInt32:
      return FillIntegerIdentity<int32_t>(op, dst, count);
    case DataType::kInt64:
      return FillIntegerIdentity<int64_t>(op, dst, count);
  }
  Die("reduce::FillIdentity", type);
}

}  // namespace ddp::reduce
