// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Shared memory: segment hygiene (nothing left in /dev/shm after a job, a crash, or a failed
// start; stale names of dead processes swept; names never reused), who may attach, and the
// shared-memory allreduce under more ranks than cores; an idle rank's progress thread asleep.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <list>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ddp/context.h"
#include "ddp/errors.h"
#include "support/check.h"
#include "support/multiprocess.h"
#include "transport/shm/domain.h"
#include "transport/shm/segment.h"
#include "transport/shm/shm_wire.h"
#include "transport/wire/wire_transport.h"

namespace ddp::testing {
namespace {

using transport::shm::Segment;

// Every libddp segment name of this user in /dev/shm (whoever created it).
std::set<std::string> OurNames() {
  std::set<std::string> names;
  FILE* ls =
      popen(absl::StrCat("ls /dev/shm 2>/dev/null | grep '^ddp-", getuid(), "-'").c_str(), "r");
  char line[512];
  while (ls != nullptr && std::fgets(line, sizeof(line), ls) != nullptr) {
    std::string name(line);
    while (!name.empty() && (name.back() == '\n')) name.pop_back();
    names.insert(name);
  }
  if (ls != nullptr) pclose(ls);
  return names;
}

// The names in /dev/shm that the job's ranks created. Only theirs: ctest runs other tests beside
// this one, whose segments come and go meanwhile.
std::vector<std::string> NamesOfJob(const JobResult& job) {
  std::vector<std::string> names;
  for (const RankResult& r : job.ranks) {
    for (std::string& name : Segment::NamesOfPid(r.pid)) names.push_back(std::move(name));
  }
  return names;
}

TEST(ShmSegments, NothingIsLeftInDevShmDuringOrAfterAJob) {
  Segment::Sweep();
  JobSpec spec;
  spec.size = 4;
  spec.env = {{"DDP_TRANSPORT", "shm"}};
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    // Once the job has started, every name is gone already: a crash from here on leaks nothing.
    if (!Segment::NamesOfPid(getpid()).empty()) {
      return absl::InternalError("this rank's segment still has a name after start-up");
    }
    std::vector<float> v(1 << 20, 1.0f);
    for (int i = 0; i < 5; ++i) {
      absl::Status s =
          ctx.Allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
      if (!s.ok()) return s;
    }
    return v[0] == 1024.0f ? absl::OkStatus() : absl::InternalError(absl::StrCat(v[0]));
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (const RankResult& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
  const std::vector<std::string> left = NamesOfJob(job);
  EXPECT_TRUE(left.empty()) << "left in /dev/shm: " << left.front();
}

TEST(ShmSegments, AKilledRankLeavesNothing) {
  Segment::Sweep();
  JobSpec spec;
  spec.size = 3;
  spec.env = {{"DDP_TRANSPORT", "shm"}, {"DDP_TIMEOUT_SECONDS", "20"}};
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    if (ctx.rank() == 1) ::raise(SIGKILL);
    std::vector<float> v(1 << 16, 1.0f);
    absl::Status s;
    while (s.ok()) {
      s = ctx.Allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
    }
    return absl::StrContains(s.message(), "rank 1") ? absl::OkStatus() : s;
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  EXPECT_EQ(job.ranks[1].signal, SIGKILL) << job.Summary();
  EXPECT_TRUE(job.ranks[0].ok() && job.ranks[2].ok()) << job.Summary();
  EXPECT_TRUE(NamesOfJob(job).empty());
}

TEST(ShmSegments, ARankThatFailsToStartLeavesNothingAndIsNamed) {
  Segment::Sweep();
  JobSpec spec;
  spec.size = 3;
  spec.env = {{"DDP_TRANSPORT", "shm"}, {"DDP_START_TIMEOUT_SECONDS", "10"}};
  // Rank 2 asks for other ring sizes: the layouts differ and nobody may attach to the others.
  spec.rank_env = {{2, {{"DDP_SHM_RING_BYTES", "8192"}}}};
  JobResult job = RunJob(spec, [](int) -> absl::Status {
    auto ctx = Context::CreateFromEnvironment();
    return ctx.ok() ? absl::InternalError("started with different layouts") : ctx.status();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  // Every rank fails saying it is shared memory; whichever ranks find the other layout first
  // name the settings (the others may find a segment already gone with its failed creator).
  int named_setting = 0;
  for (const RankResult& r : job.ranks) {
    ASSERT_TRUE(r.status_reported) << job.Summary();
    EXPECT_TRUE(absl::StrContains(r.status, "shared memory")) << job.Summary();
    if (absl::StrContains(r.status, "DDP_SHM")) ++named_setting;
  }
  EXPECT_GE(named_setting, 1) << job.Summary();
  EXPECT_TRUE(NamesOfJob(job).empty());
}

TEST(ShmSegments, NamesOfDeadProcessesAreSweptAndNeverReused) {
  // A process that dies between creating its segment and the others attaching (the only
  // window in which a name exists) leaves the name behind.
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  if (child == 0) {
    auto seg = Segment::Create("job-token-123", 0, 42, 1 << 16);
    const std::string name = seg.ok() ? seg->name() : "";
    (void)!write(pipe_fds[1], name.data(), name.size());
    _exit(0);  // no destructor: as if killed
  }
  close(pipe_fds[1]);
  char buf[256] = {};
  const ssize_t got = read(pipe_fds[0], buf, sizeof(buf) - 1);
  close(pipe_fds[0]);
  waitpid(child, nullptr, 0);
  ASSERT_GT(got, 0);
  const std::string leaked = std::string(buf).substr(1);  // without the leading '/'
  EXPECT_TRUE(OurNames().count(leaked)) << leaked;
  // A live process's names are kept; the dead one's go.
  auto mine = Segment::Create("job-token-123", 0, 42, 1 << 16);  // sweeps first
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_FALSE(OurNames().count(leaked)) << leaked;
  EXPECT_TRUE(OurNames().count(mine->name().substr(1)));
  EXPECT_EQ(Segment::Sweep(), 0);
  auto again = Segment::Create("job-token-123", 0, 42, 1 << 16);
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->name(), mine->name());
  mine->Unlink();
  again->Unlink();
  EXPECT_FALSE(OurNames().count(mine->name().substr(1)));
}

// A peer's pid means a process only within its own pid namespace: segments made in another
// (containers sharing a host name and /dev/shm, not their pids) are told apart by name, and
// their creators' liveness is left to heartbeats and the timeout.
TEST(ShmSegments, SegmentsOfAnotherPidNamespaceAreToldApart) {
  auto seg = Segment::Create("job-token-123", 0, 42, 1 << 16);
  ASSERT_TRUE(seg.ok()) << seg.status();
  EXPECT_TRUE(Segment::OfOurPids(seg->name())) << seg->name();
  EXPECT_TRUE(Segment::OfOurPids(seg->name().substr(1))) << seg->name();
  struct stat ns {};
  ASSERT_EQ(::stat("/proc/self/ns/pid", &ns), 0);
  const std::string other = absl::StrCat("/ddp-", ::getuid(), "-", ns.st_ino + 1, "-7-1-00ff");
  EXPECT_FALSE(Segment::OfOurPids(other)) << other;
  seg->Unlink();
}

TEST(ShmSegments, OnlyHoldersOfTheJobTokenAttach) {
  auto seg = Segment::Create("the-right-token", 3, 7, 1 << 16);
  ASSERT_TRUE(seg.ok()) << seg.status();
  // Readable and writable by its owner only.
  struct stat st;
  ASSERT_EQ(::stat(absl::StrCat(transport::shm::kDevShm, seg->name()).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto wrong = Segment::Attach(seg->name(), "the-wrong-token", 3, 7, 1 << 16);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kPermissionDenied) << wrong.status();
  EXPECT_TRUE(absl::StrContains(wrong.status().message(), "job token")) << wrong.status();
  auto wrong_rank = Segment::Attach(seg->name(), "the-right-token", 2, 7, 1 << 16);
  EXPECT_FALSE(wrong_rank.ok());
  auto wrong_size = Segment::Attach(seg->name(), "the-right-token", 3, 7, 1 << 17);
  EXPECT_FALSE(wrong_size.ok());
  auto not_a_name = Segment::Attach("../etc/passwd", "the-right-token", 3, 7, 1 << 16);
  EXPECT_FALSE(not_a_name.ok());
  EXPECT_EQ(seg->header()->attached.load(), 0u);
  auto right = Segment::Attach(seg->name(), "the-right-token", 3, 7, 1 << 16);
  ASSERT_TRUE(right.ok()) << right.status();
  EXPECT_EQ(seg->header()->attached.load(), 1u);
  // Both mappings see the same memory.
  seg->base()[4096] = 'x';
  EXPECT_EQ(right->base()[4096], 'x');
}

TEST(ShmSegments, AFullDevShmIsAClearErrorAtStartup) {
  // Far more than any /dev/shm holds: posix_fallocate refuses, and nothing is left.
  auto seg = Segment::Create("job-token-123", 0, 1, size_t{1} << 46);
  ASSERT_FALSE(seg.ok());
  EXPECT_EQ(seg.status().code(), absl::StatusCode::kResourceExhausted) << seg.status();
  EXPECT_TRUE(absl::StrContains(seg.status().message(), "/dev/shm")) << seg.status();
  EXPECT_TRUE(Segment::NamesOfPid(getpid()).empty());
}

// Start-up over shared memory names who kept it from finishing. Local ranks 4, 5 and 6: 5 gives up
// joining (its store died, blaming rank 0), and 4, waiting for it to map 4's segment, fails at
// once with 5's reason and blame, not after the start timeout blaming no one (tests/chaos: the
// rendezvous host dying as the ranks met).
std::vector<std::shared_ptr<transport::shm::ShmDomain>> Domains(int n) {
  std::vector<std::shared_ptr<transport::shm::ShmDomain>> d;
  for (int i = 0; i < n; ++i) {
    transport::shm::ShmConfig config;
    config.local_rank = i;
    config.local_size = n;
    config.ranks = {4, 5, 6};
    config.ranks.resize(static_cast<size_t>(n));
    config.hosts.assign(static_cast<size_t>(n), "h");
    config.token = "join-token";
    auto created = transport::shm::ShmDomain::Create(config);
    EXPECT_TRUE(created.ok()) << created.status();
    if (created.ok()) d.push_back(*std::move(created));
  }
  return d;
}

TEST(ShmJoin, APeerThatGivesUpIsNamedAtOnceWithItsReason) {
  Segment::Sweep();
  {
    auto d = Domains(2);
    ASSERT_EQ(d.size(), 2u);
    d[1]->Abandon(WithRanks(
        absl::UnavailableError("the rendezvous store at 10.0.0.1:29500 stopped answering"), {0}));
    const absl::Status s = d[0]->Connect({d[0]->name(), d[1]->name()}, absl::InfiniteFuture());
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(absl::StrContains(s.message(),
                                  "rank 5 (h, shm): gave up joining: the rendezvous "
                                  "store at 10.0.0.1:29500 stopped answering"))
        << s;
    EXPECT_EQ(BlamedRanks(s), std::vector<int>{0}) << s;
  }
  EXPECT_TRUE(Segment::NamesOfPid(getpid()).empty());
}

// Rank 6 never maps anything (stuck before it could): at the start timeout, ranks 4 and 5, which
// mapped each other's segments, name rank 6 and only rank 6.
TEST(ShmJoin, TheTimeoutNamesThePeersThatDidNotAttach) {
  auto d = Domains(3);
  ASSERT_EQ(d.size(), 3u);
  const std::vector<std::string> names = {d[0]->name(), d[1]->name(), d[2]->name()};
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  absl::Status other;
  std::thread five([&] { other = d[1]->Connect(names, deadline); });
  const absl::Status four = d[0]->Connect(names, deadline);
  five.join();
  for (const absl::Status& s : {four, other}) {
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(absl::StrContains(s.message(), "(not rank 6 (h, shm))")) << s;
    EXPECT_EQ(BlamedRanks(s), std::vector<int>{6}) << s;
  }
}

// The allreduce's slice per step when none is configured: 64 KiB where every rank has a core;
// where ranks outnumber cores, 256 KiB up to 4 ranks, halved until all ranks' reduction areas fit
// in 40 MiB, never below 64 KiB. An explicit size is kept.
TEST(ShmDomain, TheDefaultChunkGrowsWhereRanksShareCoresWithinItsBudget) {
  using transport::shm::DefaultChunkBytes;
  constexpr size_t kKiB = 1024;
  for (int n : {1, 2, 4, 8, 64}) EXPECT_EQ(DefaultChunkBytes(n, 2, 4, false), 64 * kKiB) << n;
  for (int n = 1; n <= 4; ++n) EXPECT_EQ(DefaultChunkBytes(n, 2, 4, true), 256 * kKiB) << n;
  EXPECT_EQ(DefaultChunkBytes(5, 2, 4, true), 128 * kKiB);
  for (int n : {6, 8, 64}) EXPECT_EQ(DefaultChunkBytes(n, 2, 4, true), 64 * kKiB) << n;
  EXPECT_EQ(DefaultChunkBytes(4, 2, 16, true), 64 * kKiB);  // more slots, smaller steps
  EXPECT_EQ(DefaultChunkBytes(2, 1, 4, true), 256 * kKiB);
  for (int n = 1; n <= 8; ++n) {
    const size_t chunk = DefaultChunkBytes(n, 2, 4, true);
    const auto ranks = static_cast<size_t>(n);
    if (chunk > 64 * kKiB) {
      EXPECT_LE(ranks * 2 * 4 * (ranks + 1) * chunk, 40u << 20) << n;
    }
  }
  // A domain without a chunk gets the default for its ranks (`crowded`: the bootstrap's
  // agreed answer to whether ranks outnumber their cores).
  for (bool crowded : {false, true}) {
    transport::shm::ShmConfig config;
    config.local_size = 2;
    config.ranks = {0, 1};
    config.hosts = {"h", "h"};
    config.token = "chunk-token";
    config.crowded = crowded;
    auto d = transport::shm::ShmDomain::Create(config);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ((*d)->config().chunk_bytes, (crowded ? 256 : 64) * kKiB) << crowded;
    config.chunk_bytes = 4096;
    auto explicit_chunk = transport::shm::ShmDomain::Create(config);
    ASSERT_TRUE(explicit_chunk.ok()) << explicit_chunk.status();
    EXPECT_EQ((*explicit_chunk)->config().chunk_bytes, 4096u);
  }
}

// Four ranks sharing two cores (and eight in the conformance suite): waits must sleep, not spin,
// or each step takes a scheduler time slice. Checks results, never time.
TEST(ShmAllreduce, MoreRanksThanCoresStayCorrect) {
  JobSpec spec;
  spec.size = 4;
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    for (size_t count : {size_t{1}, size_t{1000}, size_t{1} << 22}) {
      std::vector<int32_t> v(count, ctx.rank() + 1);
      for (int i = 0; i < 3; ++i) {
        std::fill(v.begin(), v.end(), ctx.rank() + 1);
        absl::Status s = ctx.Allreduce(v.data(), v.data(), count, DataType::kInt32, ReduceOp::kSum);
        if (!s.ok()) return s;
        if (v.front() != 10 || v.back() != 10) {
          return absl::InternalError(absl::StrCat("count ", count, ": got ", v.front()));
        }
      }
    }
    return absl::OkStatus();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (const RankResult& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

// Voluntary context switches of this process's threads named `name`, summed; -1 if it has no
// thread of that name.
int64_t WakeUpsOf(const std::string& name) {
  int64_t total = -1;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::string comm = ReadFile((task.path() / "comm").string());
    while (!comm.empty() && comm.back() == '\n') comm.pop_back();
    if (comm != name) continue;
    total = std::max<int64_t>(total, 0);
    const std::string status = ReadFile((task.path() / "status").string());
    const std::string key = "\nvoluntary_ctxt_switches:";
    const size_t at = status.find(key);
    if (at != std::string::npos) total += std::atoll(status.c_str() + at + key.size());
  }
  return total;
}

// The point-to-point progress thread of an idle rank sleeps until a peer writes to it (the
// segment's bell), instead of polling every 0.5 ms: in a training job it would take that CPU
// from the backward pass (docs/results.md, 2026-12-02). Counts the
// thread's wake-ups over a second of idleness (about 2,000 when it polled; now at most a few
// dozen: the periodic checks), then that a broadcast still works.
TEST(ShmWire, AnIdleRanksProgressThreadSleepsUntilAPeerWrites) {
  JobSpec spec;
  spec.size = 2;
  spec.env = {{"DDP_TRANSPORT", "shm"}};
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    std::vector<int32_t> v(1 << 20, ctx.rank() + 1);
    CHECK_OK(ctx.Broadcast(v.data(), v.data(), v.size(), DataType::kInt32, 0));
    CHECK_OK(ctx.Barrier());
    const int64_t before = WakeUpsOf("ddp-shm");
    // (A thread that has only spun so far has slept 0 times: that is no failure.)
    if (before < 0) return absl::InternalError("no thread named ddp-shm found");
    absl::SleepFor(absl::Seconds(1));
    const int64_t woke = WakeUpsOf("ddp-shm") - before;
    if (woke > 200) {
      return absl::InternalError(
          absl::StrCat("the idle progress thread woke ", woke, " times in a second"));
    }
    std::fill(v.begin(), v.end(), ctx.rank() + 7);
    CHECK_OK(ctx.Broadcast(v.data(), v.data(), v.size(), DataType::kInt32, 1));
    if (v.front() != 8 || v.back() != 8) {
      return absl::InternalError(absl::StrCat("broadcast after idling: got ", v.front()));
    }
    return absl::OkStatus();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (const RankResult& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

// Transfers that no caller waits for move on the bells alone: two in-process shared-memory
// transports whose idle progress threads sleep on their bells with no time limit, and callers
// that only test their requests. Messages larger than the 256 KiB ring both ways at once (the
// writer sleeps until the reader frees room), small inline ones, empty ones, receives posted
// before and after the sends. A lost wake-up hangs the transfer (the test gives up after 60 s).
TEST(ShmWire, TransfersNobodyWaitsForMoveOnTheBellsAlone) {
  // Every transfer's buffers live until the transports are gone (declared first, destroyed
  // last): after a lost wake-up the test ends with transfers still pending.
  std::list<std::vector<uint8_t>> buffers;
  auto d = Domains(2);
  ASSERT_EQ(d.size(), 2u);
  const std::vector<std::string> names = {d[0]->name(), d[1]->name()};
  absl::Status other;
  std::thread five([&] { other = d[1]->Connect(names, absl::Now() + absl::Seconds(30)); });
  ASSERT_TRUE(d[0]->Connect(names, absl::Now() + absl::Seconds(30)).ok());
  five.join();
  ASSERT_TRUE(other.ok()) << other;
  std::vector<std::unique_ptr<transport::wire::WireTransport>> t;
  for (int i = 0; i < 2; ++i) {
    transport::wire::WireConfig config;
    config.rank = i;
    config.size = 2;
    config.ranks = {4, 5};
    config.hosts = {"h", "h"};
    config.kind = "shm";
    config.park_at_most = absl::InfiniteDuration();
    auto created = transport::wire::WireTransport::Create(
        config, std::make_unique<transport::shm::ShmWire>(d[static_cast<size_t>(i)]));
    ASSERT_TRUE(created.ok()) << created.status();
    t.push_back(*std::move(created));
  }
  const transport::Descriptor none;
  // `from` sends `bytes` to the other rank (-1: both at once); false if it never completes.
  auto transfer = [&](size_t bytes, int from) {
    std::vector<uint8_t>* out[2];
    std::vector<uint8_t>* in[2];
    std::vector<transport::RequestPtr> requests;
    for (int i = 0; i < 2; ++i) {
      const auto me = static_cast<size_t>(i);
      out[me] = &buffers.emplace_back(bytes, static_cast<uint8_t>(bytes % 251 + i + 1));
      in[me] = &buffers.emplace_back(bytes);
      // Rank 0 posts its receive first, rank 1 its send.
      auto recv = [&] {
        if (from != i) requests.push_back(t[me]->Irecv(1 - i, bytes, none, in[me]->data(), bytes));
      };
      if (i == 0) recv();
      if (from == -1 || from == i) {
        requests.push_back(t[me]->Isend(1 - i, bytes, none, out[me]->data(), bytes));
      }
      if (i == 1) recv();
    }
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    auto all_done = [&] {
      return std::all_of(requests.begin(), requests.end(), [](const auto& r) { return r->Test(); });
    };
    while (!all_done() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
    if (!all_done()) return false;
    for (const auto& r : requests) EXPECT_TRUE(r->Wait().ok()) << r->Wait();
    if (from != 1) {
      EXPECT_EQ(*in[1], *out[0]) << bytes << " from " << from;
    }
    if (from != 0) {
      EXPECT_EQ(*in[0], *out[1]) << bytes << " from " << from;
    }
    return true;
  };
  for (size_t bytes : {size_t{3} << 20, size_t{100}, size_t{0}, size_t{1} << 20}) {
    for (int from : {0, 1, -1}) {
      ASSERT_TRUE(transfer(bytes, from))
          << bytes << " bytes from " << from << ": a wake-up was lost";
    }
  }
}

// Ranks that reduce different counts fail, each blaming (as data) the rank that runs the other
// call, whichever rank saw it first: rank 2 disagrees with the others, so the innocent rank 1's
// error blames rank 2, whether it found the difference itself or heard of it in an abort.
TEST(ShmAllreduce, RanksThatDisagreeAreBlamedNotTheRankThatNoticed) {
  JobSpec spec;
  spec.size = 3;
  spec.env["DDP_TIMEOUT_SECONDS"] = "30";
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    const size_t count = ctx.rank() == 2 ? 2000 : 1000;
    std::vector<float> v(2000, 1.0f);
    absl::Status s = ctx.Allreduce(v.data(), v.data(), count, DataType::kFloat32, ReduceOp::kSum);
    return s.ok() ? absl::InternalError("an allreduce of different counts succeeded") : s;
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (int r : {0, 1}) {
    const std::string& status = job.ranks[static_cast<size_t>(r)].status;
    EXPECT_TRUE(absl::StrContains(status, "disagree")) << job.Summary();
    const size_t at = status.find("ddp.BlamedRanks='");
    ASSERT_NE(at, std::string::npos) << job.Summary();
    const std::string blamed = status.substr(at + 17, status.find('\'', at + 17) - at - 17);
    EXPECT_TRUE(absl::StrContains(absl::StrCat(",", blamed, ","), ",2,")) << job.Summary();
  }
}

// A rank that shuts down (on purpose, and stays alive) is named by the others at once: the
// allreduce they wait in learns of its goodbye, not only of its death or a timeout. Rank 1 lives
// until both others have their error, so nothing here can come from its process exiting.
TEST(ShmAllreduce, ARankThatShutsDownIsNamedAtOnceWhileItStillRuns) {
  const std::string marks = absl::StrCat(::testing::TempDir(), "/ddp-shm-left-", ::getpid());
  JobSpec spec;
  spec.size = 3;
  spec.env["DDP_TIMEOUT_SECONDS"] = "120";
  JobResult job = RunWithContext(spec, [&marks](Context& ctx) -> absl::Status {
    CHECK_OK(ctx.Barrier());
    if (ctx.rank() == 1) {
      CHECK_OK(ctx.Shutdown());
      for (int i = 0; i < 100000; ++i) {
        if (::access(absl::StrCat(marks, "-0").c_str(), F_OK) == 0 &&
            ::access(absl::StrCat(marks, "-2").c_str(), F_OK) == 0) {
          return absl::OkStatus();
        }
        ::usleep(1000);
      }
      return absl::InternalError("the other ranks never reported");
    }
    absl::Status result;
    for (size_t count : {size_t{16}, size_t{1} << 20}) {
      std::vector<float> v(count, 1.0f);
      absl::Status s = ctx.Allreduce(v.data(), v.data(), count, DataType::kFloat32, ReduceOp::kSum);
      if (s.ok()) {
        result = absl::InternalError("an allreduce without rank 1 succeeded");
      } else if (!absl::StrContains(s.message(), "rank 1") ||
                 !absl::StrContains(s.message(), "shut down")) {
        result = absl::InternalError(absl::StrCat("rank 1's goodbye not named: ", s.ToString()));
      }
      if (!result.ok()) break;
    }
    FILE* f = std::fopen(absl::StrCat(marks, "-", ctx.rank()).c_str(), "w");
    if (f != nullptr) std::fclose(f);
    return result;
  });
  for (int r : {0, 2}) std::remove(absl::StrCat(marks, "-", r).c_str());
  ASSERT_FALSE(job.hung) << job.Summary();
  for (const RankResult& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

}  // namespace
}  // namespace ddp::testing
