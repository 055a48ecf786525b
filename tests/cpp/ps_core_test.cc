// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The parameter server's rules without a network: ServerCore driven directly (sync and async
// keys, worker deaths, waits past the limit, bad requests, checkpoints), and the optimizers'
// saved state.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compress/codec.h"
#include "ddp/errors.h"
#include "ddp/ps.h"
#include "ps/optimizer.h"
#include "ps/protocol.h"
#include "ps/server_core.h"
#include "support/ps_jobs.h"

namespace ddp::testing {
namespace {

using ps::Consistency;
using ps::Outgoing;
using ps::RequestHeader;
using ps::ServerCore;

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
  h.bytes = bytes;  // a push's payload (read only where one is carried)
  if (op == ps::Op::kPull || op == ps::Op::kPushPull) h.answer_bytes = bytes;
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

// A key whose pushes travel int8 (ps.h, KeyOptions::compression): each push is decoded into the
// float32 sum; a push of the raw size, and disagreeing or impossible codecs, are refused.
TEST(PsCore, CompressedPushesAreDecodedIntoTheSumAndOddOnesRefused) {
  ServerCore core(Config(2));
  std::vector<Outgoing> out;
  constexpr uint64_t kCount = 300;  // two int8 blocks, the second partial
  const compress::Coder& int8 = *compress::CoderFor(Codec::kInt8);
  std::vector<float> zeros(kCount, 0.0f);
  for (int w = 0; w < 2; ++w) {
    RequestHeader h = InitHeader(0, kCount, Consistency::kSync, -1, "sgd", w == 0);
    h.config.codec = static_cast<uint8_t>(Codec::kInt8);
    core.Handle(w, 0, h, reinterpret_cast<const char*>(zeros.data()), &out);
  }
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(StatusOf(out[0]).ok() && StatusOf(out[1]).ok()) << StatusOf(out[1]);
  std::vector<float> g0(kCount), g1(kCount), want(kCount), d0(kCount), d1(kCount);
  std::vector<uint8_t> e0(int8.EncodedBytes(kCount)), e1(e0.size());
  for (size_t i = 0; i < kCount; ++i) {
    g0[i] = static_cast<float>(i % 17) * 0.25f - 2.0f;
    g1[i] = static_cast<float>(i) * 1e-3f;
  }
  int8.Encode(g0.data(), kCount, e0.data());
  int8.Encode(g1.data(), kCount, e1.data());
  int8.Decode(e0.data(), kCount, d0.data());
  int8.Decode(e1.data(), kCount, d1.data());
  out.clear();
  // The raw float32 size is not what an int8 push carries.
  core.Handle(0, 1, Op(ps::Op::kPush, 0, 1, 0, kCount * 4),
              reinterpret_cast<const char*>(g0.data()), &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(absl::StrContains(StatusOf(out[0]).message(),
                                absl::StrCat("which takes ", e0.size(), " (int8)")))
      << StatusOf(out[0]);
  out.clear();
  RequestHeader push = Op(ps::Op::kPushPull, 0, 1, 0, e0.size());
  push.answer_bytes = kCount * 4;
  core.Handle(0, 2, push, reinterpret_cast<const char*>(e0.data()), &out);
  core.Handle(1, 1, push, reinterpret_cast<const char*>(e1.data()), &out);
  ASSERT_EQ(out.size(), 2u);
  for (const Outgoing& o : out) {
    ASSERT_TRUE(StatusOf(o).ok()) << StatusOf(o);
    const std::vector<float> got = Floats(o);
    ASSERT_EQ(got.size(), kCount);
    for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(got[i], d0[i] + d1[i]) << i;
  }
  // Registered with another codec by a worker: refused, naming both.
  out.clear();
  RequestHeader other = InitHeader(0, kCount, Consistency::kSync, -1, "sgd", false);
  other.config.codec = static_cast<uint8_t>(Codec::kBf16);
  core.Handle(1, 2, other, nullptr, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(absl::StrContains(StatusOf(out[0]).message(), "compression int8 vs bf16"))
      << StatusOf(out[0]);
  // PowerSGD is no push codec; int8 takes float32 keys only.
  RequestHeader powersgd = InitHeader(1, 4, Consistency::kSync, -1, "sgd", false);
  powersgd.config.codec = static_cast<uint8_t>(Codec::kPowerSgd);
  EXPECT_FALSE(ps::CheckRequest(powersgd).ok());
  out.clear();
  RequestHeader doubles = InitHeader(1, 4, Consistency::kSync, -1, "sgd", false);
  doubles.config.dtype = static_cast<uint8_t>(DataType::kFloat64);
  doubles.config.codec = static_cast<uint8_t>(Codec::kInt8);
  core.Handle(0, 3, doubles, nullptr, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(absl::StrContains(StatusOf(out[0]).message(), "need a float32 key, not f64"))
      << StatusOf(out[0]);
}

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
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

// How pushes travel is not a key's state: a job restored from a checkpoint may register its key
// with a codec the checkpointing job did not use; the first registration says which, and a
// worker that disagrees with it is refused.
TEST(PsCore, ARestoredKeyTakesTheCodecItIsRegisteredWith) {
  const ScratchDir scratch;
  ps::CoreConfig c = Config(2);
  c.checkpoint_dir = scratch.path();
  ServerCore a(c);
  InitAll(a, 2, 4, Consistency::kSync, -1, "sgd", {1, 2, 3, 4});
  ASSERT_TRUE(a.WriteCheckpoint().ok());
  ServerCore b(c);
  ASSERT_TRUE(b.Restore().ok());
  std::vector<Outgoing> out;
  for (int w = 0; w < 2; ++w) {
    RequestHeader h = InitHeader(0, 4, Consistency::kSync, -1, "sgd", false);
    h.config.codec = static_cast<uint8_t>(w == 0 ? Codec::kBf16 : Codec::kNone);
    b.Handle(w, 0, h, nullptr, &out);
  }
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(StatusOf(out[0]).ok()) << StatusOf(out[0]);
  EXPECT_TRUE(absl::StrContains(StatusOf(out[1]).message(), "compression bf16 vs none"))
      << StatusOf(out[1]);
  // Its pushes are bf16 now: 2 bytes a value.
  out.clear();
  const std::vector<uint16_t> half = {0x3f80, 0x4000, 0x4040, 0x4080};  // 1, 2, 3, 4
  b.Handle(0, 1, Op(ps::Op::kPush, 0, 1, 0, 8), reinterpret_cast<const char*>(half.data()), &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(StatusOf(out[0]).ok()) << StatusOf(out[0]);
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

}  // namespace
}  // namespace ddp::testing
