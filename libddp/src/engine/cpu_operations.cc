// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The operations on CPU memory: libddp's collectives, with tensor fusion (a persistent fusion
// buffer; scale factors applied while packing and unpacking, so tensors with different factors
// still fuse; none where the collective reads and writes the tensors in place, as shared memory's
// does) and joined ranks' identity contributions.
#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/collectives.h"
#include "common/status.h"
#include "engine/compressed.h"
#include "engine/operations.h"
#include "reduce/epilogue.h"
#include "reduce/reduce.h"

namespace ddp::engine {
namespace {

// A collective's split for the timeline (reduce::CombineTimer): the time in the reduction
// kernels on this thread, and the rest (transfers, waits for the peers' data), in us.
std::string ReductionMicros(const std::optional<reduce::CombineTimer>& timer) {
  return timer ? absl::StrCat(timer->nanos() / 1000) : "";
}
std::string TransferMicros(const std::optional<reduce::CombineTimer>& timer, int64_t start_us,
                           int64_t end_us) {
  return timer ? absl::StrCat(std::max<int64_t>(0, end_us - start_us - timer->nanos() / 1000)) : "";
}

// Times a collective's reduction kernels on this thread while a timeline is written, except
// where a backend reduces out of libddp's sight (MPI): its split is then not known.
std::optional<reduce::CombineTimer>& TimeIf(const Executor& executor, const std::string& method,
                                            std::optional<reduce::CombineTimer>& timer) {
  if (executor.timing() && method != "mpi") timer.emplace();
  return timer;
}

// Whether a run's slice on the "collectives" track is split into TRANSFER and REDUCE.
std::string Split(const std::optional<reduce::CombineTimer>& timer) {
  return timer ? "transfer and reduce" : "none: reduced inside MPI";
}

// What a collective sent and received through the transport: its communicator's counters.
class WireCount {
 public:
  explicit WireCount(const collectives::Communicator& comm)
      : comm_(comm), sent_(comm.bytes_sent()), received_(comm.bytes_received()) {}
  void Done(Executor& executor) const {
    executor.Wire(Codec::kNone, comm_.bytes_sent() - sent_, comm_.bytes_received() - received_);
  }

 private:
  const collectives::Communicator& comm_;
  const uint64_t sent_;
  const uint64_t received_;
};

using reduce::Epilogue;

class CpuOperations final : public DeviceOperations {
 public:
  CpuOperations(Executor& executor, std::string transport_name, CudaBackend& cuda)
      : executor_(executor), transport_(std::move(transport_name)), compressed_(executor, cuda) {}

  absl::Status Allreduce(ProcessSet& set, const std::vector<Response*>& batch,
                         int active) override {
    if (batch[0]->meta.compression != Codec::kNone) {
      return compressed_.Run(set, batch, active);
    }
    if (batch.size() == 1 && batch[0]->meta.shapes.size() == 1) {
      return Alone(set, *batch[0], active);  // no copy into the fusion buffer
    }
    return Fused(set, batch, active);
  }

  absl::Status Run(ProcessSet& set, const Response& r, LocalOp& op) override;

 private:
  absl::Status Alone(ProcessSet& set, const Response& r, int active);
  absl::Status Fused(ProcessSet& set, const std::vector<Response*>& batch, int active);
  // Copies the batch's tensors (each scaled by its prescale; a joined rank's: the identity)
  // end to end into `buffer`; this rank's submissions (null where joined).
  std::vector<LocalOp*> Pack(ProcessSet& set, const std::vector<Response*>& batch, char* buffer);
  // Fused where the collective reads and writes the tensors where they lie (shared memory): no
  // fusion buffer, except scratch for what cannot be read in place (a joined rank's identity, a
  // prescaled input).
  absl::Status FusedInPlace(ProcessSet& set, const std::vector<Response*>& batch, int active,
                            uint64_t total);
  // Where a result of `bytes` goes: the caller's output (LocalOp::into_bytes) when it fits,
  // else memory the handle owns; `misfit` says why the caller's was not used.
  static void* OutputFor(const LocalOp& op, size_t bytes, absl::Status* misfit);
  char* Buffer(size_t bytes) {
    if (fusion_buffer_.size() < bytes) fusion_buffer_.resize(bytes);
    return fusion_buffer_.data();
  }

