// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// What the engine keeps per submission and per process set, shared by its parts: the
// negotiator (negotiator.h), the executor (executor.h) and the loop (engine.h).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "collectives/communicator.h"
#include "ddp/engine.h"
#include "engine/handle_state.h"
#include "engine/message.h"
#include "engine/response_cache.h"
#include "nccl/device.h"
#include "transport/subset.h"

namespace ddp::engine {

// One submission waiting on this rank.
struct LocalOp {
  enum class State { kNew, kAnnounced, kCached, kReady };
  std::string name;
  int process_set = 0;
  TensorMeta meta;
  std::vector<const void*> inputs;  // one per shape
  std::vector<void*> outputs;       // allreduce/broadcast: one per shape; and below
  // Allgather and reduce-scatter into the caller's memory (outputs[0]) of this many bytes;
  // without it the engine allocates the output.
  std::optional<size_t> into_bytes;
  std::shared_ptr<HandleState> handle;
  nccl::ReadyPtr ready;  // CUDA tensors: when the inputs are ready on their stream
  absl::Time submitted;
  int64_t submitted_us = 0;  // timeline clock
  uint64_t flight_id = 0;    // its flight recorder entry (0: none)
  State state = State::kNew;
  int slot = -1;
};

// A tensor every rank of the set has agreed to run now (or to fail, when error is set).
struct Response {
  std::string name;
  TensorMeta meta;
  std::vector<int64_t> first_dims;  // allgather: each member's first dimension
  absl::Status error;
  bool cached = false;
  int64_t ready_us = 0;        // timeline clock: when the round that agreed it ended
  int64_t round_start_us = 0;  // ... and began (the engine sets it)
};

// What one rank said about a tensor not (yet) agreed: kept identically on every rank.
struct TableEntry {
  std::vector<std::optional<TensorMeta>> metas;  // per set member
  absl::Time first_seen;
  absl::Time last_warned;
  bool stall_fail_sent = false;
  // An entry exists because some member described the tensor: the first such description.
  const TensorMeta& FirstMeta() const {
    for (const auto& m : metas) {
      if (m) return *m;
    }
    return *metas.front();  // unreachable
  }
};

// One process set as negotiation sees it: this rank's submissions, and the agreed state, which is
// identical on every member (each applies the same rounds in the same order).
struct SetState {
  int id = 0;
  std::vector<int> members;  // job ranks, increasing
  int my_index = -1;         // -1: this rank is not a member
  ResponseCache cache;
  bool capacity_agreed = false;
  // This rank's submissions, by name, and those not yet described to the others.
  absl::flat_hash_map<std::string, std::unique_ptr<LocalOp>> pending;
  std::vector<LocalOp*> fresh;
  // Agreed state.
  std::vector<std::string> table_order;
  absl::flat_hash_map<std::string, TableEntry> table;
  std::vector<bool> was_joined;
  std::vector<std::string> stall_fail_outbox;  // the set's first member only
  // How long this rank's own submissions that became ready in its last round waited (us + 1;
  // 0: none), told to the others in the next round (negotiator.cc: who waited for whom).
  uint32_t wait_report_us = 0;
  uint64_t waits_reported = 0;  // rounds whose reports said something (the first is not counted)
};

// A process set with what runs its collectives.
struct ProcessSet : SetState {
  std::unique_ptr<transport::SubsetTransport> subset;
  std::unique_ptr<collectives::Communicator> comm;
};

// The engine's counters, from every part and thread.
class StatsBox {
 public:
  template <class Fn>
  void Update(Fn&& fn) {
    std::lock_guard<std::mutex> lock(mu_);
    fn(stats_);
  }
  EngineStats Get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  mutable std::mutex mu_;
  EngineStats stats_;
};

}  // namespace ddp::engine
