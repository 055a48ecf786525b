// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The fusion engine across real rank processes: random submission orders, mixed dtypes and ops,
// mismatches, duplicates, stalls, the timeline, join, process sets, the response cache, autotune,
// idle sleeping and a dead peer (the operation kinds themselves: engine_kinds_test.cc).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ddp/ddp.h"
#include "ddp/errors.h"
#include "support/check.h"
#include "support/data.h"
#include "support/multiprocess.h"

namespace ddp::testing {
namespace {

std::string TempPath(absl::string_view stem) {
  return absl::StrCat(::testing::TempDir(), "/ddp-engine-", stem, "-", ::getpid());
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct TensorCase {
  std::string name;
  DataType type;
  ReduceOp op;
  size_t count;
};

// A ResNet-like mix: many small tensors, a few large, every dtype and op.
std::vector<TensorCase> MixedTensors(uint64_t seed, int n) {
  std::mt19937_64 rng(seed);
  std::vector<TensorCase> cases;
  const DataType types[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                            DataType::kBFloat16, DataType::kInt8,    DataType::kUInt8,
                            DataType::kInt32,    DataType::kInt64};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                          ReduceOp::kProduct};
  const size_t counts[] = {0, 1, 7, 33, 1000, 4099, 65537, 300007};
  for (int i = 0; i < n; ++i) {
    cases.push_back(
        {absl::StrCat("grad.", i), types[rng() % 8], ops[rng() % 5], counts[rng() % 8]});
  }
  return cases;
}

// Every rank submits all tensors in its own random order, then waits; checks every result.
// Inputs are filled before any submission, and the last rank submits only once every other rank
// has submitted all of its tensors (a blocking barrier, beside the engine): its tensors then meet
// peers that have everything pending, so ready tensors do pile up and fusion is exercised
// whatever the machine's load, instead of each rank's submissions trickling in one at a time.
absl::Status RunMixedStep(Context& ctx, const std::vector<TensorCase>& cases, uint64_t seed,
                          uint64_t step) {
  std::vector<std::vector<char>> in(cases.size()), out(cases.size());
  std::vector<size_t> order(cases.size());
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed * 7919 + step * 104729 + static_cast<uint64_t>(ctx.rank()));
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<Handle> handles(cases.size());
  for (size_t i : order) {
    const TensorCase& c = cases[i];
    const size_t bytes = c.count * DataTypeSize(c.type);
    in[i].resize(bytes + 1);
    out[i].resize(bytes + 1);
    FillInput(DataGen{seed, step * 1000 + i}, c.type, c.op, ctx.rank(), in[i].data(), c.count);
    Poison(out[i].data(), bytes);
  }
  const bool last = ctx.rank() == ctx.size() - 1;
  if (last && ctx.size() > 1) CHECK_OK(ctx.Barrier());
  // A third of the tensors in place: fused over shared memory, they are read and written where
  // they lie, so input and output being one memory must not matter.
  auto result = [&](size_t i) { return i % 3 == 0 ? in[i].data() : out[i].data(); };
  for (size_t i : order) {
    const TensorCase& c = cases[i];
    handles[i] = ctx.engine().AllreduceAsync(c.name, in[i].data(), result(i), c.type,
                                             {static_cast<int64_t>(c.count)}, c.op);
  }
  if (!last) CHECK_OK(ctx.Barrier());
  for (size_t i : order) {
    const TensorCase& c = cases[i];
    CHECK_OK(handles[i].Wait());
    CHECK_OK(CheckReduced(DataGen{seed, step * 1000 + i}, c.type, c.op, ctx.size(), result(i),
                          c.count, 0,
                          absl::StrCat(c.name, " step ", step, " (", DataTypeName(c.type), ", ",
                                       ReduceOpName(c.op), ", count ", c.count, ")")));
  }
  return absl::OkStatus();
}

class EngineMixed : public ::testing::TestWithParam<int> {};

TEST_P(EngineMixed, RandomOrdersMixedDtypesAndCacheHitsFromTheSecondStep) {
  const uint64_t seed = TestSeed();
  JobSpec spec;
  spec.size = GetParam();
  spec.env["DDP_FUSION_THRESHOLD"] = "1M";  // several fused batches per step
  JobResult job = RunWithContext(spec, [seed](Context& ctx) -> absl::Status {
    const auto cases = MixedTensors(seed, 80);
    CHECK_OK(RunMixedStep(ctx, cases, seed, 0));
    const EngineStats first = ctx.engine().stats();
    CHECK_OK(Expect(first.cache_misses == cases.size(),
                    absl::StrCat("step 0: ", first.cache_misses, " misses")));
    for (uint64_t step = 1; step <= 3; ++step) CHECK_OK(RunMixedStep(ctx, cases, seed, step));
    const EngineStats s = ctx.engine().stats();
    CHECK_OK(Expect(
        s.cache_misses == cases.size() && s.cache_hits == 3 * cases.size(),
        absl::StrCat("after 4 steps: ", s.cache_hits, " hits, ", s.cache_misses, " misses")));
    // Alone, a rank's engine may run each tensor before the next is even filled (a loaded
    // machine makes that likely), so fusion is only required where peers make tensors wait.
    if (ctx.size() > 1) {
      CHECK_OK(Expect(s.fused_tensors > 0 && s.collectives < s.tensors,
                      absl::StrCat(s.collectives, " collectives for ", s.tensors, " tensors")));
    }
    return absl::OkStatus();
  });
  EXPECT_FALSE(job.hung) << job.Summary();
  for (const auto& r : job.ranks) EXPECT_TRUE(r.ok()) << "seed " << seed << "\n" << job.Summary();
}

INSTANTIATE_TEST_SUITE_P(Ranks, EngineMixed, ::testing::Values(1, 2, 3, 4));

TEST(Engine, DisagreementsFailTheTensorOnEveryRankAndTheEngineGoesOn) {
  JobSpec spec;
  spec.size = 3;
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    const int r = ctx.rank();
    std::vector<float> x(16, 1.0f);
    // dtype disagreement (rank 1 says f16), marked as one (IsDisagreement) for the bindings.
    const DataType t = r == 1 ? DataType::kFloat16 : DataType::kFloat32;
    const absl::Status dtype_status =
        e.AllreduceAsync("x", x.data(), x.data(), t, {4}, ReduceOp::kSum).Wait();
    CHECK_OK(ExpectError(dtype_status, absl::StatusCode::kInvalidArgument,
                         {"allreduce 'x'", "dtype", "rank 1: f16", "ranks 0, 2: f32"}));
    CHECK_OK(Expect(IsDisagreement(dtype_status), "a disagreement is marked as one"));
    CHECK_OK(Expect(!IsDisagreement(absl::InvalidArgumentError("x")), "a bad argument is not"));
    // Shape, op and scale disagreements.
    CHECK_OK(ExpectError(e.AllreduceAsync("s", x.data(), x.data(), DataType::kFloat32,
                                          {r == 2 ? 8 : 4}, ReduceOp::kSum)
                             .Wait(),
                         absl::StatusCode::kInvalidArgument, {"'s'", "shape", "rank 2: [8]"}));
    CHECK_OK(ExpectError(e.AllreduceAsync("o", x.data(), x.data(), DataType::kFloat32, {4},
                                          r == 0 ? ReduceOp::kMax : ReduceOp::kSum)
                             .Wait(),
                         absl::StatusCode::kInvalidArgument, {"'o'", "reduce op", "rank 0: max"}));
    CHECK_OK(ExpectError(
        e.BroadcastAsync("root", x.data(), DataType::kFloat32, {4}, r == 0 ? 1 : 0).Wait(),
        absl::StatusCode::kInvalidArgument, {"'root'", "root rank"}));
    // A cached tensor whose description changes on one rank: the cache entry is invalidated and
    // the change reported; agreeing again works.
    for (int step = 0; step < 2; ++step) {
      CHECK_OK(e.AllreduceAsync("c", x.data(), x.data(), DataType::kFloat32, {4}, ReduceOp::kSum)
                   .Wait());
    }
    CHECK_OK(ExpectError(e.AllreduceAsync("c", x.data(), x.data(), DataType::kFloat32,
                                          {r == 1 ? 5 : 4}, ReduceOp::kSum)
                             .Wait(),
                         absl::StatusCode::kInvalidArgument, {"'c'", "shape", "rank 1: [5]"}));
    std::fill(x.begin(), x.end(), 1.0f);
    CHECK_OK(
        e.AllreduceAsync("c", x.data(), x.data(), DataType::kFloat32, {5}, ReduceOp::kSum).Wait());
    CHECK_OK(Expect(x[0] == 3.0f && x[4] == 3.0f && x[5] == 1.0f, "after re-agreeing"));
    return absl::OkStatus();
  });
  EXPECT_FALSE(job.hung) << job.Summary();
  for (const auto& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

TEST(Engine, DuplicateNameInFlightIsAnError) {
  JobSpec spec;
  spec.size = 2;
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    std::vector<float> a(4, 1.0f), b(4, 1.0f);
    if (ctx.rank() == 0) {
      Handle first =
          e.AllreduceAsync("dup", a.data(), a.data(), DataType::kFloat32, {4}, ReduceOp::kSum);
      Handle again =
          e.AllreduceAsync("dup", b.data(), b.data(), DataType::kFloat32, {4}, ReduceOp::kSum);
      // Refused by the submission itself (the Python layer raises it there, as Horovod does).
      CHECK_OK(Expect(again.refused() && again.Poll(), "the second submission refused at once"));
      CHECK_OK(
          ExpectError(again.Wait(), absl::StatusCode::kInvalidArgument, {"'dup'", "in flight"}));
      CHECK_OK(ctx.Barrier());
      CHECK_OK(first.Wait());
      CHECK_OK(Expect(!first.refused(), "the first submission ran"));
    } else {
      CHECK_OK(ctx.Barrier());  // rank 0 has submitted twice by now
      CHECK_OK(e.AllreduceAsync("dup", a.data(), a.data(), DataType::kFloat32, {4}, ReduceOp::kSum)
                   .Wait());
    }
    return Expect(a[0] == 2.0f && b[0] == 1.0f, "the first submission's result");
  });
  for (const auto& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

TEST(Engine, StallIsReportedThenFailedOnEveryRank) {
  JobSpec spec;
  spec.size = 3;
  spec.env["DDP_STALL_CHECK_SECONDS"] = "1";
  spec.env["DDP_STALL_SHUTDOWN_SECONDS"] = "3";
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    std::vector<float> x(4, 1.0f);
    // Known to the cache first, so that the stall must also be found behind a cache bit.
    for (int step = 0; step < 2; ++step) {
      CHECK_OK(e.AllreduceAsync("w", x.data(), x.data(), DataType::kFloat32, {4}, ReduceOp::kSum)
                   .Wait());
    }
    if (ctx.rank() != 2) {
      Handle w = e.AllreduceAsync("w", x.data(), x.data(), DataType::kFloat32, {4}, ReduceOp::kSum);
      Handle fresh =
          e.AllreduceAsync("fresh", x.data(), x.data(), DataType::kFloat32, {4}, ReduceOp::kSum);
      for (Handle* h : {&w, &fresh}) {
        CHECK_OK(ExpectError(h->Wait(), absl::StatusCode::kDeadlineExceeded,
                             {"stalled", "ranks 0, 1", "not by rank 2"}));
      }
    }
    CHECK_OK(ctx.Barrier());
    // The job goes on.
    std::fill(x.begin(), x.end(), 1.0f);
    CHECK_OK(e.AllreduceAsync("after", x.data(), x.data(), DataType::kFloat32, {4}, ReduceOp::kSum)
                 .Wait());
    return Expect(x[0] == 3.0f, "after the stall");
  });
  EXPECT_FALSE(job.hung) << job.Summary();
  for (const auto& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
  EXPECT_TRUE(absl::StrContains(job.ranks[0].output, "stall: 'fresh'")) << job.Summary();
  EXPECT_TRUE(absl::StrContains(job.ranks[0].output, "not yet by rank 2")) << job.Summary();
}

