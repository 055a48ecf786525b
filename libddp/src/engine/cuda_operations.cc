// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The operations on CUDA memory: the same bookkeeping as on the CPU (batches, joined ranks'
// identity, timeline, handles), the data movement by the NCCL backend (nccl/device.h).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/collectives.h"
#include "collectives/comm_ids.h"
#include "common/status.h"
#include "engine/operations.h"

namespace ddp::engine {

absl::StatusOr<std::shared_ptr<nccl::Backend>> CudaBackend::Get() {
  std::lock_guard<std::mutex> lock(mu_);
  if (backend_ == nullptr && error_.ok()) {
    auto created = nccl::CreateBackend(options_);
    if (created.ok()) {
      backend_ = std::shared_ptr<nccl::Backend>(*std::move(created));
    } else {
      error_ = created.status();
    }
  }
  if (backend_ == nullptr) return error_;
  return backend_;
}

absl::Status CudaBackend::Prepare(LocalOp& op, const Device& device) {
  DDP_ASSIGN_OR_RETURN(std::shared_ptr<nccl::Backend> backend, Get());
  DDP_ASSIGN_OR_RETURN(op.ready,
                       backend->RecordReady(device.index, device.stream, device.stream_ordered));
  op.meta.device = kCudaMemory;
  return absl::OkStatus();
}

void CudaBackend::Close(const absl::Status& reason) {
  std::shared_ptr<nccl::Backend> backend;
  {
    std::lock_guard<std::mutex> lock(mu_);
    backend = std::move(backend_);  // a later submission gets the error
    if (error_.ok()) error_ = reason;
  }
  backend.reset();  // destroyed here unless a submitting thread still holds it (then there)
}

namespace {

class CudaOperations final : public DeviceOperations {
 public:
  CudaOperations(Executor& executor, CudaBackend& backend)
      : executor_(executor), backend_(backend) {}

  absl::Status Allreduce(ProcessSet& set, const std::vector<Response*>& batch, int active) override;
  absl::Status Run(ProcessSet& set, const Response& r, LocalOp& op) override;

 private:
  // The set's NCCL communicator, made on first use. Its unique id goes from the set's first
  // member to the others on a communicator of the NCCL id range (collectives/comm_ids.h), one
  // per process set, so that it never mixes with the set's negotiation.
  absl::StatusOr<std::shared_ptr<nccl::Backend>> Ready(ProcessSet& set);

