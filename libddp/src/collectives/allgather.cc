// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Allgather(v): the pipelined ring, receiving straight into the output buffer.
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/ring.h"
#include "common/status.h"

namespace ddp::collectives {

absl::Status Allgatherv(Communicator& comm, const void* send, void* recv,
                        const std::vector<size_t>& counts, DataType type) {
  const Blocks blocks = Blocks::FromCounts(counts);
  const CallId call =
      comm.Begin(Kind::kAllgather, type, ReduceOp::kSum, Algorithm::kRing, -1, blocks.total);
  const size_t es = DataTypeSize(type);
  auto* out = static_cast<char*>(recv);
  char* mine = out + blocks.offset[static_cast<size_t>(comm.rank())] * es;
  const size_t my_bytes = blocks.count[static_cast<size_t>(comm.rank())] * es;
  if (send != mine && my_bytes > 0) std::memmove(mine, send, my_bytes);
  if (comm.size() == 1) return absl::OkStatus();
  Transfers transfers(comm, call);
  if (blocks.total == 0) {
    // Nothing to move, but still check that the neighbours agree.
    const int n = comm.size();
    transfers.Send((comm.rank() + 1) % n, 0, 0, nullptr, 0);
    transfers.Recv((comm.rank() + n - 1) % n, 0, 0, nullptr, 0);
    return transfers.WaitAll();
  }
  RingAllgatherArgs args;
  args.out = out;
  args.blocks = blocks;
  args.element_size = es;
  return RingAllgather(comm, transfers, args);
}

}  // namespace ddp::collectives
