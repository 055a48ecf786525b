// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// ServerCore: one server's keys and the rules of the consistency modes, with no transport in
// sight: requests come in as (worker, request number, header, payload), answers go out as
// Outgoing records that the caller sends (server.cc over the transport, or straight into a
// colocated worker's buffers). Single-threaded: only the server's thread calls it (stats()
// excepted).
//
// Per partition it holds the value (shared, copied on write, so that answers in flight are sent
// from it without a copy), its version, each worker's last push sequence number and push count,
// the sync aggregations by step, the pulls waiting, and an async key's optimizer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ddp/ps.h"
#include "ps/protocol.h"

namespace ddp {
class ByteReader;  // common/bytes.h
}  // namespace ddp

namespace ddp::ps {

struct Outgoing {
  int worker = 0;
  uint64_t request = 0;
  ResponseHeader header;
  // Pulls: the answer's payload (the value, or `zeros` bytes of zeros for an error answer).
  bool has_payload = false;
  std::shared_ptr<const std::vector<char>> payload;
};

struct CoreConfig {
  int num_workers = 1;
  int server_index = 0;
  int num_servers = 1;
  std::vector<int> worker_ranks;  // each worker's job rank (errors blame it)
  // "worker 2 (rank 2 (host-b, 10.0.0.7:41234))"
  std::function<std::string(int worker)> worker_name;
  WorkerLossPolicy on_worker_loss = WorkerLossPolicy::kFail;
  // Pulls and inits waiting longer than this are answered with an error naming the workers they
  // wait on (before a worker's own transport timeout would blame the server).
  absl::Duration wait_limit = absl::Seconds(240);
  std::string checkpoint_dir;
  int64_t checkpoint_steps = 0;
  double checkpoint_seconds = 0;
  int64_t max_payload_bytes = int64_t{1} << 31;
};

class ServerCore {
 public:
  explicit ServerCore(CoreConfig config);

  // Loads this server's shard from the checkpoint directory, if there is one.
  absl::Status Restore();
  // The file this server checkpoints to ("" without a directory).
  std::string CheckpointPath() const;

  // `payload` holds header.bytes bytes for pushes and inits that carry one.
  void Handle(int worker, uint64_t request, const RequestHeader& header, const char* payload,
              std::vector<Outgoing>* out);
  // A worker finished (failed = false) or died (true, `why` naming it).
  void WorkerGone(int worker, const absl::Status& why, bool failed, std::vector<Outgoing>* out);
  // Answers waits past the limit and writes a checkpoint when one is due by time.
  void Tick(absl::Time now, std::vector<Outgoing>* out);
  bool AllWorkersGone() const;
  // Writes the shard now (atomically: a temporary file, fsync, rename, fsync of the directory).
  absl::Status WriteCheckpoint();

  ServerStats stats() const;

 private:
  struct Waiter {
    int worker = 0;
    uint64_t request = 0;
    int64_t clock = 0;
    uint64_t bytes = 0;
    absl::Time since;
    bool init = false;
    uint64_t lost = 0;  // rejoin inits: what the answer reports
  };
  struct Agg {
    std::shared_ptr<std::vector<char>> sum;
    std::vector<char> pushed;
    int count = 0;
  };
  struct Partition {
    PartitionConfig config;
    DataType type = DataType::kFloat32;
    size_t bytes = 0;
    bool has_value = false;
    std::shared_ptr<std::vector<char>> value;
    // The value before the last step (sync): the next step's sum reuses it once no answer in
    // flight holds it, instead of a fresh buffer per step.
    std::shared_ptr<std::vector<char>> spare;
    int64_t version = 0;
    uint32_t contributors = 0;
    std::unique_ptr<ServerOptimizer> optimizer;
    std::vector<uint64_t> last_seq;
    std::vector<int64_t> clock;
    std::map<int64_t, Agg> aggs;
    std::vector<Waiter> waiters;
    bool restored = false;
    // Sync, after a worker registered again with a restarted server: the version moved on to the
    // steps the workers had completed, and the value is not the sum of the current version (that
    // sum died with the previous process) until the next step completes.
    bool value_lost = false;
    bool rejoined = false;    // a worker registered it again with this restarted server
    bool registered = false;  // a worker's init has been accepted by this process
  };
  enum class WorkerState : uint8_t { kAlive, kDone, kFailed };