  Executor& executor_;
  CudaBackend& backend_;
};

absl::StatusOr<std::shared_ptr<nccl::Backend>> CudaOperations::Ready(ProcessSet& set) {
  DDP_ASSIGN_OR_RETURN(std::shared_ptr<nccl::Backend> backend, backend_.Get());
  const collectives::Communicator& comm = *set.comm;
  const collectives::CommId id =
      collectives::CommRangeBegin(collectives::CommRange::kNccl) + static_cast<uint32_t>(set.id);
  if (id >= collectives::CommRangeEnd(collectives::CommRange::kNccl)) {
    return absl::ResourceExhaustedError("too many process sets with NCCL communicators");
  }
  collectives::Communicator exchange(comm.rank(), comm.size(), set.subset.get(), comm.tuning(), id);
  DDP_RETURN_IF_ERROR(
      backend->EnsureComm(set.id, comm.size(), set.my_index, [&exchange](void* data, size_t n) {
        return collectives::Broadcast(exchange, data, data, n, DataType::kUInt8, 0);
      }));
  return backend;
}

absl::Status CudaOperations::Allreduce(ProcessSet& set, const std::vector<Response*>& batch,
                                       int active) {
  std::vector<std::string> names;
  for (const Response* r : batch) names.push_back("'" + r->name + "'");
  const std::string what = absl::StrCat(
      batch.size() > 1 ? "allreduce of fused CUDA tensors " : "allreduce of CUDA tensor ",
      absl::StrJoin(names, ", "));
  auto backend = Ready(set);
  if (!backend.ok()) return Annotate(backend.status(), what);
  const DataType type = batch[0]->meta.type;
  const ReduceOp op = batch[0]->meta.op;
  std::vector<nccl::Backend::Piece> pieces;
  std::vector<LocalOp*> ops;
  uint64_t total = 0;
  for (const Response* r : batch) {
    LocalOp* local = executor_.Local(set, r->name);
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
  const int64_t t0 = executor_.Now();
  absl::StatusOr<nccl::DonePtr> done = (*backend)->Allreduce(set.id, pieces, type, op, active);
  if (!done.ok()) return Annotate(done.status(), what);
  const int64_t t1 = executor_.Now();  // stream-ordered: enqueued, not done
  const uint64_t bytes = total * DataTypeSize(type);
  for (size_t b = 0; b < batch.size(); ++b) {
    if (ops[b] != nullptr) {
      executor_.Waited(*ops[b], *batch[b], t0);
      if (*done != nullptr) {
        ops[b]->handle->device_done = *done;
        ops[b]->handle->done_device = (*backend)->device();
      }
    }
    executor_.Phase(batch[b]->name, "NCCL_ALLREDUCE", t0, t1,
                    {{"transport", "nccl"},
                     {"fused_tensors", absl::StrCat(batch.size())},
                     {"bytes", absl::StrCat(bytes)}});
    executor_.Finish(set, batch[b]->name, absl::OkStatus());
  }
  executor_.Ran(batch.size(), bytes, /*fused=*/pieces.size() > 1);
  return absl::OkStatus();
}

absl::Status CudaOperations::Run(ProcessSet& set, const Response& r, LocalOp& op) {
  const TensorMeta& m = r.meta;
  const std::string what = absl::StrCat(OpKindName(m.kind), " of CUDA tensor '", r.name, "'");
  auto ready = Ready(set);
  if (!ready.ok()) return Annotate(ready.status(), what);
  nccl::Backend& backend = **ready;
  HandleState& h = *op.handle;
  const int n = set.comm->size();
  const size_t es = DataTypeSize(m.type);
  const int64_t start = executor_.Now();
  executor_.Waited(op, r, start);
  absl::StatusOr<nccl::Backend::DeviceBuffer> out = nccl::Backend::DeviceBuffer();
  uint64_t out_bytes = 0;
  switch (m.kind) {
    case OpKind::kBroadcast: {
      absl::Status s =
          backend.Broadcast(set.id, op.outputs[0], m.ElementCount(), m.type, m.root, op.ready);
      if (!s.ok()) out = s;
      break;
    }
    case OpKind::kAllgather: {
      SplitLayout layout = AllgatherLayout(m, r.first_dims);
      h.output_shape = std::move(layout.output_shape);
      out_bytes = ElementCount(h.output_shape) * es;
      out = backend.Allgatherv(set.id, op.inputs[0], layout.counts, m.type, op.ready);
      break;
    }
    case OpKind::kAlltoall:
      h.output_shape = m.shapes[0];
      out_bytes = m.Bytes();
      out = backend.Alltoall(set.id, op.inputs[0], m.ElementCount() / static_cast<size_t>(n),
                             m.type, op.ready);
      break;
    case OpKind::kReduceScatter: {
      SplitLayout layout = ReduceScatterLayout(m, n, set.my_index);
      h.output_shape = std::move(layout.output_shape);
      out_bytes = layout.counts[static_cast<size_t>(set.my_index)] * es;
      out = backend.ReduceScatterv(set.id, op.inputs[0], layout.counts, m.type, m.op, m.prescale,
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
    h.output_device = backend.device();
  }
  std::string phase = absl::StrCat("NCCL_", OpKindName(m.kind));
  std::transform(phase.begin(), phase.end(), phase.begin(), ::toupper);
  executor_.Phase(r.name, phase.c_str(), start, executor_.Now(), {{"transport", "nccl"}});
  executor_.Ran(1, m.kind == OpKind::kBroadcast ? m.Bytes() : out_bytes, /*fused=*/false);
  executor_.Finish(set, r.name, absl::OkStatus());
  return absl::OkStatus();
}

}  // namespace

std::unique_ptr<DeviceOperations> MakeCudaOperations(Executor& executor, CudaBackend& backend) {
  return std::make_unique<CudaOperations>(executor, backend);
}

}  // namespace ddp::engine
