// Internal entry points beneath the CPU dispatch of reduce.h. Collectives call reduce.h; tests call
// these too, so every implementation is checked on a machine that can run it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ddp/types.h"

namespace ddp::reduce::internal {

// Combine and DivideBy for every type without the F16C path: auto-vectorized loops with the
// software f16/bf16 conversions (still compiled for AVX2 where the CPU has it).
void CombinePortable(DataType type, ReduceOp op, void* dst, const void* a, const void* b,
                     size_t count);
void DivideByPortable(DataType type, void* buf, size_t count, int64_t divisor);

// True when the CPU has AVX2 and F16C. The F16C conversions round to nearest even and quiet NaNs
// exactly like half.h, so the two paths give bit-identical results.
bool HaveF16c();

// f16 kernels converting with F16C; call only when HaveF16c(). Same contract as reduce.h.
void CombineHalfF16c(ReduceOp op, uint16_t* dst, const uint16_t* a, const uint16_t* b,
                     size_t count);
void DivideHalfF16c(uint16_t* buf, size_t count, int64_t divisor);

}  // namespace ddp::reduce::internal
