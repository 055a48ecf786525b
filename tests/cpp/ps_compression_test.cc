// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Compressed pushes to the parameter server (ps.h, KeyOptions::compression) in real jobs: sums
// within the codec's error each step and, with error feedback, within one step's error over
// the whole run (where the errors of plain rounding would add up); the bytes counted; the
// disagreements and impossible requests refused, named.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "compress/codec.h"
#include "ddp/ps.h"
#include "support/check.h"
#include "support/multiprocess.h"
#include "support/ps_jobs.h"

namespace ddp::testing {
namespace {

constexpr int kSteps = 30;

// Worker w's gradient at `step`: every element different, magnitudes from 0 to 7.
float Gradient(int w, int step, size_t i) {
  return std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(w) +
                  0.11f * static_cast<float>(step)) *
         static_cast<float>(1 + i % 7);
}

struct CompressedKey {
  const char* name;
  Codec codec;
  size_t count;
  ps::Consistency mode;
  // How far one push's decoding may be from its value, at most: the gradients are within 7, the
  // residuals within one step's loss, so values within 7.1: int8 loses up to half its scale
  // (7.1 / 127), bf16 and fp16 half a unit in the last place of values below 8.
  float step_error;
};

constexpr CompressedKey kKeys[] = {
    // 3000 floats in partitions of 1024 (DDP_PS_PARTITION_BYTES 4096): the last has 952, whose
    // final int8 block is partial.
    {"int8", Codec::kInt8, 3000, ps::Consistency::kSync, 7.1f / 254},
    {"bf16", Codec::kBf16, 1000, ps::Consistency::kSync, 8.0f / 512},
    // The server's "sum" optimizer (value += gradient): the value is the decoded pushes' sum.
    {"fp16", Codec::kFp16, 500, ps::Consistency::kAsync, 8.0f / 4096},
};

// Every step's pulled sum within the workers' step errors of the exact sum; over the run, the
// sum of what was pulled within one step's error of the sum of the gradients (error feedback:
// what a push loses goes with the next).
absl::Status TrainCompressed(ps::ParameterServer& ps) {
  if (!ps.is_worker()) return ps.Serve();
  const int workers = ps.num_workers();
  const int w = ps.worker_index();
  std::vector<int> ids;
  for (const CompressedKey& k : kKeys) {
    ps::KeyOptions o;
    o.consistency = k.mode;
    o.compression = k.codec;
    o.optimizer.name = "sum";
    std::vector<float> zeros(k.count, 0.0f);
    const int64_t shape[] = {static_cast<int64_t>(k.count)};
    DDP_ASSIGN_OR_RETURN(const int id,
                         ps.Register(k.name, DataType::kFloat32, shape, zeros.data(), o));
    ids.push_back(id);
  }
  std::vector<std::vector<float>> exact_total(3), pulled_total(3);
  for (size_t k = 0; k < 3; ++k) {
    exact_total[k].assign(kKeys[k].count, 0.0f);
    pulled_total[k].assign(kKeys[k].count, 0.0f);
  }
  bool lossy = false;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<std::vector<float>> mine(3), out(3);
    for (size_t k = 0; k < 3; ++k) {
      mine[k].resize(kKeys[k].count);
      out[k].resize(kKeys[k].count);
      for (size_t i = 0; i < kKeys[k].count; ++i) {
        mine[k][i] = Gradient(w, step, i);
        float sum = 0;
        for (int v = 0; v < workers; ++v) sum += Gradient(v, step, i);
        exact_total[k][i] += sum;  // sync keys: this step's; the async key's over the run
      }
    }
    // The async push first, waited for: once the sync step completes, every worker's is in.
    DDP_RETURN_IF_ERROR(ps.Push(ids[2], mine[2].data()).Wait());
    ps::Handle a = ps.PushPull(ids[0], mine[0].data(), out[0].data());
    ps::Handle b = ps.PushPull(ids[1], mine[1].data(), out[1].data());
    const absl::Status sa = a.Wait();
    DDP_RETURN_IF_ERROR(b.Wait());
    DDP_RETURN_IF_ERROR(sa);
    for (size_t k = 0; k < 2; ++k) {
      float worst = 0;
      for (size_t i = 0; i < kKeys[k].count; ++i) {
        float sum = 0;
        for (int v = 0; v < workers; ++v) sum += Gradient(v, step, i);
        const float error = std::fabs(out[k][i] - sum);
        worst = std::max(worst, error);
        lossy = lossy || error > 0;
        pulled_total[k][i] += out[k][i];
      }
      // Each worker's push: its gradient plus its residual, each within a step's error.
      const float bound = 2.0f * static_cast<float>(workers) * kKeys[k].step_error + 1e-4f;
      DDP_RETURN_IF_ERROR(Expect(worst <= bound, absl::StrCat(kKeys[k].name, " step ", step,
                                                              ": off by ", worst, " > ", bound)));
    }
  }
  DDP_RETURN_IF_ERROR(Expect(lossy, "no pulled sum differed from the exact one: not encoded?"));
  std::vector<float> value(kKeys[2].count);
  DDP_RETURN_IF_ERROR(ps.Pull(ids[2], value.data()).Wait());
  pulled_total[2] = value;
  for (size_t k = 0; k < 3; ++k) {
    float worst = 0;
    for (size_t i = 0; i < kKeys[k].count; ++i) {
      worst = std::max(worst, std::fabs(pulled_total[k][i] - exact_total[k][i]));
    }
    // Error feedback: the run's error is what the residuals hold at its end (one step's loss
    // per worker), and the float32 sums' own rounding of totals near 30 * 7 * workers.
    const float bound = 1.5f * static_cast<float>(workers) * kKeys[k].step_error + 2e-3f;
    DDP_RETURN_IF_ERROR(Expect(
        worst <= bound,
        absl::StrCat(kKeys[k].name, " over ", kSteps, " steps: off by ", worst, " > ", bound)));
  }
  // The bytes: every push counted once, encoded and as gradients.
  const ps::WorkerStats stats = ps.worker_stats();
  for (const CompressedKey& k : kKeys) {
    const compress::Coder& coder = *compress::CoderFor(k.codec);
    size_t encoded = 0;
    for (size_t at = 0; at < k.count; at += 1024)
      encoded += coder.EncodedBytes(std::min<size_t>(1024, k.count - at));
    const auto c = static_cast<size_t>(k.codec);
    DDP_RETURN_IF_ERROR(Expect(
        stats.bytes_pushed[c] == static_cast<int64_t>(kSteps * encoded) &&
            stats.bytes_pushed_decoded[c] == static_cast<int64_t>(kSteps * k.count * 4),
        absl::StrCat(k.name, ": ", stats.bytes_pushed[c], " bytes pushed (", kSteps * encoded,
                     " expected), ", stats.bytes_pushed_decoded[c], " decoded")));
  }
  DDP_RETURN_IF_ERROR(Expect(stats.residual_floats == 4500,
                             absl::StrCat(stats.residual_floats, " residual floats, not 4500")));
  return ps.Finish();
}

