// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The NCCL backend's collectives (nccl_backend.cc: the machinery around them). Allreduce runs in
// place on a lone tensor and through the fusion buffer otherwise; uneven allgathers and
// reduce-scatters are grouped broadcasts and reduces. Scale factors and averages are our kernels
// (kernels.cu), finished as reduce::Epilogue defines them.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>

#include "common/status.h"
#include "nccl/backend_impl.h"
#include "nccl/kernels.h"
#include "reduce/epilogue.h"

namespace ddp::nccl::impl {
namespace {

absl::Status KernelStatus(int e, absl::string_view what) {
  if (e == 0) return absl::OkStatus();
  return CudaError(static_cast<cudaError_t>(e), what);
}

ncclDataType_t NcclType(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kInt8:
      return ncclInt8;
    case DataType::kUInt8:
      return ncclUint8;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
  }
  return ncclFloat32;
}

// Average is a sum finished by a division over the contributing ranks (which join can make
// fewer than the communicator's size, so ncclAvg would be wrong).
ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return ncclSum;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kProduct:
      return ncclProd;
  }
  return ncclSum;
}

}  // namespace

absl::Status NcclBackend::FinishOutput(DataType type, ReduceOp op, void* out, size_t count,
                                       double postscale, int active) {
  if (count == 0 || out == nullptr) return absl::OkStatus();
  // What average and postscale mean is reduce::Epilogue's; on the GPU floating types are
  // finished by one multiplication (a fused kernel), integers by a division, then the postscale.
  const reduce::Epilogue epilogue = reduce::Epilogue::For(op, active, postscale);
  if (IsFloating(type)) {
    if (epilogue.factor() == 1.0) return absl::OkStatus();
    return KernelStatus(kernels::Scale(type, out, out, count, epilogue.factor(), stream_),
                        "scaling");
  }
  if (epilogue.divisor != 1) {
    DDP_RETURN_IF_ERROR(
        KernelStatus(kernels::DivideInt(type, out, count, epilogue.divisor, stream_), "averaging"));
  }
  if (postscale != 1.0) {
    return KernelStatus(kernels::Scale(type, out, out, count, postscale, stream_), "scaling");
  }
  return absl::OkStatus();
}

absl::StatusOr<DonePtr> NcclBackend::Allreduce(int set, const std::vector<Piece>& pieces,
                                               DataType type, ReduceOp op, int active) {
  std::lock_guard<std::mutex> lock(mu_);
  DDP_ASSIGN_OR_RETURN(Comm * c, Begin(set, "allreduce"));
  const size_t es = DataTypeSize(type);
  size_t total = 0;
  for (const Piece& p : pieces) {
    total += p.count;
    DDP_RETURN_OR_FAIL(WaitReady(p.ready));
  }
  if (total == 0) return DonePtr();
  if (pieces.size() == 1 && pieces[0].input != nullptr) {
    // Alone: in place on the caller's memory, no copy.
    const Piece& p = pieces[0];
    const void* in = p.input;
    if (p.prescale != 1.0) {
      DDP_RETURN_OR_FAIL(KernelStatus(
          kernels::Scale(type, p.output, p.input, p.count, p.prescale, stream_), "prescaling"));
      in = p.output;
    }
    DDP_RETURN_IF_ERROR(Issue(
        *c, ncclAllReduce(in, p.output, p.count, NcclType(type), NcclOp(op), c->comm, stream_),
        "allreduce"));
    DDP_RETURN_OR_FAIL(FinishOutput(type, op, p.output, p.count, p.postscale, active));
    return Finished(*c, pieces, "allreduce");
  }
  DDP_RETURN_OR_FAIL(ReserveFusion(*c, total * es));
  char* buffer = static_cast<char*>(fusion_);
  size_t offset = 0;
  for (const Piece& p : pieces) {
    char* dst = buffer + offset * es;
    if (p.input == nullptr) {
      DDP_RETURN_OR_FAIL(KernelStatus(kernels::FillIdentity(type, op, dst, p.count, stream_),
                                      "filling the identity"));
    } else if (p.prescale != 1.0) {
      DDP_RETURN_OR_FAIL(KernelStatus(
          kernels::Scale(type, dst, p.input, p.count, p.prescale, stream_), "prescaling"));
    } else if (p.count > 0) {
      DDP_CUDA_FAIL(cudaMemcpyAsync(dst, p.input, p.count * es, cudaMemcpyDeviceToDevice, stream_),
                    "packing the fusion buffer");
    }
    offset += p.count;
  }
  DDP_RETURN_IF_ERROR(
      Issue(*c, ncclAllReduce(buffer, buffer, total, NcclType(type), NcclOp(op), c->comm, stream_),
            "allreduce of the fusion buffer"));
  offset = 0;
  for (const Piece& p : pieces) {
    if (p.output != nullptr && p.count > 0) {
      DDP_CUDA_FAIL(cudaMemcpyAsync(p.output, buffer + offset * es, p.count * es,
                                    cudaMemcpyDeviceToDevice, stream_),
                    "unpacking the fusion buffer");
      DDP_RETURN_OR_FAIL(FinishOutput(type, op, p.output, p.count, p.postscale, active));
    }
    offset += p.count;
  }
  return Finished(*c, pieces, "allreduce of the fusion buffer");
}

