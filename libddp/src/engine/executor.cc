// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Executor: batches, the table of operations by device, and what they share.
#include "engine/executor.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "ddp/errors.h"
#include "reduce/reduce.h"

namespace ddp::engine {
namespace {

bool Fusible(const Response& a, const Response& b) {
  return b.error.ok() && b.meta.kind == OpKind::kAllreduce && a.meta.type == b.meta.type &&
         a.meta.op == b.meta.op && a.meta.device == b.meta.device &&
         a.meta.compression == b.meta.compression;
}

size_t DeviceIndex(int32_t device) { return device == kCpuMemory ? 0 : 1; }

}  // namespace

std::string TensorNames(const std::vector<Response*>& batch) {
  constexpr size_t kNamed = 4;
  std::vector<std::string> names;
  for (size_t i = 0; i < batch.size() && i < kNamed; ++i) names.push_back(batch[i]->name);
  std::string text = absl::StrJoin(names, ", ");
  if (batch.size() > kNamed) absl::StrAppend(&text, " and ", batch.size() - kNamed, " more");
  return text;
}

SplitLayout AllgatherLayout(const TensorMeta& meta, const std::vector<int64_t>& first_dims) {
  const std::vector<int64_t>& shape = meta.shapes[0];
  const uint64_t row = ElementCount({shape.begin() + 1, shape.end()});
  SplitLayout layout;
  int64_t rows = 0;
  for (int64_t d : first_dims) {
    layout.counts.push_back(static_cast<size_t>(static_cast<uint64_t>(d) * row));
    rows += d;
  }
  layout.output_shape = shape;
  layout.output_shape[0] = rows;
  return layout;
}

SplitLayout ReduceScatterLayout(const TensorMeta& meta, int n, int me) {
  const std::vector<int64_t>& shape = meta.shapes[0];
  const uint64_t row = ElementCount({shape.begin() + 1, shape.end()});
  SplitLayout layout;
  for (int i = 0; i < n; ++i) {
    const int64_t rows = shape[0] / n + (i < shape[0] % n ? 1 : 0);
    layout.counts.push_back(static_cast<size_t>(static_cast<uint64_t>(rows) * row));
    if (i == me) {
      layout.output_shape = shape;
      layout.output_shape[0] = rows;
    }
  }
  return layout;
}

Executor::Executor(Timeline* timeline, StatsBox* stats, FlightRecorder* recorder,
                   int64_t fusion_threshold, std::function<void(int, const std::string&)> finished)
    : timeline_(timeline),
      stats_(stats),
      recorder_(recorder),
      fusion_threshold_(fusion_threshold),
      finished_(std::move(finished)) {}

void Executor::SetOperations(int32_t device, std::unique_ptr<DeviceOperations> operations) {
  operations_[DeviceIndex(device)] = std::move(operations);
}

absl::Status Executor::Execute(ProcessSet& set, std::vector<Response>& responses, int active) {
  std::vector<bool> taken(responses.size(), false);  // already run as part of an earlier batch
  for (size_t i = 0; i < responses.size(); ++i) {
    if (taken[i]) continue;
    Response& r = responses[i];
    if (!r.error.ok()) {
      Finish(set, r.name, r.error);
      continue;
    }
    // Compressed allreduces run on the host (CUDA tensors staged through host memory:
    // compressed.h), their codecs on the CPU.
    const bool on_host = r.meta.kind == OpKind::kAllreduce && !r.meta.compression.none();
    DeviceOperations* ops = operations_[DeviceIndex(on_host ? kCpuMemory : r.meta.device)].get();
    if (ops == nullptr) {
      Finish(set, r.name, absl::UnimplementedError("no operations for this memory"));
      continue;
    }
    if (r.meta.kind != OpKind::kAllreduce) {
      LocalOp* op = Local(set, r.name);
      if (op == nullptr) {
        // Only a joined rank runs tensors it did not submit, and only allreduces reach it.
        return absl::InternalError(absl::StrCat(OpKindName(r.meta.kind), " '", r.name,
                                                "' was agreed without this rank's submission"));
      }
      recorder_->Started(op->flight_id);
      DDP_RETURN_IF_ERROR(ops->Run(set, r, *op));
      continue;
    }
    // A batch: this allreduce and every later compatible one of the round (same dtype, op and
    // memory, wherever it stands in the list) that still fits under the threshold. Every rank
    // has the same list, so every rank forms the same batches. A group is one unit, fused even
    // when it alone exceeds the threshold.
    std::vector<Response*> batch = {&r};
    uint64_t bytes = r.meta.Bytes();
    for (size_t j = i + 1; j < responses.size(); ++j) {
      if (!taken[j] && Fusible(r, responses[j]) &&
          bytes + responses[j].meta.Bytes() <= static_cast<uint64_t>(fusion_threshold_)) {
        bytes += responses[j].meta.Bytes();
        batch.push_back(&responses[j]);
        taken[j] = true;
      }
    }
    for (const Response* member : batch) {
      if (const LocalOp* op = Local(set, member->name); op != nullptr) {
        recorder_->Started(op->flight_id);
      }
    }
    DDP_RETURN_IF_ERROR(ops->Allreduce(set, batch, active));
  }
  return absl::OkStatus();
}

LocalOp* Executor::Local(ProcessSet& set, const std::string& name) {
  auto it = set.pending.find(name);
  return it == set.pending.end() ? nullptr : it->second.get();
}

void Executor::Finish(ProcessSet& set, const std::string& name, absl::Status status) {
  auto it = set.pending.find(name);
  if (it == set.pending.end()) return;  // a joined rank's share, or not submitted here
  std::unique_ptr<LocalOp> op = std::move(it->second);
  set.pending.erase(it);
  const uint64_t bytes = status.ok() ? op->meta.Bytes() : 0;
  stats_->Update([&](EngineStats& s) {
    ++s.tensors;
    s.bytes += bytes;
  });
  finished_(set.id, name);
  recorder_->Finished(op->flight_id, status);
  op->handle->Finish(WithTensor(std::move(status), name));
}

void Executor::Phase(const std::string& name, const char* phase, int64_t start, int64_t end,
                     const std::vector<std::pair<std::string, std::string>>& args) {
  if (timeline_ != nullptr) timeline_->Phase(name, phase, start, end, args);  // no-op if stopped
}

void Executor::Collective(const std::string& name, int64_t start, int64_t end,
                          const std::vector<std::pair<std::string, std::string>>& args,
                          const reduce::CombineTimer* timer) {
  if (!timing()) return;
  if (timer == nullptr) {  // reduced out of libddp's sight (MPI): one slice, not split
    timeline_->Collective(name, start, end, args, nullptr);
    return;
  }
  // At most kMostReductions REDUCE slices, apart at the longest gaps (a ring of many small
  // chunks stays readable); each says how much of it was in the kernels.
  constexpr size_t kMostReductions = 64;
  std::vector<reduce::CombineTimer::Interval> merged = timer->intervals();
  reduce::MergeToAtMost(merged, kMostReductions);
  std::vector<Timeline::Reduction> reducing;
  reducing.reserve(merged.size());
  for (const auto& interval : merged) {
    reducing.push_back({timeline_->MicrosOf(interval.start), timeline_->MicrosOf(interval.end),
                        interval.busy / 1000});
  }
  timeline_->Collective(name, start, end, args, &reducing);
}

void Executor::Waited(const LocalOp& op, const Response& r, int64_t started) {
  // Until the round that agreed it began, the tensor waited: for the other ranks to submit it
  // (a straggler shows here on the others' tracks), or for the engine's next round; that round
  // itself is the negotiation.
  const int64_t agreeing = std::max(op.submitted_us, r.round_start_us);
  if (agreeing > op.submitted_us) Phase(r.name, "WAIT_FOR_PEERS", op.submitted_us, agreeing);
  Phase(r.name, "NEGOTIATE", agreeing, r.ready_us);
  Phase(r.name, "QUEUE", r.ready_us, started);
}

void Executor::Wire(Compression compression, uint64_t sent, uint64_t received) {
  const auto i = static_cast<size_t>(compression.codec);
  stats_->Update([&](EngineStats& s) {
    s.sent_bytes[i] += sent;
    s.received_bytes[i] += received;
  });
}

void Executor::Residuals(uint64_t floats) {
  stats_->Update([&](EngineStats& s) { s.residual_floats = floats; });
}

void Executor::Ran(size_t tensors, uint64_t bytes, bool fused) {
  stats_->Update([&](EngineStats& s) {
    ++s.collectives;
    if (fused) s.fused_tensors += tensors;
  });
  executed_bytes_ += bytes;
}

}  // namespace ddp::engine
