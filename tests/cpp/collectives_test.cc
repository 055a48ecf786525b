// Conformance: every collective x dtype x op x count x placement, for N = 1..8 real processes,
// against references in higher precision, fresh random data each run, outputs poisoned first.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ddp/context.h"
#include "support/data.h"
#include "support/multiprocess.h"

namespace ddp::testing {
namespace {

constexpr DataType kTypes[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                               DataType::kBFloat16, DataType::kInt8,    DataType::kUInt8,
                               DataType::kInt32,    DataType::kInt64};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kProduct};

std::string Name(absl::string_view coll, DataType t, ReduceOp op, size_t count, bool in_place) {
  return absl::StrCat(coll, " ", DataTypeName(t), " ", ReduceOpName(op), " count ", count,
                      in_place ? " in-place" : " out-of-place");
}

#define RETURN_IF_ERROR(expr) \
  do {                        \
    absl::Status s_ = (expr); \
    if (!s_.ok()) return s_;  \
  } while (0)

struct Suite {
  Context& ctx;
  uint64_t seed;
  uint64_t call = 0;
  uint64_t digest = 1469598103934665603ULL;
  int n() const { return ctx.size(); }
  int r() const { return ctx.rank(); }

  absl::Status Allreduce(DataType t, ReduceOp op, size_t count, bool in_place) {
    const DataGen g{seed, ++call};
    const size_t es = DataTypeSize(t);
    const std::string what = Name("allreduce", t, op, count, in_place);
    std::vector<char> in(count * es + 1), out(count * es + 1);
    FillInput(g, t, op, r(), in.data(), count);
    std::vector<char> pristine = in;
    Poison(out.data(), out.size());
    if (in_place) {
      std::memcpy(out.data(), in.data(), count * es);
      RETURN_IF_ERROR(ctx.Allreduce(out.data(), out.data(), count, t, op));
    } else {
      RETURN_IF_ERROR(ctx.Allreduce(in.data(), out.data(), count, t, op));
      if (in != pristine) return absl::InternalError(what + ": the send buffer was modified");
    }
    if (static_cast<unsigned char>(out[count * es]) != 0xCD) {
      return absl::InternalError(what + ": wrote past the end of the receive buffer");
    }
    digest = Digest(out.data(), count * es, digest);
    return CheckReduced(g, t, op, n(), out.data(), count, 0, what);
  }

  absl::Status Allgatherv(DataType t, size_t count, bool uneven, bool in_place) {
    const DataGen g{seed, ++call};
    const size_t es = DataTypeSize(t);
    std::vector<size_t> counts(static_cast<size_t>(n()), count);
    if (uneven) {
      for (int j = 0; j < n(); ++j) counts[static_cast<size_t>(j)] = j == 1 ? 0 : count / 2 + j;
    }
    std::vector<size_t> offsets;
    size_t total = 0;
    for (size_t c : counts) {
      offsets.push_back(total);
      total += c;
    }
    const std::string what =
        Name(uneven ? "allgatherv" : "allgather", t, ReduceOp::kSum, count, in_place);
    const size_t mine = counts[static_cast<size_t>(r())];
    std::vector<char> in(mine * es + 1), out(total * es + 1);
    Poison(out.data(), out.size());
    FillInput(g, t, ReduceOp::kSum, r(), in.data(), mine);
    char* slot = out.data() + offsets[static_cast<size_t>(r())] * es;
    const void* send = in.data();
    if (in_place) {
      std::memcpy(slot, in.data(), mine * es);
      send = slot;
    }
    if (uneven) {
      RETURN_IF_ERROR(ctx.Allgatherv(send, out.data(), counts, t));
    } else {
      RETURN_IF_ERROR(ctx.Allgather(send, out.data(), count, t));
    }
    for (int j = 0; j < n(); ++j) {
      RETURN_IF_ERROR(CheckCopied(g, t, ReduceOp::kSum, j,
                                  out.data() + offsets[static_cast<size_t>(j)] * es,
                                  counts[static_cast<size_t>(j)], 0, what));
    }
    return absl::OkStatus();
  }

