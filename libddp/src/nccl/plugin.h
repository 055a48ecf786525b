// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The one symbol libddp_nccl.so exports, `ddp_nccl_plugin`, and the table it returns. Both sides
// are built together from one tree; `abi` catches a stale plugin next to a newer libddp.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nccl/device.h"

namespace ddp::nccl {

inline constexpr int kPluginAbi = 3;  // 3: Backend::StageOut, StageIn

struct PluginApi {
  int abi;
  int (*device_count)();
  std::string (*version)();
  absl::StatusOr<std::unique_ptr<Backend>> (*create)(const BackendOptions& options);
  absl::StatusOr<std::shared_ptr<void>> (*alloc)(int device, size_t bytes);
  absl::Status (*to_device)(void* dst, const void* src, size_t bytes);
  absl::Status (*to_host)(void* dst, const void* src, size_t bytes);
  bool (*done_on_device)(const DoneEvent& done);
  absl::Status (*stream_wait)(const DoneEvent& done, void* stream);
};

}  // namespace ddp::nccl
