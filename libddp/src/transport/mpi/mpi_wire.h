// The MPI transport (DDP_TRANSPORT=mpi): a WireTransport over MPI point-to-point. The MPI calls
// live in libddp_mpi.so (mpi_wire.cc), reached through the MPI plugin's table; libddp never links
// MPI.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "ddp/types.h"
#include "transport/wire/wire.h"

namespace ddp::transport::mpi {

// Needs MPI initialised with MPI_THREAD_MULTIPLE (the MPI bootstrap does that). Collective over
// MPI_COMM_WORLD: every rank calls it at the same point. `native_ids`: the communicator ids that
// get an MPI communicator of their own for Allreduce.
absl::StatusOr<std::unique_ptr<wire::Wire>> CreateWire(const std::vector<int>& native_ids);
bool HasAllreduce(int comm_id);
// MPI_Allreduce on the communicator for `comm_id`; the result lands in `recv`.
absl::Status Allreduce(int comm_id, const void* send, void* recv, size_t count, DataType type,
                       ReduceOp op);

}  // namespace ddp::transport::mpi