// Appends "]" when the file was cut off, then parses it with Python's json module and checks
// that every phase occurs. Returns the checker's output on failure.
std::string CheckTimeline(const std::string& path, const std::vector<std::string>& phases) {
  const std::string script = TempPath("check.py");
  {
    std::ofstream py(script);
    py << "import json, sys\n"
          "text = open(sys.argv[1]).read().rstrip()\n"
          "if not text.endswith(']'): text += ']'\n"
          "events = json.loads(text)\n"
          "names = {e.get('name') for e in events}\n"
          "missing = [p for p in sys.argv[2:] if p not in names]\n"
          "assert not missing, 'missing phases %s' % missing\n"
          "for e in events:\n"
          "  if e['ph'] == 'X': assert e['dur'] >= 0 and e['ts'] >= 0, e\n";
  }
  std::string cmd = absl::StrCat("/usr/bin/python3 ", script, " ", path);
  for (const auto& p : phases) absl::StrAppend(&cmd, " ", p);
  cmd += " 2>&1";
  std::string output;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  char buf[512];
  while (pipe != nullptr && std::fgets(buf, sizeof(buf), pipe) != nullptr) output += buf;
  const int rc = pipe == nullptr ? -1 : ::pclose(pipe);
  std::remove(script.c_str());
  return rc == 0 ? "" : absl::StrCat("timeline check failed (", rc, "): ", output);
}

