// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Reduce-scatter(v): the reduce-scatter phase of the ring on its own.
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/ring.h"
#include "common/status.h"
#include "reduce/epilogue.h"
#include "reduce/reduce.h"

namespace ddp::collectives {

absl::Status ReduceScatterv(Communicator& comm, const void* send, void* recv,
                            const std::vector<size_t>& counts, DataType type, ReduceOp op) {
  return ReduceScatterv(comm, send, recv, counts, type, op, reduce::Epilogue::For(op, comm.size()));
}

absl::Status ReduceScatterv(Communicator& comm, const void* send, void* recv,
                            const std::vector<size_t>& counts, DataType type, ReduceOp op,
                            const reduce::Epilogue& epilogue) {
  const Blocks blocks = Blocks::FromCounts(counts);
  const CallId call =
      comm.Begin(Kind::kReduceScatter, type, op, Algorithm::kRing, -1, blocks.total);
  const int n = comm.size();
  const int r = comm.rank();
  const size_t es = DataTypeSize(type);
  const size_t my_count = blocks.count[static_cast<size_t>(r)];
  const size_t my_offset = blocks.offset[static_cast<size_t>(r)];
  const bool in_place = send == recv;
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  if (n == 1) {
    epilogue.Apply(type, out, in, my_count);
    return absl::OkStatus();
  }
  Transfers transfers(comm, call);
  if (blocks.total == 0) {
    transfers.Send((r + 1) % n, 0, 0, nullptr, 0);
    transfers.Recv((r + n - 1) % n, 0, 0, nullptr, 0);
    return transfers.WaitAll();
  }
  size_t largest = 0;
  for (size_t c : blocks.count) largest = std::max(largest, c);
  // Partial sums of other ranks' blocks: in place they overwrite the input (the caller gave
  // the buffer up); otherwise they alternate between two scratch halves by step parity.
  char* halves = in_place ? nullptr : comm.Scratch(2, 2 * largest * es);
  char* result = in_place ? out + my_offset * es : out;
  RingReduceScatterArgs args;
  args.in = in;
  args.blocks = blocks;
  args.type = type;
  args.op = reduce::Combining(op);
  args.accumulator = [&](int step, int block) -> char* {
    if (block == r) return result;
    if (in_place) return out + blocks.offset[static_cast<size_t>(block)] * es;
    return halves + static_cast<size_t>(step % 2) * largest * es;
  };
  args.on_final = [&](uint32_t /*segment*/, size_t first, size_t elems) {
    epilogue.Apply(type, result + first * es, elems);
  };
  std::vector<std::vector<transport::Request*>> sends;
  DDP_RETURN_IF_ERROR(RingReduceScatter(comm, transfers, args, &sends));
  DDP_RETURN_IF_ERROR(transfers.WaitAll());
  if (in_place && my_offset > 0 && my_count > 0) std::memmove(out, result, my_count * es);
  return absl::OkStatus();
}

}  // namespace ddp::collectives
