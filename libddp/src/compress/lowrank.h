// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The matrix arithmetic of PowerSGD (engine/compressed_powersgd.cc) on row-major float32 arrays:
// M is rows x cols; its factors are kept transposed, each of their r columns a contiguous row:
// Pt is r x rows and Qt is r x cols (M ~ P Q^T). Loops the compiler vectorizes, in float32, in a
// fixed order of operations: the same bits on every machine for the same inputs, which is what
// keeps the ranks identical where they compute on the same (summed) factors.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ddp::compress {

// Pt = (M Q)^T: pt[k][i] = the dot product of M's row i with qt[k].
void MultiplyRight(const float* m, size_t rows, size_t cols, const float* qt, size_t r, float* pt);
// Qt = (M^T P)^T: qt[k][j] = the sum over i of m[i][j] pt[k][i].
void MultiplyTransposed(const float* m, size_t rows, size_t cols, const float* pt, size_t r,
                        float* qt);
// out = P Q^T (out may not alias pt or qt).
void Product(const float* pt, const float* qt, size_t rows, size_t cols, size_t r, float* out);
// PowerSGD's last step in one pass over M: lost = M - P Mine^T (what this rank's M loses: its
// part outside P's columns; 0 where that is not finite), then M = P Q^T (the summed
// approximation). `row` holds cols floats.
void Reconstruct(float* m, float* lost, const float* pt, const float* mine_t, const float* qt,
                 size_t rows, size_t cols, size_t r, float* row);
// P's columns (the rows of pt) made orthonormal, in order (modified Gram-Schmidt, accumulated in
// float64); a column that has nothing left of its own (a norm under 1e-30 of what it was, or
// zero) becomes zero.
void Orthogonalize(float* pt, size_t rows, size_t r);
// Whether Qt (r x cols) can start the next step: finite, and no column of Q all zeros (one
// that is would stay so: a zero or non-finite step makes one, and the next starts from a seed).
bool UsableWarmStart(const float* qt, size_t cols, size_t r);
// `count` values in [-1, 1) from `seed` alone (splitmix64): PowerSGD's first Q, the same on every
// rank that gives the same seed.
void Seeded(uint64_t seed, float* out, size_t count);
// FNV-1a of `bytes`: a seed from a tensor's name that every rank computes alike.
uint64_t Fnv1a(const char* bytes, size_t length);

}  // namespace ddp::compress
