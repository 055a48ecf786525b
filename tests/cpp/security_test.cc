// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The security contract (docs/security.md): the claims not tested beside the code they concern.
// The job token stays out of every log line, error and timeline, even at debug level and when a
// rank aborts; every listening socket is bound to the chosen interface, never to all of them.
// (The rest: Store.*, Faults.StrangersAndGarbageAreRejectedAndTheJobCompletes,
// Faults.RankWithWrongTokenCannotJoin, ShmSegments.OnlyHoldersOfTheJobTokenAttach,
// Negotiator.HostileAnnouncementsAreAnErrorNamingTheirSender, PsFaults.StrangersAndGarbage...,
// and the Python launcher's tests: see docs/security.md.)
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ddp/ddp.h"
#include "support/check.h"
#include "support/multiprocess.h"

namespace ddp::testing {
namespace {

TEST(Security, TheTokenAppearsInNoLogErrorOrTimeline) {
  const std::string token = "5ecre7-70ken-that-must-never-be-printed";
  const std::string timeline = absl::StrCat(::testing::TempDir(), "/ddp-security-", ::getpid());
  JobSpec spec;
  spec.size = 3;
  spec.rank0_hosts_store = true;  // rank 0 serves the store with this token
  spec.env = {{"DDP_JOB_TOKEN", token}, {"DDP_LOG_LEVEL", "debug"}, {"DDP_TRANSPORT", "tcp"}};
  spec.rank_env[0]["DDP_TIMELINE"] = timeline;
  spec.hang_limit = absl::Seconds(120);
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    std::vector<float> t(1000, 1.0f);
    CHECK_OK(
        e.AllreduceAsync("layer", t.data(), t.data(), DataType::kFloat32, {1000}, ReduceOp::kSum)
            .Wait());
    if (ctx.rank() == 2) {
      // Time for rank 0's engine to write the step to its timeline before the abort ends it.
      ::usleep(500000);
      ctx.Abort(absl::CancelledError("loss became NaN"));
      return absl::CancelledError("aborted");
    }
    // Until rank 2's abort fails this rank's collectives.
    for (;;) {
      absl::Status s =
          e.AllreduceAsync("layer", t.data(), t.data(), DataType::kFloat32, {1000}, ReduceOp::kSum)
              .Wait();
      if (!s.ok()) return s;
    }
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (const RankResult& r : job.ranks) {
    EXPECT_FALSE(r.ok()) << job.Summary();
    EXPECT_FALSE(absl::StrContains(r.output, token)) << job.Summary();
    EXPECT_FALSE(absl::StrContains(r.status, token)) << job.Summary();
  }
  // The survivors' errors say why (so the check above looked at real errors).
  EXPECT_TRUE(absl::StrContains(job.ranks[0].status, "loss became NaN")) << job.Summary();
  // Debug logging was on: the output is full of the job's start.
  EXPECT_TRUE(absl::StrContains(job.ranks[1].output, "[ddp 1 D]")) << job.Summary();
  const std::string written = ReadFile(timeline);
  EXPECT_TRUE(absl::StrContains(written, "NEGOTIATE")) << written.substr(0, 500);
  EXPECT_FALSE(absl::StrContains(written, token));
  std::remove(timeline.c_str());
}

// This process's listening TCP sockets, as "address:port" in /proc's hex (00000000 = 0.0.0.0).
std::vector<std::string> ListeningSockets() {
  std::set<std::string> inodes;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (dirent* e = ::readdir(d)) {
      char target[256];
      const std::string link = absl::StrCat("/proc/self/fd/", e->d_name);
      const ssize_t n = ::readlink(link.c_str(), target, sizeof(target) - 1);
      if (n <= 0) continue;
      target[n] = '\0';
      absl::string_view t(target);
      if (absl::ConsumePrefix(&t, "socket:[") && absl::ConsumeSuffix(&t, "]")) {
        inodes.insert(std::string(t));
      }
    }
    ::closedir(d);
  }
  std::vector<std::string> listening;
  for (const char* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::istringstream lines(ReadFile(table));
    std::string line;
    std::getline(lines, line);  // the header
    while (std::getline(lines, line)) {
      std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
      // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
      if (f.size() > 9 && f[3] == "0A" && inodes.count(f[9])) listening.push_back(f[1]);
    }
  }
  return listening;
}

TEST(Security, EverySocketListensOnlyOnTheChosenInterface) {
  JobSpec spec;
  spec.size = 2;
  spec.rank0_hosts_store = true;
  spec.env = {{"DDP_IFACE", "lo"}, {"DDP_TRANSPORT", "tcp"}};
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    CHECK_OK(ctx.Barrier());
    const std::vector<std::string> listening = ListeningSockets();
    // The transport's listener, and on rank 0 the rendezvous store's too.
    const size_t want = ctx.rank() == 0 ? 2 : 1;
    if (listening.size() < want) {
      return absl::InternalError(absl::StrCat("found ", listening.size(), " listening sockets"));
    }
    for (const std::string& a : listening) {
      // 127.0.0.1 in /proc's byte order; 0.0.0.0 or :: would be every interface.
      if (!absl::StartsWith(a, "0100007F:")) {
        return absl::InternalError(absl::StrCat("a socket listens on ", a));
      }
    }
    return ctx.Barrier();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (const RankResult& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

}  // namespace
}  // namespace ddp::testing