TEST(Engine, TimelineParsesAndHoldsEveryPhaseEvenAfterACrash) {
  const std::string base = TempPath("timeline");
  JobSpec spec;
  spec.size = 2;
  spec.env["DDP_FUSION_THRESHOLD"] = "64K";
  spec.env["DDP_TIMELINE_MARK_CYCLES"] = "1";
  spec.rank_env[0]["DDP_TIMELINE"] = base + ".0.json";
  spec.rank_env[1]["DDP_TIMELINE"] = base + ".1.json";
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    std::vector<std::vector<float>> t(6, std::vector<float>(1000, 1.0f));
    std::vector<float> big(100000, 1.0f);
    for (int step = 0; step < 2; ++step) {
      std::vector<Handle> hs;
      for (size_t i = 0; i < t.size(); ++i) {
        hs.push_back(e.AllreduceAsync(absl::StrCat("layer\"", i), t[i].data(), t[i].data(),
                                      DataType::kFloat32, {1000}, ReduceOp::kSum));
      }
      hs.push_back(e.AllreduceAsync("big", big.data(), big.data(), DataType::kFloat32, {100000},
                                    ReduceOp::kSum));
      std::vector<int32_t> row(2, ctx.rank());
      hs.push_back(e.AllgatherAsync("gather", row.data(), DataType::kInt32, {1, 2}));
      for (auto& h : hs) CHECK_OK(h.Wait());
    }
    if (ctx.rank() == 1) {
      ::usleep(100000);  // let the engine flush its last cycle
      ::raise(SIGKILL);  // dies without closing the timeline
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(job.ranks[0].ok()) << job.Summary();
  EXPECT_EQ(job.ranks[1].signal, SIGKILL) << job.Summary();
  // Over shared memory the fused tensors are reduced where they lie: no MEMCPY_*_FUSION_BUFFER
  // phases (Engine.FusionOverTcpCopiesThroughTheBuffer has those).
  const std::vector<std::string> phases = {"NEGOTIATE", "QUEUE", "ALLREDUCE", "ALLGATHER",
                                           "CYCLE_START"};
  EXPECT_EQ(CheckTimeline(base + ".0.json", phases), "");
  EXPECT_TRUE(absl::EndsWith(absl::StripTrailingAsciiWhitespace(ReadFile(base + ".0.json")), "]"));
  EXPECT_EQ(CheckTimeline(base + ".1.json", phases), "");  // cut off by SIGKILL
  const std::string text = ReadFile(base + ".0.json");
  EXPECT_TRUE(absl::StrContains(text, "\"algorithm\"")) << text.substr(0, 2000);
  // Both ranks on this host: the default transport is shared memory, and the timeline says so.
  EXPECT_TRUE(absl::StrContains(text, "\"transport\":\"shm\"")) << text.substr(0, 2000);
  EXPECT_TRUE(absl::StrContains(text, "layer\\\"3")) << "names are escaped";
  EXPECT_TRUE(absl::StrContains(text, "\"fusion_buffer\":\"none: read and written in place\""))
      << text.substr(0, 2000);
  std::remove((base + ".0.json").c_str());
  std::remove((base + ".1.json").c_str());
}

// DDP_TIMELINE exported to every rank (mpirun -x, a Kubernetes env): one path for all would be
// written by all at once, a file that parses for none. The first rank to lock it writes it and
// the others say why they have none; '{rank}' in the path gives each rank its own file.
TEST(Engine, OneTimelinePathForEveryRankIsWrittenByOneRankAndRankGivesEachItsOwn) {
  const std::string shared = TempPath("timeline-shared") + ".json";
  const std::string per_rank = TempPath("timeline-rank");
  for (const std::string& path : {shared, per_rank + ".{rank}.json"}) {
    JobSpec spec;
    spec.size = 3;
    spec.env["DDP_TIMELINE"] = path;
    JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
      std::vector<float> t(1000, 1.0f);
      for (int step = 0; step < 20; ++step) {
        CHECK_OK(ctx.engine()
                     .AllreduceAsync(absl::StrCat("t", step % 4), t.data(), t.data(),
                                     DataType::kFloat32, {1000}, ReduceOp::kSum)
                     .Wait());
      }
      return absl::OkStatus();
    });
    ASSERT_FALSE(job.hung) << job.Summary();
    for (const auto& r : job.ranks) ASSERT_TRUE(r.ok()) << job.Summary();
    if (path == shared) {
      EXPECT_EQ(CheckTimeline(shared, {"NEGOTIATE", "ALLREDUCE"}), "");
      const std::string text = ReadFile(shared);
      size_t processes = 0;  // one rank's events only
      for (size_t at = text.find("process_name"); at != std::string::npos;
           at = text.find("process_name", at + 1)) {
        ++processes;
      }
      EXPECT_EQ(processes, 1u) << text.substr(0, 2000);
      int refused = 0;
      for (const auto& r : job.ranks) {
        refused += absl::StrContains(r.output, "no timeline on this rank") &&
                   absl::StrContains(r.output, "put {rank} in the path");
      }
      EXPECT_EQ(refused, 2) << job.Summary();
      std::remove(shared.c_str());
    } else {
      for (int rank = 0; rank < 3; ++rank) {
        const std::string file = absl::StrCat(per_rank, ".", rank, ".json");
        EXPECT_EQ(CheckTimeline(file, {"NEGOTIATE", "ALLREDUCE"}), "");
        EXPECT_TRUE(
            absl::StrContains(ReadFile(file), absl::StrCat("\"name\":\"rank ", rank, "\"")));
        std::remove(file.c_str());
      }
    }
  }
}

