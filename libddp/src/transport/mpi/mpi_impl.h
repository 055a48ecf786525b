// Inside libddp_mpi.so: the MPI transport's functions that the plugin table exposes (see
// mpi_wire.h for libddp's side).
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "ddp/types.h"
#include "transport/wire/wire.h"

namespace ddp::transport::mpi::impl {

absl::StatusOr<std::unique_ptr<wire::Wire>> CreateWire(const std::vector<int>& native_ids);
bool HasAllreduce(int comm_id);
absl::Status Allreduce(int comm_id, const void* send, void* recv, size_t count, DataType type,
                       ReduceOp op);

}  // namespace ddp::transport::mpi::impl