  absl::Status Broadcast(DataType t, size_t count, bool in_place) {
    const DataGen g{seed, ++call};
    const size_t es = DataTypeSize(t);
    const int root = static_cast<int>(call % static_cast<uint64_t>(n()));
    const std::string what =
        absl::StrCat(Name("broadcast", t, ReduceOp::kSum, count, in_place), " root ", root);
    std::vector<char> in(count * es + 1), out(count * es + 1);
    Poison(out.data(), out.size());
    const void* send = nullptr;
    if (r() == root) {
      FillInput(g, t, ReduceOp::kSum, root, in.data(), count);
      if (in_place) {
        std::memcpy(out.data(), in.data(), count * es);
        send = out.data();
      } else {
        send = in.data();
      }
    }
    RETURN_IF_ERROR(ctx.Broadcast(send, out.data(), count, t, root));
    return CheckCopied(g, t, ReduceOp::kSum, root, out.data(), count, 0, what);
  }

  absl::Status ReduceScatterv(DataType t, ReduceOp op, size_t count, bool uneven, bool in_place) {
    const DataGen g{seed, ++call};
    const size_t es = DataTypeSize(t);
    std::vector<size_t> counts(static_cast<size_t>(n()), count);
    if (uneven) {
      for (int j = 0; j < n(); ++j) counts[static_cast<size_t>(j)] = j == 0 ? 0 : count / 2 + j;
    }
    size_t total = 0, offset = 0;
    for (int j = 0; j < n(); ++j) {
      if (j == r()) offset = total;
      total += counts[static_cast<size_t>(j)];
    }
    const size_t mine = counts[static_cast<size_t>(r())];
    const std::string what =
        Name(uneven ? "reducescatterv" : "reducescatter", t, op, count, in_place);
    std::vector<char> in(total * es + 1), out(mine * es + 1);
    FillInput(g, t, op, r(), in.data(), total);
    Poison(out.data(), out.size());
    const char* result = out.data();
    if (in_place) {
      RETURN_IF_ERROR(uneven ? ctx.ReduceScatterv(in.data(), in.data(), counts, t, op)
                             : ctx.ReduceScatter(in.data(), in.data(), count, t, op));
      result = in.data();
    } else {
      RETURN_IF_ERROR(uneven ? ctx.ReduceScatterv(in.data(), out.data(), counts, t, op)
                             : ctx.ReduceScatter(in.data(), out.data(), count, t, op));
      if (static_cast<unsigned char>(out[mine * es]) != 0xCD) {
        return absl::InternalError(what + ": wrote past the end of the receive buffer");
      }
    }
    return CheckReduced(g, t, op, n(), result, mine, offset, what);
  }

