// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The table of kernels that each ISA's build (isa/*.cc) exports and reduce.cc dispatches through.
//
// Free of ddp/types.h on purpose: that pulls in absl and <iostream>, whose static initializer
// would be compiled with the build's -m options and run when the library loads, on any CPU.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ddp::reduce::internal {

// One element type's kernels, with reduce.h's contracts; arguments are validated by the caller.
struct TypeKernels {
  using CombineFn = void (*)(void* dst, const void* a, const void* b, size_t count);
  CombineFn sum;  // and average, which the caller finishes with divide_by
  CombineFn min;
  CombineFn max;
  CombineFn product;
  void (*divide_by)(void* buf, size_t count, int64_t divisor);  // divisor != 0
  void (*scale)(void* dst, const void* src, size_t count, double factor);
};

// float32 linear algebra for compression's PowerSGD (reduce.h's Dots, Axpys, Combination).
struct LinearKernels {
  void (*dots)(const float* x, const float* ys, size_t n, size_t r, float* out);
  void (*axpys)(const float* a, const float* x, float* ys, size_t n, size_t r);
  void (*combination)(const float* a, const float* xs, size_t n, size_t r, float* out);
};

struct KernelTable {
  TypeKernels f32, f64, f16, bf16, i8, u8, i32, i64;
  LinearKernels linear;
};

// isa/scalar.cc, isa/avx2.cc and isa/avx512.cc; the last two only in x86-64 builds, where
// DDP_REDUCE_X86_KERNELS is defined. Constant-initialized, so that no code of a build runs
// before the dispatch has checked that the CPU can run it.
extern constinit const KernelTable kScalarKernels;
extern constinit const KernelTable kAvx2Kernels;
extern constinit const KernelTable kAvx512Kernels;

}  // namespace ddp::reduce::internal
