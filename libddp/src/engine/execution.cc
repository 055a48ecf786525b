// Execution of agreed responses: tensor fusion for allreduce, the other collectives one by one,
// scale factors, joined ranks' identity contributions, timeline phases and handle completion.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/collectives.h"
#include "common/status.h"
#include "ddp/errors.h"
#include "engine/engine_impl.h"
#include "reduce/epilogue.h"
#include "reduce/reduce.h"

namespace ddp::engine {
namespace {

using reduce::Epilogue;

bool Fusible(const Response& a, const Response& b) {
  return b.error.ok() && b.meta.kind == OpKind::kAllreduce && a.meta.type == b.meta.type &&
         a.meta.op == b.meta.op && a.meta.device == b.meta.device;
}

}  // namespace

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

void EngineImpl::FinishOther(ProcessSet& set, const Response& r, const std::string& phase,
                             int64_t start, const std::string& transport, uint64_t bytes) {
  std::string upper = phase;
  std::transform(upper.begin(), upper.end(), upper.begin(), ::toupper);
  TimelinePhase(r.name, upper.c_str(), start, timeline_ ? timeline_->NowMicros() : 0,
                {{"transport", transport}});
  {
    std::lock_guard<std::mutex> lock(wake_->mu);
    ++stats_.collectives;
  }
  executed_bytes_ += bytes;
  Finish(set, r.name, absl::OkStatus());
}

void EngineImpl::TimelinePhase(const std::string& name, const char* phase, int64_t start,
                               int64_t end, std::vector<std::pair<std::string, std::string>> args) {
  if (timeline_ != nullptr) timeline_->Phase(name, phase, start, end, args);
}

void EngineImpl::TimelineWaited(const LocalOp& op, const Response& r, int64_t started) {
  TimelinePhase(r.name, "NEGOTIATE", op.submitted_us, r.ready_us);
  TimelinePhase(r.name, "QUEUE", r.ready_us, started);
}

absl::Status EngineImpl::Execute(ProcessSet& set, std::vector<Response>& responses, int active) {
  const int64_t threshold = params_.fusion_threshold;
  std::vector<bool> taken(responses.size(), false);  // already run as part of an earlier batch
  for (size_t i = 0; i < responses.size(); ++i) {
    if (taken[i]) continue;
    Response& r = responses[i];
    if (!r.error.ok()) {
      Finish(set, r.name, r.error);
      continue;
    }
    if (r.meta.kind != OpKind::kAllreduce) {
      DDP_RETURN_IF_ERROR(RunOther(set, r));
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
          bytes + responses[j].meta.Bytes() <= static_cast<uint64_t>(threshold)) {
        bytes += responses[j].meta.Bytes();
        batch.push_back(&responses[j]);
        taken[j] = true;
      }
    }
    if (r.meta.device != kCpuMemory) {
      DDP_RETURN_IF_ERROR(RunDeviceAllreduce(set, batch, active));
    } else if (batch.size() == 1 && r.meta.shapes.size() == 1) {
      DDP_RETURN_IF_ERROR(RunAlone(set, r, active));  // no copy into the fusion buffer
    } else {
      DDP_RETURN_IF_ERROR(RunFused(set, batch, active));
    }
  }
  return absl::OkStatus();
}

absl::Status EngineImpl::RunAlone(ProcessSet& set, Response& r, int active) {
  const TensorMeta& m = r.meta;
  const size_t count = m.ElementCount();
  auto it = set.pending.find(r.name);
  LocalOp* op = it == set.pending.end() ? nullptr : it->second.get();
  const int64_t start = timeline_ ? timeline_->NowMicros() : 0;
  if (op != nullptr) {
    TimelineWaited(*op, r, start);
  }
  const void* in;
  void* out;
  if (op != nullptr) {
    in = op->inputs[0];
    out = op->outputs[0];
    if (m.prescale != 1.0) {
      reduce::Scale(m.type, out, in, count, m.prescale);
      in = out;
    }
  } else {
    // Joined: contribute the identity from scratch memory.
    const size_t bytes = count * DataTypeSize(m.type);
    if (fusion_buffer_.size() < bytes) fusion_buffer_.resize(bytes);
    reduce::FillIdentity(m.type, reduce::Combining(m.op), fusion_buffer_.data(), count);
    in = out = fusion_buffer_.data();
  }
  const std::string method = collectives::AllreduceMethod(*set.comm, count, m.type, m.op);
  // Finished inside the collective, where it costs least (on the ring: this rank's block only).
  absl::Status s = collectives::Allreduce(*set.comm, in, out, count, m.type, m.op,
                                          Epilogue::For(m.op, active, m.postscale));
  if (!s.ok()) return Annotate(s, absl::StrCat("allreduce '", r.name, "'"));
  const int64_t end = timeline_ ? timeline_->NowMicros() : 0;
  TimelinePhase(r.name, "ALLREDUCE", start, end,
                {{"algorithm", method},
                 {"transport", transport_name_},
                 {"bytes", absl::StrCat(count * DataTypeSize(m.type))}});
  {
    std::lock_guard<std::mutex> lock(wake_->mu);
    ++stats_.collectives;
  }
  executed_bytes_ += count * DataTypeSize(m.type);
  Finish(set, r.name, absl::OkStatus());
  return absl::OkStatus();
}

