// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Allreduce: the pipelined ring for large messages, recursive doubling for small ones.
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "collectives/collectives.h"
#include "collectives/ring.h"
#include "common/status.h"
#include "common/thread_priority.h"
#include "reduce/epilogue.h"
#include "reduce/reduce.h"

namespace ddp::collectives {
namespace {

using reduce::Epilogue;

// Recursive doubling: log2(N) exchanges of the whole vector. Ranks beyond the largest power of
// two first fold their data into a partner and get the result back at the end. Operands are
// always combined lower-rank-group first, so every rank computes bit-identical results.
absl::Status RecursiveDoubling(Communicator& comm, const CallId& call, char* out, size_t count,
                               DataType type, ReduceOp op, const Epilogue& epilogue) {
  const int n = comm.size();
  const int r = comm.rank();
  const size_t bytes = count * DataTypeSize(type);
  int p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  const int extra = n - p2;
  char* tmp = comm.Scratch(1, bytes);
  Transfers transfers(comm, call);

  int vrank;  // rank among the p2 participants, or -1 for a rank that folded
  if (r < 2 * extra) {
    if (r % 2 == 0) {
      DDP_RETURN_IF_ERROR(transfers.Wait(transfers.Send(r + 1, 0, 0, out, bytes)));
      vrank = -1;
    } else {
      DDP_RETURN_IF_ERROR(transfers.Wait(transfers.Recv(r - 1, 0, 0, tmp, bytes)));
      reduce::Combine(type, op, out, tmp, out, count);
      vrank = r / 2;
    }
  } else {
    vrank = r - extra;
  }
  if (vrank >= 0) {
    auto real = [&](int v) { return v < extra ? 2 * v + 1 : v + extra; };
    uint32_t step = 1;
    for (int mask = 1; mask < p2; mask <<= 1, ++step) {
      const int partner = real(vrank ^ mask);
      transport::Request* recv = transfers.Recv(partner, step, 0, tmp, bytes);
      transport::Request* send = transfers.Send(partner, step, 0, out, bytes);
      DDP_RETURN_IF_ERROR(transfers.Wait(recv));
      DDP_RETURN_IF_ERROR(transfers.Wait(send));
      if ((vrank & mask) == 0) {
        reduce::Combine(type, op, out, out, tmp, count);
      } else {
        reduce::Combine(type, op, out, tmp, out, count);
      }
    }
  }
  if (r < 2 * extra) {
    if (r % 2 == 1) {
      DDP_RETURN_IF_ERROR(transfers.Wait(transfers.Send(r - 1, 31, 0, out, bytes)));
    } else {
      DDP_RETURN_IF_ERROR(transfers.Wait(transfers.Recv(r + 1, 31, 0, out, bytes)));
    }
  }
  epilogue.Apply(type, out, count);
  return transfers.WaitAll();
}

absl::Status Ring(Communicator& comm, const CallId& call, const char* in, char* out, size_t count,
                  DataType type, ReduceOp op, const Epilogue& epilogue) {
  const int n = comm.size();
  const int r = comm.rank();
  const size_t es = DataTypeSize(type);
  const Blocks blocks = Blocks::Even(count, n);
  const uint32_t gather_base = static_cast<uint32_t>(n - 1);
  Transfers transfers(comm, call);
  char* my_block = out + blocks.offset[static_cast<size_t>(r)] * es;

  RingReduceScatterArgs rs;
  rs.in = in;
  rs.blocks = blocks;
  rs.type = type;
  rs.op = op;
  rs.accumulator = [&](int /*step*/, int block) {
    return out + blocks.offset[static_cast<size_t>(block)] * es;
  };
  // As each segment of this rank's block is final, finish it (epilogue) and start the all-gather
  // with it: the two phases overlap.
  rs.on_final = [&](uint32_t j, size_t first, size_t elems) {
    epilogue.Apply(type, my_block + first * es, elems);
    transfers.Send((r + 1) % n, gather_base, j, my_block + first * es, elems * es);
  };
  std::vector<std::vector<transport::Request*>> sends;
  // All-gather receives land where the reduce-scatter sent from at the same step; post each as
  // soon as that send is done, so that early all-gather data never needs buffering.
  std::vector<std::vector<transport::Request*>> gather_posted(static_cast<size_t>(n - 1));
  const size_t seg = SegmentElements(comm, type);
  int post_step = 0;
  uint32_t post_segment = 0;
  rs.after_segment = [&] {
    while (post_step < n - 1) {
      const auto step = static_cast<size_t>(post_step);
      const int b = (r - post_step - 1 + n) % n;
      const uint32_t segments = SegmentsOf(blocks.count[static_cast<size_t>(b)], seg);
      if (post_segment >= segments) {
        ++post_step;
        post_segment = 0;
        continue;
      }
      // Out of place, step 0 of the reduce-scatter sends from the input: nothing to wait for.
      const bool region_free =
          (step == 0 && in != out) ||
          (step < sends.size() && post_segment < sends[step].size() &&
           sends[step][post_segment] != nullptr && sends[step][post_segment]->Test());
      if (!region_free) return;
      const size_t first = blocks.offset[static_cast<size_t>(b)] + post_segment * seg;
      const size_t elems = std::min(seg, blocks.count[static_cast<size_t>(b)] - post_segment * seg);
      gather_posted[step].push_back(transfers.Recv((r + n - 1) % n, gather_base + step,
                                                   post_segment, out + first * es, elems * es));
      ++post_segment;
    }
  };
  DDP_RETURN_IF_ERROR(RingReduceScatter(comm, transfers, rs, &sends));

  RingAllgatherArgs ag;
  ag.out = out;
  ag.blocks = blocks;
  ag.element_size = es;
  ag.step_base = gather_base;
  ag.first_sends_posted = true;
  ag.posted = std::move(gather_posted);
  // A block is received into the region that the reduce-scatter sent from at the same step.
  ag.before_receive = [&](int step, uint32_t j) -> absl::Status {
    const auto& list = sends[static_cast<size_t>(step)];
    if (j < list.size() && list[j] != nullptr) return transfers.Wait(list[j]);
    return absl::OkStatus();
  };
  return RingAllgather(comm, transfers, ag);
}

}  // namespace

namespace {

// Hierarchical: reduce-scatter among the ranks of each host (shared memory), allreduce of each
// rank's block among the ranks with the same local index on every host (the network), then
// all-gather within each host. Only 1/L of the data crosses the network from each rank, and
// every host sends over L connections at once. Blocks are reduced by one rank each and copied
// everywhere, so every rank gets the same bits.
//
// A message of several chunks (Tuning::hier_chunk_bytes) goes through the three phases chunk by
// chunk, as a pipeline: while this thread allreduces chunk c across hosts, a helper thread
// reduce-scatters chunk c+1 and all-gathers chunk c-1 within the host, so that only the first
// chunk's reduce-scatter and the last one's all-gather add to the time of the network phase.
// The helper makes its calls in the same order on every rank (RS0 RS1 AG0 RS2 AG1 ... AG(C-1)),
// and each level numbers its calls from a range reserved beforehand, so the two threads number
// alike on every rank whichever runs first.
class HierarchicalPipeline {
 public:
  HierarchicalPipeline(Communicator& comm, const char* send, char* recv, size_t count,
                       DataType type, ReduceOp op, const Epilogue& epilogue, int chunks)
      : h_(comm.hierarchy()),
        send_(send),
        recv_(recv),
        type_(type),
        es_(DataTypeSize(type)),
        op_(op),
        epilogue_(epilogue),
        chunks_(Blocks::Even(count, chunks)) {
    const int local_size = h_.local->size();
    size_t mine = 0;
    for (size_t c = 0; c < static_cast<size_t>(chunks); ++c) {
      within_.push_back(Blocks::Even(chunks_.count[c], local_size));
      block_offset_.push_back(mine);
      mine += within_.back().count[static_cast<size_t>(h_.local->rank())];
    }
    block_ = comm.Scratch(7, std::max<size_t>(mine * es_, 1));
  }

