// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// PowerSGD (Vogels, Karimireddy and Jaggi, NeurIPS 2019) in the engine: each matrix M (its
// contribution plus its residual) is approximated at rank r as P Q^T with one step of subspace
// iteration from the last Q (warm start): P = sum over ranks of M Q, orthogonalized; Q = sum of
// M^T P; the sum of the ranks' M is then taken to be P Q^T. Only P and Q travel (allreduced in
// float32): (rows + cols) r floats instead of rows x cols. Every rank orthogonalizes the same
// summed P, so all hold the same bits. What a rank's M loses, M - P (M^T P)^T (its part outside
// P's columns), is its residual: summed over ranks, exactly what the approximation lost.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "collectives/collectives.h"
#include "common/status.h"
#include "compress/lowrank.h"
#include "engine/compressed.h"

namespace ddp::engine {
namespace {

struct Matrix {
  std::string key;  // its Q's warm start: "process set/name#shape"
  size_t offset;    // in data_
  size_t rows;
  size_t cols;
  size_t p_at;  // in p_ (Pt: r x rows) and in q_/mine_ (Qt: r x cols)
  size_t q_at;
  size_t response;  // its index in the batch
  size_t within;    // its offset in that tensor (a group's members are end to end)
};

std::vector<Matrix> Matrices(const ProcessSet& set, const std::vector<Response*>& batch, size_t r) {
  std::vector<Matrix> out;
  size_t offset = 0, p_at = 0, q_at = 0;
  for (size_t b = 0; b < batch.size(); ++b) {
    const Response* resp = batch[b];
    size_t within = 0;
    for (size_t k = 0; k < resp->meta.shapes.size(); ++k) {
      const std::vector<int64_t>& shape = resp->meta.shapes[k];
      const size_t count = ElementCount(shape);
      // Checked at submission: two or more dimensions, r <= min(rows, cols).
      const auto rows = static_cast<size_t>(shape[0]);
      const size_t cols = rows == 0 ? 0 : count / rows;
      out.push_back({absl::StrCat(set.id, "/", resp->name, "#", k), offset, rows, cols, p_at, q_at,
                     b, within});
      offset += count;
      within += count;
      p_at += rows * r;
      q_at += cols * r;
    }
  }
  return out;
}

}  // namespace

std::vector<float*> CompressedAllreduces::LossTargets(ProcessSet& set,
                                                      const std::vector<Response*>& batch,
                                                      const std::vector<LocalOp*>& ops) {
  std::vector<float*> out(batch.size());
  for (size_t b = 0; b < batch.size(); ++b) {
    if (ops[b] == nullptr) continue;
    std::vector<float>& residual = residuals_[Key(set, batch[b]->name)];
    // Overwritten by the step; zeros if it fails before (a new size never keeps old values).
    if (residual.size() != batch[b]->meta.ElementCount()) {
      residual.assign(batch[b]->meta.ElementCount(), 0.0f);
    }
  }
  // Pointers once every entry exists (a later insertion may move the map's vectors, though not
  // their elements).
  size_t offset = 0;
  for (size_t b = 0; b < batch.size(); ++b) {
    out[b] =
        ops[b] != nullptr ? residuals_[Key(set, batch[b]->name)].data() : lost_.data() + offset;
    offset += batch[b]->meta.ElementCount();
  }
  return out;
}

absl::Status CompressedAllreduces::LowRank(ProcessSet& set, const std::vector<Response*>& batch,
                                           const std::vector<LocalOp*>& ops, int rank) {
  const auto r = static_cast<size_t>(rank);
  const std::vector<Matrix> matrices = Matrices(set, batch, r);
  // Each matrix's loss goes straight into its tensor's residual; a joined rank's (it has no
  // tensor of its own) into lost_, which is dropped.
  const std::vector<float*> losses = LossTargets(set, batch, ops);
  size_t p_size = 0, q_size = 0;
  for (const Matrix& m : matrices) {
    p_size = m.p_at + m.rows * r;
    q_size = m.q_at + m.cols * r;
  }
  p_.assign(p_size, 0.0f);
  q_.assign(q_size, 0.0f);
  mine_.assign(q_size, 0.0f);
  for (const Matrix& m : matrices) {
    float* q = q_.data() + m.q_at;
    auto it = qs_.find(m.key);
    if (it != qs_.end() && it->second.size() == m.cols * r) {
      std::copy(it->second.begin(), it->second.end(), q);
    } else {  // the first step (or a new shape): the same seeded Q on every rank
      compress::Seeded(compress::Fnv1a(m.key.data(), m.key.size()), q, m.cols * r);
    }
    compress::MultiplyRight(data_.data() + m.offset, m.rows, m.cols, q, r, p_.data() + m.p_at);
  }
  DDP_RETURN_IF_ERROR(collectives::Allreduce(*set.comm, p_.data(), p_.data(), p_.size(),
                                             DataType::kFloat32, ReduceOp::kSum));
  for (const Matrix& m : matrices) {
    compress::Orthogonalize(p_.data() + m.p_at, m.rows, r);
    compress::MultiplyTransposed(data_.data() + m.offset, m.rows, m.cols, p_.data() + m.p_at, r,
                                 mine_.data() + m.q_at);
  }
  std::copy(mine_.begin(), mine_.end(), q_.begin());
  DDP_RETURN_IF_ERROR(collectives::Allreduce(*set.comm, q_.data(), q_.data(), q_.size(),
                                             DataType::kFloat32, ReduceOp::kSum));
  for (const Matrix& m : matrices) {
    approx_.resize(m.cols);
    compress::Reconstruct(data_.data() + m.offset, losses[m.response] + m.within,
                          p_.data() + m.p_at, mine_.data() + m.q_at, q_.data() + m.q_at, m.rows,
                          m.cols, r, approx_.data());
    // Q, the same on every rank, starts the next step; if it cannot (a zero or non-finite
    // step), every rank alike starts the next from the seed.
    if (compress::UsableWarmStart(q_.data() + m.q_at, m.cols, r)) {
      qs_[m.key].assign(q_.begin() + static_cast<std::ptrdiff_t>(m.q_at),
                        q_.begin() + static_cast<std::ptrdiff_t>(m.q_at + m.cols * r));
    } else {
      qs_.erase(m.key);
    }
  }
  return absl::OkStatus();
}

}  // namespace ddp::engine
