// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Element types and reduction operations understood by every libddp collective.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

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
// f32, f64, f16 and bf16.
constexpr bool IsFloating(DataType type) {
  return type == DataType::kFloat32 || type == DataType::kFloat64 || type == DataType::kFloat16 ||
         type == DataType::kBFloat16;
}

// How an allreduce's data travels (docs/compression.md): as it is, or encoded, with error
// feedback (what the encoding lost is added to the tensor's next contribution). For
// floating-point tensors reduced by sum or average.
enum class Codec : uint8_t {
  kNone = 0,
  kBf16 = 1,      // bfloat16, rounded to nearest even: half the bytes
  kFp16 = 2,      // IEEE binary16, rounded to nearest even: half the bytes
  kInt8 = 3,      // int8 with a float32 scale per block of 256 values: about a quarter
  kPowerSgd = 4,  // a rank-r approximation of each matrix (Vogels et al., 2019)
};
inline constexpr int kNumCodecs = 5;
// "none", "bf16", "fp16", "int8", "powersgd".
absl::string_view CodecName(Codec codec);
absl::StatusOr<Codec> ParseCodec(absl::string_view name);
bool IsValid(Codec codec);

// A codec and its parameter: PowerSGD's rank (1 or more; 0 for the other codecs).
struct Compression {
  Codec codec = Codec::kNone;
  int32_t rank = 0;

  constexpr Compression() = default;
  constexpr Compression(Codec c) : codec(c) {}  // NOLINT(google-explicit-constructor): a codec
  static constexpr Compression PowerSgd(int32_t rank) {
    Compression c(Codec::kPowerSgd);
    c.rank = rank;
    return c;
  }
  bool none() const { return codec == Codec::kNone; }
  friend bool operator==(const Compression& a, const Compression& b) {
    return a.codec == b.codec && a.rank == b.rank;
  }
};
// "int8", "powersgd(rank=4)".
std::string CompressionName(const Compression& compression);

// The allreduce algorithm (DDP_ALGO): chosen by size and topology, or forced.
enum class Algorithm { kAuto, kRing, kRecursiveDoubling, kHierarchical };
// "auto", "ring", "rd", "hier".
absl::string_view AlgorithmName(Algorithm algorithm);

// How much libddp logs (DDP_LOG_LEVEL).
enum class LogLevel { kTrace = 0, kDebug = 1, kInfo = 2, kWarning = 3, kError = 4, kOff = 5 };

// Where a tensor's memory lives. CPU memory goes through the transports; CUDA memory through the
// NCCL backend (built with DDP_WITH_NCCL). All CUDA tensors of one rank must be on one device.
struct Device {
  static constexpr int kCpu = -1;
  int index = kCpu;  // the CUDA device ordinal, or kCpu
  // CUDA: the stream (a cudaStream_t) on which the inputs were produced; the collective starts
  // once the work queued there so far is done. Null: the legacy default stream.
  void* stream = nullptr;
  // CUDA allreduces: false (the default): the handle finishes once the result is in memory.
  // true: once the collective is enqueued on the GPU, and Handle::WaitOnStream makes a stream
  // wait for the result (as torch.distributed's NCCL work does; ddp.torch submits this way), so
  // that the host never waits for the GPU. Other collectives finish as with false.
  bool stream_ordered = false;

  bool is_cuda() const { return index >= 0; }
  static Device Cpu() { return {}; }
  static Device Cuda(int index, void* stream = nullptr, bool stream_ordered = false) {
    return {index, stream, stream_ordered};
  }
};

}  // namespace ddp
