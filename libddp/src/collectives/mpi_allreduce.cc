// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// MpiAllreduce: MPI_Allreduce through the MPI plugin, then the epilogue.
#include "collectives/mpi_allreduce.h"

#include "mpi/mpi.h"

namespace ddp::collectives {

absl::Status MpiAllreduce::Allreduce(const void* send, void* recv, size_t count, DataType type,
                                     ReduceOp combine, const reduce::Epilogue& epilogue) {
  absl::Status health = transport_.health();
  if (!health.ok()) return health;
  absl::Status s = mpi::Allreduce(slot_, send, recv, count, type, combine);
  if (!s.ok()) {
    transport_.Abort(s);
    return s;
  }
  epilogue.Apply(type, recv, count);
  return absl::OkStatus();
}

}  // namespace ddp::collectives