  absl::Status Run() {
    const int chunks = static_cast<int>(chunks_.count.size());
    if (chunks == 1) return InOneThread(1);
    const auto calls = static_cast<uint32_t>(chunks);
    const uint32_t first = h_.local->ReserveCalls(3 * calls);
    struct Numbering {  // back to the shared counter however Run returns
      Hierarchy& h;
      ~Numbering() {
        h.local->NumberCallsFromShared();
        h.cross->NumberCallsFromShared();
      }
    } numbering{h_};
    h_.local->NumberCallsFrom(first);
    h_.cross->NumberCallsFrom(first + 2 * calls);
    std::thread host;
    try {
      host = std::thread([this, chunks] {
        NameThisThread("ddp-hier-host");
        Finish(HostPhases(chunks));
      });
    } catch (const std::system_error&) {
      // No thread to be had (a process or container limit): the same calls, in the same order
      // at each level and with the same numbers, from this thread; peers that pipeline agree.
      return InOneThread(chunks);
    }
    for (int c = 0; c < chunks; ++c) {
      if (!WaitFor(reduced_, c)) break;
      const absl::Status status = CrossChunk(c);
      if (!status.ok()) {
        Finish(status);
        break;
      }
      Publish(crossed_, c + 1);
    }
    host.join();
    return first_error_;
  }

