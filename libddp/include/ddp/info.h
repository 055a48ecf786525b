// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// What this installation of libddp can do: its transports and the GPU path, with the library
// behind each (the optional ones are plugins, found at run time).
#pragma once

#include <string>
#include <vector>

namespace ddp {

// The version of the library linked in ("0.1.0"; from the repository's VERSION file), which may
// differ from the headers' DDP_VERSION_STRING (ddp/version.h) when a program runs against another
// build than it was compiled with.
const char* Version();

struct TransportInfo {
  std::string name;     // what DDP_TRANSPORT may name: "tcp", "shm", "mpi", "ofi"
  std::string library;  // "built in", or the library's version ("Open MPI v4.1.4", ...)
};
std::vector<TransportInfo> AvailableTransports();

// True when the NCCL backend (libddp_nccl.so) loads: CUDA tensors can be reduced.
bool NcclAvailable();
// "NCCL 2.28.9, CUDA runtime 13.0, driver 13.0", or why there is none.
std::string NcclVersion();

}  // namespace ddp
