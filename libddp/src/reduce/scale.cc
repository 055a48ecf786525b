// Scaling (the engine's pre- and post-scale factors) and identity fill (a joined rank's share).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "reduce/half.h"
#include "reduce/reduce.h"

namespace ddp::reduce {
namespace {

template <typename T, typename F>
void ScaleLoop(T* dst, const T* src, size_t count, F factor) {
  // Separate loops so that the compiler need not prove the pointers apart to vectorize.
  if (dst == src) {
    for (size_t i = 0; i < count; ++i) dst[i] = static_cast<T>(dst[i] * factor);
    return;
  }
  T* __restrict d = dst;
  const T* __restrict s = src;
  for (size_t i = 0; i < count; ++i) d[i] = static_cast<T>(s[i] * factor);
}

template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
void ScaleHalfLoop(uint16_t* dst, const uint16_t* src, size_t count, float factor) {
  for (size_t i = 0; i < count; ++i) dst[i] = Store(Load(src[i]) * factor);
}

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

void Scale(DataType type, void* dst, const void* src, size_t count, double factor) {
  switch (type) {
    case DataType::kFloat32:
      return ScaleLoop(static_cast<float*>(dst), static_cast<const float*>(src), count,
                       static_cast<float>(factor));
    case DataType::kFloat64:
      return ScaleLoop(static_cast<double*>(dst), static_cast<const double*>(src), count, factor);
    case DataType::kFloat16:
      return ScaleHalfLoop<internal::HalfBitsToFloat, internal::FloatToHalfBits>(
          static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), count,
          static_cast<float>(factor));
    case DataType::kBFloat16:
      return ScaleHalfLoop<internal::BFloat16BitsToFloat, internal::FloatToBFloat16Bits>(
          static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), count,
          static_cast<float>(factor));
    default:
      Die("reduce::Scale", type);
  }
}

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
