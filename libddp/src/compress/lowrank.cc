// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// PowerSGD's matrix arithmetic (lowrank.h).
#include "compress/lowrank.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "compress/codec.h"
#include "reduce/reduce.h"

namespace ddp::compress {
namespace {

// A dot product's independent partial sums in float64 (Orthogonalize's), added in lane order at
// the end, and the length of a difference's pieces: compile-time trip counts the vectorizer takes
// at -O2, with the same order of operations whatever the vector width. The float32 products are
// the reduction kernels' (reduce::Dots and Axpy: the widest ISA this CPU runs, alike in bits).
constexpr size_t kLanes = 16;
constexpr size_t kChunk = 64;

double Dot(const float* __restrict x, const float* __restrict y, size_t n) {
  double lanes[kLanes] = {};
  const size_t full = n - n % kLanes;
  for (size_t j = 0; j < full; j += kLanes) {
    for (size_t l = 0; l < kLanes; ++l) {
      lanes[l] += static_cast<double>(x[j + l]) * static_cast<double>(y[j + l]);
    }
  }
  for (size_t j = full; j < n; ++j) {
    lanes[j - full] += static_cast<double>(x[j]) * static_cast<double>(y[j]);
  }
  double sum = 0;
  for (size_t l = 0; l < kLanes; ++l) sum += lanes[l];
  return sum;
}

[[gnu::always_inline]] inline void DifferenceChunk(float* __restrict out, const float* __restrict x,
                                                   const float* __restrict y) {
  for (size_t j = 0; j < kChunk; ++j) out[j] = FiniteOrZero(x[j] - y[j]);
}

// out = x - y over n values, a non-finite difference as 0 (codec.h's FiniteOrZero).
void Difference(float* __restrict out, const float* __restrict x, const float* __restrict y,
                size_t n) {
  const size_t full = n - n % kChunk;
  for (size_t j = 0; j < full; j += kChunk) DifferenceChunk(out + j, x + j, y + j);
  for (size_t j = full; j < n; ++j) out[j] = FiniteOrZero(x[j] - y[j]);
}

// P's row i (column i of pt): r values, strided in pt.
void RowOf(const float* pt, size_t rows, size_t r, size_t i, float* a) {
  for (size_t k = 0; k < r; ++k) a[k] = pt[k * rows + i];
}

}  // namespace

void MultiplyRight(const float* m, size_t rows, size_t cols, const float* qt, size_t r, float* pt) {
  std::vector<float> dots(r);
  for (size_t i = 0; i < rows; ++i) {
    reduce::Dots(m + i * cols, qt, cols, r, dots.data());
    for (size_t k = 0; k < r; ++k) pt[k * rows + i] = dots[k];
  }
}

void MultiplyTransposed(const float* m, size_t rows, size_t cols, const float* pt, size_t r,
                        float* qt) {
  std::fill(qt, qt + r * cols, 0.0f);
  std::vector<float> a(r);
  for (size_t i = 0; i < rows; ++i) {
    RowOf(pt, rows, r, i, a.data());
    reduce::Axpys(a.data(), m + i * cols, qt, cols, r);
  }
}

void Product(const float* pt, const float* qt, size_t rows, size_t cols, size_t r, float* out) {
  std::vector<float> a(r);
  for (size_t i = 0; i < rows; ++i) {
    RowOf(pt, rows, r, i, a.data());
    reduce::Combination(a.data(), qt, cols, r, out + i * cols);
  }
}

void Reconstruct(float* m, float* lost, const float* pt, const float* mine_t, const float* qt,
                 size_t rows, size_t cols, size_t r, float* row) {
  std::vector<float> a(r);
  for (size_t i = 0; i < rows; ++i) {
    float* x = m + i * cols;
    RowOf(pt, rows, r, i, a.data());
    reduce::Combination(a.data(), mine_t, cols, r, row);
    Difference(lost + i * cols, x, row, cols);
    reduce::Combination(a.data(), qt, cols, r, x);
  }
}

void Orthogonalize(float* pt, size_t rows, size_t r) {
  for (size_t k = 0; k < r; ++k) {
    float* p = pt + k * rows;
    const double before = Dot(p, p, rows);
    for (size_t l = 0; l < k; ++l) {  // take out the earlier (orthonormal) columns
      const float* e = pt + l * rows;
      const double dot = Dot(p, e, rows);
      for (size_t i = 0; i < rows; ++i) p[i] = static_cast<float>(p[i] - dot * e[i]);
    }
    const double norm = std::sqrt(Dot(p, p, rows));
    const bool left = norm > 0.0 && norm * norm > 1e-30 * before;
    for (size_t i = 0; i < rows; ++i) p[i] = left ? static_cast<float>(p[i] / norm) : 0.0f;
  }
}

bool UsableWarmStart(const float* qt, size_t cols, size_t r) {
  for (size_t k = 0; k < r; ++k) {
    bool nonzero = false;
    for (size_t j = 0; j < cols; ++j) {
      const float v = qt[k * cols + j];
      if (!std::isfinite(v)) return false;
      nonzero = nonzero || v != 0.0f;
    }
    if (!nonzero) return false;
  }
  return true;
}

void Seeded(uint64_t seed, float* out, size_t count) {
  uint64_t state = seed;
  for (size_t i = 0; i < count; ++i) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    // The top 24 bits as a float in [-1, 1): exact, so every machine agrees.
    out[i] = static_cast<float>(static_cast<double>(z >> 40) / 8388608.0 - 1.0);
  }
}

uint64_t Fnv1a(const char* bytes, size_t length) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < length; ++i) {
    h ^= static_cast<unsigned char>(bytes[i]);
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace ddp::compress