 private:
  // The pipeline's calls one after the other: RS0 RS1 X0 AG0 RS2 X1 AG1 ... X(C-1) AG(C-1),
  // each level's in the order HostPhases and Run make them.
  absl::Status InOneThread(int chunks) {
    DDP_RETURN_IF_ERROR(ReduceScatterChunk(0));
    for (int c = 0; c < chunks; ++c) {
      if (c + 1 < chunks) DDP_RETURN_IF_ERROR(ReduceScatterChunk(c + 1));
      DDP_RETURN_IF_ERROR(CrossChunk(c));
      DDP_RETURN_IF_ERROR(GatherChunk(c));
    }
    return absl::OkStatus();
  }

  absl::Status ReduceScatterChunk(int c) {
    const auto i = static_cast<size_t>(c);
    return ReduceScatterv(*h_.local, send_ + chunks_.offset[i] * es_,
                          block_ + block_offset_[i] * es_, within_[i].count, type_, op_,
                          Epilogue{});
  }
  absl::Status CrossChunk(int c) {
    const auto i = static_cast<size_t>(c);
    char* block = block_ + block_offset_[i] * es_;
    return Allreduce(*h_.cross, block, block,
                     within_[i].count[static_cast<size_t>(h_.local->rank())], type_, op_,
                     epilogue_);
  }
  absl::Status GatherChunk(int c) {
    const auto i = static_cast<size_t>(c);
    return Allgatherv(*h_.local, block_ + block_offset_[i] * es_, recv_ + chunks_.offset[i] * es_,
                      within_[i].count, type_);
  }

  // The helper thread's calls, one chunk of reduce-scatter ahead of the network phase.
  absl::Status HostPhases(int chunks) {
    for (int c = 0; c < chunks; ++c) {
      DDP_RETURN_IF_ERROR(ReduceScatterChunk(c));
      Publish(reduced_, c + 1);
      if (c > 0) {
        if (!WaitFor(crossed_, c - 1)) return absl::OkStatus();
        DDP_RETURN_IF_ERROR(GatherChunk(c - 1));
      }
    }
    if (!WaitFor(crossed_, chunks - 1)) return absl::OkStatus();
    return GatherChunk(chunks - 1);
  }

