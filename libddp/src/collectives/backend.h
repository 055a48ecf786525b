// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Collective backends: whole collectives run by something other than libddp's own algorithms
// over point-to-point messages, as NCCL keeps CollNet beside its point-to-point network table.
// Today: the allreduce through shared reduction areas (shm_allreduce.h) and MPI_Allreduce
// (mpi_allreduce.h). The transport below stays point-to-point only.
//
// A communicator keeps a list of backends; the first that takes a call runs it, else the
// communicator's own algorithms do. Every rank must make the same choice for the same call, so
// Takes() may depend only on the call's arguments and the job's shape, never on timing.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ddp/types.h"
#include "reduce/epilogue.h"
#include "transport/transport.h"

namespace ddp::transport::shm {
class ShmDomain;
}

namespace ddp::collectives {

struct CallId;

// One tensor of a fused allreduce, read from `in` and written to `out` (the same memory when in
// place), finished with its own epilogue (each tensor has its own postscale). A fused call's
// result is the allreduce of its pieces laid end to end.
struct Piece {
  const void* in = nullptr;
  void* out = nullptr;
  size_t count = 0;
  reduce::Epilogue epilogue;
};

class AllreduceBackend {
 public:
  virtual ~AllreduceBackend() = default;
  // "shm", "mpi": how the timeline shows what ran the allreduce.
  virtual std::string name() const = 0;
  virtual bool Takes(size_t count, DataType type, ReduceOp op) const = 0;
  // Every collective call that starts on the communicator (any kind), before its messages, so
  // that a backend that waits on its peers outside the transport can tell a peer in another call.
  virtual void NoteCall(const CallId& /*call*/) {}
  // recv = combine(send over ranks) with `combine` (never Average: see reduce/epilogue.h), then
  // `epilogue` applied once. In place when send == recv. Its failure is the collective's.
  virtual absl::Status Allreduce(const void* send, void* recv, size_t count, DataType type,
                                 ReduceOp combine, const reduce::Epilogue& epilogue) = 0;
  // Whether AllreducePieces reads and writes the pieces where they lie (no packing into one
  // buffer first); the engine then fuses tensors without a fusion buffer.
  virtual bool TakesPieces() const { return false; }
  // The allreduce of `pieces` laid end to end (`count` elements in all), each piece finished with
  // its own epilogue.
  virtual absl::Status AllreducePieces(const std::vector<Piece>& /*pieces*/, size_t /*count*/,
                                       DataType /*type*/, ReduceOp /*combine*/) {
    return absl::UnimplementedError(name() + " does not reduce pieces in place");
  }
};

// What the job offers for allreduces over all its ranks, from its assembly: shared reduction
// areas when one host holds the whole job (and DDP_ALGO leaves the choice to libddp), and
// MPI_Allreduce when asked for (DDP_MPI_ALLREDUCE=1).
struct BackendResources {
  transport::Transport* transport = nullptr;  // the job's
  std::shared_ptr<transport::shm::ShmDomain> shm;
  bool mpi_allreduce = false;
};

// The backends of a communicator that spans the whole job. `slot` tells those communicators
// apart (kContextSlot, kEngineSlot): each gets resources of its own (a reduction area, an MPI
// communicator), so that their calls never interleave.
inline constexpr int kContextSlot = 0;
inline constexpr int kEngineSlot = 1;
inline constexpr int kBackendSlots = 2;
std::vector<std::unique_ptr<AllreduceBackend>> WholeJobBackends(const BackendResources& resources,
                                                                int slot);

}  // namespace ddp::collectives
