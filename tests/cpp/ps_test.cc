// The parameter server (ddp/ps.h): the server's rules without a network (ServerCore), then real
// jobs of processes: the correctness matrix over every transport, worker and server deaths,
// checkpoints across jobs, and hostile peers at a server.
#include "ddp/ps.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bootstrap/job.h"
#include "bootstrap/tcp_store.h"
#include "common/auth.h"
#include "common/socket.h"
#include "common/status.h"
#include "ddp/errors.h"
#include "ofi/ofi_wire.h"
#include "ps/optimizer.h"
#include "ps/protocol.h"
#include "ps/server_core.h"
#include "support/check.h"
#include "support/multiprocess.h"
#include "support/ps_matrix.h"

namespace ddp::testing {
namespace {

using ps::Consistency;
using ps::Outgoing;
using ps::RequestHeader;
using ps::ServerCore;

// ---------------------------------------------------------------------------------------------
// ServerCore, driven directly.

ps::CoreConfig Config(int workers) {
  ps::CoreConfig c;
  c.num_workers = workers;
  for (int w = 0; w < workers; ++w) c.worker_ranks.push_back(w + 10);
  return c;
}

RequestHeader InitHeader(uint32_t partition, uint64_t count, Consistency mode, int staleness,
                         const char* optimizer, bool value) {
  RequestHeader h;
  h.op = static_cast<uint32_t>(ps::Op::kInit);
  h.partition = partition;
  std::snprintf(h.config.key_name, sizeof(h.config.key_name), "key%u", partition);
  h.config.key_id = partition;
  h.config.parts = 1;
  h.config.dtype = static_cast<uint8_t>(DataType::kFloat32);
  h.config.consistency = static_cast<uint8_t>(mode);
  h.config.staleness = staleness;
  h.config.count = count;
  std::snprintf(h.config.optimizer, sizeof(h.config.optimizer), "%s", optimizer);
  h.config.learning_rate = 0.1;
  h.config.beta1 = 0.9;
  h.config.beta2 = 0.999;
  h.config.epsilon = 1e-8;
  if (value) {
    h.flags = ps::kInitHasValue;
    h.bytes = count * 4;
  }
  return h;
}

RequestHeader Op(ps::Op op, uint32_t partition, uint64_t seq, int64_t clock, uint64_t bytes) {
  RequestHeader h;
  h.op = static_cast<uint32_t>(op);
  h.partition = partition;
  h.seq = seq;
  h.clock = clock;
  h.bytes = bytes;
  return h;
}

std::vector<float> Floats(const Outgoing& o) {
  std::vector<float> v(o.payload->size() / 4);
  std::memcpy(v.data(), o.payload->data(), o.payload->size());
  return v;
}

absl::Status StatusOf(const Outgoing& o) { return ps::ResponseStatus(o.header); }

// Registers partition 0 (count floats, value `init`) from every worker.
void InitAll(ServerCore& core, int workers, uint64_t count, Consistency mode, int staleness,
             const char* optimizer, const std::vector<float>& init) {
  for (int w = 0; w < workers; ++w) {
    std::vector<Outgoing> out;
    RequestHeader h = InitHeader(0, count, mode, staleness, optimizer, w == 0);
    core.Handle(w, 0, h, w == 0 ? reinterpret_cast<const char*>(init.data()) : nullptr, &out);
    if (w == 0) {
      ASSERT_GE(out.size(), 1u);
      EXPECT_TRUE(StatusOf(out[0]).ok()) << StatusOf(out[0]);
    }
  }
}

TEST(PsCore, SyncPullIsTheSumOfOnePushPerWorkerAndResentPushesApplyOnce) {
  ServerCore core(Config(2));
  InitAll(core, 2, 4, Consistency::kSync, -1, "sgd", {1, 2, 3, 4});
  std::vector<Outgoing> out;
  const std::vector<float> g0 = {1, 1, 1, 1}, g1 = {10, 20, 30, 40};
  // Worker 0 pushes step 0 and asks for it: not ready until worker 1 pushes.
  core.Handle(0, 1, Op(ps::Op::kPushPull, 0, 1, 0, 16), reinterpret_cast<const char*>(g0.data()),
              &out);
  EXPECT_TRUE(out.empty());
  core.Handle(1, 1, Op(ps::Op::kPush, 0, 1, 0, 16), reinterpret_cast<const char*>(g1.data()), &out);
  ASSERT_EQ(out.size(), 2u);  // worker 0's pull, worker 1's push acknowledged
  const Outgoing& pull = out[0].worker == 0 ? out[0] : out[1];
  EXPECT_EQ(Floats(pull), (std::vector<float>{11, 21, 31, 41}));
  EXPECT_EQ(pull.header.version, 1);
  EXPECT_EQ(pull.header.contributors, 2u);
  // Worker 1's push of step 0 sent again (after a reconnect): acknowledged, not applied.
  out.clear();
  core.Handle(1, 2, Op(ps::Op::kPush, 0, 1, 0, 16), reinterpret_cast<const char*>(g1.data()), &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(StatusOf(out[0]).ok());
  out.clear();
  core.Handle(1, 3, Op(ps::Op::kPull, 0, 0, 1, 16), nullptr, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(Floats(out[0]), (std::vector<float>{11, 21, 31, 41}));
  EXPECT_EQ(core.stats().duplicate_pushes, 1);
  EXPECT_EQ(core.stats().pushes_applied, 2);
}

TEST(PsCore, AsyncAppliesEachPushOnceAndBoundedStalenessHoldsPullsBack) {
  ServerCore core(Config(3));
  InitAll(core, 3, 2, Consistency::kAsync, 1, "sum", {0, 0});
  const std::vector<float> one = {1, 1};
  std::vector<Outgoing> out;
  // Worker 0 pushes twice: its pull at clock 2 needs everyone at >= 1.
  core.Handle(0, 1, Op(ps::Op::kPush, 0, 1, 0, 8), reinterpret_cast<const char*>(one.data()), &out);
  core.Handle(0, 2, Op(ps::Op::kPushPull, 0, 2, 0, 8), reinterpret_cast<const char*>(one.data()),
              &out);
  ASSERT_EQ(out.size(), 1u);  // only the first push's acknowledgement
  out.clear();
  core.Handle(1, 1, Op(ps::Op::kPush, 0, 1, 0, 8), reinterpret_cast<const char*>(one.data()), &out);
  ASSERT_EQ(out.size(), 1u);  // worker 2 is still at 0
  out.clear();
  core.Handle(2, 1, Op(ps::Op::kPush, 0, 1, 0, 8), reinterpret_cast<const char*>(one.data()), &out);
  ASSERT_EQ(out.size(), 2u);
  const Outgoing& pull = out[0].worker == 0 ? out[0] : out[1];
  EXPECT_EQ(Floats(pull), (std::vector<float>{4, 4}));
  EXPECT_EQ(pull.header.version, 4);
  EXPECT_LE(core.stats().max_staleness_seen, 1);
  EXPECT_EQ(core.stats().max_staleness_seen, 1);
  EXPECT_EQ(core.stats().pushes_applied, 4);
}

TEST(PsCore, AWorkerDeathFailsSyncStepsOrLetsTheOthersGoOn) {
  for (auto policy : {ps::WorkerLossPolicy::kFail, ps::WorkerLossPolicy::kContinue}) {
    ps::CoreConfig c = Config(3);
    c.on_worker_loss = policy;
    ServerCore core(c);
    InitAll(core, 3, 1, Consistency::kSync, -1, "sgd", {0});
    const std::vector<float> g = {5};
    std::vector<Outgoing> out;
    core.Handle(0, 1, Op(ps::Op::kPushPull, 0, 1, 0, 4), reinterpret_cast<const char*>(g.data()),
                &out);
    core.Handle(1, 1, Op(ps::Op::kPushPull, 0, 1, 0, 4), reinterpret_cast<const char*>(g.data()),
                &out);
    EXPECT_TRUE(out.empty());
    core.WorkerGone(2, absl::AbortedError("rank 12 died"), true, &out);
    ASSERT_EQ(out.size(), 2u);
    for (const Outgoing& o : out) {
      if (policy == ps::WorkerLossPolicy::kFail) {
        EXPECT_EQ(StatusOf(o).code(), absl::StatusCode::kAborted);
        EXPECT_EQ(BlamedRanks(StatusOf(o)), std::vector<int>{12}) << StatusOf(o);
        EXPECT_TRUE(absl::StrContains(StatusOf(o).message(), "worker 2")) << StatusOf(o);
      } else {
        EXPECT_TRUE(StatusOf(o).ok()) << StatusOf(o);
        EXPECT_EQ(Floats(o), std::vector<float>{10});
        EXPECT_EQ(o.header.contributors, 2u);
      }
    }
  }
}

TEST(PsCore, WaitsPastTheLimitNameTheWorkersBehind) {
  ps::CoreConfig c = Config(2);
  c.wait_limit = absl::Milliseconds(1);
  ServerCore core(c);
  InitAll(core, 2, 1, Consistency::kSync, -1, "sgd", {0});
  const std::vector<float> g = {1};
  std::vector<Outgoing> out;
  core.Handle(0, 1, Op(ps::Op::kPushPull, 0, 1, 0, 4), reinterpret_cast<const char*>(g.data()),
              &out);
  core.Tick(absl::Now() + absl::Seconds(1), &out);
  ASSERT_EQ(out.size(), 1u);
  const absl::Status s = StatusOf(out[0]);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(s.message(), "worker 1")) << s;
  EXPECT_EQ(BlamedRanks(s), std::vector<int>{11});
}

TEST(PsCore, BadRequestsAreAnsweredWithErrorsAndTheServerGoesOn) {
  ServerCore core(Config(2));
  std::vector<Outgoing> out;
  // Not a request at all; an init of an unknown dtype; a push to a partition nobody registered.
  RequestHeader junk;
  junk.magic = 7;
  EXPECT_FALSE(ps::CheckRequest(junk).ok());
  // Counters the server would overflow computing with (found by tests/fuzz/fuzz_ps).
  RequestHeader wild = Op(ps::Op::kPull, 0, 0, std::numeric_limits<int64_t>::min(), 16);
  EXPECT_FALSE(ps::CheckRequest(wild).ok());
  wild = Op(ps::Op::kPush, 0, uint64_t{1} << 63, 0, 16);
  EXPECT_FALSE(ps::CheckRequest(wild).ok());
  EXPECT_TRUE(ps::CheckRequest(Op(ps::Op::kPush, 0, 1, 0, 16)).ok());
  RequestHeader bad = InitHeader(0, 4, Consistency::kSync, -1, "sgd", false);
  bad.config.dtype = 99;
  core.Handle(0, 0, bad, nullptr, &out);
  core.Handle(0, 1, Op(ps::Op::kPush, 5, 1, 0, 16), nullptr, &out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(StatusOf(out[0]).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StatusOf(out[1]).code(), absl::StatusCode::kFailedPrecondition);
  // An async key of integers; an unknown optimizer.
  out.clear();
  RequestHeader ints = InitHeader(1, 4, Consistency::kAsync, -1, "sgd", false);
  ints.config.dtype = static_cast<uint8_t>(DataType::kInt32);
  core.Handle(0, 2, ints, nullptr, &out);
  core.Handle(0, 3, InitHeader(2, 4, Consistency::kAsync, -1, "nope", false), nullptr, &out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_FALSE(StatusOf(out[0]).ok());
  EXPECT_TRUE(absl::StrContains(StatusOf(out[1]).message(), "unknown server optimizer"));
  // Worker 1 registers partition 0 unlike worker 0: refused, naming it.
  out.clear();
  InitAll(core, 1, 4, Consistency::kSync, -1, "sgd", {1, 2, 3, 4});
  out.clear();
  core.Handle(1, 0, InitHeader(0, 5, Consistency::kSync, -1, "sgd", false), nullptr, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(absl::StrContains(StatusOf(out[0]).message(), "element count 4 vs 5"))
      << StatusOf(out[0]);
  EXPECT_EQ(BlamedRanks(StatusOf(out[0])), std::vector<int>{11});
  // A pull of the wrong size still gets its payload's bytes (the worker posted that receive).
  out.clear();
  core.Handle(0, 4, Op(ps::Op::kPull, 0, 0, 0, 12), nullptr, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(StatusOf(out[0]).ok());
  ASSERT_TRUE(out[0].has_payload);
  EXPECT_EQ(out[0].payload->size(), 12u);
  // A pull claiming 2^63 bytes (found by tests/fuzz/fuzz_ps): an error with no payload, where
  // the count once passed the size limit as a negative number and the server died allocating.
  out.clear();
  core.Handle(0, 4, Op(ps::Op::kPull, 0, 0, 0, uint64_t{1} << 63), nullptr, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(StatusOf(out[0]).ok());
  EXPECT_FALSE(out[0].has_payload);
  // And the key still works.
  out.clear();
  core.Handle(0, 5, Op(ps::Op::kPull, 0, 0, 0, 16), nullptr, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(Floats(out[0]), (std::vector<float>{1, 2, 3, 4}));
}

// A directory of the test's own, removed with everything in it when the test ends.
class ScratchDir {
 public:
  ScratchDir() {
    char tmpl[] = "/tmp/ddp-ps-test-XXXXXX";
    const char* d = ::mkdtemp(tmpl);
    if (d == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    path_ = d;
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(PsCore, ARestoredServerEqualsTheCheckpointedOne) {
  const ScratchDir scratch;
  const std::string& dir = scratch.path();
  ps::CoreConfig c = Config(2);
  c.checkpoint_dir = dir;
  ServerCore a(c);
  InitAll(a, 2, 3, Consistency::kAsync, -1, "adam", {1, 2, 3});
  std::vector<Outgoing> out;
  const std::vector<float> g = {0.5f, -1.0f, 2.0f};
  for (uint64_t s = 1; s <= 3; ++s) {
    a.Handle(0, s, Op(ps::Op::kPush, 0, s, 0, 12), reinterpret_cast<const char*>(g.data()), &out);
  }
  a.Handle(1, 1, Op(ps::Op::kPush, 0, 1, 0, 12), reinterpret_cast<const char*>(g.data()), &out);
  ASSERT_TRUE(a.WriteCheckpoint().ok());
  EXPECT_EQ(a.stats().checkpoints_written, 1);

  ServerCore b(c);
  ASSERT_TRUE(b.Restore().ok());
  EXPECT_EQ(b.stats().keys_restored, 1);
  // Both registered again (worker 0's value is ignored: the checkpoint's wins); worker 0 learns
  // it had pushed 3 times, worker 1 once.
  for (int w = 0; w < 2; ++w) {
    out.clear();
    const std::vector<float> other = {9, 9, 9};
    b.Handle(w, 10, InitHeader(0, 3, Consistency::kAsync, -1, "adam", w == 0),
             reinterpret_cast<const char*>(other.data()), &out);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(StatusOf(out[0]).ok()) << StatusOf(out[0]);
    EXPECT_EQ(out[0].header.seq_base, w == 0 ? 3u : 1u);
    EXPECT_EQ(out[0].header.version, 4);
  }
  // The same next push on both gives the same bits: value and Adam's moments were restored.
  std::vector<Outgoing> pa, pb;
  a.Handle(1, 2, Op(ps::Op::kPushPull, 0, 2, 0, 12), reinterpret_cast<const char*>(g.data()), &pa);
  b.Handle(1, 11, Op(ps::Op::kPushPull, 0, 2, 0, 12), reinterpret_cast<const char*>(g.data()), &pb);
  ASSERT_EQ(pa.size(), 1u);
  ASSERT_EQ(pb.size(), 1u);
  EXPECT_EQ(Floats(pa[0]), Floats(pb[0]));
  EXPECT_EQ(pa[0].header.version, pb[0].header.version);
  // A corrupt file is refused with a clear error, not trusted.
  {
    std::ofstream f(a.CheckpointPath(), std::ios::binary | std::ios::trunc);
    f << "DDPPSCK1garbage";
  }
  ServerCore broken(c);
  const absl::Status s = broken.Restore();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  std::system(absl::StrCat("rm -rf ", dir).c_str());
}

// An optimizer's saved state, a checkpoint's bytes: the step, the sizes of its two arrays, the
// arrays. State that does not fit the partition is refused.
TEST(PsOptimizer, SavedStateIsTheStepTheSizesAndTheArrays) {
  ps::OptimizerConfig config;
  config.learning_rate = 1;
  config.momentum = 0.5;
  auto sgd = ps::MakeOptimizer(config, 2);
  ASSERT_TRUE(sgd.ok()) << sgd.status();
  double value[2] = {0, 0};
  const double gradient[2] = {1, 2};
  (*sgd)->Apply(value, gradient, 2);
  const std::string state = (*sgd)->SaveState();
  EXPECT_EQ(state, std::string("\x01\0\0\0\0\0\0\0"    // step
                               "\x02\0\0\0\0\0\0\0"    // momentum buffer: 2
                               "\0\0\0\0\0\0\0\0"      // no second array
                               "\0\0\0\0\0\0\xf0\x3f"  // 1.0
                               "\0\0\0\0\0\0\0\x40",   // 2.0
                               40));
  auto restored = ps::MakeOptimizer(config, 2);
  ASSERT_TRUE(restored.ok()) << restored.status();
  ASSERT_TRUE((*restored)->LoadState(state).ok());
  EXPECT_EQ((*restored)->SaveState(), state);
  EXPECT_EQ((*restored)->LoadState(state.substr(0, 23)).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ((*restored)->LoadState(state.substr(0, 32)).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ((*restored)->LoadState(state + "x").code(), absl::StatusCode::kDataLoss);
  auto larger = ps::MakeOptimizer(config, 3);
  ASSERT_TRUE(larger.ok()) << larger.status();
  EXPECT_EQ((*larger)->LoadState(state).code(), absl::StatusCode::kDataLoss);

  config.name = "adam";
  auto adam = ps::MakeOptimizer(config, 2);
  ASSERT_TRUE(adam.ok()) << adam.status();
  (*adam)->Apply(value, gradient, 2);
  const std::string moments = (*adam)->SaveState();
  ASSERT_EQ(moments.size(), 24u + 4 * 8);
  EXPECT_EQ(moments.substr(0, 24), std::string("\x01\0\0\0\0\0\0\0"
                                               "\x02\0\0\0\0\0\0\0"
                                               "\x02\0\0\0\0\0\0\0",
                                               24));
  auto adam_restored = ps::MakeOptimizer(config, 2);
  ASSERT_TRUE(adam_restored.ok()) << adam_restored.status();
  ASSERT_TRUE((*adam_restored)->LoadState(moments).ok());
  EXPECT_EQ((*adam_restored)->SaveState(), moments);
}

// ---------------------------------------------------------------------------------------------
// Jobs of processes.

struct Layout {
  const char* name;
  const char* transport;
  int size;
  int servers;  // 0 = colocated
  const char* provider = "";
};

std::ostream& operator<<(std::ostream& os, const Layout& l) { return os << l.name; }

JobSpec PsSpec(const Layout& l) {
  JobSpec spec;
  spec.size = l.size;
  spec.env["DDP_TRANSPORT"] = l.transport;
  spec.env["DDP_PS_SERVERS"] = absl::StrCat(l.servers);
  spec.env["DDP_PS_PARTITION_BYTES"] = "4096";
  // Two partitions in flight at a server, the rest wait for credit: the pacer is in every job.
  spec.env["DDP_PS_CREDIT_BYTES"] = "4096";
  spec.env["DDP_TIMEOUT_SECONDS"] = "60";
  if (l.provider[0] != '\0') spec.env["DDP_OFI_PROVIDER"] = l.provider;
  spec.hang_limit = absl::Seconds(240);
  return spec;
}

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

// Runs `pushes` PushPulls of one each on an async "sum" key and returns the last value pulled.
absl::StatusOr<float> PushOnes(ps::ParameterServer& ps, int key, int pushes) {
  std::vector<float> ones(1000, 1.0f), out(1000);
  for (int i = 0; i < pushes; ++i) {
    absl::Status s = ps.PushPull(key, ones.data(), out.data()).Wait();
    if (!s.ok()) return s;
  }
  return out[0];
}

absl::StatusOr<int> RegisterSum(ps::ParameterServer& ps, const char* name, Consistency mode) {
  ps::KeyOptions o;
  o.consistency = mode;
  o.optimizer.name = "sum";
  std::vector<float> zero(1000, 0.0f);
  const int64_t shape[] = {1000};
  return ps.Register(name, DataType::kFloat32, shape, zero.data(), o);
}

// A worker killed in async mode: the others finish, and the value counts every push the servers
// acknowledged (the dead worker's 5, which it waited for, and the survivors' 30 each).
TEST(PsFaults, AsyncTrainingOutlivesAKilledWorker) {
  JobSpec spec = PsSpec(Layout{"", "tcp", 5, 2});
  JobResult job = RunJob(spec, [](int /*rank*/) -> absl::Status {
    auto made = ps::ParameterServer::CreateFromEnvironment();
    CHECK_OK(made.status());
    ps::ParameterServer& ps = **made;
    if (!ps.is_worker()) return ps.Serve();
    auto key = RegisterSum(ps, "w", Consistency::kAsync);
    CHECK_OK(key.status());
    if (ps.worker_index() == 2) {
      CHECK_OK(PushOnes(ps, *key, 5).status());
      ::raise(SIGKILL);
    }
    CHECK_OK(PushOnes(ps, *key, 30).status());
    // Consistent at the end: 2 x 30 + 5, once both survivors are through.
    std::vector<float> out(1000);
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (true) {
      CHECK_OK(ps.Pull(*key, out.data()).Wait());
      bool all = true;
      for (float v : out) all &= v == 65.0f;
      if (all) break;
      CHECK_OK(Expect(absl::Now() < deadline, absl::StrCat("value ", out[0], ", want 65")));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return ps.Finish();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  EXPECT_EQ(job.ranks[2].signal, SIGKILL) << job.Summary();
  for (int r : {0, 1, 3, 4}) EXPECT_TRUE(job.ranks[static_cast<size_t>(r)].ok()) << job.Summary();
  // Each server logged the death, naming the worker.
  for (int r : {3, 4}) {
    EXPECT_TRUE(absl::StrContains(job.ranks[static_cast<size_t>(r)].output, "worker 2"))
        << job.Summary();
  }
}

// A worker killed in sync mode: the others get an error naming it (within the timeout), or with
// DDP_PS_ON_WORKER_LOSS=continue, the steps complete with the two that remain.
TEST(PsFaults, SyncStepsNameAKilledWorkerOrContinueWithoutIt) {
  for (const char* policy : {"fail", "continue"}) {
    JobSpec spec = PsSpec(Layout{"", "tcp", 4, 1});
    spec.env["DDP_PS_ON_WORKER_LOSS"] = policy;
    const bool go_on = std::string(policy) == "continue";
    JobResult job = RunJob(spec, [go_on](int /*rank*/) -> absl::Status {
      auto made = ps::ParameterServer::CreateFromEnvironment();
      CHECK_OK(made.status());
      ps::ParameterServer& ps = **made;
      if (!ps.is_worker()) return ps.Serve();
      auto key = RegisterSum(ps, "g", Consistency::kSync);
      CHECK_OK(key.status());
      std::vector<float> ones(1000, 1.0f), out(1000);
      for (int step = 0; step < 3; ++step) {
        CHECK_OK(ps.PushPull(*key, ones.data(), out.data()).Wait());
      }
      if (ps.worker_index() == 2) ::raise(SIGKILL);
      const absl::Time start = absl::Now();
      ps::Handle h = ps.PushPull(*key, ones.data(), out.data());
      absl::Status s = h.Wait();
      if (go_on) {
        CHECK_OK(s);
        CHECK_OK(Expect(h.contributors() == 2 && out[0] == 2.0f,
                        absl::StrCat(h.contributors(), " contributors, value ", out[0])));
        for (int step = 0; step < 3; ++step) {
          CHECK_OK(ps.PushPull(*key, ones.data(), out.data()).Wait());
        }
        return ps.Finish();
      }
      CHECK_OK(Expect(!s.ok(), "a sync step completed without the dead worker"));
      CHECK_OK(Expect(BlamedRanks(s) == std::vector<int>{2}, s.ToString()));
      CHECK_OK(Expect(absl::StrContains(s.message(), "worker 2"), s.ToString()));
      CHECK_OK(Expect(absl::Now() - start < absl::Seconds(60), "slower than the timeout"));
      std::printf("named: %s\n", s.ToString().c_str());
      return ps.Finish();
    });
    ASSERT_FALSE(job.hung) << policy << job.Summary();
    EXPECT_EQ(job.ranks[2].signal, SIGKILL);
    for (int r : {0, 1, 3}) {
      EXPECT_TRUE(job.ranks[static_cast<size_t>(r)].ok()) << policy << job.Summary();
    }
  }
}

// A server killed mid-training: every worker's next operation fails, naming it, within the
// timeout.
TEST(PsFaults, AKilledServerIsNamed) {
  JobSpec spec = PsSpec(Layout{"", "tcp", 4, 2});
  spec.env["DDP_TIMEOUT_SECONDS"] = "20";
  JobResult job = RunJob(spec, [](int /*rank*/) -> absl::Status {
    auto made = ps::ParameterServer::CreateFromEnvironment();
    CHECK_OK(made.status());
    ps::ParameterServer& ps = **made;
    if (!ps.is_worker()) {
      if (ps.server_index() == 1) {
        // Dies in the middle of training: once it has applied some pushes.
        std::thread([&ps] {
          while (ps.server_stats().pushes_applied < 20) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          ::raise(SIGKILL);
        }).detach();
      }
      return ps.Serve();
    }
    auto key = RegisterSum(ps, "w", Consistency::kAsync);  // 1000 floats: one partition
    CHECK_OK(key.status());
    ps::KeyOptions o;
    std::vector<float> big(3000, 0.0f);
    const int64_t shape[] = {3000};  // over both servers
    auto key2 = ps.Register("big", DataType::kFloat32, shape, big.data(), o);
    CHECK_OK(key2.status());
    const absl::Time start = absl::Now();
    absl::Status s;
    std::vector<float> grad(3000, 1.0f);
    while (s.ok() && absl::Now() - start < absl::Seconds(60)) {
      s = ps.PushPull(*key2, grad.data(), grad.data()).Wait();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    CHECK_OK(Expect(!s.ok(), "no error after the server's death"));
    CHECK_OK(Expect(BlamedRanks(s) == std::vector<int>{3}, s.ToString()));
    CHECK_OK(Expect(absl::StrContains(s.message(), "server 1"), s.ToString()));
    std::printf("named: %s\n", s.ToString().c_str());
    // More operations on the dead server's key, beyond its credit, not waited for before
    // Finish(): each still ends, with an error, and none waits forever.
    std::vector<std::vector<float>> grads(6, std::vector<float>(3000, 1.0f));
    std::vector<ps::Handle> late;
    for (auto& g : grads) late.push_back(ps.PushPull(*key2, g.data(), g.data()));
    CHECK_OK(ps.Finish());
    for (ps::Handle& h : late) CHECK_OK(Expect(!h.Wait().ok(), "an operation on a dead server"));
    return absl::OkStatus();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  EXPECT_EQ(job.ranks[3].signal, SIGKILL);
  for (int r : {0, 1}) EXPECT_TRUE(job.ranks[static_cast<size_t>(r)].ok()) << job.Summary();
}

// A server killed mid-training, with checkpoints and restarts on: its new process (DDP_REJOIN)
// restores the checkpoint and rejoins; the workers register with it again, send again what the
// old one had not answered, and training goes on. Exactly what is lost is accounted for: the
// async key ends at every push made less the pushes each worker was told were lost (acknowledged
// after the last checkpoint); a sync step either sums exactly or, at most once per worker (when
// the server died while answering it), fails DATA_LOSS.
TEST(PsRestart, AKilledServerRejoinsFromItsCheckpointAndTrainingGoesOn) {
  JobSpec spec = PsSpec(Layout{"", "tcp", 4, 2});
  const ScratchDir scratch;
  spec.env["DDP_PS_CHECKPOINT_DIR"] = scratch.path();
  spec.env["DDP_PS_CHECKPOINT_STEPS"] = "4";
  spec.env["DDP_PS_SERVER_RESTART_SECONDS"] = "60";
  constexpr int kSteps = 60;
  JobResult job = RunJob(spec, [](int rank) -> absl::Status {
    if (rank == 2) {
      // Server 0: forks its successor first, which waits for its death, then takes its place.
      ForkSuccessor("successor", []() -> absl::Status {
        auto next = ps::ParameterServer::CreateFromEnvironment();
        if (!next.ok()) return next.status();
        DDP_RETURN_IF_ERROR((*next)->Serve());
        const ps::ServerStats st = (*next)->server_stats();
        std::printf("successor: restored %lld partitions, %lld rejoins, %lld pushes lost\n",
                    static_cast<long long>(st.keys_restored), static_cast<long long>(st.rejoins),
                    static_cast<long long>(st.pushes_lost));
        if (st.keys_restored < 1 || st.rejoins < 2) return absl::InternalError("nothing restored");
        return absl::OkStatus();
      });
    }
    auto made = ps::ParameterServer::CreateFromEnvironment();
    CHECK_OK(made.status());
    ps::ParameterServer& ps = **made;
    if (!ps.is_worker()) {
      if (ps.server_index() == 0) {
        std::thread([&ps] {
          while (ps.server_stats().pushes_applied < 50) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          ::raise(SIGKILL);
        }).detach();
      }
      return ps.Serve();
    }
    // Placement (size-balanced): a and h on server 0, which dies; g and lost on server 1.
    auto a = RegisterSum(ps, "a", Consistency::kAsync);
    auto g = RegisterSum(ps, "g", Consistency::kSync);
    auto h = RegisterSum(ps, "h", Consistency::kSync);
    auto lost = RegisterSum(ps, "lost", Consistency::kSync);
    for (auto* k : {&a, &g, &h, &lost}) CHECK_OK(k->status());
    const float mine = static_cast<float>(ps.worker_index() + 1);
    std::vector<float> ones(1000, 1.0f), share(1000, mine), out(1000);
    int data_loss = 0;
    for (int step = 0; step < kSteps; ++step) {
      CHECK_OK(ps.PushPull(*a, ones.data(), out.data()).Wait());
      CHECK_OK(ps.PushPull(*g, share.data(), out.data()).Wait());
      CHECK_OK(Expect(out[0] == 3.0f && out[999] == 3.0f, absl::StrCat("g: ", out[0])));
      absl::Status s = ps.PushPull(*h, share.data(), out.data()).Wait();
      if (s.ok()) {
        CHECK_OK(Expect(out[0] == 3.0f && out[999] == 3.0f, absl::StrCat("h: ", out[0])));
      } else {
        CHECK_OK(Expect(s.code() == absl::StatusCode::kDataLoss && ++data_loss == 1, s.ToString()));
        std::printf("step %d of h: %s\n", step, s.ToString().c_str());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    CHECK_OK(Expect(ps.servers_recovered() == 1,
                    absl::StrCat(ps.servers_recovered(), " servers recovered")));
    // The total of what was lost of key a (a sync step: also the point where both are through).
    std::vector<float> lost_a(1000, static_cast<float>(ps.pushes_lost(*a))), total(1000);
    CHECK_OK(ps.PushPull(*lost, lost_a.data(), total.data()).Wait());
    CHECK_OK(ps.Pull(*a, out.data()).Wait());
    std::printf("a = %g after %d pushes, %g lost; %lld pushes lost in all by this worker\n", out[0],
                2 * kSteps, total[0], static_cast<long long>(ps.pushes_lost()));
    CHECK_OK(Expect(out[0] == static_cast<float>(2 * kSteps) - total[0] && out[999] == out[0],
                    absl::StrCat("a = ", out[0], ", expected ", 2 * kSteps, " - ", total[0])));
    return ps.Finish();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (int r : {0, 1, 3}) EXPECT_TRUE(job.ranks[static_cast<size_t>(r)].ok()) << job.Summary();
  EXPECT_EQ(job.ranks[2].signal, SIGKILL) << job.Summary();
  EXPECT_TRUE(absl::StrContains(job.ranks[2].output, "successor: OK")) << job.Summary();
}

// A job writes checkpoints; the next job with the same directory starts from them: the value,
// the version and the optimizer's state (the same further pushes give the same bits as one
// uninterrupted job).
TEST(PsCheckpoint, ANewJobRestoresTheServersShards) {
  const ScratchDir scratch;
  const std::string& dir = scratch.path();
  const auto run = [&](int pushes, const std::string& report) {
    JobSpec spec = PsSpec(Layout{"", "tcp", 4, 2});
    spec.env["DDP_PS_CHECKPOINT_DIR"] = dir;
    spec.env["DDP_PS_CHECKPOINT_STEPS"] = "3";
    return RunJob(spec, [&](int /*rank*/) -> absl::Status {
      auto made = ps::ParameterServer::CreateFromEnvironment();
      CHECK_OK(made.status());
      ps::ParameterServer& ps = **made;
      if (!ps.is_worker()) return ps.Serve();
      ps::KeyOptions o;
      o.consistency = Consistency::kAsync;
      o.optimizer.name = "sgd";
      o.optimizer.momentum = 0.9;
      o.optimizer.learning_rate = 0.125;
      std::vector<float> init(3000);
      for (size_t i = 0; i < init.size(); ++i) init[i] = static_cast<float>(i % 11);
      const int64_t shape[] = {3000};
      auto key = ps.Register("weights", DataType::kFloat32, shape, init.data(), o);
      CHECK_OK(key.status());
      std::vector<float> grad(3000), out(3000);
      for (int i = 0; i < pushes; ++i) {
        for (size_t j = 0; j < grad.size(); ++j) {
          grad[j] = static_cast<float>(j % 5);  // alike on both: order does not matter
        }
        CHECK_OK(ps.Push(*key, grad.data()).Wait());
      }
      // A sync barrier, then worker 0 reports the value.
      ps::KeyOptions so;
      std::vector<int32_t> b(1, 0);
      const int64_t one[] = {1};
      auto barrier = ps.Register("barrier", DataType::kInt32, one, b.data(), so);
      CHECK_OK(barrier.status());
      CHECK_OK(ps.PushPull(*barrier, b.data(), b.data()).Wait());
      ps::Handle h = ps.Pull(*key, out.data());
      CHECK_OK(h.Wait());
      if (ps.worker_index() == 0) {
        std::ofstream f(report, std::ios::binary);
        f.write(reinterpret_cast<const char*>(out.data()),
                static_cast<std::streamsize>(out.size() * 4));
        f << "version=" << h.version();
      }
      return ps.Finish();
    });
  };
  const auto slurp = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  };
  // One job of 8 pushes per worker, against 5 then 3 in two jobs.
  JobResult whole = run(8, dir + "/whole");
  ASSERT_FALSE(whole.hung) << whole.Summary();
  for (const RankResult& r : whole.ranks) ASSERT_TRUE(r.ok()) << whole.Summary();
  std::system(absl::StrCat("rm -f ", dir, "/*.ckpt").c_str());
  JobResult first = run(5, dir + "/first");
  for (const RankResult& r : first.ranks) ASSERT_TRUE(r.ok()) << first.Summary();
  JobResult second = run(3, dir + "/second");
  for (const RankResult& r : second.ranks) ASSERT_TRUE(r.ok()) << second.Summary();
  EXPECT_TRUE(absl::StrContains(second.ranks[2].output, "restored")) << second.Summary();
  const std::string w = slurp(dir + "/whole");
  EXPECT_TRUE(absl::StrContains(w, "version=16")) << w.substr(w.size() - 20);
  EXPECT_EQ(slurp(dir + "/second"), w) << "a restored job diverged from an uninterrupted one";
  std::system(absl::StrCat("rm -rf ", dir).c_str());
}

// Strangers, garbage and wrong tokens at a server's socket, and nonsense requests from a peer
// that has the token: each refused, and the job goes on with correct results.
TEST(PsFaults, StrangersAndGarbageAtAServerAreRefused) {
  JobSpec spec = PsSpec(Layout{"", "tcp", 3, 1});
  spec.env["DDP_LOG_LEVEL"] = "warning";
  JobResult job = RunJob(spec, [](int rank) -> absl::Status {
    if (rank == 1) {
      // A member of the job that speaks nonsense to the server, then leaves politely.
      Options options = *Options::FromEnvironment();
      auto joined = bootstrap::AssembleJob(&options, 0);
      CHECK_OK(joined.status());
      transport::Transport& t = *joined->transport;
      t.SetPeerFailurePolicy(transport::Transport::PeerFailurePolicy::kIsolatePeer);
      ps::RequestHeader junk;
      junk.magic = 0xBAD;
      ps::ResponseHeader answer;
      auto r = t.Irecv(2, ps::Tag(0, ps::Part::kResponse), transport::Descriptor{}, &answer,
                       sizeof(answer));
      CHECK_OK(t.Wait(
          t.Isend(2, ps::Tag(0, ps::Part::kRequest), transport::Descriptor{}, &junk, sizeof(junk))
              .get()));
      CHECK_OK(t.Wait(r.get()));
      CHECK_OK(Expect(!ps::ResponseStatus(answer).ok(), "nonsense accepted"));
      ps::RequestHeader done;
      done.op = static_cast<uint32_t>(ps::Op::kDone);
      auto r2 = t.Irecv(2, ps::Tag(1, ps::Part::kResponse), transport::Descriptor{}, &answer,
                        sizeof(answer));
      CHECK_OK(t.Wait(
          t.Isend(2, ps::Tag(1, ps::Part::kRequest), transport::Descriptor{}, &done, sizeof(done))
              .get()));
      CHECK_OK(t.Wait(r2.get()));
      return t.Shutdown();
    }
    auto made = ps::ParameterServer::CreateFromEnvironment();
    CHECK_OK(made.status());
    ps::ParameterServer& ps = **made;
    if (!ps.is_worker()) return ps.Serve();
    // Worker 0 attacks the server's socket, then trains.
    const char* token = std::getenv("DDP_JOB_TOKEN");
    const int store_port = std::atoi(std::getenv("DDP_RENDEZVOUS_PORT"));
    auto store = bootstrap::TcpStoreClient::Connect("127.0.0.1", store_port, token, 99,
                                                    absl::Now() + absl::Seconds(5));
    CHECK_OK(store.status());
    auto address = (*store)->Get("ddp/1/addr/2", absl::Seconds(5));
    CHECK_OK(address.status());
    std::string ip;
    int port = 0;
    CHECK_OK(net::SplitHostPort(*address, &ip, &port));
    {
      auto fd = net::ConnectWithRetry(ip, port, absl::Now() + absl::Seconds(5));
      CHECK_OK(fd.status());
      auth::Hello hello;
      absl::Status s = auth::ClientHandshake(fd->get(), "not-the-job-token", auth::Role::kTransport,
                                             0, 0, absl::Now() + absl::Seconds(5), &hello);
      CHECK_OK(Expect(!s.ok(), "wrong token accepted"));
    }
    {
      auto fd = net::ConnectWithRetry(ip, port, absl::Now() + absl::Seconds(5));
      CHECK_OK(fd.status());
      std::mt19937_64 rng(7);
      std::vector<char> junk(4096);
      for (char& c : junk) c = static_cast<char>(rng());
      ::send(fd->get(), junk.data(), junk.size(), MSG_NOSIGNAL);
    }
    auto key = RegisterSum(ps, "w", Consistency::kAsync);
    CHECK_OK(key.status());
    auto last = PushOnes(ps, *key, 20);
    CHECK_OK(last.status());
    CHECK_OK(Expect(*last == 20.0f, absl::StrCat("value ", *last)));
    return ps.Finish();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (const RankResult& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
  EXPECT_TRUE(absl::StrContains(job.ranks[2].output, "bad request from rank 1")) << job.Summary();
  EXPECT_TRUE(absl::StrContains(job.ranks[2].output, "wrong job token")) << job.Summary();
}

}  // namespace
}  // namespace ddp::testing
