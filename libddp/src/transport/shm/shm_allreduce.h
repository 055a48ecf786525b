// ShmAllreduce: allreduce among the ranks of one host through their shared reduction areas,
// moving each byte as few times as possible.
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
// passes (naming the ranks not there yet), a peer's process has exited, or `health` reports the
// transport failed (a peer's abort). The ranks must agree on each call: a rank whose peer
// started a different call (count, type, op) fails naming it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ddp/types.h"
#include "transport/shm/domain.h"
#include "transport/transport.h"

namespace ddp::transport::shm {

class ShmAllreduce {
 public:
  // `health`: the transport's failure, if any (a peer's abort among them). `left(peer)`: whether
  // a local peer has said goodbye. `abort`: tells the peers why this rank stops.
  ShmAllreduce(std::shared_ptr<ShmDomain> domain, std::function<absl::Status()> health,
               std::function<bool(int)> left, std::function<void(const absl::Status&)> abort);

  bool Has(int area) const {
    return domain_->config().native_allreduce && area >= 0 && area < domain_->config().areas;
  }
  // Publishes the call that communicator `area` starts (see Transport::NoteCall).
  void NoteCall(int area, uint32_t seq, const Descriptor& descriptor);
  void SetDescribe(std::function<std::string(const Descriptor&)> describe) {
    describe_ = std::move(describe);
  }
  // Not thread-safe per area: one caller at a time (each communicator has its own area).
  absl::Status Run(int area, const void* send, void* recv, size_t count, DataType type,
                   ReduceOp op);

 private:
  struct AreaState {
    uint64_t step = 0;  // last step used by this rank
    bool failed = false;
    absl::Status failure;
    uint32_t call_seq = 0;  // the call this rank's communicator is in
    Descriptor call;
  };
  absl::Status Small(int area, uint64_t step, const char* in, char* out, size_t count,
                     DataType type, ReduceOp op);
  absl::Status Large(int area, uint64_t first, const char* in, char* out, size_t count,
                     DataType type, ReduceOp op);
  // Waits until `flag` of every peer's area reaches `step` (`self_too`: this rank's as well).
  absl::Status WaitAll(int area, Line AreaControl::*flag, uint64_t step, const char* what);
  void Stamp(int area, uint64_t step, size_t count, DataType type, ReduceOp op);
  absl::Status CheckCalls(int area, uint64_t step, size_t count, DataType type, ReduceOp op);
  absl::Status Check(int area, int peer, absl::Time deadline, const char* what, uint64_t step);
  absl::Status Fail(int area, absl::Status status);
  // The error when a peer has left or died: names every local peer gone.
  absl::Status Gone();

  std::shared_ptr<ShmDomain> domain_;
  std::function<absl::Status()> health_;
  std::function<bool(int)> left_;
  std::function<void(const absl::Status&)> abort_;
  std::vector<AreaState> areas_;
  std::function<std::string(const Descriptor&)> describe_;
};

}  // namespace ddp::transport::shm
