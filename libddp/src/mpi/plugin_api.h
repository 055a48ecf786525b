// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The table libddp_mpi.so returns from `ddp_mpi_plugin` (both sides built from one tree).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ddp/types.h"
#include "transport/wire/wire.h"

namespace ddp::mpi {

inline constexpr int kMpiPluginAbi = 3;

struct MpiPluginApi {
  int abi;
  std::string (*version)();
  absl::Status (*init)(int* rank, int* size);
  absl::Status (*broadcast)(void* data, size_t bytes, int root);
  absl::StatusOr<std::vector<std::string>> (*allgather)(const std::string& mine);
  absl::StatusOr<std::unique_ptr<transport::wire::Wire>> (*create_wire)(int allreduce_slots);
  absl::Status (*allreduce)(int slot, const void* send, void* recv, size_t count, DataType type,
                            ReduceOp combine);
};

}  // namespace ddp::mpi
