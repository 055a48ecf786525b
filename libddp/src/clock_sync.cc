// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
#include "clock_sync.h"

#include <algorithm>
#include <vector>

#include "absl/time/clock.h"
#include "collectives/collectives.h"
#include "common/status.h"

namespace ddp {

absl::StatusOr<ClockSync> SyncClocks(collectives::Communicator& comm, int rank, int size) {
  const size_t n = static_cast<size_t>(size);
  const size_t me = static_cast<size_t>(rank);
  std::vector<int64_t> offsets;
  std::vector<int64_t> read(n);
  for (int round = 0; round < kClockSyncRounds; ++round) {
    DDP_RETURN_IF_ERROR(collectives::Barrier(comm));
    read[me] = absl::ToUnixMicros(absl::Now());
    DDP_RETURN_IF_ERROR(collectives::Allgatherv(comm, &read[me], read.data(),
                                                std::vector<size_t>(n, 1), DataType::kInt64));
    offsets.push_back(read[me] - read[0]);
  }
  std::sort(offsets.begin(), offsets.end());
  ClockSync sync;
  sync.offset_us = offsets[offsets.size() / 2];
  sync.spread_us = offsets.back() - offsets.front();
  sync.rounds = kClockSyncRounds;
  return sync;
}

}  // namespace ddp