  absl::Status Alltoall(DataType t, size_t count, bool in_place) {
    const DataGen g{seed, ++call};
    const size_t es = DataTypeSize(t);
    const size_t total = count * static_cast<size_t>(n());
    const std::string what = Name("alltoall", t, ReduceOp::kSum, count, in_place);
    std::vector<char> in(total * es + 1), out(total * es + 1);
    FillInput(g, t, ReduceOp::kSum, r(), in.data(), total);
    Poison(out.data(), out.size());
    char* result = out.data();
    if (in_place) {
      RETURN_IF_ERROR(ctx.Alltoall(in.data(), in.data(), count, t));
      result = in.data();
    } else {
      RETURN_IF_ERROR(ctx.Alltoall(in.data(), out.data(), count, t));
    }
    for (int j = 0; j < n(); ++j) {
      RETURN_IF_ERROR(CheckCopied(g, t, ReduceOp::kSum, j,
                                  result + static_cast<size_t>(j) * count * es, count,
                                  static_cast<size_t>(r()) * count, what));
    }
    return absl::OkStatus();
  }
};

// Runs the whole matrix on one rank; the digest line lets the parent compare results bitwise.
absl::Status RunMatrix(Context& ctx, uint64_t seed, const std::vector<size_t>& reduce_counts,
                       const std::vector<size_t>& block_counts) {
  Suite s{ctx, seed};
  for (bool in_place : {false, true}) {
    for (DataType t : kTypes) {
      for (size_t count : reduce_counts) {
        for (ReduceOp op : kOps) RETURN_IF_ERROR(s.Allreduce(t, op, count, in_place));
      }
      for (size_t count : block_counts) {
        RETURN_IF_ERROR(s.Allgatherv(t, count, /*uneven=*/false, in_place));
        RETURN_IF_ERROR(s.Allgatherv(t, count, /*uneven=*/true, in_place));
        RETURN_IF_ERROR(s.Broadcast(t, count * 3 + 1, in_place));
        RETURN_IF_ERROR(s.Alltoall(t, count, in_place));
        for (ReduceOp op : kOps) {
          RETURN_IF_ERROR(s.ReduceScatterv(t, op, count, /*uneven=*/false, in_place));
          RETURN_IF_ERROR(s.ReduceScatterv(t, op, count, /*uneven=*/true, in_place));
        }
      }
    }
  }
  for (int i = 0; i < 3; ++i) RETURN_IF_ERROR(ctx.Barrier());
  std::printf("digest=%016llx\n", static_cast<unsigned long long>(s.digest));
  return absl::OkStatus();
}

void ExpectAllOkAndIdentical(const JobResult& job, uint64_t seed) {
  ASSERT_FALSE(job.hung) << "seed " << seed << "\n" << job.Summary();
  std::set<std::string> digests;
  for (const RankResult& r : job.ranks) {
    ASSERT_TRUE(r.ok()) << "seed " << seed << " (replay with DDP_TEST_SEED=" << seed << ")\n"
                        << job.Summary();
    for (absl::string_view line : absl::StrSplit(r.output, '\n')) {
      if (absl::StartsWith(line, "digest=")) digests.insert(std::string(line));
    }
  }
  EXPECT_EQ(digests.size(), 1u) << "ranks computed different allreduce bits\n" << job.Summary();
}

class Conformance : public ::testing::TestWithParam<int> {};

TEST_P(Conformance, AllCollectivesAllTypesAllOps) {
  const int n = GetParam();
  const uint64_t seed = TestSeed();
  RecordProperty("seed", std::to_string(seed));
  JobSpec spec;
  spec.size = n;
  spec.hang_limit = absl::Seconds(600);
  // Sanitizer builds (DDP_TEST_QUICK=1) keep every case but use smaller large counts.
  const bool quick = std::getenv("DDP_TEST_QUICK") != nullptr;
  const std::vector<size_t> reduce_counts = {0,
                                             1,
                                             7,
                                             33,
                                             quick ? size_t{20011} : 65537,
                                             quick ? size_t{100003} : 1000003,
                                             static_cast<size_t>(n) * 1021 + 1};
  const std::vector<size_t> block_counts = {0, 1, 7, quick ? size_t{12503} : 125003};
  JobResult job = RunWithContext(
      spec, [&](Context& ctx) { return RunMatrix(ctx, seed, reduce_counts, block_counts); });
  ExpectAllOkAndIdentical(job, seed);
}

INSTANTIATE_TEST_SUITE_P(Ranks, Conformance, ::testing::Range(1, 9),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return absl::StrCat("N", p.param);
                         });

// The same matrix with each allreduce algorithm forced, tiny segments (many pipelined segments
// and receive-slot reuse), and several TCP streams per peer.
struct Variant {
  const char* name;
  int n;
  std::map<std::string, std::string> env;
  bool rank0_hosts_store = false;
};

void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

class Variants : public ::testing::TestWithParam<Variant> {};

TEST_P(Variants, AllCollectivesAllTypesAllOps) {
  const Variant& v = GetParam();
  const uint64_t seed = TestSeed();
  RecordProperty("seed", std::to_string(seed));
  JobSpec spec;
  spec.size = v.n;
  spec.env = v.env;
  spec.rank0_hosts_store = v.rank0_hosts_store;
  spec.hang_limit = absl::Seconds(600);
  JobResult job = RunWithContext(spec, [&](Context& ctx) {
    const bool quick = std::getenv("DDP_TEST_QUICK") != nullptr;
    return RunMatrix(ctx, seed, {0, 1, 7, 4099, quick ? size_t{30011} : 100003},
                     {0, 3, quick ? size_t{3001} : 12347});
  });
  ExpectAllOkAndIdentical(job, seed);
}

INSTANTIATE_TEST_SUITE_P(
    Tcp, Variants,
    ::testing::Values(Variant{"Ring3", 3, {{"DDP_ALGO", "ring"}}},
                      Variant{"RecursiveDoubling5", 5, {{"DDP_ALGO", "rd"}}},
                      Variant{"RecursiveDoubling6", 6, {{"DDP_ALGO", "rd"}}},
                      Variant{"SmallSegments4", 4, {{"DDP_SEGMENT_BYTES", "4096"}}},
                      Variant{"ThreeStreams3", 3, {{"DDP_TCP_STREAMS", "3"}}},
                      Variant{"RankZeroHostsStore2", 2, {}, true}),
    [](const ::testing::TestParamInfo<Variant>& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace ddp::testing
