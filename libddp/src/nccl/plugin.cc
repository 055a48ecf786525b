// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// libddp_nccl.so's table (plugin.h): the backend's creation, and what libddp asks of CUDA
// outside any backend (devices, plain memory and copies for tests, a collective's done event).
#include "nccl/plugin.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "nccl/backend_impl.h"

namespace ddp::nccl {
namespace {

using impl::DeviceScope;

int CountDevices() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

std::string Version() {
  int nccl = 0;
  int runtime = 0;
  int driver = 0;
  ncclGetVersion(&nccl);
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  return absl::StrCat("NCCL ", nccl / 10000, ".", nccl / 100 % 100, ".", nccl % 100,
                      ", CUDA runtime ", runtime / 1000, ".", runtime % 1000 / 10, ", driver ",
                      driver / 1000, ".", driver % 1000 / 10, ", ", CountDevices(), " device(s)");
}

absl::StatusOr<std::unique_ptr<Backend>> Create(const BackendOptions& options) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA tensors need a GPU, and this process sees none (",
        e != cudaSuccess ? absl::StrCat(cudaGetErrorName(e), ": ", cudaGetErrorString(e))
                         : std::string("0 devices"),
        ")"));
  }
  return std::unique_ptr<Backend>(new impl::NcclBackend(options));
}

absl::StatusOr<std::shared_ptr<void>> Alloc(int device, size_t bytes) {
  DeviceScope scope(device);
  void* p = nullptr;
  DDP_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "cudaMalloc");
  return std::shared_ptr<void>(p, [device](void* q) {
    DeviceScope inner(device);
    cudaFree(q);
  });
}

// The device that owns `p` (copies on the legacy default stream of that device are ordered after
// the work queued there, e.g. a Handle::WaitOnStream(nullptr)).
int DeviceOf(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();  // not sticky, but not ours to leave behind
    return -1;
  }
  return a.type == cudaMemoryTypeDevice ? a.device : -1;
}

// A synchronous copy on the legacy default stream of the device that owns `on_device`.
absl::Status Copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                  const void* on_device, const char* what) {
  if (bytes == 0) return absl::OkStatus();
  const int device = DeviceOf(on_device);
  std::optional<DeviceScope> scope;
  if (device >= 0) scope.emplace(device);
  DDP_CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind), what);
  return absl::OkStatus();
}

absl::Status ToDevice(void* dst, const void* src, size_t bytes) {
  return Copy(dst, src, bytes, cudaMemcpyHostToDevice, dst, "copying to the device");
}

absl::Status ToHost(void* dst, const void* src, size_t bytes) {
  return Copy(dst, src, bytes, cudaMemcpyDeviceToHost, src, "copying to the host");
}

bool DoneOnDevice(const DoneEvent& done) {
  return done.failed.load(std::memory_order_acquire) ||
         cudaEventQuery(done.event) != cudaErrorNotReady;
}

absl::Status StreamWait(const DoneEvent& done, void* stream) {
  if (done.failed.load(std::memory_order_acquire)) return done.error;
  DeviceScope scope(done.device);
  DDP_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), done.event, 0),
                 "making the stream wait for the collective");
  return absl::OkStatus();
}

constexpr PluginApi kApi = {kPluginAbi, CountDevices, Version,      Create,    Alloc,
                            ToDevice,   ToHost,       DoneOnDevice, StreamWait};

}  // namespace
}  // namespace ddp::nccl

extern "C" __attribute__((visibility("default"))) const void* ddp_nccl_plugin() {
  return &ddp::nccl::kApi;
}
