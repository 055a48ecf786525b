// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The baseline build of the kernels (isa/kernels.inc): no -m options, so SSE2 on x86-64 and the
// target's baseline elsewhere, with the software f16/bf16 conversions. Runs on every CPU.
#define DDP_REDUCE_ISA scalar
#include "reduce/isa/kernels.inc"

namespace ddp::reduce::internal {

constinit const KernelTable kScalarKernels =
    scalar::MakeKernelTable<scalar::Blocks<scalar::SoftHalf>,
                            scalar::Blocks<scalar::SoftBFloat16>>();

}  // namespace ddp::reduce::internal
