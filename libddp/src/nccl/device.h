// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// nccl/: the GPU path. Collectives on CUDA memory with NCCL communicators, on a stream of its own.
//
// This header is all the rest of the library sees of CUDA and NCCL: no CUDA type appears here,
// and only the sources of this folder include CUDA headers: they form libddp_nccl.so, which
// loader.cc (in libddp) opens on first use; without it every function below answers a clear
// error (Unimplemented), so libddp never depends on CUDA at run time and callers never #ifdef.
//
// Threads: RecordReady may be called from any thread (the submitting one); the collectives from
// one thread, the engine's. Every collective enqueues its work on the backend's stream after the
// inputs' ready events, then waits for it to finish while polling NCCL's asynchronous error, the
// job's health and a deadline; on any of those it aborts the communicators (ncclCommAbort) and
// that error, naming the operation, becomes the backend's for good (a NCCL communicator cannot
// be reused after an abort).
//
// Stream-ordered allreduces (every input submitted with Device::stream_ordered, as ddp.torch
// does) do not wait: Allreduce returns once the work is enqueued, with an event that completes
// with it, and the caller makes its own stream wait for that event (StreamWait) when it needs
// the result, as torch.distributed's NCCL work does. The host never blocks on the GPU then, so
// it can queue the next step's kernels while the last gradients are reduced. A watcher thread
// keeps polling those in flight (NCCL's asynchronous error, the job's health, the deadline) and
// aborts as above; the error is logged at once and answers the backend's next call.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/wait.h"
#include "ddp/types.h"

namespace ddp::nccl {

// True when this build has the NCCL backend.
bool Built();
// CUDA devices visible to this process (0 without a driver, a GPU, or NCCL support).
int DeviceCount();
// "NCCL 2.28.9, CUDA runtime 13.0, driver 13.0" or why there is none.
std::string VersionString();

// Marks the moment a tensor was submitted on its producer's stream; opaque outside nccl/.
struct ReadyEvent;
using ReadyPtr = std::shared_ptr<ReadyEvent>;
// Completes when a stream-ordered collective's results are in; opaque outside nccl/.
struct DoneEvent;
using DonePtr = std::shared_ptr<DoneEvent>;

struct BackendOptions {
  absl::Duration timeout = absl::Seconds(300);  // a collective taking longer is aborted
  int default_device = 0;  // used when this rank must join a collective before any submission
  // The job's CPU-side health (e.g. the transport's): an error aborts the GPU collective in flight
  // instead of letting it wait on a peer that is gone.
  std::function<absl::Status()> health;
  // Called (from the watcher thread, no lock held) when a stream-ordered collective failed after
  // its handle finished: breaks the job (the transport's Abort), so that nobody waits for it.
  std::function<void(const absl::Status&)> on_failure;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // Any thread. Checks that `device` is this rank's device (the first CUDA device submitted
  // fixes it) and records an event on `stream` (a cudaStream_t, null: the legacy default one).
  // `stream_ordered`: the caller waits for the result on a stream (see above), not the host.
  virtual absl::StatusOr<ReadyPtr> RecordReady(int device, void* stream, bool stream_ordered) = 0;

  // --- engine thread ---
  // Sends `bytes` at `data` from the set's first member to the others (over the CPU transport).
  using IdBroadcast = std::function<absl::Status(void* data, size_t bytes)>;
  // Creates the set's NCCL communicator on first use; every member calls it at the same point.
  virtual absl::Status EnsureComm(int set, int size, int index, const IdBroadcast& broadcast) = 0;

  // One tensor of a fused allreduce. A null input contributes the op's identity (a joined rank).
  struct Piece {
    const void* input = nullptr;
    void* output = nullptr;
    size_t count = 0;
    double prescale = 1.0;
    double postscale = 1.0;
    ReadyPtr ready;
  };
  // Every output = op over ranks of its input (Average: the sum divided by `active`, with the
  // postscale; for integers truncated). One piece goes in place without a copy; several are
  // packed into the device fusion buffer and reduced by one NCCL call. Returns once the results
  // are in (null), or, when every piece with an input is stream-ordered, once the work is
  // enqueued, with the event that completes with it.
  virtual absl::StatusOr<DonePtr> Allreduce(int set, const std::vector<Piece>& pieces,
                                            DataType type, ReduceOp op, int active) = 0;
  virtual absl::Status Broadcast(int set, void* buffer, size_t count, DataType type, int root,
                                 const ReadyPtr& ready) = 0;
  // --- engine thread: a CUDA tensor staged through host memory (the engine's compressed
  // allreduces run their codecs on the CPU). On a stream of the backend's own for copies (it
  // waits for no other work on the device): once `ready` (the submission's event on the
  // producer's stream) has completed, `bytes` from the device to `host`; and back. Each returns
  // once its copy is complete (so a handle that finishes after StageIn has its result in place
  // for any stream), polling as the collectives do: the job's health, DDP_TIMEOUT_SECONDS.
  virtual absl::Status StageOut(void* host, const void* device, size_t bytes,
                                const ReadyPtr& ready) = 0;
  virtual absl::Status StageIn(void* device, const void* host, size_t bytes) = 0;
  // Device memory owned by the returned pointer (null when empty).
  using DeviceBuffer = std::shared_ptr<void>;
  // Rank i's `counts[i]` elements, concatenated in rank order.
  virtual absl::StatusOr<DeviceBuffer> Allgatherv(int set, const void* input,
                                                  const std::vector<size_t>& counts, DataType type,
                                                  const ReadyPtr& ready) = 0;
  // Block j (`count` elements) of the input goes to rank j; block i of the output is rank i's.
  virtual absl::StatusOr<DeviceBuffer> Alltoall(int set, const void* input, size_t count,
                                                DataType type, const ReadyPtr& ready) = 0;
  // Reduces over ranks, keeps this rank's block (counts[i] elements for rank i).
  virtual absl::StatusOr<DeviceBuffer> ReduceScatterv(int set, const void* input,
                                                      const std::vector<size_t>& counts,
                                                      DataType type, ReduceOp op, double prescale,
                                                      double postscale, int active,
                                                      const ReadyPtr& ready) = 0;
  // The device this rank uses (-1 before the first submission or collective).
  virtual int device() const = 0;
};

// A backend, or Unimplemented (built without NCCL) / FailedPrecondition (no usable GPU).
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options);

// Whether the collective behind `done` has finished on the GPU (true for null).
bool DoneOnDevice(const DonePtr& done);
// How a GPU event and NCCL's state are polled: 50 rounds that yield the core (of the order of
// 100 us, the query included), then sleeps from 20 us doubling to 200 us. A collective's end is
// seen at most ~200 us late (plus the kernel's timer slack): the engine's next collective and the
// caller's synchronize wait on it, so a coarser sleep delays every step by up to that much, while
// 200 us sleeps cost a waiting thread next to nothing.
inline constexpr Backoff::Policy kDevicePollBackoff{0, 50, absl::Microseconds(20),
                                                    absl::Microseconds(200)};
// Makes `stream` (a cudaStream_t; null: the legacy default one) wait for `done` (no-op for null).
absl::Status StreamWait(const DonePtr& done, void* stream);

// For tests and benchmarks: plain device memory and copies (synchronous).
absl::StatusOr<std::shared_ptr<void>> DeviceAlloc(int device, size_t bytes);
absl::Status CopyToDevice(void* dst, const void* src, size_t bytes);
absl::Status CopyToHost(void* dst, const void* src, size_t bytes);

}  // namespace ddp::nccl
