// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The pipelined ring: reduce-scatter and all-gather over per-rank blocks, segmented so that
// sending, receiving and reducing overlap (each segment is forwarded as soon as it is reduced).
// Every rank sends and receives (N-1)/N of the data per phase, whatever N is.
#pragma once

#include <cstddef>
#include <functional>

#include "collectives/communicator.h"

namespace ddp::collectives {

struct RingReduceScatterArgs {
  const char* in = nullptr;  // the whole input, blocks.total elements
  Blocks blocks;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  uint32_t step_base = 0;
  // Where the partial sum of block `block` received at `step` is kept (block start). The last
  // step's block is this rank's: its location holds the result.
  std::function<char*(int step, int block)> accumulator;
  // Called as each segment of this rank's block becomes final (element range within the block).
  std::function<void(uint32_t segment, size_t first, size_t count)> on_final;
  // Called after each reduced segment (lets allreduce post all-gather receives early).
  std::function<void()> after_segment;
};

// Runs the reduce-scatter phase. `sends[k][j]` receives the request of the step-k send of
// segment j so that the caller can tell when a buffer region is free again.
absl::Status RingReduceScatter(Communicator& comm, Transfers& transfers,
                               const RingReduceScatterArgs& args,
                               std::vector<std::vector<transport::Request*>>* sends);

struct RingAllgatherArgs {
  char* out = nullptr;  // blocks.total elements; this rank's block already in place
  Blocks blocks;
  size_t element_size = 4;
  uint32_t step_base = 0;
  bool first_sends_posted = false;  // the step-0 sends of this rank's block are already out
  // Called before the receive for (step, segment) is posted; may wait for that region to be free.
  std::function<absl::Status(int step, uint32_t segment)> before_receive;
  // Receives the caller already posted, by step then segment (a prefix of the full order).
  std::vector<std::vector<transport::Request*>> posted;
};

absl::Status RingAllgather(Communicator& comm, Transfers& transfers, const RingAllgatherArgs& args);

// Segments of a block of `count` elements.
inline uint32_t SegmentsOf(size_t count, size_t segment_elements) {
  return static_cast<uint32_t>((count + segment_elements - 1) / segment_elements);
}
size_t SegmentElements(const Communicator& comm, DataType type);

}  // namespace ddp::collectives
