// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The NCCL backend: libddp_nccl.so, which loader.cc opens on the first CUDA submission, so that
// libddp itself never depends on CUDA or NCCL at run time.
//
// One stream per rank, one non-blocking NCCL communicator per process set (created on first use,
// the unique id broadcast over the CPU transport). Every operation (collectives.cc): wait for the
// inputs' ready events on the stream, pack / scale with our kernels, the NCCL call(s), unpack /
// finish, record the done event, then poll it together with ncclCommGetAsyncError, the job's
// health and the deadline. Non-blocking communicators make init and every call return at once, so
// no NCCL call can hang the engine thread; an error or timeout aborts every communicator.
// Stream-ordered allreduces (device.h) return once enqueued; the watcher thread polls them
// instead. This file: that machinery, around the collectives.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/status.h"
#include "common/thread_priority.h"
#include "common/wait.h"
#include "nccl/backend_impl.h"
#include "nccl/errors.h"

namespace ddp::nccl::impl {

absl::Status CudaError(cudaError_t e, absl::string_view what) {
  return absl::InternalError(absl::StrCat("CUDA error in ", what, ": ", cudaGetErrorName(e), " (",
                                          cudaGetErrorString(e), ")"));
}

NcclBackend::~NcclBackend() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  watch_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  const int device = device_.load();
  if (device < 0) return;
  DeviceScope scope(device);
  for (auto& [set, c] : comms_) {
    bool clean = failed_.ok() && ncclCommFinalize(c.comm) != ncclSystemError;
    // Finalize flushes the communicator's pending work with its peers; bounded, then abort.
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    Backoff backoff(kDevicePollBackoff);
    ncclResult_t state = ncclInProgress;
    while (clean && absl::Now() < deadline) {
      if (ncclCommGetAsyncError(c.comm, &state) != ncclSuccess || state != ncclInProgress) break;
      backoff.Wait();
    }
    if (clean && state == ncclSuccess) {
      ncclCommDestroy(c.comm);
    } else {
      ncclCommAbort(c.comm);
    }
  }
  comms_.clear();
  if (fusion_ != nullptr) cudaFree(fusion_);
  if (done_ != nullptr) cudaEventDestroy(done_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  if (copied_ != nullptr) cudaEventDestroy(copied_);
  if (copy_stream_ != nullptr) cudaStreamDestroy(copy_stream_);
}

absl::StatusOr<ReadyPtr> NcclBackend::RecordReady(int device, void* stream, bool stream_ordered) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda:", device, " does not exist (this process sees ", count, " CUDA devices)"));
  }
  int expected = -1;
  if (!device_.compare_exchange_strong(expected, device) && expected != device) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the tensor is on cuda:", device, " but this rank already uses cuda:", expected,
        "; all CUDA tensors of one rank must be on one device"));
  }
  DeviceScope scope(device);
  auto ready = std::make_shared<ReadyEvent>();
  ready->device = device;
  ready->stream_ordered = stream_ordered;
  DDP_CUDA_CHECK(cudaEventCreateWithFlags(&ready->event, cudaEventDisableTiming),
                 "creating an event");
  DDP_CUDA_CHECK(cudaEventRecord(ready->event, static_cast<cudaStream_t>(stream)),
                 "recording the input's ready event on its stream");
  return ready;
}

absl::Status NcclBackend::Prepare() {
  if (prepared_) return absl::OkStatus();
  int expected = -1;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  // local_rank, unless each rank sees only its own GPU(s) (CUDA_VISIBLE_DEVICES per rank).
  const int fallback = options_.default_device < count ? options_.default_device : 0;
  device_.compare_exchange_strong(expected, fallback);
  DDP_CUDA_CHECK(cudaSetDevice(device_.load()), "selecting the rank's device");
  DDP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating a stream");
  DDP_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "creating an event");
  prepared_ = true;
  return absl::OkStatus();
}

absl::Status NcclBackend::Fail(absl::Status status) {
  for (auto& [set, c] : comms_) ncclCommAbort(c.comm);
  comms_.clear();
  // Work queued behind the aborted NCCL call (unpacking into callers' buffers) must be over
  // before their handles fail and the memory goes back to them. Bounded: a producer stream that
  // never reaches its ready event would hold the stream forever.
  if (stream_ != nullptr) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    Backoff backoff(kDevicePollBackoff);
    while (cudaStreamQuery(stream_) == cudaErrorNotReady && absl::Now() < deadline) {
      backoff.Wait();
    }
  }
  if (failed_.ok()) failed_ = status;
  // Stream-ordered collectives in flight ran on aborted communicators: their waiters get this.
  for (InFlight& f : in_flight_) {
    f.done->error = status;
    f.done->failed.store(true, std::memory_order_release);
  }
  in_flight_.clear();
  return status;
}

