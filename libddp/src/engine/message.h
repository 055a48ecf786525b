// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// What ranks tell each other about a submitted tensor during negotiation, how it is encoded, and
// how disagreements become error messages.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ddp/types.h"

namespace ddp::engine {

enum class OpKind : uint8_t {
  kAllreduce = 1,
  kAllgather = 2,
  kBroadcast = 3,
  kAlltoall = 4,
  kReduceScatter = 5,
  kAddProcessSet = 6,  // shapes[0] holds the member ranks
};
absl::string_view OpKindName(OpKind kind);

inline constexpr int32_t kCpuMemory = -1;
inline constexpr int32_t kCudaMemory = 1;

// Everything every rank must agree on about one named operation (allgather: all but the first
// dimension). A grouped allreduce has one shape per member.
struct TensorMeta {
  OpKind kind = OpKind::kAllreduce;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int32_t root = -1;
  int32_t device = kCpuMemory;  // where the tensor lives (not which GPU: ranks use their own)
  double prescale = 1.0;
  double postscale = 1.0;
  std::vector<std::vector<int64_t>> shapes;
  Compression compression = Codec::kNone;  // allreduce: how its data travels

  uint64_t ElementCount() const;  // over all shapes
  uint64_t Bytes() const { return ElementCount() * DataTypeSize(type); }
  friend bool operator==(const TensorMeta& a, const TensorMeta& b);
};

// One entry of a rank's announcement in a negotiation round.
struct Record {
  enum class Type : uint8_t {
    kRequest = 1,    // "I have submitted `name`": meta follows
    kStallFail = 2,  // (from the set's coordinator) fail `name` on every rank: it stalled
  };
  Type type = Type::kRequest;
  std::string name;
  TensorMeta meta;
};

void AppendRecord(const Record& record, std::string* out);
// Decodes all records of one rank's announcement; malformed input is an error, never a crash.
absl::StatusOr<std::vector<Record>> ParseRecords(absl::string_view bytes);

// Checks that the descriptions from the given ranks (rank numbers of the job) agree. On a
// disagreement: an error naming the tensor, the field, and which ranks said what.
absl::Status CheckAgreement(absl::string_view name, const std::vector<int>& ranks,
                            const std::vector<const TensorMeta*>& metas);

std::string ShapeString(const std::vector<int64_t>& shape);
// Elements in a tensor of this shape (1 for a scalar).
uint64_t ElementCount(const std::vector<int64_t>& shape);

}  // namespace ddp::engine