// Where the collective cannot read tensors in place (TCP here), fused tensors are packed into
// the fusion buffer and unpacked after, and the timeline shows both copies; scale factors are
// applied on the way in and out.
TEST(Engine, FusionOverTcpCopiesThroughTheBuffer) {
  const std::string base = TempPath("timeline-tcp");
  JobSpec spec;
  spec.size = 2;
  spec.env["DDP_TRANSPORT"] = "tcp";
  spec.rank_env[0]["DDP_TIMELINE"] = base + ".0.json";
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    std::vector<std::vector<float>> t(6, std::vector<float>(1000, 1.0f));
    CHECK_OK(ctx.Barrier());
    // A group is always one fused collective, whatever the timing.
    std::vector<GroupMember> members;
    for (size_t i = 0; i < t.size(); ++i) {
      members.push_back({absl::StrCat("t", i), t[i].data(), t[i].data(), {1000}});
    }
    CHECK_OK(e.GroupedAllreduceAsync("group", std::move(members), DataType::kFloat32,
                                     ReduceOp::kSum, /*prescale=*/2.0, /*postscale=*/0.25)
                 .Wait());
    for (const auto& v : t) CHECK_OK(Expect(v[0] == 1.0f && v[999] == 1.0f, "scaled sum"));
    return absl::OkStatus();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (const auto& r : job.ranks) ASSERT_TRUE(r.ok()) << job.Summary();
  EXPECT_EQ(CheckTimeline(base + ".0.json",
                          {"MEMCPY_IN_FUSION_BUFFER", "ALLREDUCE", "MEMCPY_OUT_FUSION_BUFFER"}),
            "");
  std::remove((base + ".0.json").c_str());
}

