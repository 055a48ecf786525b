// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The conformance matrix: every collective x dtype x op x count x placement, against references
// in higher precision, fresh random data each run, outputs poisoned first. Run by the gtest
// suites over every transport the build has (collectives_test.cc) and, under mpirun, by the
// standalone ddp-conformance program.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "ddp/context.h"

namespace ddp::testing {

// Runs the whole matrix on this rank. Prints "digest=<hex>" (a hash of every allreduce result's
// bits) so that the caller can check that all ranks computed identical bits.
absl::Status RunMatrix(Context& ctx, uint64_t seed, const std::vector<size_t>& reduce_counts,
                       const std::vector<size_t>& block_counts);

}  // namespace ddp::testing
