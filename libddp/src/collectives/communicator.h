// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Communicator: what every collective algorithm runs on. Wraps a Transport with collective
// sequence numbers, tags, message descriptors, scratch memory and the choice of algorithm.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "collectives/backend.h"
#include "collectives/comm_ids.h"
#include "ddp/types.h"
#include "transport/transport.h"

namespace ddp::collectives {

enum class Kind : uint8_t {
  kAllreduce = 1,
  kAllgather = 2,
  kBroadcast = 3,
  kReduceScatter = 4,
  kAlltoall = 5,
  kBarrier = 6,
};
absl::string_view KindName(Kind kind);

struct Tuning {
  Algorithm algorithm = Algorithm::kAuto;
  size_t segment_bytes = 1 << 20;
  size_t small_allreduce_bytes = 64 * 1024;
  size_t small_broadcast_bytes = 64 * 1024;
  // The hierarchical allreduce's chunks (0: one; empty: chosen by the number of ranks).
  std::optional<size_t> hier_chunk_bytes;
  // Some machine of the job runs more of its ranks than it has cores (bootstrap::Job::crowded).
  bool crowded = false;
  // The host of each rank of the communicator (empty: unknown), for the hierarchical allreduce.
  std::vector<std::string> hosts;
};

class Communicator;

// The two levels of the hierarchical allreduce: the ranks on this rank's host, and the ranks
// with this rank's local index on every host. Exists when there are several hosts with the
// same number (more than one) of ranks each.
struct Hierarchy {
  std::unique_ptr<transport::Transport> local_transport;
  std::unique_ptr<transport::Transport> cross_transport;
  std::unique_ptr<Communicator> local;
  std::unique_ptr<Communicator> cross;
};

// Identity of one collective call: every message it sends carries `descriptor`, and its tags
// share the group `seq`, so ranks that disagree about the call fail instead of mixing data.
struct CallId {
  uint32_t seq = 0;
  transport::Descriptor descriptor;
};

class Communicator {
 public:
  // `transport` may be null for a single-rank job (nothing is ever sent). Communicators sharing
  // a transport need distinct ids (from CommIds): the id is part of every tag, so their
  // collectives can be in flight at the same time without mixing. `backends` run whole
  // allreduces they take (backend.h); the others use this communicator's algorithms.
  Communicator(int rank, int size, transport::Transport* transport, Tuning tuning, CommId id,
               std::vector<std::unique_ptr<AllreduceBackend>> backends = {});
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  transport::Transport& transport() { return *transport_; }
  const Tuning& tuning() const { return tuning_; }
  CommId id() const { return id_; }
  // The first backend that takes this allreduce, or null.
  AllreduceBackend* BackendFor(size_t count, DataType type, ReduceOp op) const;

  // Starts a collective. `algorithm` is the one chosen (ranks must choose alike), `root` -1 when
  // not applicable, `count` the element count that every rank must agree on.
  CallId Begin(Kind kind, DataType type, ReduceOp op, Algorithm algorithm, int root,
               uint64_t count);

  // A 64-bit tag: the call's sequence number (32 bits: the 20-bit communicator id, then a
  // 12-bit call counter), then the step (12 bits: a ring of up to 2048 ranks) and the segment
  // (20 bits); the group (transport.h) is the sequence number.
  static constexpr int kCounterBits = 12;
  static constexpr int kStepBits = 12;
  static constexpr int kSegmentBits = 20;
  static uint32_t Seq(CommId id, uint32_t counter) {
    return (id << kCounterBits) | (counter & ((1u << kCounterBits) - 1));
  }
  static uint64_t Tag(uint32_t seq, uint32_t step, uint32_t segment) {
    static_assert(kCommIdBits + kCounterBits == 64 - transport::kTagGroupShift);
    static_assert(kStepBits + kSegmentBits == transport::kTagGroupShift);
    return (uint64_t{seq} << transport::kTagGroupShift) |
           (uint64_t{step & ((1u << kStepBits) - 1)} << kSegmentBits) |
           uint64_t{segment & ((1u << kSegmentBits) - 1)};
  }

