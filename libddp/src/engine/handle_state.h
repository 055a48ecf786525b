// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// HandleState: what a Handle shares with the engine thread that finishes the operation.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/output_pool.h"

namespace ddp::nccl {
struct DoneEvent;  // nccl/device.h
}  // namespace ddp::nccl

namespace ddp::engine {

struct HandleState {
  explicit HandleState(std::string n) : name(std::move(n)) {}

  // Called once, by the engine. The output fields must be set before.
  void Finish(const absl::Status& s);

  const std::string name;
  // The engine refused the submission itself (set before Finish, never changed after).
  bool refused = false;
  std::atomic<bool> done{false};
  std::mutex mu;
  std::condition_variable cv;
  absl::Status status;  // valid once done
  std::vector<std::function<void(const absl::Status&)>> callbacks;

  HostOutput output;  // CPU outputs
  // CUDA outputs (output_device >= 0): GPU memory, freed with the last reference.
  std::shared_ptr<void> device_output;
  size_t device_output_bytes = 0;
  int output_device = -1;
  std::vector<int64_t> output_shape;
  int int_result = -1;  // join: the last rank to join; add_process_set: the id
  // A stream-ordered CUDA allreduce (Device::stream_ordered): the event that completes with it
  // on the GPU, and its device. Set before Finish.
  std::shared_ptr<nccl::DoneEvent> device_done;
  int done_device = -1;
};

}  // namespace ddp::engine