class PsCompression : public ::testing::TestWithParam<Layout> {};

TEST_P(PsCompression, SumsWithinTheCodecsErrorAndErrorFeedbackKeepsTheRunsError) {
  JobResult job = RunJob(PsSpec(GetParam()), [](int /*rank*/) -> absl::Status {
    auto ps = ps::ParameterServer::CreateFromEnvironment();
    CHECK_OK(ps.status());
    return TrainCompressed(**ps);
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (const RankResult& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

INSTANTIATE_TEST_SUITE_P(Ps, PsCompression,
                         ::testing::Values(Layout{"TcpThreeWorkersOneServer", "tcp", 4, 1},
                                           Layout{"ShmColocatedTwo", "shm", 2, 0}),
                         [](const ::testing::TestParamInfo<Layout>& p) {
                           return std::string(p.param.name);
                         });

// Two workers register a key with different codecs: the one whose init reaches the server
// second is refused, naming both codecs and itself (the other's goes on, or, for worker 1, learns
// that worker 0, which gives the value, left without one). PowerSGD and a compressed integer key
// are refused before anything is sent.
TEST(PsCompressionRefusals, DisagreeingCodecsPowerSgdAndIntegersAreNamed) {
  JobResult job = RunJob(PsSpec(Layout{"", "tcp", 3, 1}), [](int /*rank*/) -> absl::Status {
    auto made = ps::ParameterServer::CreateFromEnvironment();
    CHECK_OK(made.status());
    ps::ParameterServer& ps = **made;
    if (!ps.is_worker()) return ps.Serve();
    const int w = ps.worker_index();
    std::vector<float> zeros(64, 0.0f);
    const int64_t shape[] = {64};
    ps::KeyOptions o;
    o.compression = w == 0 ? Codec::kInt8 : Codec::kNone;
    auto key = ps.Register("k", DataType::kFloat32, shape, zeros.data(), o);
    if (!key.ok()) {
      const std::string m(key.status().message());
      const bool refused =
          absl::StrContains(m, absl::StrCat("worker ", w, " (rank ", w)) &&
          absl::StrContains(m, w == 0 ? "compression none vs int8" : "compression int8 vs none");
      const bool left = w == 1 && absl::StrContains(m, "which gives it, is gone");
      DDP_RETURN_IF_ERROR(Expect(refused || left, key.status().ToString()));
      if (refused) std::printf("@@refused@@\n");
    }
    ps::KeyOptions powersgd;
    powersgd.compression = Compression::PowerSgd(2);
    auto low_rank = ps.Register("m", DataType::kFloat32, shape, zeros.data(), powersgd);
    DDP_RETURN_IF_ERROR(
        Expect(!low_rank.ok() && absl::StrContains(low_rank.status().message(),
                                                   "PowerSGD cannot compress parameter-server"),
               absl::StrCat("PowerSGD: ", low_rank.status().ToString())));
    ps::KeyOptions int8;
    int8.compression = Codec::kInt8;
    std::vector<int32_t> ints(64, 0);
    auto integers = ps.Register("i", DataType::kInt32, shape, ints.data(), int8);
    DDP_RETURN_IF_ERROR(
        Expect(!integers.ok() && absl::StrContains(integers.status().message(),
                                                   "int8 compression takes float32 keys, not i32"),
               absl::StrCat("int32: ", integers.status().ToString())));
    std::fflush(stdout);
    return ps.Finish();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  int refused = 0;
  for (const RankResult& r : job.ranks) {
    EXPECT_TRUE(r.ok()) << job.Summary();
    refused += absl::StrContains(r.output, "@@refused@@") ? 1 : 0;
  }
  EXPECT_EQ(refused, 1) << job.Summary();
}

}  // namespace
}  // namespace ddp::testing