  void Publish(int& counter, int value) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      counter = value;
    }
    cv_.notify_all();
  }
  // Waits until chunk c has passed the phase `counter` counts; false if the other thread failed.
  bool WaitFor(const int& counter, int c) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return counter > c || failed_; });
    return !failed_;
  }
  // Records the first failure and releases the other thread. A failed collective has aborted
  // the transport both levels share, so the other thread's call in progress fails too.
  void Finish(const absl::Status& status) {
    if (status.ok()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!failed_) first_error_ = status;
      failed_ = true;
    }
    cv_.notify_all();
  }

  Hierarchy& h_;
  const char* send_;
  char* recv_;
  DataType type_;
  size_t es_;
  ReduceOp op_;
  const Epilogue& epilogue_;
  Blocks chunks_;                     // the message's chunks
  std::vector<Blocks> within_;        // each chunk's blocks, one per rank of the host
  std::vector<size_t> block_offset_;  // where this rank's block of each chunk is kept
  char* block_ = nullptr;

  std::mutex mu_;
  std::condition_variable cv_;
  int reduced_ = 0;  // chunks reduced within the host
  int crossed_ = 0;  // chunks allreduced across hosts
  bool failed_ = false;
  absl::Status first_error_;
};

absl::Status Hierarchical(Communicator& comm, const void* send, void* recv, size_t count,
                          DataType type, ReduceOp op, const Epilogue& epilogue) {
  const size_t bytes = count * DataTypeSize(type);
  const size_t per_host = static_cast<size_t>(comm.hierarchy().local->size());
  // By default, chunks of at least 4 MiB, and of at least 512 KiB per rank of the job: each
  // step of a chunk's ring across hosts then moves at least 512 KiB. On the namespace cluster
  // (8 hosts x 2 ranks at 1 Gbit/s, 64 MiB) smaller steps lost more to the ring's step-by-step
  // synchronisation than the overlap gained. One chunk where ranks outnumber a machine's cores:
  // the second thread finds no idle core to overlap on, and every extra step waits for the
  // scheduler (measured on that cluster at 4 and 10 Gbit/s; docs/scaling.md).
  const Tuning& tuning = comm.tuning();
  const size_t chunk_bytes = tuning.hier_chunk_bytes.value_or(
      tuning.crowded
          ? 0
          : std::max<size_t>(size_t{4} << 20, static_cast<size_t>(comm.size()) * (512 << 10)));
  // Chunks of at least one element per rank of the host, at most kMaxChunks; by default also
  // at most kMaxSteps steps across hosts in all, 2(H-1) a chunk: with many hosts the steps'
  // latency would cost more than the overlap hides (the cost model, docs/scaling.md).
  constexpr size_t kMaxChunks = 64;
  constexpr size_t kMaxSteps = 256;
  size_t chunks = chunk_bytes == 0 ? 1 : bytes / chunk_bytes;
  if (!tuning.hier_chunk_bytes.has_value()) {
    const size_t steps = 2 * static_cast<size_t>(comm.hierarchy().cross->size() - 1);
    chunks = std::min(chunks, kMaxSteps / steps);
  }
  chunks = std::clamp<size_t>(std::min(chunks, count / per_host), 1, kMaxChunks);
  HierarchicalPipeline pipeline(comm, static_cast<const char*>(send), static_cast<char*>(recv),
                                count, type, op, epilogue, static_cast<int>(chunks));
  return pipeline.Run();
}

}  // namespace

Algorithm ChooseAllreduce(const Communicator& comm, size_t bytes) {
  const Algorithm forced = comm.tuning().algorithm;
  if (forced == Algorithm::kRing || forced == Algorithm::kRecursiveDoubling) return forced;
  // Several hosts with several ranks each: shared memory within them, the network between.
  // (DDP_ALGO=hier where the hosts do not allow it falls back to the choice below.)
  if (comm.HierarchyApplies()) return Algorithm::kHierarchical;
  // Measured on loopback TCP (benchmarks/): with two ranks one exchange of the whole vector
  // beats the ring's two phases up to a few hundred KiB; with more ranks the ring's smaller
  // messages win sooner.
  const size_t limit = comm.tuning().small_allreduce_bytes * (comm.size() == 2 ? 4 : 1);
  return bytes <= limit ? Algorithm::kRecursiveDoubling : Algorithm::kRing;
}

