// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// mpi/: everything libddp does with MPI, in one room. Under mpirun (Open MPI, MPICH/PMI):
//   - the bootstrap exchanges rank 0's job token and every rank's host and address with MPI
//     collectives (bootstrap/exchange.h), so no rendezvous store or exported token is needed;
//   - the MPI transport (DDP_TRANSPORT=mpi) is a WireTransport over MPI point-to-point;
//   - MPI_Allreduce itself can run whole allreduces (DDP_MPI_ALLREDUCE=1), as a collective
//     backend (collectives/mpi_allreduce.h).
// The MPI calls live in libddp_mpi.so (plugin.cc, wire.cc, allreduce.cc), built when MPI is found
// (DDP_WITH_MPI) and opened on first use; libddp itself never links MPI. This header is libddp's
// side: every function answers Unimplemented, saying why, when the plugin does not load.
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

// True when a launcher of the MPI family started this process (its rank variables are set).
bool LaunchedByMpi();
// True when the plugin loads; else `why` (if given) says why not.
bool Available(std::string* why = nullptr);
// "Open MPI v4.1.4, ..." (MPI_Get_library_version) or why there is none.
std::string Version();

// --- bootstrap ---
// Initialises MPI unless the process already has (mpi4py, torch.distributed), asking for
// MPI_THREAD_MULTIPLE; finalised at exit if libddp initialised it. Returns MPI's rank and size.
absl::Status Init(int* rank, int* size);
// MPI_COMM_WORLD collectives (after Init; the calling thread only).
absl::Status Broadcast(void* data, size_t bytes, int root);
absl::StatusOr<std::vector<std::string>> Allgather(const std::string& mine);

// --- transport ---
// The MPI wire. Needs MPI initialised with MPI_THREAD_MULTIPLE. Collective over MPI_COMM_WORLD:
// every rank calls it at the same point. It also makes `allreduce_slots` MPI communicators of
// their own for Allreduce below (0: none).
absl::StatusOr<std::unique_ptr<transport::wire::Wire>> CreateWire(int allreduce_slots);

// --- collective backend ---
// MPI_Allreduce of `count` elements with `combine` (never Average) on the communicator made for
// `slot` by CreateWire; in place when send == recv.
absl::Status Allreduce(int slot, const void* send, void* recv, size_t count, DataType type,
                       ReduceOp combine);

}  // namespace ddp::mpi
