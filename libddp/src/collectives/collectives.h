// The collective operations, over a Communicator. Arguments are validated by the caller
// (ContextImpl); these assume sane pointers and counts.
#pragma once

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "collectives/communicator.h"
#include "ddp/types.h"

namespace ddp::collectives {

absl::Status Allreduce(Communicator& comm, const void* send, void* recv, size_t count,
                       DataType type, ReduceOp op);
absl::Status Allgatherv(Communicator& comm, const void* send, void* recv,
                        const std::vector<size_t>& counts, DataType type);
absl::Status Broadcast(Communicator& comm, const void* send, void* recv, size_t count,
                       DataType type, int root);
absl::Status ReduceScatterv(Communicator& comm, const void* send, void* recv,
                            const std::vector<size_t>& counts, DataType type, ReduceOp op);
absl::Status Alltoall(Communicator& comm, const void* send, void* recv, size_t count,
                      DataType type);
absl::Status Barrier(Communicator& comm);

// Which allreduce algorithm `comm` uses for a message of `bytes` (the same on every rank).
Algorithm ChooseAllreduce(const Communicator& comm, size_t bytes);

}  // namespace ddp::collectives