absl::Status Allreduce(Communicator& comm, const void* send, void* recv, size_t count,
                       DataType type, ReduceOp op) {
  return Allreduce(comm, send, recv, count, type, op, Epilogue::For(op, comm.size()));
}

std::string AllreduceMethod(const Communicator& comm, size_t count, DataType type, ReduceOp op) {
  if (const AllreduceBackend* backend = comm.BackendFor(count, type, op)) return backend->name();
  const Algorithm algorithm = count < static_cast<size_t>(comm.size())
                                  ? Algorithm::kRecursiveDoubling
                                  : ChooseAllreduce(comm, count * DataTypeSize(type));
  return std::string(AlgorithmName(algorithm));
}

bool TakesPieces(const Communicator& comm, size_t count, DataType type, ReduceOp op) {
  if (comm.size() == 1) return true;  // each piece is its own result, finished where it lies
  const AllreduceBackend* backend = comm.BackendFor(count, type, op);
  return backend != nullptr && backend->TakesPieces();
}

absl::Status AllreducePieces(Communicator& comm, const std::vector<Piece>& pieces, size_t count,
                             DataType type, ReduceOp op) {
  if (comm.size() == 1) {
    comm.Begin(Kind::kAllreduce, type, op, Algorithm::kAuto, -1, count);
    for (const Piece& p : pieces) p.epilogue.Apply(type, p.out, p.in, p.count);
    return absl::OkStatus();
  }
  AllreduceBackend* backend = comm.BackendFor(count, type, op);
  if (backend == nullptr || !backend->TakesPieces()) {
    return absl::InternalError("allreduce of pieces on a communicator that does not take them");
  }
  comm.Begin(Kind::kAllreduce, type, op, Algorithm::kAuto, -1, count);
  return backend->AllreducePieces(pieces, count, type, reduce::Combining(op));
}

absl::Status Allreduce(Communicator& comm, const void* send, void* recv, size_t count,
                       DataType type, ReduceOp op, const Epilogue& epilogue) {
  const size_t bytes = count * DataTypeSize(type);
  const ReduceOp combine = reduce::Combining(op);
  if (AllreduceBackend* backend = comm.BackendFor(count, type, op)) {
    // Begun like any other call, so that a peer in a different call is noticed.
    comm.Begin(Kind::kAllreduce, type, op, Algorithm::kAuto, -1, count);
    return backend->Allreduce(send, recv, count, type, combine, epilogue);
  }
  // The ring needs a block per rank; recursive doubling handles any count, including zero (an
  // exchange of empty messages that still checks that the ranks agree).
  const Algorithm algorithm = count < static_cast<size_t>(comm.size())
                                  ? Algorithm::kRecursiveDoubling
                                  : ChooseAllreduce(comm, bytes);
  const CallId call = comm.Begin(Kind::kAllreduce, type, op, algorithm, -1, count);
  auto* out = static_cast<char*>(recv);
  const auto* in = static_cast<const char*>(send);
  if (comm.size() == 1) {
    epilogue.Apply(type, out, in, count);
    return absl::OkStatus();
  }
  if (algorithm == Algorithm::kRecursiveDoubling) {
    if (in != out && bytes > 0) std::memcpy(out, in, bytes);
    return RecursiveDoubling(comm, call, out, count, type, combine, epilogue);
  }
  if (algorithm == Algorithm::kHierarchical) {
    return Hierarchical(comm, in, out, count, type, combine, epilogue);
  }
  return Ring(comm, call, in, out, count, type, combine, epilogue);
}

}  // namespace ddp::collectives
