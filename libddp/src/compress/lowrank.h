// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The matrix arithmetic of PowerSGD (engine/powersgd.h): row-major float32 matrices, a fixed order
// of operations (the same bits on every machine for the same inputs), accumulation in float64.
// M is rows x cols; P is rows x r; Q is cols x r.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ddp::compress {

// p = m q.
void MultiplyRight(const float* m, size_t rows, size_t cols, const float* q, size_t r, float* p);
// q = m^T p.
void MultiplyTransposed(const float* m, size_t rows, size_t cols, const float* p, size_t r,
                        float* q);
// out = p q^T (out may not alias p or q).
void Product(const float* p, const float* q, size_t rows, size_t cols, size_t r, float* out);
// The columns of p made orthonormal, in order (modified Gram-Schmidt); a column that has nothing
// left of its own (a norm under 1e-30 of what it was, or zero) becomes zero.
void Orthogonalize(float* p, size_t rows, size_t r);
// `count` values in [-1, 1) from `seed` alone (splitmix64): PowerSGD's first Q, the same on every
// rank that gives the same seed.
void Seeded(uint64_t seed, float* out, size_t count);
// FNV-1a of `bytes`: a seed from a tensor's name that every rank computes alike.
uint64_t Fnv1a(const char* bytes, size_t length);

}  // namespace ddp::compress
