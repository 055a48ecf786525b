// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// MPI_Allreduce as a collective backend (DDP_MPI_ALLREDUCE=1), part of libddp_mpi.so: each slot
// (the context's collectives, the engine's world set) has a duplicate of MPI_COMM_WORLD of its
// own, so that their allreduces never interleave. f16 and bf16 use libddp's kernels as MPI user
// operations. The caller finishes averages (reduce/epilogue.h).
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "mpi/plugin_impl.h"
#include "reduce/reduce.h"

namespace ddp::mpi::impl {
namespace {

std::map<int, MPI_Comm>& AllreduceComms() {
  static auto* comms = new std::map<int, MPI_Comm>();
  return *comms;
}

// f16 and bf16 have no MPI type: they travel as MPI_UINT16_T with libddp's own kernels.
template <DataType T, ReduceOp O>
void HalfOp(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  reduce::Combine(T, O, inout, in, inout, static_cast<size_t>(*len));
}

absl::StatusOr<MPI_Op> HalfOpFor(DataType type, ReduceOp op) {
  // The context's and the engine's allreduces run in different threads.
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  static std::map<std::pair<int, int>, MPI_Op>* ops = new std::map<std::pair<int, int>, MPI_Op>();
  const auto key = std::make_pair(static_cast<int>(type), static_cast<int>(op));
  if (auto it = ops->find(key); it != ops->end()) return it->second;
  MPI_User_function* fn = nullptr;
  const bool f16 = type == DataType::kFloat16;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      fn = f16 ? HalfOp<DataType::kFloat16, ReduceOp::kSum>
               : HalfOp<DataType::kBFloat16, ReduceOp::kSum>;
      break;
    case ReduceOp::kMin:
      fn = f16 ? HalfOp<DataType::kFloat16, ReduceOp::kMin>
               : HalfOp<DataType::kBFloat16, ReduceOp::kMin>;
      break;
    case ReduceOp::kMax:
      fn = f16 ? HalfOp<DataType::kFloat16, ReduceOp::kMax>
               : HalfOp<DataType::kBFloat16, ReduceOp::kMax>;
      break;
    case ReduceOp::kProduct:
      fn = f16 ? HalfOp<DataType::kFloat16, ReduceOp::kProduct>
               : HalfOp<DataType::kBFloat16, ReduceOp::kProduct>;
      break;
  }
  MPI_Op created = MPI_OP_NULL;
  DDP_MPI_CHECK(MPI_Op_create(fn, /*commute=*/1, &created), "MPI_Op_create");
  (*ops)[key] = created;
  return created;
}

}  // namespace

absl::Status CreateAllreduceComms(int slots) {
  for (int slot = 0; slot < slots; ++slot) {
    if (AllreduceComms().count(slot) != 0) continue;
    MPI_Comm c = MPI_COMM_NULL;
    DDP_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    AllreduceComms()[slot] = c;
  }
  return absl::OkStatus();
}

absl::Status Allreduce(int slot, const void* send, void* recv, size_t count, DataType type,
                       ReduceOp op) {
  auto it = AllreduceComms().find(slot);
  if (it == AllreduceComms().end()) {
    return absl::InternalError(absl::StrCat("no MPI communicator for allreduce slot ", slot));
  }
  MPI_Datatype dt = MPI_DATATYPE_NULL;
  switch (type) {
    case DataType::kFloat32:
      dt = MPI_FLOAT;
      break;
    case DataType::kFloat64:
      dt = MPI_DOUBLE;
      break;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      dt = MPI_UINT16_T;
      break;
    case DataType::kInt8:
      dt = MPI_INT8_T;
      break;
    case DataType::kUInt8:
      dt = MPI_UINT8_T;
      break;
    case DataType::kInt32:
      dt = MPI_INT32_T;
      break;
    case DataType::kInt64:
      dt = MPI_INT64_T;
      break;
  }
  MPI_Op mop = MPI_SUM;
  if (type == DataType::kFloat16 || type == DataType::kBFloat16) {
    auto half = HalfOpFor(type, op);
    if (!half.ok()) return half.status();
    mop = *half;
  } else {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage:
        mop = MPI_SUM;
        break;
      case ReduceOp::kMin:
        mop = MPI_MIN;
        break;
      case ReduceOp::kMax:
        mop = MPI_MAX;
        break;
      case ReduceOp::kProduct:
        mop = MPI_PROD;
        break;
    }
  }
  const size_t es = DataTypeSize(type);
  if (send != recv && count > 0) std::memcpy(recv, send, count * es);
  // In place, in pieces that MPI's int counts can carry.
  constexpr size_t kPiece = size_t{1} << 30;
  auto* out = static_cast<char*>(recv);
  size_t done = 0;
  do {
    const size_t n = std::min(kPiece, count - done);
    DDP_MPI_CHECK(
        MPI_Allreduce(MPI_IN_PLACE, out + done * es, static_cast<int>(n), dt, mop, it->second),
        "MPI_Allreduce");
    done += n;
  } while (done < count);
  return absl::OkStatus();
}

}  // namespace ddp::mpi::impl
