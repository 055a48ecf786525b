// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Pipelined ring reduce-scatter and all-gather.
#include "collectives/ring.h"

#include <algorithm>

#include "common/status.h"
#include "reduce/reduce.h"

namespace ddp::collectives {
namespace {

// Receive buffers in flight during reduce-scatter: a whole block's worth when it fits, so that
// a segment is always received straight into a posted buffer (an early one would be buffered
// and copied once more), bounded so that scratch memory stays modest.
constexpr size_t kMinReceiveSlots = 4;
constexpr size_t kMaxReceiveBytes = 64 << 20;

int Mod(int a, int n) { return ((a % n) + n) % n; }

// One rank's reduce-scatter around the ring. At step k it sends block r-k-1 to its right-hand
// neighbour (its own data at step 0, later the partial sum it has just reduced) and receives
// block r-k-2 from its left-hand one, segment by segment, into receive slots posted ahead; each
// received segment is reduced with this rank's data and sent on at once. The last step's block
// is this rank's own, final. Everything here is inline: it runs per segment.
class ReduceScatterRing {
 public:
  ReduceScatterRing(Communicator& comm, Transfers& transfers, const RingReduceScatterArgs& args,
                    std::vector<std::vector<transport::Request*>>* sends)
      : comm_(comm),
        transfers_(transfers),
        args_(args),
        es_(DataTypeSize(args.type)),
        seg_(SegmentElements(comm, args.type)),
        sends_(sends),
        n_(comm.size()),
        r_(comm.rank()),
        right_(Mod(r_ + 1, n_)),
        left_(Mod(r_ - 1, n_)) {}

  absl::Status Run() {
    sends_->assign(static_cast<size_t>(n_ - 1), {});
    ListIncoming();
    TakeReceiveSlots();
    for (size_t q = 0; q < std::min(receive_slots_, incoming_.size()); ++q) PostReceive(q);
    if (args_.after_segment) args_.after_segment();
    SendOwnBlock();
    for (size_t q = 0; q < incoming_.size(); ++q) DDP_RETURN_IF_ERROR(ReduceSegment(q));
    return absl::OkStatus();
  }

 private:
  struct Incoming {
    int step;
    uint32_t segment;
  };

  int SendBlock(int k) const { return Mod(r_ - k - 1, n_); }
  int RecvBlock(int k) const { return Mod(r_ - k - 2, n_); }
  size_t SegmentCount(int block, uint32_t j) const {
    return std::min(seg_, args_.blocks.count[static_cast<size_t>(block)] - j * seg_);
  }
  uint32_t Segments(int block) const {
    return SegmentsOf(args_.blocks.count[static_cast<size_t>(block)], seg_);
  }
  // Segment j of `block` in this rank's input.
  const char* Input(int block, uint32_t j) const {
    return args_.in + (args_.blocks.offset[static_cast<size_t>(block)] + j * seg_) * es_;
  }
  char* Slot(size_t q) const { return slots_ + (q % receive_slots_) * seg_ * es_; }

  // Every incoming segment, in the order the left neighbour sends them.
  void ListIncoming() {
    for (int k = 0; k < n_ - 1; ++k) {
      const uint32_t segments = Segments(RecvBlock(k));
      for (uint32_t j = 0; j < segments; ++j) incoming_.push_back({k, j});
    }
    receives_.assign(incoming_.size(), nullptr);
  }

  // Receive buffers in flight: a whole block's worth when it fits (kMaxReceiveBytes).
  void TakeReceiveSlots() {
    size_t largest_block = 0;
    for (size_t c : args_.blocks.count) largest_block = std::max(largest_block, c);
    receive_slots_ =
        std::clamp<size_t>(SegmentsOf(largest_block, seg_), kMinReceiveSlots,
                           std::max<size_t>(kMinReceiveSlots, kMaxReceiveBytes / (seg_ * es_)));
    slots_ = comm_.Scratch(0, receive_slots_ * seg_ * es_);
  }

  void PostReceive(size_t q) {
    const Incoming& m = incoming_[q];
    const int b = RecvBlock(m.step);
    receives_[q] = transfers_.Recv(left_, args_.step_base + static_cast<uint32_t>(m.step),
                                   m.segment, Slot(q), SegmentCount(b, m.segment) * es_);
  }

  // Step 0: this rank's own data for its left-hand block goes out at once (after the receives
  // are posted, so that the neighbour's first segments land in place).
  void SendOwnBlock() {
    const int b = SendBlock(0);
    const uint32_t segments = Segments(b);
    for (uint32_t j = 0; j < segments; ++j) {
      (*sends_)[0].push_back(
          transfers_.Send(right_, args_.step_base, j, Input(b, j), SegmentCount(b, j) * es_));
    }
  }

