// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The parameter server's correctness matrix, run by every rank of a parameter-server job (gtest's
// multi-process jobs over tcp, shm and libfabric; ddp-conformance --ps under mpirun for MPI):
//   - sync keys of every dtype, split into partitions over the servers: every pull of step t is
//     exactly the sum of one push per worker, with version t + 1 and every worker contributing;
//     a pull before any push gives worker 0's initial value;
//   - an async key (optimizer "sum"): after every worker's K pushes, the value is exactly
//     initial + W * K (every push applied once);
//   - a bounded-staleness key (s = 1, "sum"): a worker that has pushed c times never pulls a value
//     below W * (c - s) (the slowest worker had pushed at least c - s times), whatever the
//     workers' speeds.
// Server-only ranks serve. Returns the first discrepancy.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "ddp/ps.h"

namespace ddp::testing {

absl::Status RunPsMatrix(ps::ParameterServer& ps, uint64_t seed);

}  // namespace ddp::testing
