// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The parameter server (ddp/ps.h) in real jobs of processes: the correctness matrix over every
// transport (and under mpirun), and credit that keeps workers submitting keys in opposite orders
// from waiting on each other. ps_core_test.cc has the server's rules without a network,
// ps_faults_test.cc deaths, restarts, checkpoints across jobs and hostile peers.
#include "ddp/ps.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ofi/ofi_wire.h"
#include "support/check.h"
#include "support/multiprocess.h"
#include "support/ps_jobs.h"
#include "support/ps_matrix.h"

namespace ddp::testing {
namespace {

class PsMatrix : public ::testing::TestWithParam<Layout> {};

TEST_P(PsMatrix, SumsExactAsyncOnceStalenessBounded) {
  const Layout& l = GetParam();
  std::string why;
  if (std::string(l.transport) == "ofi" && !ofi::Available(&why)) GTEST_SKIP() << why;
  const uint64_t seed = TestSeed();
  RecordProperty("seed", std::to_string(seed));
  JobResult job = RunJob(PsSpec(l), [seed](int /*rank*/) -> absl::Status {
    auto ps = ps::ParameterServer::CreateFromEnvironment();
    CHECK_OK(ps.status());
    const absl::Status ran = RunPsMatrix(**ps, seed);
    if (!ran.ok()) return ran;
    // With one or two servers, the f64 key's 6 partitions put 3 or more at a remote server, one
    // more than may be in flight there: requests waited for credit (and the sums above were
    // exact all the same). With three, two at each: nothing need wait.
    const int remote = (*ps)->num_servers() - ((*ps)->is_server() ? 1 : 0);
    if ((*ps)->is_worker() && remote > 0 && (*ps)->num_servers() <= 2 &&
        (*ps)->requests_deferred() == 0) {
      return absl::InternalError("no request waited for credit");
    }
    return absl::OkStatus();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (const RankResult& r : job.ranks) EXPECT_TRUE(r.ok()) << "seed " << seed << job.Summary();
}

INSTANTIATE_TEST_SUITE_P(
    Ps, PsMatrix,
    ::testing::Values(Layout{"TcpThreeWorkersTwoServers", "tcp", 5, 2},
                      Layout{"TcpColocatedThree", "tcp", 3, 0},
                      Layout{"ShmTwoWorkersTwoServers", "shm", 4, 2},
                      Layout{"ShmColocatedTwo", "shm", 2, 0},
                      Layout{"OfiTwoWorkersOneServer", "ofi", 3, 1, "tcp;ofi_rxm"},
                      Layout{"OneRankAlone", "tcp", 1, 0}),
    [](const ::testing::TestParamInfo<Layout>& p) { return std::string(p.param.name); });

// Under mpirun: the MPI transport (and the MPI bootstrap).
TEST(PsMpi, SumsExactAsyncOnceStalenessBounded) {
#if !defined(DDP_MPIEXEC) || !defined(DDP_CONFORMANCE_BIN)
  GTEST_SKIP() << "built without MPI (DDP_WITH_MPI)";
#else
  std::string command =
      absl::StrCat("timeout -s KILL 600 ", DDP_MPIEXEC, " --tag-output -np 3 --oversubscribe");
  if (::geteuid() == 0) absl::StrAppend(&command, " --allow-run-as-root");
  absl::StrAppend(&command,
                  " -x DDP_TRANSPORT=mpi -x DDP_PS_SERVERS=1 -x DDP_PS_PARTITION_BYTES=4096 ",
                  DDP_CONFORMANCE_BIN, " --ps 2>&1");
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr) << command;
  std::string output;
  char buf[4096];
  while (size_t got = std::fread(buf, 1, sizeof(buf), pipe)) output.append(buf, got);
  const int rc = ::pclose(pipe);
  int ok = 0;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    if (absl::StrContains(line, "status=OK")) ++ok;
  }
  EXPECT_EQ(rc, 0) << command << "\n" << output;
  EXPECT_EQ(ok, 3) << command << "\n" << output;
#endif
}

// Two workers submit two sync keys in opposite orders, every step, each key 16 partitions on the
// one server and a credit of two in flight. Were credit returned only by answers, each worker's
// two in flight would wait for the other's pushes, queued behind them: both would wait until the
// timeout. Held notices return it: every step completes, with exact sums.
TEST(PsCredit, KeysSubmittedInOppositeOrdersDoNotWaitOnEachOther) {
  JobSpec spec = PsSpec(Layout{"", "tcp", 3, 1});
  spec.env["DDP_TIMEOUT_SECONDS"] = "30";
  JobResult job = RunJob(spec, [](int /*rank*/) -> absl::Status {
    auto made = ps::ParameterServer::CreateFromEnvironment();
    CHECK_OK(made.status());
    ps::ParameterServer& ps = **made;
    if (!ps.is_worker()) return ps.Serve();
    constexpr size_t kCount = 16 * 1024;  // 64 KiB: 16 partitions of 4096 bytes
    std::vector<float> zero(kCount, 0.0f);
    const int64_t shape[] = {static_cast<int64_t>(kCount)};
    ps::KeyOptions o;  // sync
    auto a = ps.Register("a", DataType::kFloat32, shape, zero.data(), o);
    CHECK_OK(a.status());
    auto b = ps.Register("b", DataType::kFloat32, shape, zero.data(), o);
    CHECK_OK(b.status());
    const int w = ps.worker_index();
    std::vector<float> ga(kCount), gb(kCount), oa(kCount), ob(kCount);
    for (int step = 0; step < 20; ++step) {
      for (size_t i = 0; i < kCount; ++i) {
        ga[i] = static_cast<float>(w + 1 + step);
        gb[i] = static_cast<float>(10 * (w + 1) + step);
      }
      ps::Handle first, second;
      if (w == 0) {
        first = ps.PushPull(*a, ga.data(), oa.data());
        second = ps.PushPull(*b, gb.data(), ob.data());
      } else {
        first = ps.PushPull(*b, gb.data(), ob.data());
        second = ps.PushPull(*a, ga.data(), oa.data());
      }
      absl::Status s = first.Wait();
      const absl::Status s2 = second.Wait();  // both: their buffers live in this scope
      if (s.ok()) s = s2;
      if (!s.ok()) return s;
      const float want_a = static_cast<float>(3 + 2 * step),
                  want_b = static_cast<float>(30 + 2 * step);
      for (size_t i = 0; i < kCount; ++i) {
        if (oa[i] != want_a || ob[i] != want_b) {
          return absl::InternalError(absl::StrCat("step ", step, " element ", i, ": ", oa[i], ", ",
                                                  ob[i], "; want ", want_a, ", ", want_b));
        }
      }
    }
    if (ps.requests_deferred() == 0) return absl::InternalError("no request waited for credit");
    return ps.Finish();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (const RankResult& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

}  // namespace
}  // namespace ddp::testing
