// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The instruction-set dispatch beneath reduce.h. Collectives call reduce.h; tests and benchmarks
// call these too, so that every implementation is checked and measured on a machine that runs it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "ddp/types.h"

namespace ddp::reduce::internal {

// The builds of the kernels, from the baseline up. Each level's CPU requirements include those of
// the level below, so the supported ones are always a prefix of this list.
enum class Isa : uint8_t {
  // The portable build for the target's baseline (SSE2 on x86-64), auto-vectorized where the
  // compiler can, with software f16/bf16 conversions. The only one off x86-64.
  kScalar = 0,
  // AVX2, FMA and F16C (Haswell, Zen 1 and later); vector f16 and bf16 conversions.
  kAvx2 = 1,
  // AVX-512 F, BW and VL on 512-bit vectors (Skylake-SP, Ice Lake, Zen 4 and later).
  kAvx512 = 2,
};
inline constexpr int kNumIsas = 3;

// "scalar", "avx2", "avx512": the names DDP_REDUCE_ISA accepts.
const char* IsaName(Isa isa);

// Compiled into this library for this architecture, and this CPU and OS can run it.
bool IsaSupported(Isa isa);

// The highest supported ISA.
Isa BestIsa();

// The ISA the entry points of reduce.h use: BestIsa(), or what DDP_REDUCE_ISA asks for. Chosen
// on the first call, thread-safely; a request that cannot be honoured logs one warning then.
Isa ActiveIsa();

// What DDP_REDUCE_ISA=`requested` selects on a CPU whose best ISA is `best`. Empty and "auto"
// mean `best`; names are case-insensitive. A name above `best` falls back to `best`, as does an
// unknown name; `warning` then says why (and lists the choices), else it is empty.
struct IsaChoice {
  Isa isa;
  std::string warning;
};
IsaChoice ChooseIsa(absl::string_view requested, Isa best);

// reduce.h's Combine, DivideBy and Scale on the kernels of one ISA, which must be supported (the
// process aborts otherwise, rather than die of an illegal instruction).
void CombineWith(Isa isa, DataType type, ReduceOp op, void* dst, const void* a, const void* b,
                 size_t count);
void DivideByWith(Isa isa, DataType type, void* buf, size_t count, int64_t divisor);
void ScaleWith(Isa isa, DataType type, void* dst, const void* src, size_t count, double factor);
// reduce.h's Dots, Axpys and Combination on one ISA's kernels.
void DotsWith(Isa isa, const float* x, const float* ys, size_t n, size_t r, float* out);
void AxpysWith(Isa isa, const float* a, const float* x, float* ys, size_t n, size_t r);
void CombinationWith(Isa isa, const float* a, const float* xs, size_t n, size_t r, float* out);

}  // namespace ddp::reduce::internal
