// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Element-wise CUDA kernels the NCCL backend needs around its collectives (kernels.cu). Plain
// types only: `stream` is a cudaStream_t. Each returns the launch's cudaError_t as an int.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ddp/types.h"

namespace ddp::nccl::kernels {

// dst[i] = src[i] * factor, floating types (f16/bf16 in f32, f64 in f64); dst may equal src.
int Scale(DataType type, void* dst, const void* src, size_t count, double factor, void* stream);
// buf[i] /= divisor for integer types, truncating toward zero (an integer average).
int DivideInt(DataType type, void* buf, size_t count, int64_t divisor, void* stream);
// dst[i] = the identity of `op` (what a joined rank contributes).
int FillIdentity(DataType type, ReduceOp op, void* dst, size_t count, void* stream);

}  // namespace ddp::nccl::kernels
