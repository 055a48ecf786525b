// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// MpiAllreduce: the collective backend (backend.h) that hands whole allreduces to
// MPI_Allreduce (DDP_TRANSPORT=mpi with DDP_MPI_ALLREDUCE=1), for users of tuned HPC MPIs. Each
// slot has an MPI communicator of its own (mpi/mpi.h), so the context's allreduces and the
// engine's never interleave. Ranks must agree on the arguments: MPI checks nothing, so a rank in
// another call is not named here (the engine's negotiation still checks every tensor).
#pragma once

#include <string>

#include "collectives/backend.h"

namespace ddp::collectives {

class MpiAllreduce final : public AllreduceBackend {
 public:
  // `transport`: the job's (the MPI transport), whose failure an MPI error becomes.
  MpiAllreduce(transport::Transport& transport, int slot) : transport_(transport), slot_(slot) {}

  std::string name() const override { return "mpi"; }
  bool Takes(size_t, DataType, ReduceOp) const override { return true; }
  absl::Status Allreduce(const void* send, void* recv, size_t count, DataType type,
                         ReduceOp combine, const reduce::Epilogue& epilogue) override;

 private:
  transport::Transport& transport_;
  const int slot_;
};

}  // namespace ddp::collectives
