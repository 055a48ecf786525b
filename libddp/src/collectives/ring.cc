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

}  // namespace

size_t SegmentElements(const Communicator& comm, DataType type) {
  return std::max<size_t>(1, comm.tuning().segment_bytes / DataTypeSize(type));
}

absl::Status RingReduceScatter(Communicator& comm, Transfers& transfers,
                               const RingReduceScatterArgs& args,
                               std::vector<std::vector<transport::Request*>>* sends) {
  const int n = comm.size();
  const int r = comm.rank();
  const int right = Mod(r + 1, n);
  const int left = Mod(r - 1, n);
  const size_t es = DataTypeSize(args.type);
  const size_t seg = SegmentElements(comm, args.type);
  const Blocks& blocks = args.blocks;
  auto send_block = [&](int k) { return Mod(r - k - 1, n); };
  auto recv_block = [&](int k) { return Mod(r - k - 2, n); };
  auto seg_count = [&](int block, uint32_t j) {
    const size_t total = blocks.count[static_cast<size_t>(block)];
    return std::min(seg, total - j * seg);
  };
  sends->assign(static_cast<size_t>(n - 1), {});

  // Every incoming segment, in the order the left neighbour sends them.
  struct Incoming {
    int step;
    uint32_t segment;
  };
  std::vector<Incoming> incoming;
  for (int k = 0; k < n - 1; ++k) {
    const uint32_t segments = SegmentsOf(blocks.count[static_cast<size_t>(recv_block(k))], seg);
    for (uint32_t j = 0; j < segments; ++j) incoming.push_back({k, j});
  }
  size_t largest_block = 0;
  for (size_t c : blocks.count) largest_block = std::max(largest_block, c);
  const size_t kReceiveSlots =
      std::clamp<size_t>(SegmentsOf(largest_block, seg), kMinReceiveSlots,
                         std::max<size_t>(kMinReceiveSlots, kMaxReceiveBytes / (seg * es)));
  char* slots = comm.Scratch(0, kReceiveSlots * seg * es);
  std::vector<transport::Request*> receives(incoming.size(), nullptr);
  auto post = [&](size_t q) {
    const Incoming& m = incoming[q];
    const int b = recv_block(m.step);
    receives[q] =
        transfers.Recv(left, args.step_base + static_cast<uint32_t>(m.step), m.segment,
                       slots + (q % kReceiveSlots) * seg * es, seg_count(b, m.segment) * es);
  };
  for (size_t q = 0; q < std::min(kReceiveSlots, incoming.size()); ++q) post(q);

  if (args.after_segment) args.after_segment();
  // Step 0: this rank's own data for its left-hand block goes out at once (after the receives
  // are posted, so that the neighbour's first segments land in place).
  {
    const int b = send_block(0);
    const uint32_t segments = SegmentsOf(blocks.count[static_cast<size_t>(b)], seg);
    for (uint32_t j = 0; j < segments; ++j) {
      const char* src = args.in + (blocks.offset[static_cast<size_t>(b)] + j * seg) * es;
      (*sends)[0].push_back(transfers.Send(right, args.step_base, j, src, seg_count(b, j) * es));
    }
  }

  for (size_t q = 0; q < incoming.size(); ++q) {
    DDP_RETURN_IF_ERROR(transfers.Wait(receives[q]));
    const auto [k, j] = incoming[q];
    const int b = recv_block(k);
    const size_t elems = seg_count(b, j);
    char* dst = args.accumulator(k, b) + j * seg * es;
    // The accumulator region may still be the source of the previous step's send.
    if (k >= 1) {
      auto& previous = (*sends)[static_cast<size_t>(k - 1)];
      if (j < previous.size() && k >= 2) DDP_RETURN_IF_ERROR(transfers.Wait(previous[j]));
    }
    const char* mine = args.in + (blocks.offset[static_cast<size_t>(b)] + j * seg) * es;
    reduce::Combine(args.type, args.op, dst, mine, slots + (q % kReceiveSlots) * seg * es, elems);
    if (q + kReceiveSlots < incoming.size()) post(q + kReceiveSlots);
    if (args.after_segment) args.after_segment();
    if (k == n - 2) {
      if (args.on_final) args.on_final(j, j * seg, elems);
    } else {
      auto& next = (*sends)[static_cast<size_t>(k + 1)];
      if (next.size() <= j) next.resize(j + 1, nullptr);
      next[j] =
          transfers.Send(right, args.step_base + static_cast<uint32_t>(k + 1), j, dst, elems * es);
    }
  }
  return absl::OkStatus();
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