absl::Status NcclBackend::NcclError(Comm& c, ncclResult_t r, absl::string_view what) {
  const char* last = c.comm != nullptr ? ncclGetLastError(c.comm) : nullptr;
  return absl::InternalError(absl::StrCat(
      "NCCL error in ", what, " (process set ", c.set, ", rank ", c.index, " of ", c.size, "): ",
      ErrorText(ncclGetErrorString(r), last != nullptr ? last : "", std::getenv("NCCL_DEBUG"))));
}

absl::Status NcclBackend::Check(Comm& c, absl::Time deadline, absl::string_view what) {
  if (options_.health) {
    absl::Status h = options_.health();
    if (!h.ok()) {
      return absl::Status(h.code(), absl::StrCat("NCCL ", what, " aborted: ", h.message()));
    }
  }
  if (absl::Now() > deadline) {
    return absl::DeadlineExceededError(absl::StrCat(
        "NCCL ", what, " (process set ", c.set, ") did not finish within ",
        absl::FormatDuration(options_.timeout),
        " (DDP_TIMEOUT_SECONDS); a peer is stuck or gone, the communicator was aborted"));
  }
  return absl::OkStatus();
}

absl::Status NcclBackend::Issue(Comm& c, ncclResult_t r, absl::string_view what) {
  if (r == ncclSuccess) return absl::OkStatus();
  if (r != ncclInProgress) return Fail(NcclError(c, r, what));
  const absl::Time deadline = absl::Now() + options_.timeout;
  Backoff backoff(kDevicePollBackoff);
  while (true) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(c.comm, &state);
    if (q != ncclSuccess) return Fail(NcclError(c, q, what));
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) return Fail(NcclError(c, state, what));
    if (absl::Status s = Check(c, deadline, what); !s.ok()) return Fail(s);
    backoff.Wait();
  }
}

absl::Status NcclBackend::Complete(Comm& c, absl::string_view what) {
  DDP_CUDA_FAIL(cudaEventRecord(done_, stream_), "recording the done event");
  const absl::Time deadline = absl::Now() + options_.timeout;
  Backoff backoff(kDevicePollBackoff);
  while (true) {
    const cudaError_t q = cudaEventQuery(done_);
    if (q == cudaSuccess) return absl::OkStatus();
    if (q != cudaErrorNotReady) return Fail(CudaError(q, absl::StrCat("NCCL ", what)));
    if (absl::Status s = StillRunning(c, deadline, what); !s.ok()) return Fail(s);
    backoff.Wait();
  }
}

absl::Status NcclBackend::StillRunning(Comm& c, absl::Time deadline, absl::string_view what) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t polled = ncclCommGetAsyncError(c.comm, &state);
  if (polled != ncclSuccess) return NcclError(c, polled, what);
  if (state != ncclSuccess && state != ncclInProgress) return NcclError(c, state, what);
  return Check(c, deadline, what);
}

absl::Status NcclBackend::EnsureComm(int set, int size, int index, const IdBroadcast& broadcast) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!failed_.ok()) return failed_;
  if (comms_.count(set) != 0) return absl::OkStatus();
  DDP_RETURN_IF_ERROR(Prepare());
  Comm c;
  c.size = size;
  c.index = index;
  c.set = set;
  ncclUniqueId id{};
  if (index == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return Fail(NcclError(c, r, "ncclGetUniqueId"));
  }
  DDP_RETURN_IF_ERROR(Annotate(broadcast(&id, sizeof(id)), "sending the NCCL unique id"));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // init and every call return at once: nothing can hang the engine
  const ncclResult_t r = ncclCommInitRankConfig(&c.comm, size, id, index, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    if (c.comm != nullptr) ncclCommAbort(c.comm);
    c.comm = nullptr;
    return Fail(NcclError(c, r, "ncclCommInitRankConfig"));
  }
  Comm& stored = comms_[set] = c;
  return Issue(stored, r, "creating the communicator");
}

absl::StatusOr<Comm*> NcclBackend::Begin(int set, const char* what) {
  if (!failed_.ok()) return failed_;
  auto it = comms_.find(set);
  if (it == comms_.end()) {
    return absl::InternalError(
        absl::StrCat("NCCL ", what, ": process set ", set, " has no communicator"));
  }
  return &it->second;
}

