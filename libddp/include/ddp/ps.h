// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Parameter-server mode: workers push gradients and pull values; servers hold the keys.
//
// A parameter-server job is a libddp job (DDP_RANK, DDP_SIZE, the rendezvous, any transport)
// whose ranks take roles: with DDP_PS_SERVERS=k (ddprun --servers k) the last k ranks are
// servers and the others workers; without it every rank is both (colocated: a server thread in
// each worker process). Its transport isolates a failed peer (a worker's death does not end the
// job), so it is a job of its own: a process uses either a ParameterServer or a Context.
//
// Keys are registered by every worker in the same order, with a dtype, a shape and the worker 0's
// initial value; a key larger than PsOptions::partition_bytes is split into partitions (and one
// of 256 KiB or more into at least one per server, so that no large tensor makes a hot server),
// and partitions are placed on servers by a size-balanced assignment (each goes to the server
// holding the fewest bytes so far) that every worker computes alike. Consistency is chosen per key
// (docs/parameter-server.md states each precisely):
//   - kSync: the value for step t is the sum of exactly one push per worker for that step; a pull
//     after a worker's t-th push waits for it (the servers only sum; workers run the optimizer);
//   - kAsync: every push is applied at once by the server's optimizer (SGD with momentum, Adam, or
//     one registered with RegisterOptimizer); a pull returns the latest value; with staleness s
//     >= 0 a worker that has pushed c times pulls only once every live worker has pushed at
//     least c - s times.
// Every accepted push is applied exactly once: pushes carry a sequence number per worker and
// partition, and a resent one is acknowledged without being applied again.
//
// Push, Pull and PushPull are asynchronous: they return a Handle at once, and the caller's
// buffers must stay valid and untouched until the handle's Wait() returns. Errors name the key,
// the server and the rank responsible (ddp/errors.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "ddp/options.h"
#include "ddp/types.h"

namespace ddp::ps {

enum class Consistency : uint8_t { kSync = 0, kAsync = 1 };

// The server-side optimizer of an async key. `name`: "sgd" (with momentum, dampening 0,
// optionally Nesterov, as torch.optim.SGD), "adam" (as torch.optim.Adam), "sum" (value +=
// gradient: an accumulator), or one registered with RegisterOptimizer. Gradients are multiplied by
// gradient_scale first (e.g. 1/num_workers to average).
struct OptimizerConfig {
  std::string name = "sgd";
  double learning_rate = 0.01;
  double momentum = 0.0;
  bool nesterov = false;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0.0;
  double gradient_scale = 1.0;
};

struct KeyOptions {
  Consistency consistency = Consistency::kSync;
  // Async keys: -1 = unbounded; s >= 0 = bounded staleness s.
  int staleness = -1;
  OptimizerConfig optimizer;  // async keys
  // The codec of this key's pushes (float32 keys): bf16, fp16 or int8, with error feedback
  // (the residual of each partition kept by the worker and added to its next push); the server
  // decodes each push into float32 before it sums or applies it. Pulls carry the value as it
  // is. PowerSGD is refused: its factors are agreed among the workers by allreduces, and a
  // server only sums. docs/compression.md.
  Compression compression;
};

// A server-side optimizer for one partition (floating dtypes; f16 and bf16 arrive as f32).
// Its state must round-trip through Save/Load (checkpoints).
class ServerOptimizer {
 public:
  virtual ~ServerOptimizer() = default;
  virtual void Apply(float* value, const float* gradient, size_t count) = 0;
  virtual void Apply(double* value, const double* gradient, size_t count) = 0;
  virtual std::string SaveState() const = 0;
  virtual absl::Status LoadState(absl::string_view state) = 0;
};
using OptimizerFactory =
    std::function<std::unique_ptr<ServerOptimizer>(const OptimizerConfig& config, size_t count)>;
// Makes `name` available to the servers of this process (call before Create; names up to 31
// characters). The built-ins cannot be replaced.
absl::Status RegisterOptimizer(const std::string& name, OptimizerFactory factory);

enum class WorkerLossPolicy { kFail, kContinue };

struct PsOptions {
  // DDP_PS_SERVERS: the last `num_servers` ranks serve only; 0 = colocated (every rank serves
  // and works).
  int num_servers = 0;
  // DDP_PS_PARTITION_BYTES: keys larger than this are split (about 4 MB, as BytePS).
  int64_t partition_bytes = 4 << 20;
  // DDP_PS_CREDIT_BYTES: beyond two requests in flight (sent, not yet answered) at a server, a
  // worker sends more there only while their bytes stay within this; the rest wait in the
  // worker, in order (0 = no limit). A worker that is ahead at one server thus gives its link
  // to the servers where it is behind, and a server's link goes to the workers it waits for
  // (BytePS's scheduling credit, with small keys let through). kCreditAcrossHosts (the
  // default): 512 KiB at servers on other hosts, no limit within a host (shared memory has no
  // link to share, and every wait for credit costs a thread's wake-up).
  static constexpr int64_t kCreditAcrossHosts = -1;
  int64_t credit_bytes = kCreditAcrossHosts;
  // DDP_PS_CHECKPOINT_DIR, DDP_PS_CHECKPOINT_STEPS, DDP_PS_CHECKPOINT_SECONDS: each server writes
  // its shard there (atomically) every that many steps of its keys or seconds, whichever comes
  // first (0 = never by that measure), and once more when the job ends; it restores from there
  // on start.
  std::string checkpoint_dir;
  int64_t checkpoint_steps = 0;
  double checkpoint_seconds = 0;
  // DDP_PS_ON_WORKER_LOSS=fail|continue: what a sync key does when a worker dies (async keys
  // always go on with the others).
  WorkerLossPolicy on_worker_loss = WorkerLossPolicy::kFail;
  // DDP_PS_SERVER_RESTART_SECONDS (set by `ddprun --restart-servers`): when a server (of
  // DDP_PS_SERVERS) fails, workers wait up to this long for its new process to rejoin the job
  // (DDP_REJOIN, over TCP), register their keys with it again and send it again what the old
  // one had not answered; training goes on. The restarted server restores its checkpoint: what
  // its previous process acknowledged after that is lost (docs/parameter-server.md). 0: a
  // failed server is an error naming it.
  double server_restart_seconds = 0;

