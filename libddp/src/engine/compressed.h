// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Allreduces with compression (TensorMeta::compression, docs/compression.md): a fused batch
// converted to float32, each tensor's error-feedback residual added, reduced by
// collectives::CompressedAllreduce (elementwise codecs) or by PowerSGD (LowRank), and what the
// encodings lost kept for the tensor's next one.
#pragma once

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/executor.h"
#include "engine/state.h"

namespace ddp::engine {

class CudaBackend;  // operations.h

class CompressedAllreduces {
 public:
  // Starts with the residuals the engines before it left (CarryCompressionResidualsOverReset).
  // CUDA tensors are staged through host memory by `cuda`'s backend.
  CompressedAllreduces(Executor& executor, CudaBackend& cuda);
  // Leaves its residuals for the next engine when asked to.
  ~CompressedAllreduces();
  CompressedAllreduces(const CompressedAllreduces&) = delete;
  CompressedAllreduces& operator=(const CompressedAllreduces&) = delete;
  // The batch (fusible: one compression, dtype and op) over `active` contributing ranks.
  absl::Status Run(ProcessSet& set, const std::vector<Response*>& batch, int active);
  // Floats kept for error feedback (every compressed tensor's residual).
  size_t residual_floats() const;

 private:
  // residuals_'s key of a tensor: "process set/name".
  static std::string Key(const ProcessSet& set, const std::string& name);
  // The batch end to end in data_ as float32: each tensor prescaled, plus its residual.
  absl::Status Pack(ProcessSet& set, const std::vector<Response*>& batch,
                    std::vector<LocalOp*>& ops);
  // Input k of `op` in host memory: itself, or, for a CUDA tensor, a copy in staging_ once its
  // producer's stream has reached the submission.
  absl::StatusOr<const void*> HostInput(const LocalOp& op, size_t k, size_t bytes);
  // `count` float32 results into output k of `op` as its dtype (a CUDA tensor's through
  // staging_, copied to the device before this returns).
  absl::Status Output(const LocalOp& op, size_t k, DataType type, const float* y, size_t count);
  // PowerSGD of data_'s matrices (each tensor shape: its first dimension by the rest) at `rank`:
  // data_ becomes the approximation of their sum, each tensor's residual what this rank's
  // approximation lost (compressed_powersgd.cc).
  absl::Status LowRank(ProcessSet& set, const std::vector<Response*>& batch,
                       const std::vector<LocalOp*>& ops, int rank);
  // Where LowRank puts each tensor's loss: its residual, sized to it (lost_ for a joined rank).
  std::vector<float*> LossTargets(ProcessSet& set, const std::vector<Response*>& batch,
                                  const std::vector<LocalOp*>& ops);
  // The result into each tensor's output; with `keep_lost`, its share of lost_ kept as its
  // residual (the elementwise codecs; PowerSGD writes the residuals itself).
  absl::Status Unpack(ProcessSet& set, const std::vector<Response*>& batch,
                      const std::vector<LocalOp*>& ops, int active, bool keep_lost);

  Executor& executor_;
  CudaBackend& cuda_;
  std::vector<float> data_;
  std::vector<float> lost_;
  std::vector<char> staging_;  // a CUDA tensor's input or output on its way through the host
  // By "process set/tensor name": what the last encodings of it lost (reset on a size change).
  absl::flat_hash_map<std::string, std::vector<float>> residuals_;
  // PowerSGD: each matrix's last Q (its warm start), by "process set/tensor name#shape".
  absl::flat_hash_map<std::string, std::vector<float>> qs_;
  std::vector<float> p_, q_, mine_, approx_;
  bool adopted_ = false;  // it started with carried residuals
  bool ran_ = false;      // it has run a compressed allreduce
};

}  // namespace ddp::engine
