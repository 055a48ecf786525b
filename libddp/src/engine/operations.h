// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The entries of the executor's table (executor.h): operations on CPU memory (libddp's
// collectives) and on CUDA memory (the NCCL backend, nccl/device.h).
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "engine/executor.h"
#include "nccl/device.h"

namespace ddp::engine {

class CudaBackend;
// The operations on host memory; compressed allreduces of CUDA tensors too, staged through host
// memory by `cuda`'s backend (compressed.h).
std::unique_ptr<DeviceOperations> MakeCpuOperations(Executor& executor, std::string transport_name,
                                                    CudaBackend& cuda);

// The NCCL backend, created by the first CUDA submission (or a joined rank's first CUDA
// collective); its creation error is kept and given to every later CUDA submission. Thread-safe:
// submitting threads and the engine's use it.
class CudaBackend {
 public:
  explicit CudaBackend(nccl::BackendOptions options) : options_(std::move(options)) {}
  absl::StatusOr<std::shared_ptr<nccl::Backend>> Get();
  // Checks a CUDA submission and records its inputs' ready event.
  absl::Status Prepare(LocalOp& op, const Device& device);
  // No backend from now on (`reason`); the current one goes with its last user.
  void Close(const absl::Status& reason);

 private:
  const nccl::BackendOptions options_;
  std::mutex mu_;
  std::shared_ptr<nccl::Backend> backend_;
  absl::Status error_;
};

std::unique_ptr<DeviceOperations> MakeCudaOperations(Executor& executor, CudaBackend& backend);

}  // namespace ddp::engine
