// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Inside libddp_nccl.so: what its sources share. nccl_backend.cc holds the backend's
// machinery (the device, stream and communicators, waiting for the GPU while watching for
// trouble, failing for good, the watcher of stream-ordered collectives), collectives.cc the
// collectives themselves, plugin.cc the table the plugin exports (plugin.h).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "nccl/device.h"

namespace ddp::nccl {

struct ReadyEvent {
  cudaEvent_t event = nullptr;
  int device = -1;
  bool stream_ordered = false;
  ~ReadyEvent() {
    if (event != nullptr) cudaEventDestroy(event);
  }
};

struct DoneEvent {
  cudaEvent_t event = nullptr;
  int device = -1;
  // Set (error first, then the flag) when the backend failed while the collective was in
  // flight: its result is not to be trusted, and waiting for it answers the error.
  absl::Status error;
  std::atomic<bool> failed{false};
  ~DoneEvent() {
    if (event != nullptr) cudaEventDestroy(event);  // CUDA frees it once it has completed
  }
};

namespace impl {

absl::Status CudaError(cudaError_t e, absl::string_view what);

#define DDP_CUDA_CHECK(expr, what)                                                        \
  do {                                                                                    \
    const cudaError_t ddp_cuda_e = (expr);                                                \
    if (ddp_cuda_e != cudaSuccess) return ::ddp::nccl::impl::CudaError(ddp_cuda_e, what); \
  } while (0)

// Inside the backend's collectives: any CUDA error fails the backend for good (Fail aborts the
// communicators and drains the stream, so nothing queued writes to a caller's buffer later).
#define DDP_CUDA_FAIL(expr, what)                                                               \
  do {                                                                                          \
    const cudaError_t ddp_cuda_e = (expr);                                                      \
    if (ddp_cuda_e != cudaSuccess) return Fail(::ddp::nccl::impl::CudaError(ddp_cuda_e, what)); \
  } while (0)
#define DDP_RETURN_OR_FAIL(expr)         \
  do {                                   \
    absl::Status ddp_s = (expr);         \
    if (!ddp_s.ok()) return Fail(ddp_s); \
  } while (0)

// Sets the calling thread's current device for a scope and restores the previous one.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) cudaSetDevice(device);
  }
  ~DeviceScope() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
};

struct Comm {
  ncclComm_t comm = nullptr;
  int size = 0;
  int index = 0;
  int set = 0;
};

class NcclBackend final : public Backend {
 public:
  explicit NcclBackend(BackendOptions options) : options_(std::move(options)) {}
  ~NcclBackend() override;

  absl::StatusOr<ReadyPtr> RecordReady(int device, void* stream, bool stream_ordered) override;
  absl::Status EnsureComm(int set, int size, int index, const IdBroadcast& broadcast) override;
  absl::StatusOr<DonePtr> Allreduce(int set, const std::vector<Piece>& pieces, DataType type,
                                    ReduceOp op, int active) override;
  absl::Status Broadcast(int set, void* buffer, size_t count, DataType type, int root,
                         const ReadyPtr& ready) override;
  absl::StatusOr<DeviceBuffer> Allgatherv(int set, const void* input,
                                          const std::vector<size_t>& counts, DataType type,
                                          const ReadyPtr& ready) override;
  absl::StatusOr<DeviceBuffer> Alltoall(int set, const void* input, size_t count, DataType type,
                                        const ReadyPtr& ready) override;
  absl::StatusOr<DeviceBuffer> ReduceScatterv(int set, const void* input,
                                              const std::vector<size_t>& counts, DataType type,
                                              ReduceOp op, double prescale, double postscale,
                                              int active, const ReadyPtr& ready) override;
  int device() const override { return device_.load(); }
  absl::Status StageOut(void* host, const void* device, size_t bytes,
                        const ReadyPtr& ready) override;
  absl::Status StageIn(void* device, const void* host, size_t bytes) override;

 private:
  // staging.cc: the copy stream and its event (made on first use), and a host wait for an event
  // that polls the job's health and the deadline.
  absl::Status PrepareCopies();
  absl::Status AwaitEvent(cudaEvent_t event, absl::string_view what);
  // The engine thread's device, stream and done event (the first call fixes them).
  absl::Status Prepare();
  absl::StatusOr<Comm*> Begin(int set, const char* what);
  absl::Status WaitReady(const ReadyPtr& ready);
  // A NCCL call's result: ncclInProgress (non-blocking communicators) is polled to the end.
  absl::Status Issue(Comm& c, ncclResult_t r, absl::string_view what);
  // Records the done event and waits for it (and for nothing else to go wrong).
  absl::Status Complete(Comm& c, absl::string_view what);
  // An allreduce's end: Complete, or for stream-ordered pieces an event handed to the watcher.
  absl::StatusOr<DonePtr> Finished(Comm& c, const std::vector<Piece>& pieces,
                                   absl::string_view what);
  // The watcher thread: polls the stream-ordered collectives in flight, aborts on trouble.
  void Watch();
  // Checks the job's health and the deadline while polling; an error from here aborts.
  absl::Status Check(Comm& c, absl::Time deadline, absl::string_view what);
  // While a collective on `c` runs on the GPU: NCCL's asynchronous error, then Check.
  absl::Status StillRunning(Comm& c, absl::Time deadline, absl::string_view what);
  absl::Status Fail(absl::Status status);
  absl::Status NcclError(Comm& c, ncclResult_t r, absl::string_view what);
  // The fusion buffer, grown if needed (after the stream's work that may still read the old one,
  // polled as Complete does: stream-ordered collectives may still be running).
  absl::Status ReserveFusion(Comm& c, size_t bytes);
  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes);
  absl::StatusOr<DeviceBuffer> AllocateOrFail(size_t bytes) {
    auto b = Allocate(bytes);
    if (!b.ok()) return Fail(b.status());
    return b;
  }
  absl::Status FinishOutput(DataType type, ReduceOp op, void* out, size_t count, double postscale,
                            int active);

  const BackendOptions options_;
  std::atomic<int> device_{-1};
  // Held by the engine thread in every call and by the watcher while it polls: everything below.
  std::mutex mu_;
  struct InFlight {
    DonePtr done;
    absl::Time deadline;
    int set = 0;
    std::string what;
  };
  std::deque<InFlight> in_flight_;  // stream-ordered collectives, in stream order
  std::condition_variable watch_cv_;
  std::thread watcher_;  // started with the first stream-ordered collective
  bool stop_ = false;
  bool prepared_ = false;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;  // staged copies (StageOut, StageIn)
  cudaEvent_t copied_ = nullptr;
  std::map<int, Comm> comms_;
  void* fusion_ = nullptr;
  size_t fusion_bytes_ = 0;
  absl::Status failed_;
};

}  // namespace impl
}  // namespace ddp::nccl
