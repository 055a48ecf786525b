// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// PowerSGD's matrix arithmetic (lowrank.h).
#include "compress/lowrank.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace ddp::compress {

void MultiplyRight(const float* m, size_t rows, size_t cols, const float* q, size_t r, float* p) {
  std::vector<double> acc(r);
  for (size_t i = 0; i < rows; ++i) {
    std::fill(acc.begin(), acc.end(), 0.0);
    const float* row = m + i * cols;
    for (size_t j = 0; j < cols; ++j) {
      const double x = row[j];
      const float* qj = q + j * r;
      for (size_t k = 0; k < r; ++k) acc[k] += x * qj[k];
    }
    for (size_t k = 0; k < r; ++k) p[i * r + k] = static_cast<float>(acc[k]);
  }
}

void MultiplyTransposed(const float* m, size_t rows, size_t cols, const float* p, size_t r,
                        float* q) {
  std::vector<double> acc(cols * r, 0.0);
  for (size_t i = 0; i < rows; ++i) {
    const float* row = m + i * cols;
    const float* pi = p + i * r;
    for (size_t j = 0; j < cols; ++j) {
      const double x = row[j];
      double* qj = acc.data() + j * r;
      for (size_t k = 0; k < r; ++k) qj[k] += x * pi[k];
    }
  }
  for (size_t i = 0; i < cols * r; ++i) q[i] = static_cast<float>(acc[i]);
}

void Product(const float* p, const float* q, size_t rows, size_t cols, size_t r, float* out) {
  for (size_t i = 0; i < rows; ++i) {
    const float* pi = p + i * r;
    float* row = out + i * cols;
    for (size_t j = 0; j < cols; ++j) {
      const float* qj = q + j * r;
      double sum = 0.0;
      for (size_t k = 0; k < r; ++k) sum += static_cast<double>(pi[k]) * qj[k];
      row[j] = static_cast<float>(sum);
    }
  }
}

void Orthogonalize(float* p, size_t rows, size_t r) {
  for (size_t k = 0; k < r; ++k) {
    double before = 0.0;
    for (size_t i = 0; i < rows; ++i) before += static_cast<double>(p[i * r + k]) * p[i * r + k];
    for (size_t l = 0; l < k; ++l) {  // take out the earlier (orthonormal) columns
      double dot = 0.0;
      for (size_t i = 0; i < rows; ++i) dot += static_cast<double>(p[i * r + k]) * p[i * r + l];
      for (size_t i = 0; i < rows; ++i) {
        p[i * r + k] = static_cast<float>(p[i * r + k] - dot * p[i * r + l]);
      }
    }
    double norm = 0.0;
    for (size_t i = 0; i < rows; ++i) norm += static_cast<double>(p[i * r + k]) * p[i * r + k];
    norm = std::sqrt(norm);
    const bool left = norm > 0.0 && norm * norm > 1e-30 * before;
    for (size_t i = 0; i < rows; ++i) {
      p[i * r + k] = left ? static_cast<float>(p[i * r + k] / norm) : 0.0f;
    }
  }
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