absl::Status NcclBackend::WaitReady(const ReadyPtr& ready) {
  if (ready == nullptr) return absl::OkStatus();
  DDP_CUDA_FAIL(cudaStreamWaitEvent(stream_, ready->event, 0), "waiting for the input's event");
  return absl::OkStatus();
}

absl::Status NcclBackend::ReserveFusion(Comm& c, size_t bytes) {
  if (bytes <= fusion_bytes_) return absl::OkStatus();
  if (fusion_ != nullptr) {
    // The stream may still use the old buffer (an earlier operation, stream-ordered ones still
    // running): wait for it while watching for trouble, never blindly.
    DDP_RETURN_IF_ERROR(Complete(c, "growing the fusion buffer"));
    cudaFree(fusion_);
    fusion_ = nullptr;
    fusion_bytes_ = 0;
  }
  // Grow geometrically so that a slowly rising threshold does not reallocate every cycle.
  const size_t want = std::max({bytes, 2 * fusion_bytes_, size_t{1} << 20});
  DDP_CUDA_FAIL(cudaMalloc(&fusion_, want),
                absl::StrCat("allocating ", want, " bytes of device fusion buffer"));
  fusion_bytes_ = want;
  return absl::OkStatus();
}

absl::StatusOr<Backend::DeviceBuffer> NcclBackend::Allocate(size_t bytes) {
  if (bytes == 0) return DeviceBuffer();
  void* p = nullptr;
  DDP_CUDA_FAIL(cudaMalloc(&p, bytes), absl::StrCat("allocating ", bytes, " bytes of output"));
  const int device = device_.load();
  return DeviceBuffer(p, [device](void* q) {
    DeviceScope scope(device);
    cudaFree(q);
  });
}

absl::StatusOr<DonePtr> NcclBackend::Finished(Comm& c, const std::vector<Piece>& pieces,
                                              absl::string_view what) {
  const bool ordered = std::all_of(pieces.begin(), pieces.end(), [](const Piece& p) {
    return p.input == nullptr || (p.ready != nullptr && p.ready->stream_ordered);
  });
  if (!ordered) {
    DDP_RETURN_IF_ERROR(Complete(c, what));
    return DonePtr();
  }
  auto done = std::make_shared<DoneEvent>();
  done->device = device_.load();
  DDP_CUDA_FAIL(cudaEventCreateWithFlags(&done->event, cudaEventDisableTiming),
                "creating an event");
  DDP_CUDA_FAIL(cudaEventRecord(done->event, stream_), "recording the done event");
  in_flight_.push_back({done, absl::Now() + options_.timeout, c.set, std::string(what)});
  if (!watcher_.joinable()) watcher_ = std::thread([this] { Watch(); });
  watch_cv_.notify_one();
  return done;
}

void NcclBackend::Watch() {
  NameThisThread("ddp-nccl-watch");
  std::unique_lock<std::mutex> lock(mu_);
  DeviceScope scope(device_.load());
  while (!stop_) {
    absl::Status trouble;
    while (!in_flight_.empty()) {
      const cudaError_t q = cudaEventQuery(in_flight_.front().done->event);
      if (q == cudaErrorNotReady) break;
      if (q != cudaSuccess) {
        trouble = CudaError(q, absl::StrCat("NCCL ", in_flight_.front().what));
        break;
      }
      in_flight_.pop_front();
    }
    if (in_flight_.empty()) {
      watch_cv_.wait(lock, [&] { return stop_ || !in_flight_.empty(); });
      continue;
    }
    // The oldest collective still running: its communicator's asynchronous error, the job's
    // health, its deadline.
    const InFlight& oldest = in_flight_.front();
    auto it = comms_.find(oldest.set);
    if (trouble.ok() && it != comms_.end()) {
      trouble = StillRunning(it->second, oldest.deadline, oldest.what);
    }
    if (!trouble.ok()) {
      // Nobody waits on the host for these collectives: say it now, fail their handles' waits
      // (Fail), and break the job (on_failure: the transport's abort), so that this rank's
      // engine and the peers fail at once instead of at the next CUDA collective.
      DDP_LOG(kError, "%s", trouble.message());
      Fail(trouble).IgnoreError();  // now the backend's error for good
      if (options_.on_failure) {
        lock.unlock();
        options_.on_failure(trouble);
        lock.lock();
      }
      continue;
    }
    watch_cv_.wait_for(lock, std::chrono::microseconds(500), [&] { return stop_; });
  }
}

}  // namespace ddp::nccl::impl
