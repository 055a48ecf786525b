// Element types and reduction operations understood by every libddp collective.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddp {

enum class DataType : uint8_t {
  kFloat32 = 0,
  kFloat64 = 1,
  kFloat16 = 2,
  kBFloat16 = 3,
  kInt8 = 4,
  kUInt8 = 5,
  kInt32 = 6,
  kInt64 = 7,
};
inline constexpr int kNumDataTypes = 8;

enum class ReduceOp : uint8_t {
  kSum = 0,
  kAverage = 1,
  kMin = 2,
  kMax = 3,
  kProduct = 4,
};
inline constexpr int kNumReduceOps = 5;

// Size in bytes of one element.
size_t DataTypeSize(DataType type);
// Short lowercase name: "f32", "f64", "f16", "bf16", "i8", "u8", "i32", "i64".
absl::string_view DataTypeName(DataType type);
// "sum", "average", "min", "max", "product".
absl::string_view ReduceOpName(ReduceOp op);

// Accepts the short names above and common long ones ("float32", "float", "int64", ...).
absl::StatusOr<DataType> ParseDataType(absl::string_view name);
absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name);

bool IsValid(DataType type);
bool IsValid(ReduceOp op);

}  // namespace ddp
