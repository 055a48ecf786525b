// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Epilogue: how an allreduce's combined result is finished, decided in one place for every
// algorithm and backend (ring, recursive doubling, hierarchical, reduce-scatter, the shared-memory
// allreduce, MPI_Allreduce, the engine's fusion buffer, NCCL).
//
// Average is a sum divided by the number of ranks the engine counts (the set's size, a joined rank
// contributing the identity; or only the ranks with data, DDP_JOIN_AVERAGE=contributors); the
// engine's postscale factor multiplies after that. Every
// algorithm combines with Combining(op) and applies the epilogue exactly once to each element of
// the result, where it is cheapest: the ring on its own block before the all-gather, the
// shared-memory allreduce on the slice it reduced, the others on the whole result.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "ddp/types.h"

namespace ddp::reduce {

// The operation the combining kernels run for `op`: Average combines as Sum.
inline ReduceOp Combining(ReduceOp op) { return op == ReduceOp::kAverage ? ReduceOp::kSum : op; }

struct Epilogue {
  // Divide by this (Average: the contributing ranks). Integers truncate toward zero; f16 and
  // bf16 divide in f32.
  int64_t divisor = 1;
  // Multiply by this after the division (integers: in f64, truncated, saturated; reduce::Scale).
  double postscale = 1.0;

  // What `op` over `contributors` ranks, then `postscale`, needs.
  static Epilogue For(ReduceOp op, int contributors, double postscale = 1.0) {
    return {op == ReduceOp::kAverage ? std::max(contributors, 1) : 1, postscale};
  }
  bool trivial() const { return divisor == 1 && postscale == 1.0; }
  // The single factor a kernel that can only multiply applies (NCCL's scale kernel).
  double factor() const { return postscale / static_cast<double>(divisor); }

  // dst[i] = finished src[i] for i < count; dst may equal src (in place). Floating types: without
  // a postscale it divides (the exact quotient, rounded once); with one, it multiplies by
  // factor(). Integers: the truncated quotient, then the postscale.
  void Apply(DataType type, void* dst, const void* src, size_t count) const;
  void Apply(DataType type, void* data, size_t count) const { Apply(type, data, data, count); }
};

}  // namespace ddp::reduce
