// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Engine: asynchronous, named collectives with negotiation, a response cache and tensor fusion.
//
// A training step submits its gradients by name as they become ready, possibly in a different
// order on every rank. The engine's background thread agrees with the other ranks on which names
// every rank has submitted, checks that they agree on what each one is (dtype, shape, op, scale
// factors, root, device), packs ready allreduces into one fusion buffer and reduces them with one
// collective. Every call returns a Handle at once; buffers must stay valid until it completes.
//
// Every call takes a Device: CUDA tensors (Device::Cuda) are negotiated like CPU ones, fused only
// with CUDA tensors, and reduced by the NCCL backend on its own stream, after the work queued on
// the given stream at submission; when the handle finishes, the results are in place on the GPU.
// Engine-allocated outputs (allgather, alltoall, reduce-scatter) are then in GPU memory owned by
// the handle (Handle::output_device() says which).
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
#include "absl/time/time.h"
#include "ddp/types.h"

namespace ddp {
namespace engine {
struct HandleState;
}

// The outcome of one asynchronous operation. Copyable; copies share the state.
class Handle {
 public:
  Handle() = default;
  explicit Handle(std::shared_ptr<engine::HandleState> state) : state_(std::move(state)) {}

  bool valid() const { return state_ != nullptr; }
  // True once the operation has finished, successfully or not. Never blocks.
  bool Poll() const;
  // True when the engine refused the submission itself, before it reached any other rank (a bad
  // argument, a name still in flight, a rank that has joined, a job already broken): the handle
  // is finished and Wait returns why. An operation that failed later says false.
  bool refused() const;
  // Blocks until the operation finishes; its status (the error names the tensor, the operation
  // and the rank(s) responsible).
  absl::Status Wait() const;
  // Like Wait, but gives up after `timeout` with DeadlineExceeded (the operation goes on).
  absl::Status WaitFor(absl::Duration timeout) const;
  // Runs `callback` with the final status once finished: at once in this thread if it already
  // is, otherwise in the engine's thread (keep it short; it must not wait on another handle).
  void OnComplete(std::function<void(const absl::Status&)> callback) const;

  // A CUDA allreduce submitted with Device::stream_ordered finishes (Poll, Wait, OnComplete) once
  // it is enqueued on the GPU. These give its result to the GPU work that needs it:
  // The CUDA device whose streams can wait for the result, or -1 (the result is in memory once
  // finished: CPU tensors, other collectives, CUDA tensors submitted without stream_ordered).
  int stream_ordered_device() const;
  // Waits as Wait does, then makes `stream` (a cudaStream_t; null: the legacy default stream)
  // wait on the GPU for the result; work queued there afterwards sees it. Without a
  // stream-ordered result, Wait alone.
  absl::Status WaitOnStream(void* stream) const;
  // True once finished and, for a stream-ordered result, done on the GPU too (then its memory
  // may be reused: never blocks).
  bool DoneOnDevice() const;
  // Waits until DoneOnDevice(), at most `timeout`, and returns it: the host's own wait for the
  // GPU, where no stream can be made to wait instead. (A caller that must stay responsive, to a
  // signal, waits in slices.)
  bool WaitDoneOnDevice(absl::Duration timeout) const;

  const std::string& name() const;
  // Allgather, alltoall and reduce-scatter allocate their output: valid once finished OK.
  const std::vector<int64_t>& output_shape() const;
  const void* output() const;
  void* mutable_output();
  size_t output_bytes() const;
  // Where output() lives: Device::kCpu or a CUDA device ordinal.
  int output_device() const;
  // Join: the rank that joined last.
  int join_last_rank() const;