absl::Status NcclBackend::Broadcast(int set, void* buffer, size_t count, DataType type, int root,
                                    const ReadyPtr& ready) {
  std::lock_guard<std::mutex> lock(mu_);
  DDP_ASSIGN_OR_RETURN(Comm * c, Begin(set, "broadcast"));
  DDP_RETURN_OR_FAIL(WaitReady(ready));
  if (count == 0) return absl::OkStatus();
  DDP_RETURN_IF_ERROR(
      Issue(*c, ncclBroadcast(buffer, buffer, count, NcclType(type), root, c->comm, stream_),
            "broadcast"));
  return Complete(*c, "broadcast");
}

absl::StatusOr<Backend::DeviceBuffer> NcclBackend::Allgatherv(int set, const void* input,
                                                              const std::vector<size_t>& counts,
                                                              DataType type,
                                                              const ReadyPtr& ready) {
  std::lock_guard<std::mutex> lock(mu_);
  DDP_ASSIGN_OR_RETURN(Comm * c, Begin(set, "allgather"));
  DDP_RETURN_OR_FAIL(WaitReady(ready));
  const size_t es = DataTypeSize(type);
  size_t total = 0;
  for (size_t n : counts) total += n;
  DDP_ASSIGN_OR_RETURN(DeviceBuffer out, AllocateOrFail(total * es));
  if (total == 0) return out;
  char* dst = static_cast<char*>(out.get());
  const bool equal =
      std::all_of(counts.begin(), counts.end(), [&](size_t n) { return n == counts[0]; });
  if (equal) {
    DDP_RETURN_IF_ERROR(Issue(
        *c, ncclAllGather(input, dst, counts[0], NcclType(type), c->comm, stream_), "allgather"));
  } else {
    // Uneven first dimensions: one broadcast per rank, grouped into one launch.
    DDP_RETURN_IF_ERROR(Issue(*c, ncclGroupStart(), "allgather"));
    size_t offset = 0;
    ncclResult_t r = ncclSuccess;
    for (size_t i = 0; i < counts.size() && r == ncclSuccess; ++i) {
      if (counts[i] > 0) {
        r = ncclBroadcast(input, dst + offset * es, counts[i], NcclType(type), static_cast<int>(i),
                          c->comm, stream_);
      }
      offset += counts[i];
    }
    const ncclResult_t end = ncclGroupEnd();
    DDP_RETURN_IF_ERROR(Issue(*c, r != ncclSuccess ? r : end, "allgather (uneven)"));
  }
  DDP_RETURN_IF_ERROR(Complete(*c, "allgather"));
  return out;
}