  static absl::StatusOr<PsOptions> FromEnvironment();
};

class HandleState;

// An operation in flight. Copyable; an empty (default) handle is done and OK.
class Handle {
 public:
  Handle() = default;
  explicit Handle(std::shared_ptr<HandleState> state) : state_(std::move(state)) {}
  // Blocks until the operation finishes; its outcome.
  absl::Status Wait();
  // Whether it has finished (Wait then returns at once).
  bool Test() const;
  // After Wait, for a pull: the key's version (sync: completed steps; async: applied pushes) and
  // how many workers' pushes the value sums (sync; fewer than num_workers() after a loss under
  // kContinue). The least over the key's partitions.
  int64_t version() const;
  int contributors() const;

 private:
  std::shared_ptr<HandleState> state_;
};

// What a server has done (the servers of this process; for tests and benchmarks).
struct ServerStats {
  int64_t pushes_applied = 0;
  int64_t duplicate_pushes = 0;
  int64_t pulls_answered = 0;
  // The largest (pushes of the pulling worker) - (fewest pushes of a live worker) seen when a
  // pull of a bounded-staleness key was answered.
  int64_t max_staleness_seen = 0;
  int64_t checkpoints_written = 0;
  int64_t keys_restored = 0;
  int64_t bytes_held = 0;
  // A restarted server (rejoined): pushes its previous process acknowledged after its last
  // checkpoint, which the workers reported when they registered again (lost: at most one
  // checkpoint interval), and the workers that registered again.
  int64_t pushes_lost = 0;
  int64_t rejoins = 0;
};

// What a worker has pushed and pulled (its payloads; a push sent again to a restarted server
// counts once).
struct WorkerStats {
  // Per codec (index: ddp::Codec): the bytes its pushes carried (encoded), and the bytes of the
  // gradients they encoded.
  std::array<int64_t, kNumCodecs> bytes_pushed{};
  std::array<int64_t, kNumCodecs> bytes_pushed_decoded{};
  int64_t pushes = 0;  // partitions pushed
  int64_t bytes_pulled = 0;
  // Floats of error-feedback residual it holds (4 bytes each): compressed keys' partitions.
  int64_t residual_floats = 0;
};

class ParameterServerImpl;

class ParameterServer {
 public:
  // Joins the job (as Context::Create does) and takes this rank's role.
  static absl::StatusOr<std::unique_ptr<ParameterServer>> Create(const Options& options,
                                                                 const PsOptions& ps_options);
  static absl::StatusOr<std::unique_ptr<ParameterServer>> CreateFromEnvironment();
  ~ParameterServer();
  ParameterServer(const ParameterServer&) = delete;
  ParameterServer& operator=(const ParameterServer&) = delete;

  int rank() const;
  int size() const;
  bool is_worker() const;
  bool is_server() const;
  int num_workers() const;
  int num_servers() const;
  // This rank's index among the workers / servers (-1 when it has no such role).
  int worker_index() const;
  int server_index() const;
  // The job rank of server `server` / worker `worker`.
  int ServerRank(int server) const;
  int WorkerRank(int worker) const;

  // Server-only ranks: serves until every worker has finished or died, writes the last
  // checkpoint and returns. Returns at once on a rank that is a worker too.
  absl::Status Serve();

  // Workers. Registers a key (every worker, same order, same arguments; `initial` is read on
  // worker 0 only, and may be null elsewhere) and returns its id. Blocks until its servers have
  // it; a key restored from a checkpoint keeps the checkpoint's value and version.
  absl::StatusOr<int> Register(const std::string& name, DataType type,
                               absl::Span<const int64_t> shape, const void* initial,
                               const KeyOptions& options);
  // The key's element count and bytes, and the server bytes each server holds (placement).
  size_t KeyCount(int key) const;
  std::vector<int64_t> ServerBytes() const;

  // `gradient` holds the key's elements.
  Handle Push(int key, const void* gradient);
  // Fills `out`: sync keys, once this worker's latest push's step is complete; async keys, the
  // latest value (bounded: once the slowest worker is within the staleness bound).
  Handle Pull(int key, void* out);
  // Push then Pull in one round trip per partition. `out` may be `gradient` (in place).
  Handle PushPull(int key, const void* gradient, void* out);

  // Tells the servers this worker is done (after waiting for its operations), and on a
  // colocated rank serves until every other worker is done too. Idempotent; the destructor
  // calls it.
  absl::Status Finish();

  ServerStats server_stats() const;
  WorkerStats worker_stats() const;
  // Requests of this worker that waited for a server's credit (PsOptions::credit_bytes).
  int64_t requests_deferred() const;
  // Server restarts this worker recovered from, and its pushes that the restarted servers
  // reported lost (acknowledged by the previous process after its last checkpoint).
  int64_t servers_recovered() const;
  int64_t pushes_lost() const;
  // Of those, the pushes of `key` (its partition that lost the most).
  int64_t pushes_lost(int key) const;

 private:
  explicit ParameterServer(std::unique_ptr<ParameterServerImpl> impl);
  std::unique_ptr<ParameterServerImpl> impl_;
};

}  // namespace ddp::ps
