// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The C API (ddp/c_api.h) in real multi-rank jobs: every engine operation against its
// definition, completion callbacks, process sets, join; and errors as codes plus messages (a NULL
// context, a refused submission, ranks that disagree on a tensor's shape).
#include "ddp/c_api.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ddp/context.h"
#include "support/check.h"
#include "support/multiprocess.h"

namespace ddp::testing {
namespace {

// A context from the environment, released (and so shut down) when the body ends.
struct CContext {
  ddp_context* c = nullptr;
  ~CContext() { ddp_context_release(c); }
};

absl::Status StatusOf(int code, const std::string& message) {
  if (code == DDP_OK) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

// Runs `body` on every rank of a job of `size`, with a C context made from the environment (and
// released, so shut down, when the body ends).
JobResult RunWithCContext(int size, const std::function<absl::Status(ddp_context*)>& body) {
  JobSpec spec;
  spec.size = size;
  return RunJob(spec, [&body](int /*rank*/) -> absl::Status {
    CContext ctx;
    if (int code = ddp_context_create(&ctx.c); code != DDP_OK) {
      return StatusOf(code, ddp_last_error());
    }
    return body(ctx.c);
  });
}

// Waits for the handle, releases it, and turns its outcome into a Status.
absl::Status Finish(ddp_handle* h) {
  const int code = ddp_handle_wait(h);
  absl::Status s = StatusOf(code, ddp_handle_message(h));
  ddp_handle_release(h);
  return s;
}

TEST(CApi, EngineOperationsMatchTheirDefinitions) {
  JobResult job = RunWithCContext(3, [](ddp_context* c) -> absl::Status {
    const int r = ddp_rank(c);
    const int n = ddp_size(c);
    CHECK_OK(Expect(n == 3 && r >= 0 && r < n, "rank and size"));
    CHECK_OK(Expect(ddp_local_size(c) == 3 && ddp_cross_size(c) == 1, "topology"));
    CHECK_OK(Expect(std::strlen(ddp_version()) > 0, "version"));

    // Allreduce, average with scale factors; the callback sees OK from the engine's thread or
    // this one.
    std::vector<float> x(1000);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(r + 1) * static_cast<float>(i);
    const int64_t xshape[] = {10, 100};
    std::atomic<int> called{-1};
    ddp_handle* h = ddp_allreduce_async(c, "grad.x", x.data(), x.data(), DDP_FLOAT32, xshape, 2,
                                        DDP_AVERAGE, 2.0, 0.5, DDP_WORLD, DDP_CPU, nullptr);
    ddp_handle_on_complete(
        h,
        [](void* user, int code, const char*) {
          static_cast<std::atomic<int>*>(user)->store(code);
        },
        &called);
    CHECK_OK(Finish(h));
    // The callback may run in the engine's thread just after the waiter wakes.
    for (int i = 0; called.load() < 0 && i < 10000; ++i) absl::SleepFor(absl::Milliseconds(1));
    CHECK_OK(Expect(called.load() == DDP_OK, "the completion callback ran with OK"));
    // mean of (r+1)*i over r = 2i; times 2, then 0.5.
    for (size_t i = 0; i < x.size(); ++i) {
      CHECK_OK(Expect(x[i] == 2.0f * static_cast<float>(i), absl::StrCat("allreduce x[", i, "]")));
    }

    // Grouped: two members of different shapes, reduced together (sum of int64).
    std::vector<int64_t> a(7, r), b(3, 10 * r);
    const char* names[] = {"g.a", "g.b"};
    const void* ins[] = {a.data(), b.data()};
    void* outs[] = {a.data(), b.data()};
    const int64_t ashape[] = {7}, bshape[] = {3, 1};
    const int64_t* shapes[] = {ashape, bshape};
    const int ndims[] = {1, 2};
    CHECK_OK(Finish(ddp_grouped_allreduce_async(c, "group.g", 2, names, ins, outs, shapes, ndims,
                                                DDP_INT64, DDP_SUM, 1.0, 1.0, DDP_WORLD, DDP_CPU,
                                                nullptr)));
    for (int64_t v : a) CHECK_OK(Expect(v == 0 + 1 + 2, "grouped member a"));
    for (int64_t v : b) CHECK_OK(Expect(v == 30, "grouped member b"));

    // Allgather with a first dimension that differs per rank: rank r sends r + 1 rows of 2.
    std::vector<int32_t> rows(static_cast<size_t>(2 * (r + 1)), r);
    const int64_t gshape[] = {r + 1, 2};
    h = ddp_allgather_async(c, "gather", rows.data(), DDP_INT32, gshape, 2, DDP_WORLD, DDP_CPU,
                            nullptr);
    CHECK_OK(StatusOf(ddp_handle_wait(h), ddp_handle_message(h)));
    CHECK_OK(Expect(ddp_handle_output_ndim(h) == 2 && ddp_handle_output_shape(h)[0] == 6 &&
                        ddp_handle_output_shape(h)[1] == 2 &&
                        ddp_handle_output_bytes(h) == 12 * sizeof(int32_t) &&
                        ddp_handle_output_device(h) == DDP_CPU,
                    "allgather output shape"));
    const auto* gathered = static_cast<const int32_t*>(ddp_handle_output(h));
    const int32_t want_gather[] = {0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2};
    CHECK_OK(
        Expect(std::memcmp(gathered, want_gather, sizeof(want_gather)) == 0, "allgather rows"));
    ddp_handle_release(h);

    // Broadcast from rank 2.
    std::vector<double> bc(5, r == 2 ? 3.25 : -1.0);
    const int64_t bshape5[] = {5};
    CHECK_OK(Finish(ddp_broadcast_async(c, "bcast", bc.data(), DDP_FLOAT64, bshape5, 1, 2,
                                        DDP_WORLD, DDP_CPU, nullptr)));
    for (double v : bc) CHECK_OK(Expect(v == 3.25, "broadcast"));

    // Alltoall: block j of rank r (value 10 r + j) goes to rank j.
    std::vector<int32_t> blocks = {10 * r, 10 * r + 1, 10 * r + 2};
    const int64_t tshape[] = {3};
    h = ddp_alltoall_async(c, "a2a", blocks.data(), DDP_INT32, tshape, 1, DDP_WORLD, DDP_CPU,
                           nullptr);
    CHECK_OK(StatusOf(ddp_handle_wait(h), ddp_handle_message(h)));
    const auto* got = static_cast<const int32_t*>(ddp_handle_output(h));
    for (int i = 0; i < 3; ++i) CHECK_OK(Expect(got[i] == 10 * i + r, "alltoall block"));
    ddp_handle_release(h);

    // Reduce-scatter: 6 rows summed, 2 per rank.
    std::vector<float> rs(6);
    for (int i = 0; i < 6; ++i) rs[static_cast<size_t>(i)] = static_cast<float>(i * (r + 1));
    const int64_t rshape[] = {6};
    h = ddp_reducescatter_async(c, "rs", rs.data(), DDP_FLOAT32, rshape, 1, DDP_SUM, 1.0, 1.0,
                                DDP_WORLD, DDP_CPU, nullptr);
    CHECK_OK(StatusOf(ddp_handle_wait(h), ddp_handle_message(h)));
    CHECK_OK(Expect(ddp_handle_output_shape(h)[0] == 2, "reduce-scatter rows"));
    const auto* mine = static_cast<const float*>(ddp_handle_output(h));
    for (int i = 0; i < 2; ++i) {
      CHECK_OK(Expect(mine[i] == static_cast<float>(6 * (2 * r + i)), "reduce-scatter value"));
    }
    ddp_handle_release(h);

    // A process set of ranks 0 and 2; rank 1 is not in it and only creates it.
    const int members[] = {0, 2};
    int set = -1;
    CHECK_OK(StatusOf(ddp_add_process_set(c, members, 2, &set), ddp_last_error()));
    if (r != 1) {
      int64_t one = 1;
      const int64_t sshape[] = {1};
      CHECK_OK(Finish(ddp_allreduce_async(c, "in.set", &one, &one, DDP_INT64, sshape, 1, DDP_SUM,
                                          1.0, 1.0, set, DDP_CPU, nullptr)));
      CHECK_OK(Expect(one == 2, "allreduce in a process set"));
    }

    CHECK_OK(StatusOf(ddp_barrier(c), ddp_last_error()));
    // Join: rank 0 reduces once more alone; the others joined contribute zeros.
    if (r == 0) {
      int64_t v = 5;
      const int64_t vshape[] = {1};
      CHECK_OK(Finish(ddp_allreduce_async(c, "after.join", &v, &v, DDP_INT64, vshape, 1, DDP_SUM,
                                          1.0, 1.0, DDP_WORLD, DDP_CPU, nullptr)));
      CHECK_OK(Expect(v == 5, "allreduce while the others joined"));
    }
    h = ddp_join_async(c);
    CHECK_OK(StatusOf(ddp_handle_wait(h), ddp_handle_message(h)));
    CHECK_OK(Expect(ddp_handle_join_last_rank(h) == 0, "rank 0 joined last"));
    ddp_handle_release(h);

    CHECK_OK(StatusOf(ddp_barrier(c), ddp_last_error()));
    // A second reference outlives nothing: shutting down through it ends the job for both.
    ddp_context* again = ddp_context_retain(c);
    CHECK_OK(StatusOf(ddp_context_shutdown(again), ddp_last_error()));
    const int after = ddp_barrier(c);
    CHECK_OK(Expect(
        after == DDP_ERR_FAILED_PRECONDITION && absl::StrContains(ddp_last_error(), "shut down"),
        absl::StrCat("a barrier after shutdown: ", after, " ", ddp_last_error())));
    ddp_context_release(again);
    return absl::OkStatus();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (const RankResult& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

TEST(CApi, ErrorsAreCodesWithMessagesNamingTheTensor) {
  // No job at all: a NULL context is refused, not dereferenced.
  EXPECT_EQ(ddp_barrier(nullptr), DDP_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(ddp_last_error(), "NULL")) << ddp_last_error();
  EXPECT_EQ(ddp_rank(nullptr), -1);
  ddp_handle* none = ddp_allreduce_async(nullptr, "x", nullptr, nullptr, DDP_FLOAT32, nullptr, 0,
                                         DDP_SUM, 1.0, 1.0, DDP_WORLD, DDP_CPU, nullptr);
  EXPECT_EQ(ddp_handle_poll(none), 1);
  EXPECT_EQ(ddp_handle_refused(none), 1);
  EXPECT_EQ(ddp_handle_wait(none), DDP_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(ddp_handle_message(none), "context is NULL"));
  int seen = -1;
  ddp_handle_on_complete(
      none, [](void* user, int code, const char*) { *static_cast<int*>(user) = code; }, &seen);
  EXPECT_EQ(seen, DDP_ERR_INVALID_ARGUMENT);
  ddp_handle_release(none);

  JobResult job = RunWithCContext(2, [](ddp_context* c) -> absl::Status {
    const int r = ddp_rank(c);
    float v[4] = {1, 2, 3, 4};
    const int64_t shape[] = {4};
    // Refused by the engine itself: an unknown data type, a negative ndim.
    ddp_handle* bad = ddp_allreduce_async(c, "bad.type", v, v, 42, shape, 1, DDP_SUM, 1.0, 1.0,
                                          DDP_WORLD, DDP_CPU, nullptr);
    CHECK_OK(
        Expect(ddp_handle_refused(bad) == 1 && ddp_handle_wait(bad) == DDP_ERR_INVALID_ARGUMENT,
               absl::StrCat("unknown dtype: ", ddp_handle_message(bad))));
    ddp_handle_release(bad);
    // Out of range: 256 must not wrap around into float32 (0), 261 into sum.
    bad = ddp_allreduce_async(c, "bad.wrap", v, v, 256, shape, 1, DDP_SUM, 1.0, 1.0, DDP_WORLD,
                              DDP_CPU, nullptr);
    CHECK_OK(Expect(ddp_handle_wait(bad) == DDP_ERR_INVALID_ARGUMENT &&
                        absl::StrContains(ddp_handle_message(bad), "unknown data type 256"),
                    absl::StrCat("dtype 256: ", ddp_handle_message(bad))));
    ddp_handle_release(bad);
    bad = ddp_allreduce_async(c, "bad.op", v, v, DDP_FLOAT32, shape, 1, 261, 1.0, 1.0, DDP_WORLD,
                              DDP_CPU, nullptr);
    CHECK_OK(Expect(ddp_handle_wait(bad) == DDP_ERR_INVALID_ARGUMENT &&
                        absl::StrContains(ddp_handle_message(bad), "unknown reduce op 261"),
                    absl::StrCat("op 261: ", ddp_handle_message(bad))));
    CHECK_OK(Expect(ddp_handle_disagreement(bad) == 0, "a bad argument is no disagreement"));
    ddp_handle_release(bad);
    bad = ddp_allreduce_async(c, "bad.ndim", v, v, DDP_FLOAT32, shape, -1, DDP_SUM, 1.0, 1.0,
                              DDP_WORLD, DDP_CPU, nullptr);
    CHECK_OK(Expect(ddp_handle_wait(bad) == DDP_ERR_INVALID_ARGUMENT &&
                        absl::StrContains(ddp_handle_message(bad), "ndim -1"),
                    absl::StrCat("negative ndim: ", ddp_handle_message(bad))));
    ddp_handle_release(bad);
    // Ranks that disagree on a shape: both fail, each naming the tensor.
    const int64_t mine[] = {r == 0 ? 4 : 2};
    ddp_handle* h = ddp_allreduce_async(c, "grad.disagree", v, v, DDP_FLOAT32, mine, 1, DDP_SUM,
                                        1.0, 1.0, DDP_WORLD, DDP_CPU, nullptr);
    const int code = ddp_handle_wait(h);
    const std::string message = ddp_handle_message(h);
    const int disagreement = ddp_handle_disagreement(h);
    ddp_handle_release(h);
    CHECK_OK(Expect(code == DDP_ERR_INVALID_ARGUMENT && disagreement == 1 &&
                        absl::StrContains(message, "grad.disagree"),
                    absl::StrCat("a shape mismatch: code ", code, ", disagreement ", disagreement,
                                 ": ", message)));
    // The context is still usable for agreeing calls.
    float ok[2] = {1, 1};
    const int64_t two[] = {2};
    CHECK_OK(Finish(ddp_allreduce_async(c, "grad.agree", ok, ok, DDP_FLOAT32, two, 1, DDP_SUM, 1.0,
                                        1.0, DDP_WORLD, DDP_CPU, nullptr)));
    return Expect(ok[0] == 2 && ok[1] == 2, "allreduce after a mismatch");
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (const RankResult& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

// Compression through the C API (what the TensorFlow ops use): int8 and PowerSGD on an
// allreduce, bf16 on a group; the same bits on both ranks, near the exact sum; bad codecs and
// ranks refused, and a codec on integers refused by the engine, naming the tensor.
TEST(CApi, CompressedAllreducesAndTheirRefusals) {
  JobResult job = RunWithCContext(2, [](ddp_context* c) -> absl::Status {
    const int r = ddp_rank(c);
    std::vector<float> x(600), m(64 * 8);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(r + 1) * 0.01f * (i % 17);
    for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<float>((i / 8) * (r + 1));  // rank 1
    const int64_t xshape[] = {600}, mshape[] = {64, 8};
    CHECK_OK(Finish(ddp_allreduce_compressed_async(c, "c.int8", x.data(), x.data(), DDP_FLOAT32,
                                                   xshape, 1, DDP_SUM, 1.0, 1.0, DDP_WORLD, DDP_CPU,
                                                   nullptr, DDP_CODEC_INT8, 0)));
    // Half a step of each rank's scale (largest 0.16 and 0.32) and of the sum's (0.48).
    constexpr float kInt8Bound = (0.16f + 0.32f + 0.48f) / 254 + 1e-6f;
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = 3 * 0.01f * static_cast<float>(i % 17);
      CHECK_OK(Expect(std::fabs(x[i] - want) <= kInt8Bound,
                      absl::StrCat("int8 x[", i, "] = ", x[i], ", want ", want)));
    }
    CHECK_OK(Finish(ddp_allreduce_compressed_async(c, "c.powersgd", m.data(), m.data(), DDP_FLOAT32,
                                                   mshape, 2, DDP_SUM, 1.0, 1.0, DDP_WORLD, DDP_CPU,
                                                   nullptr, DDP_CODEC_POWERSGD, 1)));
    for (size_t i = 0; i < m.size(); ++i) {  // a rank-1 sum: found at rank 1
      const auto want = static_cast<float>((i / 8) * 3);
      CHECK_OK(Expect(std::fabs(m[i] - want) <= 1e-3f * (1 + want),
                      absl::StrCat("powersgd m[", i, "] = ", m[i], ", want ", want)));
    }
    std::vector<float> a(5, 1.0f + static_cast<float>(r)), b(3, 0.5f);
    const char* names[] = {"cg.a", "cg.b"};
    const void* ins[] = {a.data(), b.data()};
    void* outs[] = {a.data(), b.data()};
    const int64_t ashape[] = {5}, bshape[] = {3};
    const int64_t* shapes[] = {ashape, bshape};
    const int ndims[] = {1, 1};
    CHECK_OK(Finish(ddp_grouped_allreduce_compressed_async(
        c, "cgroup", 2, names, ins, outs, shapes, ndims, DDP_FLOAT32, DDP_AVERAGE, 1.0, 1.0,
        DDP_WORLD, DDP_CPU, nullptr, DDP_CODEC_BF16, 0)));
    CHECK_OK(Expect(a[0] == 1.5f && b[2] == 0.5f, "bf16 group (exact in bf16)"));
    // Refusals: at submission (an unknown codec, a rank for a codec without one), and by the
    // engine (a codec on integers).
    const std::pair<int, int> bad_codecs[] = {{9, 0}, {-1, 0}, {DDP_CODEC_INT8, 4}};
    for (auto [codec, rank] : bad_codecs) {
      ddp_handle* h = ddp_allreduce_compressed_async(c, "c.bad", x.data(), x.data(), DDP_FLOAT32,
                                                     xshape, 1, DDP_SUM, 1.0, 1.0, DDP_WORLD,
                                                     DDP_CPU, nullptr, codec, rank);
      const std::string message = ddp_handle_message(h);
      CHECK_OK(Expect(ddp_handle_refused(h) == 1 &&
                          ddp_handle_wait(h) == DDP_ERR_INVALID_ARGUMENT &&
                          (absl::StrContains(message, "unknown codec") ||
                           absl::StrContains(message, "PowerSGD's")),
                      absl::StrCat("codec ", codec, " rank ", rank, ": ", message)));
      ddp_handle_release(h);
    }
    int64_t ints[4] = {1, 2, 3, 4};
    const int64_t ishape[] = {4};
    ddp_handle* h =
        ddp_allreduce_compressed_async(c, "c.ints", ints, ints, DDP_INT64, ishape, 1, DDP_SUM, 1.0,
                                       1.0, DDP_WORLD, DDP_CPU, nullptr, DDP_CODEC_INT8, 0);
    const int code = ddp_handle_wait(h);
    const std::string message = ddp_handle_message(h);
    ddp_handle_release(h);
    return Expect(code == DDP_ERR_INVALID_ARGUMENT && absl::StrContains(message, "c.ints"),
                  absl::StrCat("int8 on int64: ", code, " ", message));
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (const RankResult& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

TEST(CApi, ACReferenceSharesAContextThatCppOwns) {
  JobSpec spec;
  spec.size = 2;
  JobResult job = RunWithContext(spec, [](Context& owned) -> absl::Status {
    // The Python package's way: its context, handed to a plugin as a C reference (the plugin
    // releases it; the C++ owner keeps the context alive and running).
    std::shared_ptr<Context> shared(&owned, [](Context*) {});
    ddp_context* c = NewCReference(shared);
    CHECK_OK(Expect(ddp_rank(c) == owned.rank(), "same rank"));
    int64_t v = 1;
    const int64_t shape[] = {1};
    CHECK_OK(Finish(ddp_allreduce_async(c, "through.c", &v, &v, DDP_INT64, shape, 1, DDP_SUM, 1.0,
                                        1.0, DDP_WORLD, DDP_CPU, nullptr)));
    CHECK_OK(Expect(v == 2, "allreduce through a C reference"));
    ddp_context_release(c);
    CHECK_OK(owned.health());
    return owned.Barrier();
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (const RankResult& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

}  // namespace
}  // namespace ddp::testing
