// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// CompressedAllreduces (compressed.h).
#include "engine/compressed.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/collectives.h"
#include "common/status.h"
#include "compress/codec.h"
#include "engine/operations.h"
#include "nccl/device.h"
#include "reduce/epilogue.h"
#include "reduce/reduce.h"

namespace ddp::engine {
namespace {

// `count` values of `type` (floating point) as float32, times `scale`.
void ToFloatsScaled(DataType type, const void* in, float* out, size_t count, double scale) {
  switch (type) {
    case DataType::kFloat32:
      std::memcpy(out, in, count * sizeof(float));
      break;
    case DataType::kFloat64: {
      const auto* x = static_cast<const double*>(in);
      for (size_t i = 0; i < count; ++i) out[i] = static_cast<float>(x[i] * scale);
      return;
    }
    case DataType::kFloat16:
      reduce::HalvesToFloats(static_cast<const uint16_t*>(in), out, count);
      break;
    case DataType::kBFloat16:
      reduce::BFloat16sToFloats(static_cast<const uint16_t*>(in), out, count);
      break;
    default:
      return;  // refused at submission (CheckCompression)
  }
  if (scale != 1.0) {
    const auto f = static_cast<float>(scale);
    for (size_t i = 0; i < count; ++i) out[i] *= f;
  }
}

// `count` values of `type` (floating point) as float32, times `scale`, plus `residual` where it is
// not null (float32 unscaled, the common case: one pass over memory).
void ToFloats(DataType type, const void* in, float* out, size_t count, double scale,
              const float* residual) {
  if (type == DataType::kFloat32 && scale == 1.0 && residual != nullptr) {
    const auto* g = static_cast<const float*>(in);
    for (size_t i = 0; i < count; ++i) out[i] = g[i] + residual[i];
    return;
  }
  ToFloatsScaled(type, in, out, count, scale);
  if (residual != nullptr) {
    for (size_t i = 0; i < count; ++i) out[i] += residual[i];
  }
}

void FromFloats(DataType type, const float* in, void* out, size_t count) {
  switch (type) {
    case DataType::kFloat32:
      if (out != in) std::memcpy(out, in, count * sizeof(float));
      return;
    case DataType::kFloat64: {
      auto* y = static_cast<double*>(out);
      for (size_t i = 0; i < count; ++i) y[i] = in[i];
      return;
    }
    case DataType::kFloat16:
      reduce::FloatsToHalves(in, static_cast<uint16_t*>(out), count);
      return;
    case DataType::kBFloat16:
      reduce::FloatsToBFloat16s(in, static_cast<uint16_t*>(out), count);
      return;
    default:
      return;
  }
}

// Residuals between the engines of one process over an elastic reset.
struct Carry {
  std::mutex mu;
  bool on = false;  // CarryCompressionResidualsOverReset was called, no engine has started since
  absl::flat_hash_map<std::string, std::vector<float>> parked;
};

Carry& TheCarry() {
  static Carry* carry = new Carry;  // never destroyed: engines may stop during exit
  return *carry;
}

}  // namespace

CompressedAllreduces::CompressedAllreduces(Executor& executor, CudaBackend& cuda)
    : executor_(executor), cuda_(cuda) {
  Carry& carry = TheCarry();
  std::lock_guard<std::mutex> lock(carry.mu);
  if (!carry.on) return;
  carry.on = false;
  adopted_ = true;
  residuals_ = std::move(carry.parked);
  carry.parked.clear();
  if (!residuals_.empty()) executor_.Residuals(residual_floats());
}

CompressedAllreduces::~CompressedAllreduces() {
  Carry& carry = TheCarry();
  std::lock_guard<std::mutex> lock(carry.mu);
  // An engine that took residuals and never ran (its job failed to form, and the worker tries
  // the next generation) hands them on as it got them.
  if (adopted_ && !ran_) carry.on = true;
  if (!carry.on) return;
  for (auto& [key, residual] : residuals_) carry.parked.try_emplace(key, std::move(residual));
}

std::string CompressedAllreduces::Key(const ProcessSet& set, const std::string& name) {
  return absl::StrCat(set.id, "/", name);
}

size_t CompressedAllreduces::residual_floats() const {
  size_t n = 0;
  for (const auto& [key, residual] : residuals_) n += residual.size();
  return n;
}

absl::StatusOr<const void*> CompressedAllreduces::HostInput(const LocalOp& op, size_t k,
                                                            size_t bytes) {
  if (op.meta.device != kCudaMemory) return op.inputs[k];
  DDP_ASSIGN_OR_RETURN(std::shared_ptr<nccl::Backend> backend, cuda_.Get());
  staging_.resize(bytes);
  DDP_RETURN_IF_ERROR(backend->StageOut(staging_.data(), op.inputs[k], bytes, op.ready));
  return static_cast<const void*>(staging_.data());
}

absl::Status CompressedAllreduces::Output(const LocalOp& op, size_t k, DataType type,
                                          const float* y, size_t count) {
  if (op.meta.device != kCudaMemory) {
    FromFloats(type, y, op.outputs[k], count);
    return absl::OkStatus();
  }
  DDP_ASSIGN_OR_RETURN(std::shared_ptr<nccl::Backend> backend, cuda_.Get());
  const size_t bytes = count * DataTypeSize(type);
  if (type == DataType::kFloat32) return backend->StageIn(op.outputs[k], y, bytes);
  staging_.resize(bytes);
  FromFloats(type, y, staging_.data(), count);
  return backend->StageIn(op.outputs[k], staging_.data(), bytes);
}

absl::Status CompressedAllreduces::Pack(ProcessSet& set, const std::vector<Response*>& batch,
                                        std::vector<LocalOp*>& ops) {
  const DataType type = batch[0]->meta.type;
  size_t offset = 0;
  for (const Response* r : batch) {
    LocalOp* local = executor_.Local(set, r->name);
    ops.push_back(local);
    const size_t n = r->meta.ElementCount();
    float* x = data_.data() + offset;
    if (local == nullptr) {  // joined: contributes nothing to the sum
      std::fill(x, x + n, 0.0f);
      offset += n;
      continue;
    }
    auto it = residuals_.find(Key(set, r->name));
    const float* residual =
        it != residuals_.end() && it->second.size() == n ? it->second.data() : nullptr;
    size_t at = 0;
    for (size_t k = 0; k < r->meta.shapes.size(); ++k) {
      const size_t count = ElementCount(r->meta.shapes[k]);
      absl::StatusOr<const void*> in = HostInput(*local, k, count * DataTypeSize(type));
      if (!in.ok()) return Annotate(in.status(), absl::StrCat("CUDA tensor '", r->name, "'"));
      ToFloats(type, *in, x + at, count, r->meta.prescale,
               residual == nullptr ? nullptr : residual + at);
      at += count;
    }
    offset += n;
  }
  return absl::OkStatus();
}

absl::Status CompressedAllreduces::Unpack(ProcessSet& set, const std::vector<Response*>& batch,
                                          const std::vector<LocalOp*>& ops, int active,
                                          bool keep_lost) {
  const DataType type = batch[0]->meta.type;
  size_t offset = 0;
  for (size_t b = 0; b < batch.size(); ++b) {
    const Response* r = batch[b];
    const size_t n = r->meta.ElementCount();
    if (ops[b] != nullptr) {
      // What this step's encodings lost: added to the tensor's next contribution (a new size
      // starts afresh).
      if (keep_lost) {
        residuals_[Key(set, r->name)].assign(
            lost_.begin() + static_cast<std::ptrdiff_t>(offset),
            lost_.begin() + static_cast<std::ptrdiff_t>(offset + n));
      }
      float* y = data_.data() + offset;
      const reduce::Epilogue epilogue =
          reduce::Epilogue::For(r->meta.op, active, r->meta.postscale);
      // float32 in host memory: the epilogue writes the outputs (one pass); else it finishes y,
      // which is then converted or copied out.
      const bool direct = type == DataType::kFloat32 && ops[b]->meta.device != kCudaMemory;
      if (!direct) epilogue.Apply(DataType::kFloat32, y, n);
      size_t at = 0;
      for (size_t k = 0; k < r->meta.shapes.size(); ++k) {
        const size_t count = ElementCount(r->meta.shapes[k]);
        if (direct) {
          epilogue.Apply(DataType::kFloat32, ops[b]->outputs[k], y + at, count);
        } else {
          const absl::Status out = Output(*ops[b], k, type, y + at, count);
          if (!out.ok()) return Annotate(out, absl::StrCat("CUDA tensor '", r->name, "'"));
        }
        at += count;
      }
    }
    offset += n;
  }
  return absl::OkStatus();
}

absl::Status CompressedAllreduces::Run(ProcessSet& set, const std::vector<Response*>& batch,
                                       int active) {
  ran_ = true;
  const Compression compression = batch[0]->meta.compression;
  size_t total = 0;
  for (const Response* r : batch) total += r->meta.ElementCount();
  data_.resize(total);
  const bool low_rank = compression.codec == Codec::kPowerSgd;
  if (low_rank) {
    lost_.resize(total);  // only a joined rank's losses, overwritten and dropped
  } else {
    lost_.assign(total, 0.0f);  // the encodings add to it
  }
  const int64_t t0 = executor_.Now();
  std::vector<LocalOp*> ops;
  absl::Status s = Pack(set, batch, ops);
  const int64_t t1 = executor_.Now();
  const uint64_t sent = set.comm->bytes_sent();
  const uint64_t received = set.comm->bytes_received();
  std::optional<reduce::CombineTimer> timer;
  if (executor_.timing()) timer.emplace();
  const compress::Coder* coder = compress::CoderFor(compression.codec);
  if (!s.ok()) {
    // a CUDA input that could not be read: the batch fails as it is
  } else if (low_rank) {
    s = LowRank(set, batch, ops, compression.rank);
  } else if (coder != nullptr) {
    s = collectives::CompressedAllreduce(*set.comm, data_.data(), total, *coder, lost_.data());
  } else {
    s = absl::InternalError("a compressed allreduce without a codec");
  }
  if (!s.ok()) {
    return Annotate(s, absl::StrCat("allreduce (", CompressionName(compression),
                                    " compression) of ", TensorNames(batch)));
  }
  const uint64_t out = set.comm->bytes_sent() - sent;
  const uint64_t in = set.comm->bytes_received() - received;
  executor_.Wire(compression, out, in);
  const int64_t t2 = executor_.Now();
  s = Unpack(set, batch, ops, active, !low_rank);
  if (!s.ok()) return Annotate(s, absl::StrCat("allreduce of ", TensorNames(batch)));
  executor_.Residuals(residual_floats());
  const int64_t t3 = executor_.Now();
  const std::string codec_name(CompressionName(compression));
  executor_.Collective("ALLREDUCE", t1, t2,
                       {{"tensors", TensorNames(batch)},
                        {"fused_tensors", absl::StrCat(batch.size())},
                        {"compression", codec_name},
                        {"bytes", absl::StrCat(total * DataTypeSize(batch[0]->meta.type))},
                        {"sent_bytes", absl::StrCat(out)},
                        {"received_bytes", absl::StrCat(in)},
                        {"split", "transfer and reduce"}},
                       timer ? &*timer : nullptr);
  for (size_t b = 0; b < batch.size(); ++b) {
    const Response* r = batch[b];
    if (ops[b] != nullptr) executor_.Waited(*ops[b], *r, t0);
    executor_.Phase(r->name, "COMPRESS_IN", t0, t1, {{"compression", codec_name}});
    executor_.Phase(r->name, "ALLREDUCE", t1, t2,
                    {{"compression", codec_name},
                     {"fused_tensors", absl::StrCat(batch.size())},
                     {"sent_bytes", absl::StrCat(out)},
                     {"received_bytes", absl::StrCat(in)}});
    executor_.Phase(r->name, "DECOMPRESS_OUT", t2, t3, {{"compression", codec_name}});
    executor_.Finish(set, r->name, absl::OkStatus());
  }
  executor_.Ran(batch.size(), total * DataTypeSize(batch[0]->meta.type), batch.size() > 1);
  return absl::OkStatus();
}

}  // namespace ddp::engine

namespace ddp {

void CarryCompressionResidualsOverReset() {
  engine::Carry& carry = engine::TheCarry();
  std::lock_guard<std::mutex> lock(carry.mu);
  carry.on = true;
}

}  // namespace ddp
