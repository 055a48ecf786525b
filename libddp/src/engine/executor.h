// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Executor: runs the tensors a round agreed on. It forms the fusion batches (every member forms
// the same ones from the same list), then hands each batch or tensor to the operations of the
// memory it lives in, from a table by device ("first enabled wins", as Horovod keeps one list of
// operation implementations per device): CPU memory goes to libddp's collectives, CUDA memory to
// the NCCL backend. What both share is here: finishing handles, the timeline's phases, counters.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/flight_recorder.h"
#include "engine/state.h"
#include "engine/timeline.h"

namespace ddp::reduce {
class CombineTimer;
}  // namespace ddp::reduce

namespace ddp::engine {

// Per-rank element counts of an allgather or reduce-scatter, and this rank's output shape: the
// same for every device.
struct SplitLayout {
  std::vector<size_t> counts;
  std::vector<int64_t> output_shape;
};
// Every member's first dimension concatenated (first_dims from the negotiation).
SplitLayout AllgatherLayout(const TensorMeta& meta, const std::vector<int64_t>& first_dims);
// The first dimension split over n ranks, the first dim % n ranks one row more; `me`'s rows.
SplitLayout ReduceScatterLayout(const TensorMeta& meta, int n, int me);

class Executor;

// What runs agreed operations on one kind of memory.
class DeviceOperations {
 public:
  virtual ~DeviceOperations() = default;
  // A batch of allreduces with the same dtype, op and device, fused or alone (`active`: the
  // members that have not joined; a joined rank's share is the identity). Finishes them.
  virtual absl::Status Allreduce(ProcessSet& set, const std::vector<Response*>& batch,
                                 int active) = 0;
  // One allgather, broadcast, alltoall or reduce-scatter of this rank's `op`. Finishes it.
  virtual absl::Status Run(ProcessSet& set, const Response& r, LocalOp& op) = 0;
};

// The tensors of a batch as a collective's slice names them: "a, b, c, d and 6 more".
std::string TensorNames(const std::vector<Response*>& batch);

class Executor {
 public:
  // `timeline` may be null. `finished(set, name)`: told of every finished submission (the
  // engine forgets its name then).
  Executor(Timeline* timeline, StatsBox* stats, FlightRecorder* recorder, int64_t fusion_threshold,
           std::function<void(int set, const std::string& name)> finished);

  // The operations for tensors in memory `device` (kCpuMemory, kCudaMemory).
  void SetOperations(int32_t device, std::unique_ptr<DeviceOperations> operations);
  void set_fusion_threshold(int64_t bytes) { fusion_threshold_ = bytes; }

  // Runs (or fails) every response, in order, batching compatible allreduces. (Process sets
  // are the engine's: it takes their responses out first.) The flight recorder sees each of
  // this rank's submissions start and finish.
  absl::Status Execute(ProcessSet& set, std::vector<Response>& responses, int active);
  // Bytes run since the last call (autotune's measure).
  uint64_t TakeExecutedBytes() { return std::exchange(executed_bytes_, 0); }

  // --- for the operations ---
  // This rank's submission of `name` (null: it has joined and contributes the identity).
  LocalOp* Local(ProcessSet& set, const std::string& name);
  // Finishes this rank's submission of `name` with `status`.
  void Finish(ProcessSet& set, const std::string& name, absl::Status status);
  // Whether a timeline is being written (then the operations time their parts).
  bool timing() const { return timeline_ != nullptr && timeline_->active(); }
  int64_t Now() const {
    return timeline_ != nullptr && timeline_->active() ? timeline_->NowMicros() : 0;
  }
  void Phase(const std::string& name, const char* phase, int64_t start, int64_t end,
             const std::vector<std::pair<std::string, std::string>>& args = {});
  // A collective's run on the timeline's "collectives" track, split into TRANSFER and REDUCE
  // slices by `timer` (this thread's reduction kernels; null: reduced out of libddp's sight,
  // one slice).
  void Collective(const std::string& name, int64_t start, int64_t end,
                  const std::vector<std::pair<std::string, std::string>>& args,
                  const reduce::CombineTimer* timer);
  // WAIT_FOR_PEERS (submitted until the round that agreed it began), NEGOTIATE (that round) and
  // QUEUE (agreed to started) of a local submission.
  void Waited(const LocalOp& op, const Response& r, int64_t started);
  // A collective ran: `tensors` of them fused, `bytes` moved.
  void Ran(size_t tensors, uint64_t bytes, bool fused);
  // What a collective with `compression` sent and received through the transport.
  void Wire(Compression compression, uint64_t sent, uint64_t received);
  // How many floats error feedback keeps now.
  void Residuals(uint64_t floats);

 private:
  Timeline* const timeline_;
  StatsBox* const stats_;
  FlightRecorder* const recorder_;
  int64_t fusion_threshold_;
  std::function<void(int, const std::string&)> finished_;
  std::array<std::unique_ptr<DeviceOperations>, 2> operations_;  // [0] CPU, [1] CUDA
  uint64_t executed_bytes_ = 0;
};

}  // namespace ddp::engine
