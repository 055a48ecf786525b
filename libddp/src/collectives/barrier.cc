// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Barrier: dissemination in ceil(log2 N) rounds of empty messages.
#include "collectives/collectives.h"
#include "common/status.h"

namespace ddp::collectives {

absl::Status Barrier(Communicator& comm) {
  const int n = comm.size();
  const int r = comm.rank();
  const CallId call =
      comm.Begin(Kind::kBarrier, DataType::kUInt8, ReduceOp::kSum, Algorithm::kAuto, -1, 0);
  if (n == 1) return absl::OkStatus();
  Transfers transfers(comm, call);
  uint32_t round = 0;
  for (int distance = 1; distance < n; distance <<= 1, ++round) {
    transport::Request* recv = transfers.Recv((r - distance + n) % n, round, 0, nullptr, 0);
    transfers.Send((r + distance) % n, round, 0, nullptr, 0);
    DDP_RETURN_IF_ERROR(transfers.Wait(recv));
  }
  return transfers.WaitAll();
}

}  // namespace ddp::collectives