absl::Status EngineImpl::RunFused(ProcessSet& set, const std::vector<Response*>& batch,
                                  int active) {
  const DataType type = batch[0]->meta.type;
  const ReduceOp op = batch[0]->meta.op;
  const size_t es = DataTypeSize(type);
  uint64_t total = 0;
  for (const Response* r : batch) total += r->meta.ElementCount();
  if (fusion_buffer_.size() < total * es) fusion_buffer_.resize(total * es);
  char* buffer = fusion_buffer_.data();

  const int64_t t0 = timeline_ ? timeline_->NowMicros() : 0;
  std::vector<LocalOp*> ops;
  size_t offset = 0;
  for (const Response* r : batch) {
    auto it = set.pending.find(r->name);
    LocalOp* local = it == set.pending.end() ? nullptr : it->second.get();
    ops.push_back(local);
    for (size_t k = 0; k < r->meta.shapes.size(); ++k) {
      const size_t n = ElementCount(r->meta.shapes[k]);
      char* dst = buffer + offset * es;
      if (local == nullptr) {
        reduce::FillIdentity(type, reduce::Combining(op), dst, n);
      } else if (r->meta.prescale != 1.0) {
        reduce::Scale(type, dst, local->inputs[k], n, r->meta.prescale);
      } else if (n > 0) {
        std::memcpy(dst, local->inputs[k], n * es);
      }
      offset += n;
    }
  }
  const int64_t t1 = timeline_ ? timeline_->NowMicros() : 0;
  const std::string method = collectives::AllreduceMethod(*set.comm, total, type, op);
  // Combined only: each tensor is finished with its own postscale while unpacking.
  absl::Status s = collectives::Allreduce(*set.comm, buffer, buffer, total, type, op, Epilogue{});
  if (!s.ok()) {
    std::vector<std::string> names;
    for (const Response* r : batch) names.push_back("'" + r->name + "'");
    return Annotate(s, absl::StrCat("allreduce of fused tensors ", absl::StrJoin(names, ", ")));
  }
  const int64_t t2 = timeline_ ? timeline_->NowMicros() : 0;
  offset = 0;
  for (size_t b = 0; b < batch.size(); ++b) {
    const Response* r = batch[b];
    for (size_t k = 0; k < r->meta.shapes.size(); ++k) {
      const size_t n = ElementCount(r->meta.shapes[k]);
      if (ops[b] != nullptr) {
        Epilogue::For(op, active, r->meta.postscale)
            .Apply(type, ops[b]->outputs[k], buffer + offset * es, n);
      }
      offset += n;
    }
  }
  const int64_t t3 = timeline_ ? timeline_->NowMicros() : 0;
  for (size_t b = 0; b < batch.size(); ++b) {
    const Response* r = batch[b];
    if (ops[b] != nullptr) {
      TimelineWaited(*ops[b], *r, t0);
    }
    TimelinePhase(r->name, "MEMCPY_IN_FUSION_BUFFER", t0, t1);
    TimelinePhase(r->name, "ALLREDUCE", t1, t2,
                  {{"algorithm", method},
                   {"transport", transport_name_},
                   {"fused_tensors", absl::StrCat(batch.size())},
                   {"fused_bytes", absl::StrCat(total * es)}});
    TimelinePhase(r->name, "MEMCPY_OUT_FUSION_BUFFER", t2, t3);
    Finish(set, r->name, absl::OkStatus());
  }
  {
    std::lock_guard<std::mutex> lock(wake_->mu);
    ++stats_.collectives;
    stats_.fused_tensors += batch.size();
  }
  executed_bytes_ += total * es;
  return absl::OkStatus();
}