 private:
  std::shared_ptr<engine::HandleState> state_;
};

// One member of a grouped allreduce: all members share dtype and op and always go together.
struct GroupMember {
  std::string name;
  const void* input = nullptr;
  void* output = nullptr;
  std::vector<int64_t> shape;
};

struct EngineStats {
  uint64_t cycles = 0;             // negotiation rounds (all process sets)
  uint64_t cache_hits = 0;         // tensors agreed through the cache bit vector
  uint64_t cache_misses = 0;       // tensors agreed by exchanging their full description
  uint64_t tensors = 0;            // tensors finished (OK or failed)
  uint64_t collectives = 0;        // collectives run for them (a fused batch counts once)
  uint64_t fused_tensors = 0;      // tensors that went through the fusion buffer
  uint64_t bytes = 0;              // bytes of tensors finished OK
  uint64_t sleeps = 0;             // times the engine went idle and slept until woken
  int64_t fusion_threshold = 0;    // in effect now (agreed by all ranks)
  double cycle_time_ms = 0;        // in effect now
  uint64_t parameter_changes = 0;  // autotune switches applied
  uint64_t parameter_digest = 0;   // hash of the sequence of (cycle, params) applied: equal
                                   // on every rank when they switched together
  bool autotune_converged = false;
  // Stragglers, per job rank (index = rank; empty until a round measured one): how long the
  // other ranks waited for this one, in seconds summed over the waiting ranks, and in how many
  // rounds it was the one they waited for. Every rank of a process set counts the same rounds
  // from the same agreed data, so the figures are the same on every rank that has run the same
  // rounds (a process set's are known to its members only). docs/observability.md.
  std::vector<double> waited_for_seconds;
  std::vector<uint64_t> waited_for_rounds;
  // Bytes this rank's collectives sent and received through the transport (TCP, shared memory's
  // point to point, libfabric, MPI), by the compression they ran with (index: Compression;
  // kNone: every uncompressed collective). The shared-memory allreduce, which reads its peers'
  // memory in place, sends nothing.
  std::array<uint64_t, kNumCodecs> sent_bytes{};
  std::array<uint64_t, kNumCodecs> received_bytes{};
  // Floats the engine keeps for error feedback: a residual per compressed tensor.
  uint64_t residual_floats = 0;
};

class Engine {
 public:
  static constexpr int kWorld = 0;  // the process set of all ranks
  virtual ~Engine() = default;

  // output = op over ranks of input, each scaled by `prescale` before and `postscale` after the
  // reduction (integers: in f64, truncated). In place when input == output. Average divides by
  // the set's size, joined ranks included (Options::join_average_contributors: by the ranks that
  // contributed). `compression` (every rank the same; floating-point tensors in CPU memory, sum
  // or average) encodes the data on the wire with error feedback: the engine keeps what the
  // encoding lost for the tensor's name and adds it to its next contribution
  // (docs/compression.md).
  virtual Handle AllreduceAsync(std::string name, const void* input, void* output, DataType type,
                                std::vector<int64_t> shape, ReduceOp op, double prescale = 1.0,
                                double postscale = 1.0, int process_set = kWorld,
                                Device device = {}, Compression compression = Codec::kNone) = 0;
  // All members are negotiated and reduced as one unit, in one fused collective.
  virtual Handle GroupedAllreduceAsync(std::string group, std::vector<GroupMember> members,
                                       DataType type, ReduceOp op, double prescale = 1.0,
                                       double postscale = 1.0, int process_set = kWorld,
                                       Device device = {},
                                       Compression compression = Codec::kNone) = 0;
  // Concatenates every rank's input along the first dimension (which may differ per rank; the
  // other dimensions must agree). Output: Handle::output().
  virtual Handle AllgatherAsync(std::string name, const void* input, DataType type,
                                std::vector<int64_t> shape, int process_set = kWorld,
                                Device device = {}) = 0;
  // In place: `buffer` on every rank receives root's. `root` is a rank of the process set.
  virtual Handle BroadcastAsync(std::string name, void* buffer, DataType type,
                                std::vector<int64_t> shape, int root, int process_set = kWorld,
                                Device device = {}) = 0;
  // The first dimension is split into equal blocks, block j going to rank j; the output (same
  // shape) holds block i from rank i.
  virtual Handle AlltoallAsync(std::string name, const void* input, DataType type,
                               std::vector<int64_t> shape, int process_set = kWorld,
                               Device device = {}) = 0;
  // Reduces, then splits the first dimension across ranks (the first dim % size ranks get one
  // row more); this rank's rows are the output.
  virtual Handle ReduceScatterAsync(std::string name, const void* input, DataType type,
                                    std::vector<int64_t> shape, ReduceOp op, double prescale = 1.0,
                                    double postscale = 1.0, int process_set = kWorld,
                                    Device device = {}) = 0;
  // As AllgatherAsync and ReduceScatterAsync, but the result goes straight into `output`, the
  // caller's CPU memory of `output_bytes`, which must hold exactly the result: no allocation and
  // no copy out (torch's all_gather_into_tensor and reduce_scatter_tensor). Handle::output() stays
  // empty; output_shape() is the result's. A result of another size (the ranks' first dimensions
  // differ from what the caller expected) fails the operation with INVALID_ARGUMENT on the ranks
  // whose output it does not fit, once the collective has run (so no rank waits on them).
  virtual Handle AllgatherIntoAsync(std::string name, const void* input, void* output,
                                    size_t output_bytes, DataType type, std::vector<int64_t> shape,
                                    int process_set = kWorld) = 0;
  virtual Handle ReduceScatterIntoAsync(std::string name, const void* input, void* output,
                                        size_t output_bytes, DataType type,
                                        std::vector<int64_t> shape, ReduceOp op,
                                        double prescale = 1.0, double postscale = 1.0,
                                        int process_set = kWorld) = 0;
  // This rank has no more data: until every rank has joined it takes part in the other ranks'
  // allreduces contributing the op's identity (counted by Average, as in Horovod, unless
  // DDP_JOIN_AVERAGE=contributors). Finishes when all
  // ranks have joined; Handle::join_last_rank() says which joined last.
  virtual Handle JoinAsync() = 0;

