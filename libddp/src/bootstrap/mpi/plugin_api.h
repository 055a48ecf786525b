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

namespace ddp::bootstrap::mpi {

inline constexpr int kMpiPluginAbi = 2;

struct MpiPluginApi {
  int abi;
  absl::Status (*init)(int* rank, int* size);
  absl::Status (*broadcast)(void* data, size_t bytes, int root);
  absl::StatusOr<std::vector<std::string>> (*allgather)(const std::string& mine);
  std::string (*version)();
  // The MPI transport (transport/mpi/mpi_wire.h).
  absl::StatusOr<std::unique_ptr<transport::wire::Wire>> (*create_wire)(
      const std::vector<int>& native_ids);
  bool (*has_allreduce)(int comm_id);
  absl::Status (*allreduce)(int comm_id, const void* send, void* recv, size_t count, DataType type,
                            ReduceOp op);
};

}  // namespace ddp::bootstrap::mpi