  absl::Status ReduceSegment(size_t q) {
    DDP_RETURN_IF_ERROR(transfers_.Wait(receives_[q]));
    const auto [k, j] = incoming_[q];
    const int b = RecvBlock(k);
    const size_t elems = SegmentCount(b, j);
    char* dst = args_.accumulator(k, b) + j * seg_ * es_;
    // The accumulator region may still be the source of the previous step's send.
    if (k >= 2) {
      auto& previous = (*sends_)[static_cast<size_t>(k - 1)];
      if (j < previous.size()) DDP_RETURN_IF_ERROR(transfers_.Wait(previous[j]));
    }
    reduce::Combine(args_.type, args_.op, dst, Input(b, j), Slot(q), elems);
    if (q + receive_slots_ < incoming_.size()) PostReceive(q + receive_slots_);
    if (args_.after_segment) args_.after_segment();
    if (k == n_ - 2) {
      if (args_.on_final) args_.on_final(j, j * seg_, elems);
      return absl::OkStatus();
    }
    auto& next = (*sends_)[static_cast<size_t>(k) + 1];
    if (next.size() <= j) next.resize(j + 1, nullptr);
    next[j] = transfers_.Send(right_, args_.step_base + static_cast<uint32_t>(k + 1), j, dst,
                              elems * es_);
    return absl::OkStatus();
  }

  Communicator& comm_;
  Transfers& transfers_;
  const RingReduceScatterArgs& args_;
  const size_t es_;   // bytes per element
  const size_t seg_;  // elements per segment
  std::vector<std::vector<transport::Request*>>* sends_;
  const int n_;
  const int r_;
  const int right_;
  const int left_;
  std::vector<Incoming> incoming_;
  std::vector<transport::Request*> receives_;
  size_t receive_slots_ = 0;
  char* slots_ = nullptr;
};

}  // namespace

size_t SegmentElements(const Communicator& comm, DataType type) {
  return std::max<size_t>(1, comm.tuning().segment_bytes / DataTypeSize(type));
}

absl::Status RingReduceScatter(Communicator& comm, Transfers& transfers,
                               const RingReduceScatterArgs& args,
                               std::vector<std::vector<transport::Request*>>* sends) {
  return ReduceScatterRing(comm, transfers, args, sends).Run();
}

absl::Status RingAllgather(Communicator& comm, Transfers& transfers,
                           const RingAllgatherArgs& args) {
  const int n = comm.size();
  const int r = comm.rank();
  const int right = Mod(r + 1, n);
  const int left = Mod(r - 1, n);
  const size_t es = args.element_size;
  const size_t seg = std::max<size_t>(1, comm.tuning().segment_bytes / es);
  const Blocks& blocks = args.blocks;
  auto region = [&](int block, uint32_t j) {
    return args.out + (blocks.offset[static_cast<size_t>(block)] + j * seg) * es;
  };
  auto bytes_of = [&](int block, uint32_t j) {
    return std::min(seg, blocks.count[static_cast<size_t>(block)] - j * seg) * es;
  };
  // At step k this rank sends block r-k and receives block r-k-1.
  if (!args.first_sends_posted) {
    const uint32_t segments = SegmentsOf(blocks.count[static_cast<size_t>(r)], seg);
    for (uint32_t j = 0; j < segments; ++j) {
      transfers.Send(right, args.step_base, j, region(r, j), bytes_of(r, j));
    }
  }
  std::vector<std::vector<transport::Request*>> receives = args.posted;
  receives.resize(static_cast<size_t>(n - 1));
  for (int k = 0; k < n - 1; ++k) {
    const int b = Mod(r - k - 1, n);
    const uint32_t segments = SegmentsOf(blocks.count[static_cast<size_t>(b)], seg);
    for (uint32_t j = static_cast<uint32_t>(receives[static_cast<size_t>(k)].size()); j < segments;
         ++j) {
      if (args.before_receive) DDP_RETURN_IF_ERROR(args.before_receive(k, j));
      receives[static_cast<size_t>(k)].push_back(transfers.Recv(
          left, args.step_base + static_cast<uint32_t>(k), j, region(b, j), bytes_of(b, j)));
    }
  }
  for (int k = 0; k < n - 1; ++k) {
    const int b = Mod(r - k - 1, n);
    auto& list = receives[static_cast<size_t>(k)];
    for (uint32_t j = 0; j < list.size(); ++j) {
      DDP_RETURN_IF_ERROR(transfers.Wait(list[j]));
      if (k + 1 < n - 1) {
        transfers.Send(right, args.step_base + static_cast<uint32_t>(k + 1), j, region(b, j),
                       bytes_of(b, j));
      }
    }
  }
  return transfers.WaitAll();
}

}  // namespace ddp::collectives
