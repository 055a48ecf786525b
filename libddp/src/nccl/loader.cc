// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Part of libddp: opens libddp_nccl.so (next to libddp.so, or DDP_NCCL_PLUGIN) the
// first time the GPU path is needed, and forwards device.h's functions to it. Without the plugin
// (built without DDP_WITH_NCCL, or its CUDA/NCCL libraries missing at run time) every function
// answers a clear error and CPU work is unaffected.
#include <string>

#include "common/plugin.h"
#include "nccl/device.h"
#include "nccl/plugin.h"

namespace ddp::nccl {
namespace {

const plugin::Table<PluginApi>& Plugin() {
  static const auto* loaded = new plugin::Table<PluginApi>(plugin::LoadTable<PluginApi>(
      "libddp_nccl.so", "DDP_NCCL_PLUGIN", "ddp_nccl_plugin", kPluginAbi, "NCCL backend",
      "It is built when CUDA and NCCL are found (DDP_WITH_NCCL) and needs libnccl.so.2 at run "
      "time"));
  return *loaded;
}

absl::Status Missing() { return absl::UnimplementedError(Plugin().error); }

}  // namespace

bool Built() { return Plugin().api != nullptr; }

int DeviceCount() { return Built() ? Plugin().api->device_count() : 0; }

std::string VersionString() { return Built() ? Plugin().api->version() : Plugin().error; }

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options) {
  if (!Built()) return Missing();
  return Plugin().api->create(options);
}

bool DoneOnDevice(const DonePtr& done) {
  return done == nullptr || !Built() || Plugin().api->done_on_device(*done);
}

absl::Status StreamWait(const DonePtr& done, void* stream) {
  if (done == nullptr) return absl::OkStatus();
  if (!Built()) return Missing();
  return Plugin().api->stream_wait(*done, stream);
}

absl::StatusOr<std::shared_ptr<void>> DeviceAlloc(int device, size_t bytes) {
  if (!Built()) return Missing();
  return Plugin().api->alloc(device, bytes);
}

absl::Status CopyToDevice(void* dst, const void* src, size_t bytes) {
  if (!Built()) return Missing();
  return Plugin().api->to_device(dst, src, bytes);
}

absl::Status CopyToHost(void* dst, const void* src, size_t bytes) {
  if (!Built()) return Missing();
  return Plugin().api->to_host(dst, src, bytes);
}

}  // namespace ddp::nccl
