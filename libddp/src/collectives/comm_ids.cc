// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// CommIds: ranges and allocation.
#include "collectives/comm_ids.h"

#include "absl/strings/str_cat.h"

namespace ddp::collectives {
namespace {

struct Range {
  CommRange range;
  absl::string_view name;
  CommId begin;
  CommId end;
};

constexpr Range kRanges[kNumCommRanges] = {
    {CommRange::kWorld, "world", 0, 1},
    {CommRange::kEngine, "engine", 1, 2},
    {CommRange::kProcessSet, "process set", 2, 0x10000},
    {CommRange::kNccl, "NCCL", 0x10000, 0x20000},
    {CommRange::kParameterServer, "parameter server", 0x20000, 0xFF000},
    {CommRange::kNotification, "notification", 0xFF000, CommId{1} << kCommIdBits},
};

const Range& Find(CommRange range) { return kRanges[static_cast<int>(range)]; }

}  // namespace

absl::string_view CommRangeName(CommRange range) { return Find(range).name; }
CommId CommRangeBegin(CommRange range) { return Find(range).begin; }
CommId CommRangeEnd(CommRange range) { return Find(range).end; }

CommRange CommRangeOf(CommId id) {
  for (const Range& r : kRanges) {
    if (id >= r.begin && id < r.end) return r.range;
  }
  return CommRange::kNotification;  // ids are 20 bits: the last range holds the rest
}

absl::StatusOr<CommId> CommIds::Allocate(CommRange range) {
  const Range& r = Find(range);
  std::lock_guard<std::mutex> lock(mu_);
  uint32_t& next = next_[static_cast<int>(range)];
  if (next >= r.end - r.begin) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "all ", r.end - r.begin, " communicator ids of the ", r.name, " range are in use"));
  }
  return r.begin + next++;
}

uint32_t CommIds::allocated(CommRange range) const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_[static_cast<int>(range)];
}

}  // namespace ddp::collectives