  // "allreduce(count 1000, f32, sum, ring)".
  static std::string Describe(const transport::Descriptor& descriptor);

  // Bytes this communicator's collectives (and its hierarchy's levels) have sent and received
  // through the transport since it was made (Transfers counts them). Any thread.
  uint64_t bytes_sent() const { return bytes_sent_.load(std::memory_order_relaxed); }
  uint64_t bytes_received() const { return bytes_received_.load(std::memory_order_relaxed); }
  void Count(size_t sent, size_t received) {
    Communicator& counted = seq_source_ != nullptr ? *seq_source_ : *this;
    counted.bytes_sent_.fetch_add(sent, std::memory_order_relaxed);
    counted.bytes_received_.fetch_add(received, std::memory_order_relaxed);
  }

  // Scratch memory owned by the communicator, reused across calls; at least `bytes` long.
  char* Scratch(size_t slot, size_t bytes);

  // Whether the hosts allow the hierarchical allreduce (see Hierarchy), and its communicators
  // (made on first use). Their calls draw sequence numbers from this communicator, so their
  // tags never meet those of its other calls.
  bool HierarchyApplies() const { return hierarchy_applies_; }
  Hierarchy& hierarchy();

  // Takes `calls` numbers from the counter this communicator draws from and returns the first.
  uint32_t ReserveCalls(uint32_t calls);
  // Numbers this communicator's next calls from `first` on (numbers from ReserveCalls), instead
  // of drawing them from the counter it shares; NumberCallsFromShared() goes back. The two
  // levels of a hierarchy can then call from two threads and still number their calls alike on
  // every rank.
  void NumberCallsFrom(uint32_t first) { own_next_seq_ = first; }
  void NumberCallsFromShared() { own_next_seq_.reset(); }

 private:
  int rank_;
  int size_;
  transport::Transport* transport_;
  Tuning tuning_;
  CommId id_;
  std::vector<std::unique_ptr<AllreduceBackend>> backends_;
  uint32_t next_seq_ = 0;
  Communicator* seq_source_ = nullptr;    // a hierarchy level: the communicator it belongs to
  std::optional<uint32_t> own_next_seq_;  // see NumberCallsFrom
  std::vector<std::vector<char>> scratch_;
  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> bytes_received_{0};
  bool hierarchy_applies_ = false;
  std::unique_ptr<Hierarchy> hierarchy_;
};

// Tracks the transfers of one collective. Waiting on a failed transfer aborts the transport
// and waits for every other outstanding transfer to be released, so no receive can write into
// a caller's buffer after the collective has returned.
class Transfers {
 public:
  Transfers(Communicator& comm, const CallId& call) : comm_(comm), call_(call) {}
  ~Transfers();
  Transfers(const Transfers&) = delete;
  Transfers& operator=(const Transfers&) = delete;

  transport::Request* Send(int peer, uint32_t step, uint32_t segment, const void* data,
                           size_t bytes);
  transport::Request* Recv(int peer, uint32_t step, uint32_t segment, void* data, size_t bytes);
  absl::Status Wait(transport::Request* request);
  absl::Status WaitAll();

 private:
  absl::Status Failed(const absl::Status& status);

  Communicator& comm_;
  CallId call_;
  std::vector<transport::RequestPtr> requests_;
  size_t first_open_ = 0;  // requests before this index are known complete
};

// Element ranges of the blocks a buffer is split into, one per rank.
struct Blocks {
  std::vector<size_t> offset;  // in elements
  std::vector<size_t> count;
  size_t total = 0;
  static Blocks Even(size_t total, int parts);  // sizes differ by at most one element
  static Blocks FromCounts(const std::vector<size_t>& counts);
};

}  // namespace ddp::collectives