absl::StatusOr<Backend::DeviceBuffer> NcclBackend::Alltoall(int set, const void* input,
                                                            size_t count, DataType type,
                                                            const ReadyPtr& ready) {
  std::lock_guard<std::mutex> lock(mu_);
  DDP_ASSIGN_OR_RETURN(Comm * c, Begin(set, "alltoall"));
  DDP_RETURN_OR_FAIL(WaitReady(ready));
  const size_t block = count * DataTypeSize(type);
  DDP_ASSIGN_OR_RETURN(DeviceBuffer out, AllocateOrFail(block * static_cast<size_t>(c->size)));
  if (block == 0) return out;
  const char* in = static_cast<const char*>(input);
  char* dst = static_cast<char*>(out.get());
  DDP_CUDA_FAIL(cudaMemcpyAsync(dst + block * static_cast<size_t>(c->index),
                                in + block * static_cast<size_t>(c->index), block,
                                cudaMemcpyDeviceToDevice, stream_),
                "alltoall's own block");
  if (c->size > 1) {
    DDP_RETURN_IF_ERROR(Issue(*c, ncclGroupStart(), "alltoall"));
    ncclResult_t r = ncclSuccess;
    for (int peer = 0; peer < c->size && r == ncclSuccess; ++peer) {
      if (peer == c->index) continue;
      const size_t at = block * static_cast<size_t>(peer);
      r = ncclSend(in + at, count, NcclType(type), peer, c->comm, stream_);
      if (r == ncclSuccess) r = ncclRecv(dst + at, count, NcclType(type), peer, c->comm, stream_);
    }
    const ncclResult_t end = ncclGroupEnd();
    DDP_RETURN_IF_ERROR(Issue(*c, r != ncclSuccess ? r : end, "alltoall"));
  }
  DDP_RETURN_IF_ERROR(Complete(*c, "alltoall"));
  return out;
}

absl::StatusOr<Backend::DeviceBuffer> NcclBackend::ReduceScatterv(
    int set, const void* input, const std::vector<size_t>& counts, DataType type, ReduceOp op,
    double prescale, double postscale, int active, const ReadyPtr& ready) {
  std::lock_guard<std::mutex> lock(mu_);
  DDP_ASSIGN_OR_RETURN(Comm * c, Begin(set, "reducescatter"));
  DDP_RETURN_OR_FAIL(WaitReady(ready));
  const size_t es = DataTypeSize(type);
  size_t total = 0;
  for (size_t n : counts) total += n;
  const size_t mine = counts[static_cast<size_t>(c->index)];
  DDP_ASSIGN_OR_RETURN(DeviceBuffer out, AllocateOrFail(mine * es));
  if (total == 0) return out;
  const char* in = static_cast<const char*>(input);
  if (prescale != 1.0) {
    DDP_RETURN_OR_FAIL(ReserveFusion(*c, total * es));
    DDP_RETURN_IF_ERROR(
        KernelStatus(kernels::Scale(type, fusion_, input, total, prescale, stream_), "prescaling"));
    in = static_cast<const char*>(fusion_);
  }
  const bool equal =
      std::all_of(counts.begin(), counts.end(), [&](size_t n) { return n == counts[0]; });
  if (equal) {
    DDP_RETURN_IF_ERROR(Issue(
        *c, ncclReduceScatter(in, out.get(), mine, NcclType(type), NcclOp(op), c->comm, stream_),
        "reducescatter"));
  } else {
    // Uneven blocks: block i reduced to rank i, one ncclReduce each, grouped.
    DDP_RETURN_IF_ERROR(Issue(*c, ncclGroupStart(), "reducescatter"));
    size_t offset = 0;
    ncclResult_t r = ncclSuccess;
    for (size_t i = 0; i < counts.size() && r == ncclSuccess; ++i) {
      if (counts[i] > 0) {
        const bool root = static_cast<int>(i) == c->index;
        void* recv = root ? out.get() : const_cast<char*>(in + offset * es);  // unused off root
        r = ncclReduce(in + offset * es, recv, counts[i], NcclType(type), NcclOp(op),
                       static_cast<int>(i), c->comm, stream_);
      }
      offset += counts[i];
    }
    const ncclResult_t end = ncclGroupEnd();
    DDP_RETURN_IF_ERROR(Issue(*c, r != ncclSuccess ? r : end, "reducescatter (uneven)"));
  }
  DDP_RETURN_OR_FAIL(FinishOutput(type, op, out.get(), mine, postscale, active));
  DDP_RETURN_IF_ERROR(Complete(*c, "reducescatter"));
  return out;
}

}  // namespace ddp::nccl::impl