// Scale factors on integers (Horovod's rule): each product in f64, truncated toward zero,
// saturated at the type's limits; alone, fused in a group (in place and out), over shm and TCP.
TEST(Engine, JoinLetsRanksWithLessDataFinish) {
  for (const bool contributors : {false, true}) {
    JobSpec spec;
    spec.size = 3;
    if (contributors) spec.env["DDP_JOIN_AVERAGE"] = "contributors";
    JobResult job = RunWithContext(spec, [contributors](Context& ctx) -> absl::Status {
      Engine& e = ctx.engine();
      const int r = ctx.rank();
      const int my_steps = (r + 1) * 2;  // rank 0: 2 steps, rank 1: 4, rank 2: 6
      for (int step = 0; step < my_steps; ++step) {
        std::vector<float> avg(300, static_cast<float>(r + 1));
        std::vector<int32_t> mx(5, r + 1), prod(5, 2);
        Handle a = e.AllreduceAsync("avg", avg.data(), avg.data(), DataType::kFloat32, {300},
                                    ReduceOp::kAverage);
        Handle m =
            e.AllreduceAsync("max", mx.data(), mx.data(), DataType::kInt32, {5}, ReduceOp::kMin);
        Handle p = e.AllreduceAsync("prod", prod.data(), prod.data(), DataType::kInt32, {5},
                                    ReduceOp::kProduct);
        CHECK_OK(a.Wait());
        CHECK_OK(m.Wait());
        CHECK_OK(p.Wait());
        // Ranks still active in this step: those with more than `step` steps.
        std::vector<int> active;
        for (int q = 0; q < ctx.size(); ++q) {
          if ((q + 1) * 2 > step) active.push_back(q);
        }
        float sum = 0;
        for (int q : active) sum += static_cast<float>(q + 1);
        const float want = sum / static_cast<float>(contributors ? active.size() : 3);
        CHECK_OK(Expect(std::abs(avg[0] - want) < 1e-5f && std::abs(avg[299] - want) < 1e-5f,
                        absl::StrCat("step ", step, ": average ", avg[0], " want ", want)));
        CHECK_OK(Expect(mx[4] == active.front() + 1, absl::StrCat("step ", step, ": min ", mx[4])));
        CHECK_OK(Expect(prod[0] == (1 << active.size()), absl::StrCat("product ", prod[0])));
        // A broadcast (cached after the first steps) cannot run once a rank has joined.
        std::vector<float> bc(4, static_cast<float>(r));
        absl::Status bs = e.BroadcastAsync("bc", bc.data(), DataType::kFloat32, {4}, 0).Wait();
        if (step < 2) {
          CHECK_OK(bs);
          CHECK_OK(Expect(bc[3] == 0.0f, "broadcast before any rank joined"));
        } else {
          CHECK_OK(ExpectError(bs, absl::StatusCode::kFailedPrecondition,
                               {"broadcast 'bc'", "0", "joined"}));
        }
      }
      Handle j = e.JoinAsync();
      CHECK_OK(j.Wait());
      CHECK_OK(Expect(j.join_last_rank() == 2, absl::StrCat("last ", j.join_last_rank())));
      // After everyone joined, the engine works normally again.
      std::vector<float> x(3, 1.0f);
      CHECK_OK(
          e.AllreduceAsync("avg", x.data(), x.data(), DataType::kFloat32, {3}, ReduceOp::kAverage)
              .Wait());
      return Expect(x[0] == 1.0f, "average after join");
    });
    EXPECT_FALSE(job.hung) << job.Summary();
    for (const auto& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
  }
}

TEST(Engine, ProcessSetsRunCollectivesOnSubsets) {
  JobSpec spec;
  spec.size = 4;
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    const int r = ctx.rank();
    auto even = e.AddProcessSet({0, 2});
    auto odd = e.AddProcessSet({3, 1});
    CHECK_OK(even.status());
    CHECK_OK(odd.status());
    CHECK_OK(Expect(*even == 1 && *odd == 2, "set ids"));
    const int mine = r % 2 == 0 ? *even : *odd;
    const int other = r % 2 == 0 ? *odd : *even;
    for (int step = 0; step < 3; ++step) {
      std::vector<int64_t> v(1000, r), w(10, r);
      Handle hs = e.AllreduceAsync("p", v.data(), v.data(), DataType::kInt64, {1000},
                                   ReduceOp::kSum, 1, 1, mine);
      Handle hw = e.AllreduceAsync("p", w.data(), w.data(), DataType::kInt64, {10},
                                   ReduceOp::kSum);  // same name, world set
      std::vector<int64_t> root(2, r);
      Handle hb = e.BroadcastAsync("b", root.data(), DataType::kInt64, {2}, 1, mine);
      CHECK_OK(hs.Wait());
      CHECK_OK(hw.Wait());
      CHECK_OK(hb.Wait());
      CHECK_OK(Expect(v[999] == (r % 2 == 0 ? 0 + 2 : 1 + 3), absl::StrCat("set sum ", v[0])));
      CHECK_OK(Expect(w[0] == 6, "world sum"));
      CHECK_OK(Expect(root[0] == (r % 2 == 0 ? 2 : 3), absl::StrCat("set broadcast ", root[0])));
    }
    std::vector<int64_t> v(4);
    CHECK_OK(ExpectError(e.AllreduceAsync("q", v.data(), v.data(), DataType::kInt64, {4},
                                          ReduceOp::kSum, 1, 1, other)
                             .Wait(),
                         absl::StatusCode::kInvalidArgument, {"not a member"}));
    return absl::OkStatus();
  });
  EXPECT_FALSE(job.hung) << job.Summary();
  for (const auto& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

// Waits until the engine's cycle count has not moved for 200 ms (at most 5 s); returns it.
uint64_t SettledCycles(Engine& e) {
  uint64_t last = e.stats().cycles;
  for (int i = 0; i < 25; ++i) {
    ::usleep(200000);
    const uint64_t now = e.stats().cycles;
    if (now == last) return now;
    last = now;
  }
  return last;
}

TEST(Engine, IdleEngineSleepsAndWakesOnDemand) {
  JobSpec spec;
  spec.size = 3;
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    std::vector<float> x(8, 1.0f);
    for (int round = 0; round < 3; ++round) {
      CHECK_OK(ctx.Barrier());
      const uint64_t before = SettledCycles(e);
      ::usleep(300000);
      const uint64_t after = e.stats().cycles;
      CHECK_OK(Expect(before == after,
                      absl::StrCat("idle engine ran ", after - before, " cycles in 300 ms")));
      CHECK_OK(ctx.Barrier());
      if (ctx.rank() == round) {
        // The others submit now; their doorbells must wake this engine, which takes part in
        // rounds before this rank submits anything.
        const uint64_t asleep = e.stats().cycles;
        ::usleep(1000000);
        CHECK_OK(Expect(e.stats().cycles > asleep, "a doorbell did not wake this engine"));
      }
      CHECK_OK(e.AllreduceAsync("x", x.data(), x.data(), DataType::kFloat32, {8}, ReduceOp::kSum)
                   .Wait());
    }
    const EngineStats s = e.stats();
    return Expect(s.sleeps >= 2, absl::StrCat(s.sleeps, " sleeps"));
  });
  EXPECT_FALSE(job.hung) << job.Summary();
  for (const auto& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

// Ranks whose operation waits for a late rank sleep until it submits (or, now and then, to look
// for stalls), instead of a negotiation round every cycle time; the late rank's submission wakes
// them, and the operation runs. Counted in rounds, not timed: a slower machine runs fewer.
TEST(Engine, RanksWaitingForALateRankSleepInsteadOfRunningRounds) {
  JobSpec spec;
  spec.size = 3;
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    for (int step = 0; step < 3; ++step) {
      const int late = step % ctx.size();
      std::vector<float> x(8, static_cast<float>(ctx.rank() + 1));
      CHECK_OK(ctx.Barrier());
      const uint64_t before = e.stats().cycles;
      // The late rank submits 400 ms after the others: at the default cycle time of 1 ms they
      // used to run about 400 rounds meanwhile.
      if (ctx.rank() == late) ::usleep(400000);
      CHECK_OK(e.AllreduceAsync(absl::StrCat("late", step), x.data(), x.data(), DataType::kFloat32,
                                {8}, ReduceOp::kSum)
                   .Wait());
      const uint64_t rounds = e.stats().cycles - before;
      CHECK_OK(Expect(x[0] == 6.0f, absl::StrCat("sum ", x[0])));
      CHECK_OK(Expect(rounds < 100,
                      absl::StrCat(rounds, " rounds while rank ", late, " was 400 ms late")));
    }
    return absl::OkStatus();
  });
  EXPECT_FALSE(job.hung) << job.Summary();
  for (const auto& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

TEST(Engine, RanksLeavingAtDifferentTimesLogNoErrors) {
  JobSpec spec;
  spec.size = 3;
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    std::vector<float> x(1000, 1.0f);
    for (int step = 0; step < 5; ++step) {
      CHECK_OK(
          e.AllreduceAsync("x", x.data(), x.data(), DataType::kFloat32, {1000}, ReduceOp::kAverage)
              .Wait());
    }
    // Leave straight after the last result (the engines may still be in their trailing round),
    // one after the other.
    ::usleep(static_cast<useconds_t>(ctx.rank()) * 30000);
    return ctx.Shutdown();
  });
  for (const auto& r : job.ranks) {
    EXPECT_TRUE(r.ok()) << job.Summary();
    EXPECT_FALSE(absl::StrContains(r.output, " E]")) << job.Summary();
    EXPECT_FALSE(absl::StrContains(r.output, " W]")) << job.Summary();
  }
}

