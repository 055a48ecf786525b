// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Test data: deterministic pseudo-random inputs per (seed, call, rank, index) and checks of
// collective results against references computed in higher precision.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ddp/types.h"

namespace ddp::testing {

struct DataGen {
  uint64_t seed = 0;
  uint64_t call = 0;
};

// Writes count elements of rank `rank`'s input, indices first..first+count-1, into buf.
// Values suit `op`: products stay in range, integer sums never overflow.
void FillInput(const DataGen& g, DataType type, ReduceOp op, int rank, void* buf, size_t count,
               size_t first = 0);

// out[i] (i < count) must equal op over ranks 0..n-1 of input(rank, first + i), within the
// rounding the type allows (exact for integers, min and max).
absl::Status CheckReduced(const DataGen& g, DataType type, ReduceOp op, int n, const void* out,
                          size_t count, size_t first, const std::string& what);

// out[i] (i < count) must equal input(src_rank, first + i) exactly.
absl::Status CheckCopied(const DataGen& g, DataType type, ReduceOp op, int src_rank,
                         const void* out, size_t count, size_t first, const std::string& what);

// Fills with a byte pattern no correct result consists of (outputs are poisoned first).
void Poison(void* buf, size_t bytes);

// FNV-1a of the bytes: ranks compare digests to prove bit-identical results.
uint64_t Digest(const void* buf, size_t bytes, uint64_t h = 1469598103934665603ULL);

}  // namespace ddp::testing
