// Bootstrap through MPI: under mpirun (Open MPI, MPICH/PMI), rank 0's job token and every rank's
// host and listen address are exchanged with MPI collectives, so no rendezvous store, address
// or exported token is needed. The MPI calls live in libddp_mpi.so (mpi/plugin.cc), built when
// MPI is found (DDP_WITH_MPI) and opened on first use; libddp itself never links MPI.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ddp::bootstrap::mpi {

// True when a launcher of the MPI family started this process (its rank variables are set).
bool LaunchedByMpi();
// True when the plugin loads; else `why` (if given) says why not.
bool Available(std::string* why = nullptr);

// Initialises MPI unless the process already has (mpi4py, torch.distributed), asking for
// MPI_THREAD_MULTIPLE; finalised at exit if libddp initialised it. Returns MPI's rank and size.
absl::Status Init(int* rank, int* size);
// MPI_COMM_WORLD collectives (after Init; the calling thread only).
absl::Status Broadcast(void* data, size_t bytes, int root);
absl::StatusOr<std::vector<std::string>> Allgather(const std::string& mine);
// The plugin's table (transport/mpi uses it), or null when it does not load.
struct MpiPluginApi;
const MpiPluginApi* Api();

// "Open MPI v4.1.4, ..." (MPI_Get_library_version) or why there is none.
std::string Version();

}  // namespace ddp::bootstrap::mpi