  Executor& executor_;
  const std::string transport_;  // as the timeline shows it
  std::vector<char> fusion_buffer_;
  CompressedAllreduces compressed_;
};

absl::Status CpuOperations::Alone(ProcessSet& set, const Response& r, int active) {
  const TensorMeta& m = r.meta;
  const size_t count = m.ElementCount();
  const size_t bytes = count * DataTypeSize(m.type);
  LocalOp* op = executor_.Local(set, r.name);
  const int64_t start = executor_.Now();
  const void* in;
  void* out;
  if (op != nullptr) {
    executor_.Waited(*op, r, start);
    in = op->inputs[0];
    out = op->outputs[0];
    if (m.prescale != 1.0) {
      reduce::Scale(m.type, out, in, count, m.prescale);
      in = out;
    }
  } else {
    // Joined: contribute the identity from scratch memory.
    in = out = Buffer(bytes);
    reduce::FillIdentity(m.type, reduce::Combining(m.op), out, count);
  }
  const std::string method = collectives::AllreduceMethod(*set.comm, count, m.type, m.op);
  std::optional<reduce::CombineTimer> timer;
  TimeIf(executor_, method, timer);
  // Finished inside the collective, where it costs least (on the ring: this rank's block only).
  const WireCount wire(*set.comm);
  absl::Status s = collectives::Allreduce(*set.comm, in, out, count, m.type, m.op,
                                          Epilogue::For(m.op, active, m.postscale));
  if (!s.ok()) return Annotate(s, absl::StrCat("allreduce '", r.name, "'"));
  wire.Done(executor_);
  const int64_t end = executor_.Now();
  executor_.Phase(r.name, "ALLREDUCE", start, end,
                  {{"algorithm", method},
                   {"transport", transport_},
                   {"bytes", absl::StrCat(bytes)},
                   {"reduction_us", ReductionMicros(timer)},
                   {"transfer_us", TransferMicros(timer, start, end)}});
  executor_.Collective("ALLREDUCE", start, end,
                       {{"tensors", r.name},
                        {"algorithm", method},
                        {"transport", transport_},
                        {"bytes", absl::StrCat(bytes)},
                        {"split", Split(timer)}},
                       timer ? &*timer : nullptr);
  executor_.Ran(1, bytes, /*fused=*/false);
  executor_.Finish(set, r.name, absl::OkStatus());
  return absl::OkStatus();
}

std::vector<LocalOp*> CpuOperations::Pack(ProcessSet& set, const std::vector<Response*>& batch,
                                          char* buffer) {
  const DataType type = batch[0]->meta.type;
  const ReduceOp op = batch[0]->meta.op;
  const size_t es = DataTypeSize(type);
  std::vector<LocalOp*> ops;
  size_t offset = 0;
  for (const Response* r : batch) {
    LocalOp* local = executor_.Local(set, r->name);
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
  return ops;
}

absl::Status CpuOperations::Fused(ProcessSet& set, const std::vector<Response*>& batch,
                                  int active) {
  const DataType type = batch[0]->meta.type;
  const ReduceOp op = batch[0]->meta.op;
  const size_t es = DataTypeSize(type);
  uint64_t total = 0;
  for (const Response* r : batch) total += r->meta.ElementCount();
  if (collectives::TakesPieces(*set.comm, total, type, op)) {
    return FusedInPlace(set, batch, active, total);
  }
  char* buffer = Buffer(total * es);

  const int64_t t0 = executor_.Now();
  const std::vector<LocalOp*> ops = Pack(set, batch, buffer);
  const int64_t t1 = executor_.Now();
  const std::string method = collectives::AllreduceMethod(*set.comm, total, type, op);
  std::optional<reduce::CombineTimer> timer;
  TimeIf(executor_, method, timer);
  // Combined only: each tensor is finished with its own postscale while unpacking.
  const WireCount wire(*set.comm);
  absl::Status s = collectives::Allreduce(*set.comm, buffer, buffer, total, type, op, Epilogue{});
  if (s.ok()) wire.Done(executor_);
  if (!s.ok()) {
    std::vector<std::string> names;
    for (const Response* r : batch) names.push_back("'" + r->name + "'");
    return Annotate(s, absl::StrCat("allreduce of fused tensors ", absl::StrJoin(names, ", ")));
  }
  const int64_t t2 = executor_.Now();
  size_t offset = 0;
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
  const int64_t t3 = executor_.Now();
  executor_.Collective("ALLREDUCE", t1, t2,
                       {{"tensors", TensorNames(batch)},
                        {"fused_tensors", absl::StrCat(batch.size())},
                        {"algorithm", method},
                        {"transport", transport_},
                        {"bytes", absl::StrCat(total * es)},
                        {"split", Split(timer)}},
                       timer ? &*timer : nullptr);
  for (size_t b = 0; b < batch.size(); ++b) {
    const Response* r = batch[b];
    if (ops[b] != nullptr) executor_.Waited(*ops[b], *r, t0);
    executor_.Phase(r->name, "MEMCPY_IN_FUSION_BUFFER", t0, t1);
    executor_.Phase(r->name, "ALLREDUCE", t1, t2,
                    {{"algorithm", method},
                     {"transport", transport_},
                     {"fused_tensors", absl::StrCat(batch.size())},
                     {"fused_bytes", absl::StrCat(total * es)},
                     {"reduction_us", ReductionMicros(timer)},
                     {"transfer_us", TransferMicros(timer, t1, t2)}});
    executor_.Phase(r->name, "MEMCPY_OUT_FUSION_BUFFER", t2, t3);
    executor_.Finish(set, r->name, absl::OkStatus());
  }
  executor_.Ran(batch.size(), total * es, /*fused=*/true);
  return absl::OkStatus();
}

absl::Status CpuOperations::FusedInPlace(ProcessSet& set, const std::vector<Response*>& batch,
                                         int active, uint64_t total) {
  const DataType type = batch[0]->meta.type;
  const ReduceOp op = batch[0]->meta.op;
  const size_t es = DataTypeSize(type);
  const int64_t t0 = executor_.Now();
  std::vector<LocalOp*> ops;
  size_t scratch = 0;
  for (const Response* r : batch) {
    LocalOp* local = executor_.Local(set, r->name);
    ops.push_back(local);
    if (local == nullptr || r->meta.prescale != 1.0) scratch += r->meta.ElementCount();
  }
  char* buffer = Buffer(scratch * es);
  std::vector<collectives::Piece> pieces;
  size_t used = 0;
  for (size_t b = 0; b < batch.size(); ++b) {
    const Response* r = batch[b];
    LocalOp* local = ops[b];
    for (size_t k = 0; k < r->meta.shapes.size(); ++k) {
      collectives::Piece piece;
      piece.count = ElementCount(r->meta.shapes[k]);
      piece.epilogue = Epilogue::For(op, active, r->meta.postscale);
      if (local == nullptr) {  // joined: the identity, from scratch, into scratch
        char* dst = buffer + used * es;
        reduce::FillIdentity(type, reduce::Combining(op), dst, piece.count);
        piece.in = piece.out = dst;
        used += piece.count;
      } else if (r->meta.prescale != 1.0) {
        char* dst = buffer + used * es;
        reduce::Scale(type, dst, local->inputs[k], piece.count, r->meta.prescale);
        piece.in = dst;
        piece.out = local->outputs[k];
        used += piece.count;
      } else {
        piece.in = local->inputs[k];
        piece.out = local->outputs[k];
      }
      pieces.push_back(piece);
    }
  }
  const std::string method = collectives::AllreduceMethod(*set.comm, total, type, op);
  std::optional<reduce::CombineTimer> timer;
  TimeIf(executor_, method, timer);
  const WireCount wire(*set.comm);
  absl::Status s = collectives::AllreducePieces(*set.comm, pieces, total, type, op);
  if (s.ok()) wire.Done(executor_);
  if (!s.ok()) {
    std::vector<std::string> names;
    for (const Response* r : batch) names.push_back("'" + r->name + "'");
    return Annotate(s, absl::StrCat("allreduce of fused tensors ", absl::StrJoin(names, ", ")));
  }
  const int64_t t1 = executor_.Now();
  executor_.Collective("ALLREDUCE", t0, t1,
                       {{"tensors", TensorNames(batch)},
                        {"fused_tensors", absl::StrCat(batch.size())},
                        {"algorithm", method},
                        {"transport", transport_},
                        {"bytes", absl::StrCat(total * es)},
                        {"fusion_buffer", "none: read and written in place"},
                        {"split", Split(timer)}},
                       timer ? &*timer : nullptr);
  for (size_t b = 0; b < batch.size(); ++b) {
    const Response* r = batch[b];
    if (ops[b] != nullptr) executor_.Waited(*ops[b], *r, t0);
    executor_.Phase(r->name, "ALLREDUCE", t0, t1,
                    {{"algorithm", method},
                     {"transport", transport_},
                     {"fused_tensors", absl::StrCat(batch.size())},
                     {"fused_bytes", absl::StrCat(total * es)},
                     {"fusion_buffer", "none: read and written in place"},
                     {"reduction_us", ReductionMicros(timer)},
                     {"transfer_us", TransferMicros(timer, t0, t1)}});
    executor_.Finish(set, r->name, absl::OkStatus());
  }
  executor_.Ran(batch.size(), total * es, /*fused=*/true);
  return absl::OkStatus();
}

absl::Status CpuOperations::Run(ProcessSet& set, const Response& r, LocalOp& op) {
  const TensorMeta& m = r.meta;
  HandleState& h = *op.handle;
  const int n = set.comm->size();
  const size_t es = DataTypeSize(m.type);
  const int64_t start = executor_.Now();
  executor_.Waited(op, r, start);
  absl::Status s;
  uint64_t bytes = m.Bytes();
  absl::Status misfit;  // a result that does not fit the caller's output (into_bytes)
  std::optional<reduce::CombineTimer> timer;  // the reduce-scatter's reduction; the rest moves data
  if (executor_.timing()) timer.emplace();
  const WireCount wire(*set.comm);
  switch (m.kind) {
    case OpKind::kAllgather: {
      SplitLayout layout = AllgatherLayout(m, r.first_dims);
      h.output_shape = std::move(layout.output_shape);
      bytes = ElementCount(h.output_shape) * es;
      s = collectives::Allgatherv(*set.comm, op.inputs[0], OutputFor(op, bytes, &misfit),
                                  layout.counts, m.type);
      break;
    }
    case OpKind::kBroadcast:
      s = collectives::Broadcast(*set.comm, op.outputs[0], op.outputs[0], m.ElementCount(), m.type,
                                 m.root);
      break;
    case OpKind::kAlltoall:
      h.output_shape = m.shapes[0];
      h.output.resize(m.ElementCount() * es);
      s = collectives::Alltoall(*set.comm, op.inputs[0], h.output.data(),
                                m.ElementCount() / static_cast<size_t>(n), m.type);
      break;
    case OpKind::kReduceScatter: {
      SplitLayout layout = ReduceScatterLayout(m, n, set.my_index);
      const std::vector<size_t>& counts = layout.counts;
      h.output_shape = layout.output_shape;
      void* out = OutputFor(op, counts[static_cast<size_t>(set.my_index)] * es, &misfit);
      const void* in = op.inputs[0];
      if (m.prescale != 1.0) {
        reduce::Scale(m.type, Buffer(m.Bytes()), in, m.ElementCount(), m.prescale);
        in = fusion_buffer_.data();
      }
      s = collectives::ReduceScatterv(*set.comm, in, out, counts, m.type, m.op,
                                      Epilogue::For(m.op, n, m.postscale));
      break;
    }
    default:
      s = absl::InternalError("unexpected operation");
  }
  if (!s.ok()) return Annotate(s, absl::StrCat(OpKindName(m.kind), " '", r.name, "'"));
  wire.Done(executor_);
  std::string phase(OpKindName(m.kind));
  std::transform(phase.begin(), phase.end(), phase.begin(), ::toupper);
  const int64_t end = executor_.Now();
  executor_.Phase(r.name, phase.c_str(), start, end,
                  {{"transport", transport_}, {"bytes", absl::StrCat(bytes)}});
  executor_.Collective(phase, start, end,
                       {{"tensors", r.name},
                        {"transport", transport_},
                        {"bytes", absl::StrCat(bytes)},
                        {"split", Split(timer)}},
                       timer ? &*timer : nullptr);
  executor_.Ran(1, bytes, /*fused=*/false);
  if (!misfit.ok()) h.output.clear();
  executor_.Finish(set, r.name, misfit);
  return absl::OkStatus();
}

void* CpuOperations::OutputFor(const LocalOp& op, size_t bytes, absl::Status* misfit) {
  HandleState& h = *op.handle;
  if (op.into_bytes.has_value()) {
    if (*op.into_bytes == bytes) return op.outputs[0];
    // The collective still runs (into memory of the handle's): the other ranks need this one.
    *misfit = absl::InvalidArgumentError(
        absl::StrCat(OpKindName(op.meta.kind), " '", op.name, "': the result has ", bytes,
                     " bytes but the output given for it ", *op.into_bytes, " (result shape [",
                     absl::StrJoin(h.output_shape, ", "), "])"));
  }
  h.output.resize(bytes);
  return h.output.data();
}

}  // namespace

std::unique_ptr<DeviceOperations> MakeCpuOperations(Executor& executor, std::string transport_name,
                                                    CudaBackend& cuda) {
  return std::make_unique<CpuOperations>(executor, std::move(transport_name), cuda);
}

}  // namespace ddp::engine
