// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// ShmAllreduce: the collective backend (backend.h) that runs allreduce among the ranks of one
// host through their reduction areas in shared memory (transport/shm/domain.h), moving each byte
// as few times as possible.
//
// The buffer goes in pipeline steps of one "group": `chunk_bytes` per rank. At each step every
// rank stages the slices of its input that others reduce (never its own slice) in its area,
// reduces its own slice straight from its input and the peers' stages (always in rank order,
// so that the result is bit-identical on every rank whoever computes it), publishes the result
// in its area, and copies the others' results into its output. Three flags per rank and area
// (input staged, slice reduced, step done) order the steps; `slots` steps are in flight, so a
// rank reduces step s while its peers still gather step s-1. Small buffers take one step in
// which every rank reduces everything from the stages: one synchronisation instead of two.
//
// Waits spin briefly, then sleep on a futex in the peer's area, so that several ranks sharing a
// core give it to the rank they wait for. A wait ends with an error when the job's timeout
// passes (naming the ranks not there yet), a peer has left or its process has exited, or the
// transport failed (a peer's abort). The ranks must agree on each call: a rank whose peer
// started a different call (count, type, op) fails naming it. Failures go through the job's
// shared-memory transport (the one that carries everything else between these ranks): this
// rank's are sent to the peers as an abort, and theirs arrive the same way.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "collectives/backend.h"
#include "ddp/types.h"
#include "transport/shm/domain.h"
#include "transport/transport.h"

namespace ddp::collectives {

class ShmAllreduce final : public AllreduceBackend {
 public:
  // Runs in reduction area `area` of `domain`; `transport` is the job's, whose ranks are the
  // domain's local ranks (this backend exists only when one host holds the whole job).
  ShmAllreduce(std::shared_ptr<transport::shm::ShmDomain> domain, transport::Transport& transport,
               int area);

  std::string name() const override { return "shm"; }
  bool Takes(size_t, DataType, ReduceOp) const override { return true; }
  // Publishes the call in this rank's area, where the peers' waits read it.
  void NoteCall(const CallId& call) override;
  // Not thread-safe: one caller at a time (each communicator has an area of its own).
  absl::Status Allreduce(const void* send, void* recv, size_t count, DataType type,
                         ReduceOp combine, const reduce::Epilogue& epilogue) override;
  // A fused call straight from and into its tensors: each byte is staged, reduced and copied out
  // where it lies, as for one buffer, so the engine needs no fusion buffer (and no copies into
  // and out of one).
  bool TakesPieces() const override { return true; }
  absl::Status AllreducePieces(const std::vector<Piece>& pieces, size_t count, DataType type,
                               ReduceOp combine) override;

 private:
  using AreaControl = transport::shm::AreaControl;
  using Line = transport::shm::Line;
  class Layout;
  class Pipeline;  // Large()'s steps (shm_allreduce.cc)
  absl::Status Run(const Layout& layout, size_t count, DataType type, ReduceOp combine);
  absl::Status Small(uint64_t step, const Layout& layout, size_t count, DataType type, ReduceOp op);
  absl::Status Large(uint64_t first, const Layout& layout, size_t count, DataType type,
                     ReduceOp op);
  // Waits until `flag` of every peer's area reaches `step`.
  absl::Status WaitAll(Line AreaControl::*flag, uint64_t step, const char* what);
  void Stamp(uint64_t step, size_t count, DataType type, ReduceOp op);
  absl::Status CheckCalls(uint64_t step, size_t count, DataType type, ReduceOp op);
  absl::Status Check(int peer, absl::Time deadline, const char* what, uint64_t step);
  absl::Status Fail(absl::Status status);
  // The error when a peer has left or died: names every local peer gone.
  // `seen`: the peer found left or dead (named if the others' state no longer says so).
  absl::Status Gone(int seen);

  std::shared_ptr<transport::shm::ShmDomain> domain_;
  transport::Transport& transport_;
  const int area_;
  uint64_t step_ = 0;  // last step used by this rank
  bool failed_ = false;
  absl::Status failure_;
  uint32_t call_seq_ = 0;  // the call this rank's communicator is in
  transport::Descriptor call_;
};

}  // namespace ddp::collectives
