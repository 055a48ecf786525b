// The table libddp_mpi.so returns from `ddp_mpi_plugin` (both sides built from one tree).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ddp::bootstrap::mpi {

inline constexpr int kMpiPluginAbi = 1;

struct MpiPluginApi {
  int abi;
  absl::Status (*init)(int* rank, int* size);
  absl::Status (*broadcast)(void* data, size_t bytes, int root);
  absl::StatusOr<std::vector<std::string>> (*allgather)(const std::string& mine);
  std::string (*version)();
};

}  // namespace ddp::bootstrap::mpi
