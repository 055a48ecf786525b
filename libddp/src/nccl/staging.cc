// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// A CUDA tensor staged through host memory (device.h: Backend::StageOut, StageIn), for the
// engine's compressed allreduces, whose codecs run on the CPU.
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status.h"
#include "nccl/backend_impl.h"

namespace ddp::nccl::impl {

absl::Status NcclBackend::PrepareCopies() {
  DDP_RETURN_IF_ERROR(Prepare());
  if (copy_stream_ != nullptr) return absl::OkStatus();
  // Non-blocking: a copy here waits for no work of other streams (the legacy default one's
  // included: torch's default stream, where the rest of a backward pass is queued).
  DDP_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking),
                 "creating the stream for staged copies");
  DDP_CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming), "creating an event");
  return absl::OkStatus();
}

absl::Status NcclBackend::AwaitEvent(cudaEvent_t event, absl::string_view what) {
  const absl::Time deadline = absl::Now() + options_.timeout;
  Backoff backoff(kDevicePollBackoff);
  while (true) {
    const cudaError_t q = cudaEventQuery(event);
    if (q == cudaSuccess) return absl::OkStatus();
    if (q != cudaErrorNotReady) return CudaError(q, what);
    if (options_.health) {
      const absl::Status h = options_.health();
      if (!h.ok()) return absl::Status(h.code(), absl::StrCat(what, " aborted: ", h.message()));
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, " did not finish within ", absl::FormatDuration(options_.timeout),
                       " (DDP_TIMEOUT_SECONDS): its stream is stuck"));
    }
    backoff.Wait();
  }
}

absl::Status NcclBackend::StageOut(void* host, const void* device, size_t bytes,
                                   const ReadyPtr& ready) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!failed_.ok()) return failed_;
  DDP_RETURN_IF_ERROR(PrepareCopies());
  DeviceScope scope(device_.load());
  // The producer first, waited for here (a copy of pageable memory returns only once done: a
  // stream wait inside it could not be bounded).
  if (ready != nullptr && ready->event != nullptr) {
    DDP_RETURN_IF_ERROR(AwaitEvent(ready->event, "waiting for a CUDA tensor's producer stream"));
  }
  if (bytes == 0) return absl::OkStatus();
  DDP_CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, copy_stream_),
                 "copying a CUDA tensor to the host");
  DDP_CUDA_CHECK(cudaEventRecord(copied_, copy_stream_), "recording the copy's event");
  return AwaitEvent(copied_, "copying a CUDA tensor to the host");
}

absl::Status NcclBackend::StageIn(void* device, const void* host, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!failed_.ok()) return failed_;
  DDP_RETURN_IF_ERROR(PrepareCopies());
  if (bytes == 0) return absl::OkStatus();
  DeviceScope scope(device_.load());
  DDP_CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, copy_stream_),
                 "copying a result to a CUDA tensor");
  // Complete, not only staged by the driver: the handle that finishes next has it in place.
  DDP_CUDA_CHECK(cudaEventRecord(copied_, copy_stream_), "recording the copy's event");
  return AwaitEvent(copied_, "copying a result to a CUDA tensor");
}

}  // namespace ddp::nccl::impl