  void Init(int worker, uint64_t request, const RequestHeader& h, const char* payload,
            std::vector<Outgoing>* out);
  // Init's steps. The partition an init registers (made now: `fresh`), or null (with the error
  // answered) when its optimizer cannot be made or it differs from the registration held.
  Partition* PartitionToInit(int worker, uint64_t request, const RequestHeader& h, DataType type,
                             size_t bytes, bool* fresh, std::vector<Outgoing>* out);
  // A worker registers again a partition this restarted server has no value of: a sync key
  // goes on without one (true); an async key's is lost (false, with the error answered).
  bool RejoinWithoutValue(int worker, uint64_t request, const RequestHeader& h, bool fresh,
                          Partition& p, std::vector<Outgoing>* out);
  // Answers the init once the partition has a value, or holds it until worker 0's arrives.
  void AnswerOrHoldInit(int worker, uint64_t request, const RequestHeader& h, Partition& p,
                        std::vector<Outgoing>* out);
  // A worker registers partition `p` again with this (restarted) server, having had `acked` of
  // its pushes acknowledged; returns how many of those this server does not have.
  uint64_t Rejoin(int worker, Partition& p, uint64_t acked);
  // Applies a push; false (with the error answered) when refused.
  bool ApplyPush(int worker, uint64_t request, Partition& p, const RequestHeader& h,
                 const char* payload, bool answer_on_success, std::vector<Outgoing>* out);
  // A sync push added to its step's sum; false (with the error answered) for a step that
  // completed without it.
  bool AddToStep(int worker, uint64_t request, Partition& p, const RequestHeader& h,
                 const char* payload, uint64_t pull_bytes, std::vector<Outgoing>* out);
  void AnswerReady(uint32_t id, Partition& p, std::vector<Outgoing>* out);
  bool Ready(const Partition& p, const Waiter& w) const;
  void CompleteSteps(Partition& p);
  void Answer(const Partition& p, const Waiter& w, std::vector<Outgoing>* out);
  void Fail(int worker, uint64_t request, uint64_t pull_bytes, const absl::Status& status,
            std::vector<Outgoing>* out) const;
  std::vector<char>& Writable(Partition& p);
  // A push's gradient as the optimizer takes it: `payload` itself, or, for a compressed
  // partition, its decoding (into decoded_, until the next call).
  const char* Decoded(const Partition& p, const char* payload);
  int64_t MinLiveClock(const Partition& p) const;
  // The live workers `w` waits for.
  std::vector<int> Behind(const Partition& p, const Waiter& w) const;
  absl::Status ConfigError(const PartitionConfig& c) const;
  // Restore's reading of partition `i` of the checkpoint at `path`: its id and its state.
  absl::StatusOr<std::pair<uint32_t, Partition>> ReadCheckpointPartition(
      ByteReader& rd, uint32_t i, const std::string& path) const;
  void MaybeCheckpointBySteps();
  std::string Name(int worker) const;

  CoreConfig config_;
  std::map<uint32_t, Partition> parts_;
  std::vector<float> decoded_;
  std::vector<WorkerState> workers_;
  absl::Status sync_failure_;  // a worker died with on_worker_loss = kFail
  int64_t steps_ = 0;          // versions advanced on this server
  int64_t steps_at_checkpoint_ = 0;
  absl::Time last_checkpoint_ = absl::Now();
  mutable std::mutex stats_mu_;
  ServerStats stats_;
};

}  // namespace ddp::ps