TEST(Engine, ARankShuttingDownFailsTheOthersWorkAtOnce) {
  JobSpec spec;
  spec.size = 3;
  spec.env["DDP_TIMEOUT_SECONDS"] = "120";  // the failure must not come from a timeout
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    std::vector<float> x(16, 1.0f);
    CHECK_OK(ctx.Barrier());
    if (ctx.rank() == 1) return ctx.Shutdown();
    const absl::Time start = absl::Now();
    absl::Status s =
        ctx.engine()
            .AllreduceAsync("x", x.data(), x.data(), DataType::kFloat32, {16}, ReduceOp::kSum)
            .Wait();
    // Rank 2 may have left too by the time rank 0 hears of it (its own allreduce failed), but
    // rank 1, the first cause, comes first.
    CHECK_OK(Expect(!s.ok() && !BlamedRanks(s).empty() && BlamedRanks(s)[0] == 1 &&
                        absl::StrContains(s.message(), "1"),
                    s.ToString()));
    return Expect(absl::Now() - start < absl::Seconds(60), "took as long as a timeout");
  });
  EXPECT_FALSE(job.hung) << job.Summary();
  for (const auto& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

// While a rank has joined, an operation other than allreduce fails as soon as one rank submits
// it, without waiting for the others: here ranks 1 and 2 submit allgathers under names the
// other never submits (as unnamed calls are after an error on one rank), and neither hangs.
TEST(Engine, OnlyAllreduceWaitsForTheOthersWhileARankHasJoined) {
  JobSpec spec;
  spec.size = 3;
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    const int r = ctx.rank();
    if (r == 0) {
      Handle j = e.JoinAsync();
      CHECK_OK(j.Wait());
      return Expect(j.join_last_rank() != 0, "rank 0 joined first");
    }
    // Rank 0 counts in the average with its zero once it has joined.
    std::vector<float> x(4, 3.0f);
    CHECK_OK(e.AllreduceAsync("sum", x.data(), x.data(), DataType::kFloat32, {4}, ReduceOp::kSum)
                 .Wait());
    CHECK_OK(Expect(x[0] == 6.0f, absl::StrCat("sum with a joined rank: ", x[0])));
    std::vector<float> g(2, 1.0f);
    const std::string name = absl::StrCat("gather.only.", r);
    CHECK_OK(ExpectError(e.AllgatherAsync(name, g.data(), DataType::kFloat32, {1, 2}).Wait(),
                         absl::StatusCode::kFailedPrecondition,
                         {name, "joined", "only allreduce"}));
    return e.JoinAsync().Wait();
  });
  EXPECT_FALSE(job.hung) << job.Summary();
  for (const auto& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

TEST(Engine, JoinRightAfterSubmittingAndNothingAfterJoining) {
  JobSpec spec;
  spec.size = 2;
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    const int r = ctx.rank();
    std::vector<float> z(100, static_cast<float>(r == 0 ? 1 : 3));
    std::vector<int32_t> zi(10, r == 0 ? 4 : 8);
    Handle hz =
        e.AllreduceAsync("z", z.data(), z.data(), DataType::kFloat32, {100}, ReduceOp::kAverage);
    Handle hi =
        e.AllreduceAsync("zi", zi.data(), zi.data(), DataType::kInt32, {10}, ReduceOp::kAverage);
    if (r == 0) {
      Handle j = e.JoinAsync();  // before its own reductions are done: they still count it
      CHECK_OK(ExpectError(
          e.AllreduceAsync("late", z.data(), z.data(), DataType::kFloat32, {1}, ReduceOp::kSum)
              .Wait(),
          absl::StatusCode::kFailedPrecondition, {"joined"}));
      CHECK_OK(hz.Wait());
      CHECK_OK(hi.Wait());
      CHECK_OK(j.Wait());
      CHECK_OK(Expect(j.join_last_rank() == 1, "last to join"));
    } else {
      CHECK_OK(hz.Wait());
      CHECK_OK(hi.Wait());
      std::vector<float> alone(5, 7.0f);
      CHECK_OK(e.AllreduceAsync("alone", alone.data(), alone.data(), DataType::kFloat32, {5},
                                ReduceOp::kAverage)
                   .Wait());
      // Rank 0 has joined: it counts with a zero (Horovod's rule).
      CHECK_OK(Expect(alone[4] == 3.5f, absl::StrCat("average with a joined rank: ", alone[4])));
      CHECK_OK(e.JoinAsync().Wait());
    }
    CHECK_OK(Expect(z[0] == 2.0f && z[99] == 2.0f, absl::StrCat("average of both: ", z[0])));
    return Expect(zi[9] == 6, absl::StrCat("integer average of both: ", zi[9]));
  });
  EXPECT_FALSE(job.hung) << job.Summary();
  for (const auto& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

TEST(Engine, AutotuneConvergesWithEveryRankInStep) {
  const std::string log = TempPath("autotune.csv");
  JobSpec spec;
  spec.size = 2;
  spec.env["DDP_AUTOTUNE"] = "1";
  spec.env["DDP_AUTOTUNE_LOG"] = log;
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    std::vector<std::vector<float>> t(20, std::vector<float>(2048, 1.0f));
    for (int step = 0;; ++step) {
      std::vector<Handle> hs;
      for (size_t i = 0; i < t.size(); ++i) {
        hs.push_back(e.AllreduceAsync(absl::StrCat("t", i), t[i].data(), t[i].data(),
                                      DataType::kFloat32, {2048}, ReduceOp::kAverage));
      }
      for (auto& h : hs) CHECK_OK(h.Wait());
      int32_t done = e.stats().autotune_converged ? 1 : 0;
      CHECK_OK(ctx.Broadcast(&done, &done, 1, DataType::kInt32, 0));
      if (done != 0) break;
      CHECK_OK(Expect(step < 20000, "autotune did not converge in 20000 steps"));
    }
    // Let a round pass so that every rank has applied the final parameters.
    std::vector<float> x(4, 1.0f);
    CHECK_OK(e.AllreduceAsync("last", x.data(), x.data(), DataType::kFloat32, {4}, ReduceOp::kSum)
                 .Wait());
    const EngineStats s = e.stats();
    uint64_t mine[2] = {s.parameter_digest, s.parameter_changes};
    std::vector<uint64_t> all(4);
    CHECK_OK(ctx.Allgather(mine, all.data(), 2, DataType::kInt64));
    CHECK_OK(Expect(all[0] == all[2] && all[1] == all[3],
                    "ranks applied different parameter sequences"));
    return Expect(s.parameter_changes >= 5,
                  absl::StrCat("only ", s.parameter_changes, " parameter changes"));
  });
  EXPECT_FALSE(job.hung) << job.Summary();
  for (const auto& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
  const std::string csv = ReadFile(log);
  EXPECT_TRUE(absl::StartsWith(csv, "sample,")) << csv;
  EXPECT_GT(std::count(csv.begin(), csv.end(), '\n'), 20) << csv;
  std::remove(log.c_str());
}

