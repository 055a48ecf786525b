// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Names, sizes and parsing for DataType and ReduceOp.
#include "ddp/types.h"

#include <array>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ddp {
namespace {

template <typename Enum>
struct NamedValue {
  absl::string_view name;
  Enum value;
};

// Every spelling accepted by ParseDataType; the error message is built from this table so the
// two cannot drift apart.
constexpr auto kDataTypeNames = std::to_array<NamedValue<DataType>>({
    {"f32", DataType::kFloat32},       {"float32", DataType::kFloat32},
    {"float", DataType::kFloat32},     {"f64", DataType::kFloat64},
    {"float64", DataType::kFloat64},   {"double", DataType::kFloat64},
    {"f16", DataType::kFloat16},       {"float16", DataType::kFloat16},
    {"half", DataType::kFloat16},      {"bf16", DataType::kBFloat16},
    {"bfloat16", DataType::kBFloat16}, {"i8", DataType::kInt8},
    {"int8", DataType::kInt8},         {"u8", DataType::kUInt8},
    {"uint8", DataType::kUInt8},       {"i32", DataType::kInt32},
    {"int32", DataType::kInt32},       {"int", DataType::kInt32},
    {"i64", DataType::kInt64},         {"int64", DataType::kInt64},
    {"long", DataType::kInt64},
});

constexpr auto kReduceOpNames = std::to_array<NamedValue<ReduceOp>>({
    {"sum", ReduceOp::kSum},
    {"average", ReduceOp::kAverage},
    {"avg", ReduceOp::kAverage},
    {"mean", ReduceOp::kAverage},
    {"min", ReduceOp::kMin},
    {"max", ReduceOp::kMax},
    {"product", ReduceOp::kProduct},
    {"prod", ReduceOp::kProduct},
});

constexpr auto kCodecNames = std::to_array<NamedValue<Codec>>({
    {"none", Codec::kNone},
    {"bf16", Codec::kBf16},
    {"bfloat16", Codec::kBf16},
    {"fp16", Codec::kFp16},
    {"float16", Codec::kFp16},
    {"int8", Codec::kInt8},
    {"powersgd", Codec::kPowerSgd},
});

template <typename Enum, size_t N>
absl::StatusOr<Enum> Parse(const std::array<NamedValue<Enum>, N>& table, absl::string_view what,
                           absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (const NamedValue<Enum>& entry : table) {
    if (entry.name == lower) return entry.value;
  }
  std::string accepted;
  for (const NamedValue<Enum>& entry : table) {
    absl::StrAppend(&accepted, accepted.empty() ? "" : ", ", entry.name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown ", what, " '", name, "'; accepted (case-insensitive): ", accepted));
}

}  // namespace

size_t DataTypeSize(DataType type) {
  switch (type) {
    case DataType::kFloat32:
    case DataType::kInt32:
      return 4;
    case DataType::kFloat64:
    case DataType::kInt64:
      return 8;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt8:
    case DataType::kUInt8:
      return 1;
  }
  return 0;
}

absl::string_view DataTypeName(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return "f32";
    case DataType::kFloat64:
      return "f64";
    case DataType::kFloat16:
      return "f16";
    case DataType::kBFloat16:
      return "bf16";
    case DataType::kInt8:
      return "i8";
    case DataType::kUInt8:
      return "u8";
    case DataType::kInt32:
      return "i32";
    case DataType::kInt64:
      return "i64";
  }
  return "invalid";
}

absl::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAverage:
      return "average";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kProduct:
      return "product";
  }
  return "invalid";
}

absl::StatusOr<DataType> ParseDataType(absl::string_view name) {
  return Parse(kDataTypeNames, "data type", name);
}

absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name) {
  return Parse(kReduceOpNames, "reduce op", name);
}

absl::string_view CodecName(Codec codec) {
  switch (codec) {
    case Codec::kNone:
      return "none";
    case Codec::kBf16:
      return "bf16";
    case Codec::kFp16:
      return "fp16";
    case Codec::kInt8:
      return "int8";
    case Codec::kPowerSgd:
      return "powersgd";
  }
  return "invalid";
}

absl::StatusOr<Codec> ParseCodec(absl::string_view name) {
  return Parse(kCodecNames, "compression", name);
}

bool IsValid(Codec codec) { return static_cast<int>(codec) < kNumCodecs; }

std::string CompressionName(const Compression& compression) {
  if (compression.codec == Codec::kPowerSgd) {
    return absl::StrCat("powersgd(rank=", compression.rank, ")");
  }
  return std::string(CodecName(compression.codec));
}

bool IsValid(DataType type) { return static_cast<int>(type) < kNumDataTypes; }

bool IsValid(ReduceOp op) { return static_cast<int>(op) < kNumReduceOps; }

absl::string_view AlgorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kAuto:
      return "auto";
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kRecursiveDoubling:
      return "rd";
    case Algorithm::kHierarchical:
      return "hier";
  }
  return "?";
}

}  // namespace ddp
