// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The public C++ API: bad input gives clear errors and corrupts nothing, topology from host
// names, shutdown semantics, and one collective above 2^31 bytes (slow label).
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "ddp/c_api.h"
#include "ddp/ddp.h"
#include "support/check.h"
#include "support/multiprocess.h"

namespace ddp::testing {
namespace {

// `status` must be InvalidArgument and mention `needle`.
absl::Status ExpectInvalid(const absl::Status& status, absl::string_view needle) {
  if (status.code() != absl::StatusCode::kInvalidArgument ||
      !absl::StrContains(status.message(), needle)) {
    return absl::InternalError(absl::StrCat("expected INVALID_ARGUMENT mentioning '", needle,
                                            "', got ", status.ToString()));
  }
  return absl::OkStatus();
}

// The version is written once, in the repository's VERSION file: the library, the headers and
// the C API all say it (tests/python/test_run_flags.py checks the Python side and the CMake
// package against the same file).
TEST(Api, TheVersionIsTheVersionFiles) {
  std::ifstream in(absl::StrCat(DDP_SOURCE_DIR, "/VERSION"));
  std::string written;
  ASSERT_TRUE(std::getline(in, written)) << "no VERSION file in " << DDP_SOURCE_DIR;
  EXPECT_EQ(std::string(ddp::Version()), written);
  EXPECT_EQ(std::string(DDP_VERSION_STRING), written);
  EXPECT_EQ(std::string(ddp_version()), written);
  EXPECT_EQ(absl::StrCat(DDP_VERSION_MAJOR, ".", DDP_VERSION_MINOR, ".", DDP_VERSION_PATCH),
            written);
}

// The store as launchers and elastic workers use it (ddp/rendezvous.h): keys, waits that end
// naming the key, counters, and the token checked before any request.
TEST(Api, ARendezvousClientSetsGetsAndCountsWithTheJobToken) {
  auto server = RendezvousServer::Start("127.0.0.1", 0, "job-token");
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  auto client = RendezvousClient::Connect("127.0.0.1", port, "job-token", absl::Seconds(10));
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Set("elastic/latest", "3").ok());
  auto value = (*client)->Get("elastic/latest", absl::Seconds(5));
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "3");
  auto missing = (*client)->Get("elastic/generation/4", absl::Milliseconds(100));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded) << missing.status();
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "elastic/generation/4"))
      << missing.status();
  EXPECT_EQ(*(*client)->Add("elastic/updates", 0), 0);
  EXPECT_EQ(*(*client)->Add("elastic/updates", 2), 2);
  EXPECT_EQ(*(*client)->Add("elastic/updates", 0), 2);
  auto stranger = RendezvousClient::Connect("127.0.0.1", port, "wrong", absl::Seconds(5));
  EXPECT_FALSE(stranger.ok());
  (*server)->Stop();
}