  // Creates a process set of the given ranks (of the whole job). Every rank must call it, with
  // the same ranks, in the same order relative to other AddProcessSet calls. Returns its id.
  virtual absl::StatusOr<int> AddProcessSet(std::vector<int> ranks) = 0;

  // Starts writing this rank's timeline (Chrome trace JSON, as DDP_TIMELINE does) to `path`,
  // created or truncated, with a marker per engine cycle if `mark_cycles`; a timeline being
  // written is finished first. StopTimeline finishes the file (valid JSON once it returns).
  // Horovod's start_timeline/stop_timeline; this rank only ('{rank}' in the path becomes its
  // number).
  virtual absl::Status StartTimeline(const std::string& path, bool mark_cycles) = 0;
  virtual void StopTimeline() = 0;

  virtual EngineStats stats() const = 0;
  // The flight recorder (DDP_FLIGHT_RECORDER_ENTRIES): this rank's last operations, each with
  // its process set, sequence numbers, name, kind, dtype, shapes, state (scheduled, started,
  // completed, failed), times and error, and totals per kind, as JSON (libddp's
  // flight-recorder format, docs/observability.md); `reason` says why it was taken.
  virtual std::string FlightRecord(const std::string& reason) const = 0;
  // Names this engine's job in flight records as a framework's group (torch.distributed's
  // process group: its name, description and its members' global ranks), under "group". A
  // process's flight record also holds, under "groups", the records of its other engines that
  // are so named (each torch group is a job of its own): one dump has all of a process's groups.
  virtual void NameGroup(std::string name, std::string desc, std::vector<int> global_ranks) = 0;
  // Writes it to `folder`/ddp_flight_recorder_rank_<rank>.json (the folder is created);
  // returns the file's path. The engine writes one itself when the job breaks, to
  // DDP_FLIGHT_RECORDER_DUMP.
  virtual absl::StatusOr<std::string> DumpFlightRecord(const std::string& folder,
                                                       const std::string& reason) const = 0;
  // What this rank is doing now, as a JSON object: the operations in flight (oldest first, at
  // most 8, each as in the flight record, with "age_seconds"), how many there are, the last one
  // finished, the totals per kind, the engine's counters and the error that broke the job, if
  // one did ("error"). What ddprun status shows and its metrics read (docs/observability.md).
  virtual std::string StatusJson() const = 0;
};

// Compression's error-feedback residuals over an elastic reset (docs/compression.md): the engines
// of this process that shut down after this call leave their residuals, and the next engine to
// start takes them (by process set and tensor name; a tensor whose size no longer matches starts
// afresh), so that what the last steps' encodings lost is sent after the reset. Called by
// ddp.elastic's reset between leaving one generation and joining the next.
void CarryCompressionResidualsOverReset();

}  // namespace ddp