TEST(Engine, DeadPeerFailsPendingHandlesNamingIt) {
  JobSpec spec;
  spec.size = 3;
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    std::vector<float> x(1 << 16, 1.0f);
    CHECK_OK(
        e.AllreduceAsync("x", x.data(), x.data(), DataType::kFloat32, {1 << 16}, ReduceOp::kSum)
            .Wait());
    if (ctx.rank() == 1) ::raise(SIGKILL);
    absl::Status s =
        e.AllreduceAsync("x", x.data(), x.data(), DataType::kFloat32, {1 << 16}, ReduceOp::kSum)
            .Wait();
    CHECK_OK(Expect(!s.ok() && absl::StrContains(s.message(), "rank 1") &&
                        absl::StrContains(s.message(), "'x'"),
                    s.ToString()));
    // Later submissions fail at once with the same cause.
    s = e.AllreduceAsync("y", x.data(), x.data(), DataType::kFloat32, {4}, ReduceOp::kSum).Wait();
    return Expect(!s.ok() && absl::StrContains(s.message(), "rank 1"), s.ToString());
  });
  EXPECT_FALSE(job.hung) << job.Summary();
  EXPECT_TRUE(job.ranks[0].ok()) << job.Summary();
  EXPECT_TRUE(job.ranks[2].ok()) << job.Summary();
}

}  // namespace
}  // namespace ddp::testing
