// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// How far this rank's system clock is from rank 0's, for a timeline merged across hosts
// (DDP_TIMELINE_CLOCK_SYNC=1, set by ddprun --job-timeline): kRounds times, every rank leaves a
// barrier, reads its clock and the ranks gather what they read. The ranks leave a barrier within
// about one message's latency of each other, so each round gives the offset to that accuracy;
// the median of the rounds is taken, and the spread of the rounds says how steady it was.
// Collective: every rank of the job calls it.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"

namespace ddp {

struct ClockSync {
  int64_t offset_us = 0;  // this rank's clock minus rank 0's
  int64_t spread_us = 0;  // max - min of the rounds' offsets
  int rounds = 0;
};

inline constexpr int kClockSyncRounds = 9;

absl::StatusOr<ClockSync> SyncClocks(collectives::Communicator& comm, int rank, int size);

}  // namespace ddp