TEST(Api, BadInputIsRejectedAndTheContextStaysUsable) {
  JobSpec spec;
  spec.size = 2;
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    std::vector<float> buf(64, 1.0f);
    std::vector<float> other(64, 0.0f);
    float* p = buf.data();
    CHECK_OK(
        ExpectInvalid(ctx.Allreduce(nullptr, p, 4, DataType::kFloat32, ReduceOp::kSum), "null"));
    auto* misaligned = reinterpret_cast<float*>(reinterpret_cast<char*>(p) + 1);
    CHECK_OK(ExpectInvalid(
        ctx.Allreduce(misaligned, misaligned, 4, DataType::kFloat32, ReduceOp::kSum), "aligned"));
    CHECK_OK(
        ExpectInvalid(ctx.Allreduce(p, p + 1, 8, DataType::kFloat32, ReduceOp::kSum), "overlap"));
    CHECK_OK(ExpectInvalid(ctx.Allreduce(p, p, SIZE_MAX / 2, DataType::kFloat32, ReduceOp::kSum),
                           "overflow"));
    CHECK_OK(ExpectInvalid(ctx.Allreduce(p, p, 4, static_cast<DataType>(42), ReduceOp::kSum),
                           "data type"));
    CHECK_OK(
        ExpectInvalid(ctx.Allreduce(p, p, 4, DataType::kFloat32, static_cast<ReduceOp>(9)), "op"));
    CHECK_OK(ExpectInvalid(ctx.Broadcast(p, p, 4, DataType::kFloat32, 2), "root rank 2"));
    CHECK_OK(ExpectInvalid(ctx.Broadcast(p, p, 4, DataType::kFloat32, -1), "root rank -1"));
    const size_t three[] = {1, 1, 1};
    CHECK_OK(ExpectInvalid(ctx.Allgatherv(p, other.data(), three, DataType::kFloat32), "counts"));
    CHECK_OK(ExpectInvalid(
        ctx.ReduceScatterv(p, other.data(), three, DataType::kFloat32, ReduceOp::kSum), "counts"));
    CHECK_OK(ExpectInvalid(ctx.Alltoall(p, p + 1, 4, DataType::kFloat32), "overlap"));
    // None of it touched the data or broke the context.
    for (float v : buf) CHECK_OK(Expect(v == 1.0f, "a rejected call modified the buffer"));
    CHECK_OK(ctx.Allreduce(p, other.data(), 64, DataType::kFloat32, ReduceOp::kSum));
    for (float v : other) CHECK_OK(Expect(v == 2.0f, "allreduce after rejected calls is wrong"));
    return ctx.health();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (const RankResult& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

TEST(Api, TopologyFromFakeHostNames) {
  JobSpec spec;
  spec.size = 5;
  spec.hosts = {"node-a", "node-b", "node-a", "node-b", "node-c"};
  spec.rank0_hosts_store = true;
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    const int want_local_rank[] = {0, 0, 1, 1, 0};
    const int want_local_size[] = {2, 2, 2, 2, 1};
    const int want_cross_rank[] = {0, 1, 0, 1, 2};
    const int r = ctx.rank();
    CHECK_OK(Expect(ctx.local_rank() == want_local_rank[r], "local_rank"));
    CHECK_OK(Expect(ctx.local_size() == want_local_size[r], "local_size"));
    CHECK_OK(Expect(ctx.cross_rank() == want_cross_rank[r], "cross_rank"));
    CHECK_OK(Expect(ctx.cross_size() == 3, "cross_size"));
    return ctx.Barrier();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (const RankResult& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

TEST(Api, SingleRankNeedsNoTokenNorNetwork) {
  ::unsetenv("DDP_JOB_TOKEN");
  Options options;  // rank 0 of 1
  auto ctx = Context::Create(options);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  std::vector<int64_t> v = {1, 2, 3};
  std::vector<int64_t> out(3, 0);
  ASSERT_TRUE((*ctx)->Allreduce(v.data(), out.data(), 3, DataType::kInt64, ReduceOp::kSum).ok());
  EXPECT_EQ(out, v);
  ASSERT_TRUE((*ctx)->Barrier().ok());
  ASSERT_TRUE((*ctx)->Shutdown().ok());
  absl::Status after = (*ctx)->Barrier();
  EXPECT_EQ(after.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(after.message(), "shut down"));
  EXPECT_TRUE((*ctx)->Shutdown().ok());  // idempotent
}

TEST(Api, ShutdownAndReinitialiseInTheSameJob) {
  JobSpec spec;
  spec.size = 3;
  JobResult job = RunJob(spec, [](int /*rank*/) -> absl::Status {
    for (int round = 0; round < 2; ++round) {
      auto ctx = Context::CreateFromEnvironment();
      if (!ctx.ok()) return ctx.status();
      int64_t x = 1;
      CHECK_OK((*ctx)->Allreduce(&x, &x, 1, DataType::kInt64, ReduceOp::kSum));
      CHECK_OK(Expect(x == 3, "allreduce after re-init"));
      CHECK_OK((*ctx)->Shutdown());
    }
    return absl::OkStatus();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (const RankResult& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

// More than 2^31 bytes in one call: counts and offsets must be 64-bit all the way down.
TEST(ApiSlow, AllreduceAndBroadcastAbove2GiB) {
  JobSpec spec;
  spec.size = 2;
  spec.hang_limit = absl::Seconds(1200);
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    const size_t count = (size_t{1} << 31) + 4099;  // bytes of u8
    std::vector<uint8_t> buf(count);
    const auto r = static_cast<uint8_t>(ctx.rank());
    for (size_t i = 0; i < count; ++i) buf[i] = static_cast<uint8_t>((i % 251) + r);
    CHECK_OK(ctx.Allreduce(buf.data(), buf.data(), count, DataType::kUInt8, ReduceOp::kSum));
    for (size_t i = 0; i < count; ++i) {
      if (buf[i] != static_cast<uint8_t>(2 * (i % 251) + 1)) {
        return absl::InternalError(absl::StrCat("allreduce element ", i, " wrong"));
      }
    }
    if (ctx.rank() != 0) std::fill(buf.begin(), buf.end(), 0);
    CHECK_OK(ctx.Broadcast(buf.data(), buf.data(), count, DataType::kUInt8, 0));
    for (size_t i = 0; i < count; i += 4093) {
      if (buf[i] != static_cast<uint8_t>(2 * (i % 251) + 1)) {
        return absl::InternalError(absl::StrCat("broadcast element ", i, " wrong"));
      }
    }
    return absl::OkStatus();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (const RankResult& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

// The first line of /proc/self/task/<tid>/<file> for each of this process's threads.
std::vector<std::string> PerThread(const char* file) {
  std::vector<std::string> lines;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return lines;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(absl::StrCat("/proc/self/task/", e->d_name, "/", file));
    std::string line;
    if (std::getline(in, line)) lines.push_back(line);
  }
  closedir(dir);
  return lines;
}

// The nice values of this process's threads (field 19 of /proc/self/task/<tid>/stat).
std::vector<int> ThreadNices() {
  std::vector<int> nices;
  for (const std::string& stat : PerThread("stat")) {
    // After the command name's closing parenthesis: state is field 3, nice field 19.
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::vector<std::string> fields = absl::StrSplit(stat.substr(close + 2), ' ');
    int nice = 0;
    if (fields.size() > 16 && absl::SimpleAtoi(fields[16], &nice)) nices.push_back(nice);
  }
  return nices;
}

// libddp's threads carry names (top -H, perf, gdb, py-spy): the engine's, and the transport's
// progress thread once it has one.
TEST(Api, LibddpsThreadsAreNamed) {
  for (const char* transport : {"tcp", "shm"}) {
    JobSpec spec;
    spec.size = 2;
    spec.env = {{"DDP_TRANSPORT", transport}};
    const std::string progress = absl::StrCat("ddp-", transport);
    JobResult job = RunWithContext(spec, [&progress](Context& ctx) -> absl::Status {
      std::vector<float> v(1 << 20, 1.0f);  // 4 MiB: the transport's own thread carries it
      for (int i = 0; i < 3; ++i) {
        CHECK_OK(ctx.engine()
                     .AllreduceAsync(absl::StrCat("named.", i), v.data(), v.data(),
                                     DataType::kFloat32, {1 << 20}, ReduceOp::kSum)
                     .Wait());
      }
      // A thread names itself first thing when it runs: on a busy machine look again a while.
      std::vector<std::string> names;
      auto has = [&names](const std::string& n) {
        return std::find(names.begin(), names.end(), n) != names.end();
      };
      for (int attempt = 0; attempt < 100 && !(has("ddp-engine") && has(progress)); ++attempt) {
        if (attempt > 0) absl::SleepFor(absl::Milliseconds(50));
        names = PerThread("comm");
      }
      return Expect(has("ddp-engine") && has(progress),
                    absl::StrCat("threads [", absl::StrJoin(names, ","), "]: want ddp-engine and ",
                                 progress));
    });
    for (const RankResult& r : job.ranks) EXPECT_TRUE(r.ok()) << transport << job.Summary();
  }
}

// DDP_COMM_THREAD_NICE: the engine's and the transports' threads run at that nice value, the
// application's own threads keep theirs.
TEST(Api, CommunicationThreadsTakeTheirNiceValue) {
  for (const char* transport : {"tcp", "shm"}) {
    JobSpec spec;
    spec.size = 2;
    spec.env = {{"DDP_COMM_THREAD_NICE", "7"}, {"DDP_TRANSPORT", transport}};
    JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
      std::vector<float> v(1024, 1.0f);
      CHECK_OK(ctx.engine()
                   .AllreduceAsync("nice", v.data(), v.data(), DataType::kFloat32, {1024},
                                   ReduceOp::kSum)
                   .Wait());
      // Each thread sets its value first thing when it runs; on a busy machine a thread may
      // not have run yet, so look again for a while. The engine's thread always runs by now;
      // the transports start theirs when they need them (and the wire watchdog keeps 0).
      std::vector<int> nices;
      int at_seven = 0;
      for (int attempt = 0; attempt < 100 && at_seven < 1; ++attempt) {
        if (attempt > 0) absl::SleepFor(absl::Milliseconds(50));
        nices = ThreadNices();
        at_seven = static_cast<int>(std::count(nices.begin(), nices.end(), 7));
      }
      CHECK_OK(Expect(at_seven >= 1 && std::all_of(nices.begin(), nices.end(),
                                                   [](int n) { return n == 0 || n == 7; }),
                      absl::StrCat(at_seven, " of ", nices.size(), " [", absl::StrJoin(nices, ","),
                                   "] threads at nice 7, the others at 0")));
      // On Linux, PRIO_PROCESS 0 is the calling thread: the application's, untouched.
      return Expect(getpriority(PRIO_PROCESS, 0) == 0, "the calling thread's nice value changed");
    });
    for (const RankResult& r : job.ranks) EXPECT_TRUE(r.ok()) << transport << job.Summary();
  }
}

}  // namespace
}  // namespace ddp::testing