absl::Status EngineImpl::RunOther(ProcessSet& set, Response& r) {
  const TensorMeta& m = r.meta;
  if (m.kind == OpKind::kAddProcessSet) {
    const int id = static_cast<int>(sets_.size());
    std::vector<int> members(m.shapes[0].begin(), m.shapes[0].end());
    absl::StatusOr<std::unique_ptr<ProcessSet>> made = MakeSet(id, members);
    absl::Status status = Annotate(made.status(), "add_process_set");
    if (made.ok()) {
      sets_.push_back(*std::move(made));
      std::lock_guard<std::mutex> lock(wake_->mu);
      set_members_.push_back(members);
    }
    auto it = set.pending.find(r.name);
    if (it != set.pending.end()) it->second->handle->int_result = id;
    Finish(set, r.name, status);
    return absl::OkStatus();
  }
  auto local = set.pending.find(r.name);
  if (local == set.pending.end()) {
    // Only a joined rank runs tensors it did not submit, and only allreduces reach it.
    return absl::InternalError(absl::StrCat(OpKindName(m.kind), " '", r.name,
                                            "' was agreed without this rank's submission"));
  }
  LocalOp* op = local->second.get();
  if (m.device != kCpuMemory) return RunDeviceOther(set, r, *op);
  HandleState& h = *op->handle;
  const int n = set.comm->size();
  const size_t es = DataTypeSize(m.type);
  const int64_t start = timeline_ ? timeline_->NowMicros() : 0;
  TimelineWaited(*op, r, start);
  absl::Status s;
  uint64_t bytes = m.Bytes();
  switch (m.kind) {
    case OpKind::kAllgather: {
      SplitLayout layout = AllgatherLayout(m, r.first_dims);
      h.output_shape = std::move(layout.output_shape);
      h.output.resize(ElementCount(h.output_shape) * es);
      bytes = h.output.size();
      s = collectives::Allgatherv(*set.comm, op->inputs[0], h.output.data(), layout.counts, m.type);
      break;
    }
    case OpKind::kBroadcast:
      s = collectives::Broadcast(*set.comm, op->outputs[0], op->outputs[0], m.ElementCount(),
                                 m.type, m.root);
      break;
    case OpKind::kAlltoall:
      h.output_shape = m.shapes[0];
      h.output.resize(m.ElementCount() * es);
      s = collectives::Alltoall(*set.comm, op->inputs[0], h.output.data(),
                                m.ElementCount() / static_cast<size_t>(n), m.type);
      break;
    case OpKind::kReduceScatter: {
      SplitLayout layout = ReduceScatterLayout(m, n, set.my_index);
      const std::vector<size_t>& counts = layout.counts;
      h.output_shape = layout.output_shape;
      h.output.resize(counts[static_cast<size_t>(set.my_index)] * es);
      const void* in = op->inputs[0];
      if (m.prescale != 1.0) {
        if (fusion_buffer_.size() < m.Bytes()) fusion_buffer_.resize(m.Bytes());
        reduce::Scale(m.type, fusion_buffer_.data(), in, m.ElementCount(), m.prescale);
        in = fusion_buffer_.data();
      }
      s = collectives::ReduceScatterv(*set.comm, in, h.output.data(), counts, m.type, m.op,
                                      Epilogue::For(m.op, n, m.postscale));
      break;
    }
    default:
      s = absl::InternalError("unexpected operation");
  }
  if (!s.ok()) return Annotate(s, absl::StrCat(OpKindName(m.kind), " '", r.name, "'"));
  FinishOther(set, r, std::string(OpKindName(m.kind)), start, transport_name_, bytes);
  return absl::OkStatus();
}

void EngineImpl::Finish(ProcessSet& set, const std::string& name, absl::Status status) {
  auto it = set.pending.find(name);
  if (it == set.pending.end()) return;  // a joined rank's share, or not submitted here
  std::unique_ptr<LocalOp> op = std::move(it->second);
  set.pending.erase(it);
  {
    std::lock_guard<std::mutex> lock(wake_->mu);
    in_flight_.erase(absl::StrCat(set.id, "/", name));
    ++stats_.tensors;
    if (status.ok()) stats_.bytes += op->meta.Bytes();
  }
  op->handle->Finish(WithTensor(std::move(status), name));
}

}  // namespace ddp::engine
