// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Errors, never hangs: dead and stopped ranks, strangers and garbage on the wire, ranks that
// disagree, aborts. Each job runs as real processes; a job that outlives its hang limit fails.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bootstrap/tcp_store.h"
#include "common/auth.h"
#include "common/report.h"
#include "common/socket.h"
#include "ddp/context.h"
#include "ddp/errors.h"
#include "ofi/ofi_wire.h"
#include "support/multiprocess.h"
#include "transport/tcp/frame.h"

namespace ddp::testing {
namespace {

// Allreduces until one fails; returns that error (or OK if `iterations` all succeed).
absl::Status AllreduceUntilError(Context& ctx, size_t count, int iterations) {
  std::vector<float> buf(count, 1.0f);
  for (int i = 0; i < iterations; ++i) {
    absl::Status s =
        ctx.Allreduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kAverage);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

std::string TempPath(absl::string_view name) {
  return absl::StrCat(::testing::TempDir(), "/ddp-", name, "-", ::getpid());
}

// Jobs shared by the TCP tests and their libfabric counterparts below.

// Rank 1 SIGKILLs itself (from another thread) while every rank runs allreduces of `count`
// floats until one fails; each survivor reports that error.
JobResult RunWithRankOneKilled(const JobSpec& spec, size_t count) {
  return RunWithContext(spec, [count](Context& ctx) -> absl::Status {
    if (ctx.rank() == 1) {
      std::thread([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        ::raise(SIGKILL);
      }).detach();
    }
    absl::Status s = AllreduceUntilError(ctx, count, 1000000);
    if (s.ok()) return absl::InternalError("allreduce kept succeeding after rank 1 died");
    return s;
  });
}

// Rank 1 SIGSTOPs itself during allreduces; rank 0 kills it once it has seen the error.
JobResult RunWithRankOneStopped(const JobSpec& spec, const std::string& pid_file) {
  JobResult job = RunWithContext(spec, [&](Context& ctx) -> absl::Status {
    if (ctx.rank() == 1) {
      std::ofstream(pid_file) << ::getpid();
      std::thread([] {
        // A guard kills this rank if nobody else does: rank 0 normally does once it has its
        // error, but a provider that blocks inside a call (libfabric's shm, when the stopped
        // rank holds its lock) leaves that to the watchdog, which ends ranks 0 and 2 first.
        const pid_t stopped = ::getpid();
        if (::fork() == 0) {
          for (int fd = 0; fd < 1024; ++fd) ::close(fd);  // none of the job's output pipes
          for (int i = 0; i < 40 && ::getppid() == stopped; ++i) ::sleep(1);
          if (::getppid() == stopped) ::kill(stopped, SIGKILL);
          ::_exit(0);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        ::raise(SIGSTOP);
      }).detach();
    }
    absl::Status s = AllreduceUntilError(ctx, 1 << 16, 1000000);
    if (ctx.rank() == 0) {
      // Clean up the stopped process once the error has been seen.
      int pid = 0;
      std::ifstream(pid_file) >> pid;
      if (pid > 0) ::kill(pid, SIGKILL);
    }
    return s.ok() ? absl::InternalError("no error from a stopped peer") : s;
  });
  std::remove(pid_file.c_str());
  return job;
}

// Rank 2 aborts with "loss became NaN" while the others run allreduces. It first joins one of
// them, so that every rank has formed the job: an abort while the others still connect races
// their handshakes (a rank that fails its own start closes the connections it was making, and a
// peer can see that close before the notice).
JobResult RunWithRankTwoAborting(const JobSpec& spec) {
  return RunWithContext(spec, [](Context& ctx) -> absl::Status {
    if (ctx.rank() == 2) {
      std::vector<float> v(1000, 1.0f);
      absl::Status first =
          ctx.Allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kAverage);
      if (!first.ok()) return first;
      ctx.Abort(absl::CancelledError("loss became NaN"));
      return absl::CancelledError("aborted");
    }
    return AllreduceUntilError(ctx, 1000, 100000);
  });
}

TEST(Faults, RankKilledMidAllreduceNamesItOnEverySurvivor) {
  for (int n : {2, 4}) {
    SCOPED_TRACE(absl::StrCat("N=", n));
    JobSpec spec;
    spec.size = n;
    spec.env = {{"DDP_TIMEOUT_SECONDS", "60"}, {"DDP_TRANSPORT", "tcp"}};
    spec.hang_limit = absl::Seconds(120);
    JobResult job = RunWithRankOneKilled(spec, 1 << 20);
    ASSERT_FALSE(job.hung) << job.Summary();
    EXPECT_EQ(job.ranks[1].signal, SIGKILL) << job.Summary();
    for (int r = 0; r < n; ++r) {
      if (r == 1) continue;
      const RankResult& rr = job.ranks[static_cast<size_t>(r)];
      ASSERT_TRUE(rr.status_reported) << job.Summary();
      EXPECT_TRUE(absl::StrContains(rr.status, "rank 1")) << job.Summary();
      EXPECT_TRUE(absl::StrContains(rr.status, "allreduce")) << job.Summary();
      // Broken for good, and who is to blame as data (ddp/errors.h): rank 1 first.
      EXPECT_TRUE(absl::StartsWith(rr.status, "ABORTED")) << job.Summary();
      EXPECT_TRUE(absl::StrContains(rr.status, "ddp.BlamedRanks='1")) << job.Summary();
      EXPECT_EQ(rr.exit_code, 1) << job.Summary();
    }
  }
}

TEST(Faults, StoppedRankTimesOutNamingIt) {
  JobSpec spec;
  spec.size = 3;
  spec.env = {{"DDP_TIMEOUT_SECONDS", "2"}, {"DDP_TRANSPORT", "tcp"}};
  spec.hang_limit = absl::Seconds(90);
  JobResult job = RunWithRankOneStopped(spec, TempPath("stopped-pid"));
  std::printf("%s", job.Summary().c_str());
  ASSERT_FALSE(job.hung) << job.Summary();
  for (int r : {0, 2}) {
    const RankResult& rr = job.ranks[static_cast<size_t>(r)];
    ASSERT_TRUE(rr.status_reported) << job.Summary();
    EXPECT_TRUE(absl::StrContains(rr.status, "rank 1")) << job.Summary();
    EXPECT_TRUE(absl::StrContains(rr.status, "DDP_TIMEOUT_SECONDS") ||
                absl::StrContains(rr.status, "aborted"))
        << job.Summary();
  }
}

// Two hosts, rank 1 stopped: rank 0 waits on it over shared memory while the ranks of the other
// host wait on rank 0 over TCP. Rank 0 is alive but blocked, and its TCP heartbeats say it waits
// (its transports share that: core.h, WaitingGroup), so no one blames it for not taking part:
// every survivor names rank 1 first, rank 0 at the timeout and the others through its abort.
// Every rank but 1 reported an error blaming rank 1 first.
void ExpectTheSurvivorsBlameRankOne(const JobResult& job) {
  for (size_t r = 0; r < job.ranks.size(); ++r) {
    if (r == 1) continue;
    const RankResult& rr = job.ranks[r];
    ASSERT_TRUE(rr.status_reported) << job.Summary();
    EXPECT_TRUE(absl::StrContains(rr.status, "ddp.BlamedRanks='1")) << r << job.Summary();
  }
}

TEST(Faults, ARankBlockedOnItsHostIsNotBlamedByTheOtherHost) {
  JobSpec spec;
  spec.size = 4;
  spec.hosts = {"hosta", "hosta", "hostb", "hostb"};
  spec.env = {{"DDP_TIMEOUT_SECONDS", "2"}};
  spec.hang_limit = absl::Seconds(90);
  JobResult job = RunWithRankOneStopped(spec, TempPath("blocked-pid"));
  ASSERT_FALSE(job.hung) << job.Summary();
  ExpectTheSurvivorsBlameRankOne(job);
}

// The same two failures during the hierarchical allreduce in chunks, where each rank waits in
// two threads at once (its host's phases in one, the phase across hosts in the other): the
// killed or stopped rank is named first by every survivor, and nobody hangs.
TEST(Faults, ARankKilledDuringThePipelinedHierarchicalAllreduceIsNamedByEverySurvivor) {
  JobSpec spec;
  spec.size = 4;
  spec.hosts = {"hosta", "hosta", "hostb", "hostb"};
  spec.env = {{"DDP_TIMEOUT_SECONDS", "60"}, {"DDP_HIER_CHUNK_BYTES", "64K"}};
  spec.hang_limit = absl::Seconds(120);
  JobResult job = RunWithRankOneKilled(spec, 1 << 20);  // 4 MiB: 64 chunks
  ASSERT_FALSE(job.hung) << job.Summary();
  EXPECT_EQ(job.ranks[1].signal, SIGKILL) << job.Summary();
  ExpectTheSurvivorsBlameRankOne(job);
  for (int r : {0, 2, 3}) {
    EXPECT_TRUE(absl::StartsWith(job.ranks[static_cast<size_t>(r)].status, "ABORTED"))
        << r << job.Summary();
  }
}

TEST(Faults, ARankStoppedDuringThePipelinedHierarchicalAllreduceIsNamedByEverySurvivor) {
  JobSpec spec;
  spec.size = 4;
  spec.hosts = {"hosta", "hosta", "hostb", "hostb"};
  spec.env = {{"DDP_TIMEOUT_SECONDS", "2"}, {"DDP_HIER_CHUNK_BYTES", "4K"}};
  spec.hang_limit = absl::Seconds(90);
  JobResult job = RunWithRankOneStopped(spec, TempPath("pipelined-pid"));  // 64 chunks
  ASSERT_FALSE(job.hung) << job.Summary();
  ExpectTheSurvivorsBlameRankOne(job);
}

// ddprun's report channel (common/report.h): every survivor writes one line to DDP_REPORT_FD
// naming the killed rank first; the killed rank writes nothing.
TEST(Faults, EverySurvivorReportsTheCulpritOnTheLaunchersPipe) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  JobSpec spec;
  spec.size = 3;
  spec.env = {{"DDP_TIMEOUT_SECONDS", "30"},
              {"DDP_TRANSPORT", "tcp"},
              {"DDP_REPORT_FD", std::to_string(fds[1])}};
  spec.hang_limit = absl::Seconds(90);
  JobResult job = RunWithRankOneKilled(spec, 1 << 16);
  ::close(fds[1]);
  ASSERT_FALSE(job.hung) << job.Summary();
  std::string all;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
    all.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  std::vector<std::string> lines = absl::StrSplit(all, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u) << all;
  for (const std::string& line : lines) {
    EXPECT_TRUE(absl::StartsWith(line, "failure 1 ABORTED ")) << line;
    EXPECT_TRUE(absl::StrContains(line, "rank 1")) << line;
  }
}

TEST(Faults, AReportIsOneLineNamingTheBlamedRanks) {
  const absl::Status status =
      WithRanks(absl::AbortedError("rank 3 (h, 1.2.3.4:5):\n\tsilent  for 9s"), {3, 0});
  EXPECT_EQ(FailureReportLine(status),
            "failure 3,0 ABORTED rank 3 (h, 1.2.3.4:5): silent for 9s\n");
  EXPECT_EQ(FailureReportLine(absl::UnavailableError("store gone")),
            "failure - UNAVAILABLE store gone\n");
  const std::string huge = FailureReportLine(absl::InternalError(std::string(10000, 'x')));
  EXPECT_EQ(huge.size(), kMaxReportBytes);
  EXPECT_EQ(huge.back(), '\n');
  // Not started by a launcher: nothing is written, nothing fails.
  ReportFailure(absl::AbortedError("no launcher"));
}

TEST(Faults, TheStragglerLineListsTheRanksWaitedForMostFirstWithinItsBound) {
  EXPECT_EQ(StragglerReportLine({0.5, 0.0, 2.25}, {3, 0, 7}),
            "stragglers 2:2.250000:7 0:0.500000:3\n");
  EXPECT_EQ(StragglerReportLine({0.0, 0.0}, {0, 0}), "");  // nobody was waited for
  EXPECT_EQ(StragglerReportLine({}, {}), "");
  // A large job: as many ranks as fit, whole, the most waited for first.
  std::vector<double> seconds(5000);
  std::vector<uint64_t> rounds(5000, 1);
  for (size_t r = 0; r < seconds.size(); ++r) seconds[r] = static_cast<double>(r);
  const std::string line = StragglerReportLine(seconds, rounds);
  EXPECT_LE(line.size(), kMaxReportBytes);
  EXPECT_EQ(line.rfind("stragglers 4999:4999.000000:1 4998:", 0), 0u) << line.substr(0, 80);
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(line[line.size() - 2], '1');  // the last item is whole
  ReportStragglers(seconds, rounds);      // not started by a launcher: nothing is written
}

// Connects to `address` and lets `attack` do its worst; never blocks longer than a second.
void Attack(const std::string& address, const std::function<void(int fd)>& attack) {
  std::string ip;
  int port = 0;
  ASSERT_TRUE(net::SplitHostPort(address, &ip, &port).ok());
  auto fd = net::ConnectWithRetry(ip, port, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(fd.ok()) << fd.status();
  attack(fd->get());
}

TEST(Faults, StrangersAndGarbageAreRejectedAndTheJobCompletes) {
  JobSpec spec;
  spec.size = 2;
  spec.env = {{"DDP_LOG_LEVEL", "warning"}, {"DDP_TRANSPORT", "tcp"}};  // attacks its sockets
  spec.hang_limit = absl::Seconds(120);
  JobResult job = RunWithContext(spec, [&](Context& ctx) -> absl::Status {
    if (ctx.rank() == 0) {
      // Find rank 1's transport address the way a peer would, then misbehave at it.
      const char* token = std::getenv("DDP_JOB_TOKEN");
      const int store_port = std::atoi(std::getenv("DDP_RENDEZVOUS_PORT"));
      auto store = bootstrap::TcpStoreClient::Connect("127.0.0.1", store_port, token, 99,
                                                      absl::Now() + absl::Seconds(5));
      if (!store.ok()) return store.status();
      auto address = (*store)->Get("ddp/1/addr/1", absl::Seconds(5));
      if (!address.ok()) return address.status();
      std::mt19937_64 rng(42);
      // 1. The right protocol with the wrong token.
      Attack(*address, [](int fd) {
        auth::Hello hello;
        absl::Status s = auth::ClientHandshake(fd, "not-the-job-token", auth::Role::kTransport, 0,
                                               0, absl::Now() + absl::Seconds(5), &hello);
        if (s.ok()) std::printf("WRONG TOKEN ACCEPTED\n");
      });
      // 2. Random bytes.
      Attack(*address, [&](int fd) {
        std::vector<char> junk(4096);
        for (char& c : junk) c = static_cast<char>(rng());
        ::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
      });
      // 3. A frame header claiming an enormous payload, with no handshake.
      Attack(*address, [](int fd) {
        transport::tcp::FrameHeader h;
        h.length = ~uint64_t{0} >> 1;
        char raw[transport::tcp::kFrameHeaderSize];
        transport::tcp::EncodeFrameHeader(h, raw);
        ::send(fd, raw, sizeof(raw), MSG_NOSIGNAL);
      });
      // 4. A handshake message that claims to be rank 0 with a huge stream index, then silence.
      Attack(*address, [](int fd) {
        char buf[auth::kHelloSize];
        ::recv(fd, buf, sizeof(buf), 0);
        std::string bogus(auth::kAuthSize, '\xff');
        ::send(fd, bogus.data(), bogus.size(), MSG_NOSIGNAL);
      });
      // 5. A replay: an Auth made with the token for one connection's Hello, sent on another
      // (whose Hello has a fresh nonce). Refused as not knowing the token.
      std::string recorded;
      Attack(*address, [&](int fd) {
        std::string hello(auth::kHelloSize, '\0');
        if (!auth::ReadFull(fd, hello.data(), hello.size(), absl::Now() + absl::Seconds(5)).ok()) {
          return;
        }
        auto h = auth::DecodeHello(hello, auth::Role::kTransport);
        if (!h.ok()) return;
        const auth::Nonce nonce = *auth::NewNonce();
        recorded = auth::EncodeAuth(auth::Auth{auth::Role::kTransport, 0, 9, nonce,
                                               auth::ClientMac(token, *h, 0, 9, nonce)});
      });
      Attack(*address, [&](int fd) {
        char hello[auth::kHelloSize];
        if (!auth::ReadFull(fd, hello, sizeof(hello), absl::Now() + absl::Seconds(5)).ok()) return;
        ::send(fd, recorded.data(), recorded.size(), MSG_NOSIGNAL);
        char byte;
        if (auth::ReadFull(fd, &byte, 1, absl::Now() + absl::Seconds(5)).ok()) {
          std::printf("REPLAY ACCEPTED\n");
        }
      });
      // 6. Garbage at the rendezvous store.
      Attack(absl::StrCat("127.0.0.1:", store_port), [](int fd) {
        const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        ::send(fd, junk, sizeof(junk), MSG_NOSIGNAL);
      });
    }
    // The job goes on, with correct results.
    std::vector<double> v(100000);
    for (int i = 0; i < 20; ++i) {
      for (size_t j = 0; j < v.size(); ++j) v[j] = static_cast<double>(ctx.rank() + j);
      absl::Status s =
          ctx.Allreduce(v.data(), v.data(), v.size(), DataType::kFloat64, ReduceOp::kSum);
      if (!s.ok()) return s;
      for (size_t j = 0; j < v.size(); ++j) {
        if (v[j] != static_cast<double>(2 * j + 1)) return absl::InternalError("wrong result");
      }
    }
    return ctx.Barrier();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (const RankResult& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
  EXPECT_FALSE(absl::StrContains(job.ranks[0].output, "WRONG TOKEN ACCEPTED"));
  EXPECT_FALSE(absl::StrContains(job.ranks[0].output, "REPLAY ACCEPTED"));
  // Rank 1 logged each rejection.
  EXPECT_TRUE(absl::StrContains(job.ranks[1].output, "wrong job token")) << job.Summary();
  EXPECT_TRUE(absl::StrContains(job.ranks[1].output, "not a libddp peer")) << job.Summary();
}

TEST(Faults, RankWithWrongTokenCannotJoin) {
  JobSpec spec;
  spec.size = 2;
  spec.env = {{"DDP_START_TIMEOUT_SECONDS", "4"}};
  spec.rank_env = {{1, {{"DDP_JOB_TOKEN", "some-other-secret"}}}};
  spec.hang_limit = absl::Seconds(60);
  JobResult job = RunWithContext(spec, [](Context& ctx) { return ctx.Barrier(); });
  ASSERT_FALSE(job.hung) << job.Summary();
  EXPECT_TRUE(absl::StrContains(job.ranks[1].status, "DDP_JOB_TOKEN")) << job.Summary();
  EXPECT_TRUE(absl::StrContains(job.ranks[0].status, "rank 1")) << job.Summary();
}

// Ranks that disagree get an error naming the difference, and no byte outside the buffers moves.
struct Disagreement {
  const char* name;
  std::function<absl::Status(Context&, std::vector<char>&)> call;
};

void PrintTo(const Disagreement& d, std::ostream* os) { *os << d.name; }

class Mismatch : public ::testing::TestWithParam<Disagreement> {};

TEST_P(Mismatch, FailsEveryRankWithoutCorruption) {
  // Over TCP (descriptors in every message) and shared memory (the allreduce's published calls).
  for (const char* transport : {"tcp", "shm"}) {
    SCOPED_TRACE(transport);
    JobSpec spec;
    spec.size = 3;
    spec.env = {{"DDP_TIMEOUT_SECONDS", "20"}, {"DDP_TRANSPORT", transport}};
    spec.hang_limit = absl::Seconds(90);
    JobResult job = RunWithContext(spec, [&](Context& ctx) -> absl::Status {
      // Guard bytes on both sides of the working area detect any stray write.
      constexpr size_t kGuard = 4096;
      std::vector<char> arena(kGuard + (1 << 20) + kGuard, '\x5a');
      std::vector<char> work(arena.begin() + kGuard, arena.end() - kGuard);
      absl::Status s = GetParam().call(ctx, work);
      for (size_t i = 0; i < kGuard; ++i) {
        if (arena[i] != '\x5a' || arena[arena.size() - 1 - i] != '\x5a') {
          return absl::InternalError("guard bytes were overwritten");
        }
      }
      // A rank that only sends in this call (a broadcast root, say) may finish it before the
      // others notice; it must learn of the failure by its next call at the latest.
      absl::Status again = ctx.Barrier();
      if (again.ok()) return absl::InternalError("the disagreement went unnoticed");
      return s.ok() ? again : s;
    });
    ASSERT_FALSE(job.hung) << job.Summary();
    for (const RankResult& r : job.ranks) {
      ASSERT_TRUE(r.status_reported) << job.Summary();
      EXPECT_FALSE(absl::StrContains(r.status, "guard bytes")) << job.Summary();
      EXPECT_FALSE(absl::StrContains(r.status, "went unnoticed")) << job.Summary();
      EXPECT_TRUE(absl::StrContains(r.status, "disagree") ||
                  absl::StrContains(r.status, "aborted the job") ||
                  absl::StrContains(r.status, "expects"))
          << job.Summary();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Faults, Mismatch,
                         ::testing::Values(Disagreement{"Count",
                                                        [](Context& ctx, std::vector<char>& w) {
                                                          const size_t count =
                                                              ctx.rank() == 1 ? 50000 : 50001;
                                                          return ctx.Allreduce(
                                                              w.data(), w.data(), count,
                                                              DataType::kFloat32, ReduceOp::kSum);
                                                        }},
                                           Disagreement{
                                               "DataTypeSameBytes",
                                               [](Context& ctx, std::vector<char>& w) {
                                                 return ctx.rank() == 2
                                                            ? ctx.Allreduce(w.data(), w.data(),
                                                                            20000,
                                                                            DataType::kFloat64,
                                                                            ReduceOp::kSum)
                                                            : ctx.Allreduce(w.data(), w.data(),
                                                                            40000,
                                                                            DataType::kFloat32,
                                                                            ReduceOp::kSum);
                                               }},
                                           Disagreement{"Op",
                                                        [](Context& ctx, std::vector<char>& w) {
                                                          return ctx.Allreduce(
                                                              w.data(), w.data(), 1000,
                                                              DataType::kInt32,
                                                              ctx.rank() == 0 ? ReduceOp::kMax
                                                                              : ReduceOp::kSum);
                                                        }},
                                           Disagreement{"CollectiveOrder",
                                                        [](Context& ctx, std::vector<char>& w) {
                                                          if (ctx.rank() == 1) {
                                                            return ctx.Broadcast(
                                                                w.data(), w.data(), 1000,
                                                                DataType::kFloat32, 0);
                                                          }
                                                          return ctx.Allreduce(
                                                              w.data(), w.data(), 1000,
                                                              DataType::kFloat32, ReduceOp::kSum);
                                                        }},
                                           Disagreement{"BroadcastRoot",
                                                        [](Context& ctx, std::vector<char>& w) {
                                                          return ctx.Broadcast(
                                                              w.data(), w.data(), 100000,
                                                              DataType::kUInt8,
                                                              ctx.rank() == 2 ? 1 : 0);
                                                        }},
                                           Disagreement{"AllgatherCount",
                                                        [](Context& ctx, std::vector<char>& w) {
                                                          const size_t count =
                                                              ctx.rank() == 0 ? 1000 : 999;
                                                          return ctx.Allgather(
                                                              w.data(), w.data() + 3 * 4096, count,
                                                              DataType::kFloat32);
                                                        }}),
                         [](const ::testing::TestParamInfo<Disagreement>& p) {
                           return std::string(p.param.name);
                         });

TEST(Faults, AbortReachesThePeersWithItsReason) {
  JobSpec spec;
  spec.size = 3;
  spec.env = {{"DDP_TRANSPORT", "tcp"}};
  spec.hang_limit = absl::Seconds(60);
  JobResult job = RunWithRankTwoAborting(spec);
  ASSERT_FALSE(job.hung) << job.Summary();
  for (int r : {0, 1}) {
    const RankResult& rr = job.ranks[static_cast<size_t>(r)];
    EXPECT_TRUE(absl::StrContains(rr.status, "loss became NaN")) << job.Summary();
    EXPECT_TRUE(absl::StrContains(rr.status, "rank 2")) << job.Summary();
  }
}

// A process's state letter from /proc ('T' stopped), or 0 once it is gone.
char ProcessState(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat;
  std::getline(in, stat);
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() ? '\0' : stat[paren + 2];
}

// This process's TCP sockets, by number, with the port at this end (local) or the other.
std::map<int, int> TcpSocketPorts(bool local) {
  std::map<int, int> ports;
  for (int fd = 0; fd < 1024; ++fd) {
    sockaddr_in a{};
    socklen_t len = sizeof(a);
    int type = 0;
    socklen_t tlen = sizeof(type);
    if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) != 0 || type != SOCK_STREAM) continue;
    auto* sa = reinterpret_cast<sockaddr*>(&a);
    if ((local ? ::getsockname(fd, sa, &len) : ::getpeername(fd, sa, &len)) != 0) continue;
    if (a.sin_family == AF_INET) ports[fd] = ntohs(a.sin_port);
  }
  return ports;
}

// Waits for `file` and returns the numbers in it.
std::vector<int> AwaitNumbers(const std::string& file) {
  for (int i = 0; i < 3000; ++i) {
    std::ifstream in(file);
    std::vector<int> numbers;
    for (int n; in >> n;) numbers.push_back(n);
    if (!numbers.empty()) return numbers;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return {};
}

void WriteNumbers(const std::string& file, const std::vector<int>& numbers) {
  {
    std::ofstream out(file + ".tmp");
    for (int n : numbers) out << n << "\n";
  }
  std::rename((file + ".tmp").c_str(), file.c_str());
}

// A rank dies of an abort before the others have read it; one of them reads that rank's closed
// connection first. Here: rank 1 stops; rank 0 closes its connection to rank 1; rank 2 aborts;
// rank 1 continues, to find the close ahead of the abort. It must report the abort, the cause,
// not the closed connection, its echo (CI once saw the echo win).
TEST(Faults, AnAbortIsReportedRatherThanTheClosedConnectionOfARankThatDiedOfIt) {
  const std::string files = TempPath("abort-behind");
  const std::string stopped = files + ".stopped";  // rank 1's pid, then its TCP ports
  const std::string closed = files + ".closed";    // rank 0 has closed its side
  const std::string aborted = files + ".aborted";  // rank 2 has aborted
  JobSpec spec;
  spec.size = 3;
  spec.env = {{"DDP_TRANSPORT", "tcp"}};
  spec.hang_limit = absl::Seconds(60);
  JobResult job = RunWithContext(spec, [&](Context& ctx) -> absl::Status {
    std::vector<float> w(1000, 1.0f);
    if (ctx.rank() == 1) {
      std::vector<int> numbers = {::getpid()};
      for (const auto& [fd, port] : TcpSocketPorts(/*local=*/true)) numbers.push_back(port);
      WriteNumbers(stopped, numbers);
      ::raise(SIGSTOP);  // until rank 2 continues it
    } else if (ctx.rank() == 0) {
      const std::vector<int> theirs = AwaitNumbers(stopped);
      if (theirs.empty()) return absl::InternalError("rank 1 never said it stops");
      while (ProcessState(theirs[0]) != 'T') ::usleep(1000);
      int cut = 0;
      for (const auto& [fd, port] : TcpSocketPorts(/*local=*/false)) {
        if (std::find(theirs.begin() + 1, theirs.end(), port) == theirs.end()) continue;
        ::shutdown(fd, SHUT_WR);  // rank 1 reads the end of its connection to rank 0
        ++cut;
      }
      WriteNumbers(closed, {cut});
      // Then on to an allreduce once the abort is out: its send to rank 1 breaks, and what
      // rank 2 said must win over that too.
      if (AwaitNumbers(aborted).empty()) return absl::InternalError("rank 2 never aborted");
    } else {
      if (AwaitNumbers(closed) != std::vector<int>{1}) {
        return absl::InternalError("rank 0 did not close exactly one connection to rank 1");
      }
      ctx.Abort(absl::CancelledError("loss became NaN"));
      WriteNumbers(aborted, {1});
      ::kill(AwaitNumbers(stopped)[0], SIGCONT);
      return absl::CancelledError("aborted");
    }
    absl::Status s =
        ctx.Allreduce(w.data(), w.data(), w.size(), DataType::kFloat32, ReduceOp::kSum);
    return s.ok() ? absl::InternalError("the allreduce succeeded after the abort") : s;
  });
  std::remove(stopped.c_str());
  std::remove(closed.c_str());
  std::remove(aborted.c_str());
  ASSERT_FALSE(job.hung) << job.Summary();
  for (int r : {0, 1}) {
    const RankResult& rr = job.ranks[static_cast<size_t>(r)];
    EXPECT_TRUE(absl::StrContains(rr.status, "loss became NaN")) << job.Summary();
    EXPECT_TRUE(absl::StrContains(rr.status, "ddp.BlamedRanks='2'")) << job.Summary();
  }
}

TEST(Faults, MissingRankIsNamedAtStartup) {
  JobSpec spec;
  spec.size = 3;
  spec.env = {{"DDP_START_TIMEOUT_SECONDS", "3"}};
  spec.hang_limit = absl::Seconds(60);
  JobResult job = RunJob(spec, [](int rank) -> absl::Status {
    if (rank == 2) return absl::OkStatus();  // never joins
    auto ctx = Context::CreateFromEnvironment();
    return ctx.ok() ? absl::InternalError("init succeeded without rank 2") : ctx.status();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (int r : {0, 1}) {
    EXPECT_TRUE(absl::StrContains(job.ranks[static_cast<size_t>(r)].status, "rank 2"))
        << job.Summary();
  }
}

}  // namespace
}  // namespace ddp::testing

namespace ddp::testing {
namespace {

TEST(Faults, RankBusyElsewhereIsNamedAfterTheTimeout) {
  JobSpec spec;
  spec.size = 3;
  spec.env = {{"DDP_TIMEOUT_SECONDS", "1.5"}, {"DDP_TRANSPORT", "tcp"}};
  spec.hang_limit = absl::Seconds(60);
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    if (ctx.rank() == 2) {
      // Alive (its progress thread answers) but not calling the collective: a stuck data loader.
      std::this_thread::sleep_for(std::chrono::seconds(5));
      absl::Status s = ctx.Barrier();
      return s.ok() ? absl::InternalError("barrier succeeded after the others gave up") : s;
    }
    absl::Status s = ctx.Barrier();
    return s.ok() ? absl::InternalError("barrier succeeded without rank 2") : s;
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (int r : {0, 1}) {
    const RankResult& rr = job.ranks[static_cast<size_t>(r)];
    EXPECT_TRUE(absl::StrContains(rr.status, "rank 2")) << job.Summary();
  }
  std::printf("%s", job.Summary().c_str());
}

// ---- the same promises over the libfabric transport ---------------------------------------

struct WireFaultCase {
  const char* name;
  std::map<std::string, std::string> env;
  bool needs_ofi = true;
  std::vector<std::string> hosts;  // fake hosts (DDP_HOSTNAME), empty for one
  // The provider may block inside a call while a stopped peer holds its lock in shared memory
  // (libfabric's shm): then the watchdog ends the process with its message instead.
  bool may_block_in_provider = false;
};
void PrintTo(const WireFaultCase& c, std::ostream* os) { *os << c.name; }

class WireFaults : public ::testing::TestWithParam<WireFaultCase> {
 protected:
  void SetUp() override {
    std::string why;
    if (GetParam().needs_ofi && !ofi::Available(&why)) GTEST_SKIP() << why;
  }
  JobSpec Spec(int n, const std::map<std::string, std::string>& extra) const {
    JobSpec spec;
    spec.size = n;
    spec.env = GetParam().env;
    spec.hosts = GetParam().hosts;
    for (const auto& [k, v] : extra) spec.env[k] = v;
    spec.hang_limit = absl::Seconds(90);
    return spec;
  }
};

// A killed rank is named on every survivor: by the provider's error where it reports one, by
// the heartbeat silence otherwise (shared memory says nothing when a peer dies).
TEST_P(WireFaults, RankKilledMidAllreduceIsNamed) {
  JobResult job = RunWithRankOneKilled(Spec(3, {{"DDP_TIMEOUT_SECONDS", "3"}}), 1 << 18);
  ASSERT_FALSE(job.hung) << job.Summary();
  EXPECT_EQ(job.ranks[1].signal, SIGKILL) << job.Summary();
  for (int r : {0, 2}) {
    const RankResult& rr = job.ranks[static_cast<size_t>(r)];
    // Either an error naming rank 1, or (when the dead rank took a lock of libfabric's shm
    // provider with it, so that the provider never returns) the watchdog's message naming it.
    EXPECT_TRUE(absl::StrContains(rr.status, "rank 1") ||
                (absl::StrContains(rr.output, "has not returned from a call") &&
                 absl::StrContains(rr.output, "rank 1")))
        << job.Summary();
    EXPECT_EQ(rr.exit_code, 1) << job.Summary();
  }
}

TEST_P(WireFaults, AbortReachesThePeersWithItsReason) {
  JobResult job = RunWithRankTwoAborting(Spec(3, {}));
  ASSERT_FALSE(job.hung) << job.Summary();
  for (int r : {0, 1}) {
    const RankResult& rr = job.ranks[static_cast<size_t>(r)];
    EXPECT_TRUE(absl::StrContains(rr.status, "loss became NaN")) << job.Summary();
    EXPECT_TRUE(absl::StrContains(rr.status, "rank 2")) << job.Summary();
  }
}

TEST_P(WireFaults, RanksThatDisagreeGetAnErrorNotAHang) {
  JobResult job =
      RunWithContext(Spec(2, {{"DDP_TIMEOUT_SECONDS", "5"}}), [](Context& ctx) -> absl::Status {
        std::vector<float> v(100000, 1.0f);
        // Rank 0 reduces 100000 floats, rank 1 only 1000.
        const size_t count = ctx.rank() == 0 ? 100000 : 1000;
        absl::Status s =
            ctx.Allreduce(v.data(), v.data(), count, DataType::kFloat32, ReduceOp::kSum);
        return s.ok() ? absl::InternalError("no error") : s;
      });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (const RankResult& rr : job.ranks) {
    ASSERT_TRUE(rr.status_reported) << job.Summary();
    EXPECT_TRUE(absl::StrContains(rr.status, "disagree") || absl::StrContains(rr.status, "rank"))
        << job.Summary();
  }
}

TEST_P(WireFaults, StoppedRankTimesOutNamingIt) {
  JobResult job = RunWithRankOneStopped(Spec(3, {{"DDP_TIMEOUT_SECONDS", "2"}}),
                                        TempPath(absl::StrCat("wire-stopped-", GetParam().name)));
  ASSERT_FALSE(job.hung) << job.Summary();
  for (int r : {0, 2}) {
    const RankResult& rr = job.ranks[static_cast<size_t>(r)];
    if (GetParam().may_block_in_provider && !rr.status_reported) {
      // Stuck in the provider: the watchdog ended the process, naming the silent peers.
      EXPECT_EQ(rr.exit_code, 1) << job.Summary();
      EXPECT_TRUE(absl::StrContains(rr.output, "has not returned from a call")) << job.Summary();
      EXPECT_TRUE(absl::StrContains(rr.output, "rank 1 (")) << job.Summary();
      continue;
    }
    ASSERT_TRUE(rr.status_reported) << job.Summary();
    EXPECT_TRUE(absl::StrContains(rr.status, "rank 1")) << job.Summary();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Ofi, WireFaults,
    ::testing::Values(
        WireFaultCase{
            "TcpRxm", {{"DDP_TRANSPORT", "ofi"}, {"DDP_OFI_PROVIDER", "tcp;ofi_rxm"}}, true, {}},
        WireFaultCase{
            "Shm", {{"DDP_TRANSPORT", "ofi"}, {"DDP_OFI_PROVIDER", "shm"}}, true, {}, true}),
    [](const ::testing::TestParamInfo<WireFaultCase>& p) { return std::string(p.param.name); });

// libddp's own shared memory: a dead peer is noticed by its pid within 100 ms.
INSTANTIATE_TEST_SUITE_P(
    Shm, WireFaults,
    ::testing::Values(WireFaultCase{"Shm", {{"DDP_TRANSPORT", "shm"}}, false, {}},
                      WireFaultCase{
                          "ShmRing", {{"DDP_TRANSPORT", "shm"}, {"DDP_ALGO", "ring"}}, false, {}},
                      // Ranks 0 and 1 share a host, rank 2 is on another: shm and TCP.
                      WireFaultCase{"ShmAndTcp", {}, false, {"a", "a", "b"}}),
    [](const ::testing::TestParamInfo<WireFaultCase>& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace ddp::testing
