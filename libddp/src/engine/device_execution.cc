// Agreed operations on CUDA tensors: the same bookkeeping as execution.cc (batches, joined ranks'
// identity, timeline, handles), the data movement by the NCCL backend (nccl/device.h).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/collectives.h"
#include "common/status.h"
#include "engine/engine_impl.h"

namespace ddp::engine {

absl::StatusOr<std::shared_ptr<nccl::Backend>> EngineImpl::DeviceBackend() {
  std::lock_guard<std::mutex> lock(device_mu_);
  if (device_backend_ == nullptr && device_backend_error_.ok()) {
    nccl::BackendOptions o;
    o.timeout = options_.timeout;
    o.default_device = std::max(options_.local_rank, 0);
    if (transport_ != nullptr) {
      transport::Transport* t = transport_;
      o.health = [t] { return t->health(); };
    }
    auto created = nccl::CreateBackend(o);
    if (created.ok()) {
      device_backend_ = std::shared_ptr<nccl::Backend>(*std::move(created));
    } else {
      device_backend_error_ = created.status();
    }
  }
  if (device_backend_ == nullptr) return device_backend_error_;
  return device_backend_;
}

absl::Status EngineImpl::PrepareDeviceOp(LocalOp& op, const Device& device) {
  DDP_ASSIGN_OR_RETURN(std::shared_ptr<nccl::Backend> backend, DeviceBackend());
  DDP_ASSIGN_OR_RETURN(op.ready, backend->RecordReady(device.index, device.stream));
  op.meta.device = kCudaMemory;
  return absl::OkStatus();
}

absl::Status EngineImpl::EnsureDeviceComm(ProcessSet& set) {
  DDP_ASSIGN_OR_RETURN(std::shared_ptr<nccl::Backend> backend, DeviceBackend());
  collectives::Communicator& comm = *set.comm;
  return backend->EnsureComm(set.id, comm.size(), set.my_index, [&comm](void* data, size_t n) {
    return collectives::Broadcast(comm, data, data, n, DataType::kUInt8, 0);
  });
}

absl::Status EngineImpl::RunDeviceAllreduce(ProcessSet& set, const std::vector<Response*>& batch,
                                            int active) {
  std::vector<std::string> names;
  for (const Response* r : batch) names.push_back("'" + r->name + "'");
  const std::string what = absl::StrCat(
      batch.size() > 1 ? "allreduce of fused CUDA tensors " : "allreduce of CUDA tensor ",
      absl::StrJoin(names, ", "));
  DDP_RETURN_IF_ERROR(Annotate(EnsureDeviceComm(set), what));
  const std::shared_ptr<nccl::Backend> backend = *DeviceBackend();
  const DataType type = batch[0]->meta.type;
  const ReduceOp op = batch[0]->meta.op;
  std::vector<nccl::Backend::Piece> pieces;
  std::vector<LocalOp*> ops;
  uint64_t total = 0;
  for (const Response* r : batch) {
    auto it = set.pending.find(r->name);
    LocalOp* local = it == set.pending.end() ? nullptr : it->second.get();
    ops.push_back(local);
    for (size_t k = 0; k < r->meta.shapes.size(); ++k) {
      nccl::Backend::Piece p;
      p.count = ElementCount(r->meta.shapes[k]);
      p.prescale = r->meta.prescale;
      p.postscale = r->meta.postscale;
      if (local != nullptr) {  // else joined: the identity
        p.input = local->inputs[k];
        p.output = local->outputs[k];
        p.ready = local->ready;
      }
      total += p.count;
      pieces.push_back(std::move(p));
    }
  }
  const int64_t t0 = timeline_ ? timeline_->NowMicros() : 0;
  DDP_RETURN_IF_ERROR(Annotate(backend->Allreduce(set.id, pieces, type, op, active), what));
  const int64_t t1 = timeline_ ? timeline_->NowMicros() : 0;
  const uint64_t bytes = total * DataTypeSize(type);
  for (size_t b = 0; b < batch.size(); ++b) {
    if (ops[b] != nullptr) TimelineWaited(*ops[b], *batch[b], t0);
    TimelinePhase(batch[b]->name, "NCCL_ALLREDUCE", t0, t1,
                  {{"transport", "nccl"},
                   {"fused_tensors", absl::StrCat(batch.size())},
                   {"bytes", absl::StrCat(bytes)}});
    Finish(set, batch[b]->name, absl::OkStatus());
  }
  {
    std::lock_guard<std::mutex> lock(wake_->mu);
    ++stats_.collectives;
    if (pieces.size() > 1) stats_.fused_tensors += batch.size();
  }
  executed_bytes_ += bytes;
  return absl::OkStatus();
}

absl::Status EngineImpl::RunDeviceOther(ProcessSet& set, Response& r, LocalOp& op) {
  const TensorMeta& m = r.meta;
  const std::string what = absl::StrCat(OpKindName(m.kind), " of CUDA tensor '", r.name, "'");
  DDP_RETURN_IF_ERROR(Annotate(EnsureDeviceComm(set), what));
  const std::shared_ptr<nccl::Backend> backend = *DeviceBackend();
  HandleState& h = *op.handle;
  const int n = set.comm->size();
  const size_t es = DataTypeSize(m.type);
  const int64_t start = timeline_ ? timeline_->NowMicros() : 0;
  TimelineWaited(op, r, start);
  absl::StatusOr<nccl::Backend::DeviceBuffer> out = nccl::Backend::DeviceBuffer();
  uint64_t out_bytes = 0;
  switch (m.kind) {
    case OpKind::kBroadcast: {
      absl::Status s =
          backend->Broadcast(set.id, op.outputs[0], m.ElementCount(), m.type, m.root, op.ready);
      if (!s.ok()) out = s;
      break;
    }
    case OpKind::kAllgather: {
      SplitLayout layout = AllgatherLayout(m, r.first_dims);
      h.output_shape = std::move(layout.output_shape);
      out_bytes = ElementCount(h.output_shape) * es;
      out = backend->Allgatherv(set.id, op.inputs[0], layout.counts, m.type, op.ready);
      break;
    }
    case OpKind::kAlltoall:
      h.output_shape = m.shapes[0];
      out_bytes = m.Bytes();
      out = backend->Alltoall(set.id, op.inputs[0], m.ElementCount() / static_cast<size_t>(n),
                              m.type, op.ready);
      break;
    case OpKind::kReduceScatter: {
      SplitLayout layout = ReduceScatterLayout(m, n, set.my_index);
      h.output_shape = std::move(layout.output_shape);
      out_bytes = layout.counts[static_cast<size_t>(set.my_index)] * es;
      out = backend->ReduceScatterv(set.id, op.inputs[0], layout.counts, m.type, m.op, m.prescale,
                                    m.postscale, n, op.ready);
      break;
    }
    default:
      out = absl::InternalError("unexpected operation");
  }
  if (!out.ok()) return Annotate(out.status(), what);
  if (m.kind != OpKind::kBroadcast) {
    h.device_output = *std::move(out);
    h.device_output_bytes = out_bytes;
    h.output_device = backend->device();
  }
  FinishOther(set, r, absl::StrCat("NCCL_", OpKindName(m.kind)), start, "nccl",
              m.kind == OpKind::kBroadcast ? m.Bytes() : out_bytes);
  return absl::OkStatus();
}

}  // namespace ddp::engine
