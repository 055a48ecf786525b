// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The engine's operation kinds: results of each, scale factors, bad input, and results written
// into the caller's memory.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ddp/ddp.h"
#include "support/check.h"
#include "support/multiprocess.h"

namespace ddp::testing {
namespace {

TEST(Engine, EveryOperationKind) {
  JobSpec spec;
  spec.size = 3;
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    const int r = ctx.rank();
    const int n = ctx.size();
    // Allgather with a different first dimension per rank: rank i has i+1 rows of 2.
    std::vector<int32_t> rows(static_cast<size_t>((r + 1) * 2));
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = r * 100 + static_cast<int32_t>(i);
    Handle ag = e.AllgatherAsync("ag", rows.data(), DataType::kInt32, {r + 1, 2});
    // Broadcast from rank 1, in place.
    std::vector<double> b(5, r == 1 ? 3.5 : -1.0);
    Handle bc = e.BroadcastAsync("bc", b.data(), DataType::kFloat64, {5}, 1);
    // Alltoall: 2 rows per rank of 3 columns.
    std::vector<int64_t> a2a(static_cast<size_t>(n * 2 * 3));
    for (size_t i = 0; i < a2a.size(); ++i) a2a[i] = r * 1000 + static_cast<int64_t>(i);
    Handle at = e.AlltoallAsync("a2a", a2a.data(), DataType::kInt64, {n * 2, 3});
    // Reduce-scatter of 7 rows of 2 (rows split 3, 2, 2), average, with scale factors.
    std::vector<float> rs(14);
    for (size_t i = 0; i < rs.size(); ++i) rs[i] = static_cast<float>(i + r);
    Handle rsh = e.ReduceScatterAsync("rs", rs.data(), DataType::kFloat32, {7, 2},
                                      ReduceOp::kAverage, 2.0, 0.5);
    // Grouped allreduce, one member in place.
    std::vector<float> g1(3, 1.0f + r), g2(1000, 2.0f), g2out(1000);
    Handle gh = e.GroupedAllreduceAsync(
        "group", {{"g1", g1.data(), g1.data(), {3}}, {"g2", g2.data(), g2out.data(), {10, 100}}},
        DataType::kFloat32, ReduceOp::kSum, 1.0, 0.25);
    CHECK_OK(ag.Wait());
    CHECK_OK(Expect(ag.output_shape() == std::vector<int64_t>{6, 2}, "allgather shape"));
    const auto* got = static_cast<const int32_t*>(ag.output());
    size_t at_row = 0;
    for (int src = 0; src < n; ++src) {
      for (int i = 0; i < (src + 1) * 2; ++i) {
        CHECK_OK(Expect(got[at_row++] == src * 100 + i, "allgather value"));
      }
    }
    CHECK_OK(bc.Wait());
    for (double v : b) CHECK_OK(Expect(v == 3.5, "broadcast value"));
    CHECK_OK(at.Wait());
    const auto* a2out = static_cast<const int64_t*>(at.output());
    for (int src = 0; src < n; ++src) {
      for (int k = 0; k < 6; ++k) {
        CHECK_OK(Expect(a2out[src * 6 + k] == src * 1000 + r * 6 + k, "alltoall value"));
      }
    }
    CHECK_OK(rsh.Wait());
    const int64_t my_rows = r == 0 ? 3 : 2;
    const int64_t first_row = r == 0 ? 0 : (r == 1 ? 3 : 5);
    CHECK_OK(Expect(rsh.output_shape() == std::vector<int64_t>{my_rows, 2}, "rs shape"));
    const auto* rsout = static_cast<const float*>(rsh.output());
    for (int64_t i = 0; i < my_rows * 2; ++i) {
      // mean over ranks of 2*(idx + r), times 0.5 = idx + mean(r) = idx + 1.
      const float want = static_cast<float>(first_row * 2 + i) + 1.0f;
      CHECK_OK(Expect(std::abs(rsout[i] - want) < 1e-5f, absl::StrCat("rs value ", rsout[i])));
    }
    CHECK_OK(gh.Wait());
    for (float v : g1) CHECK_OK(Expect(v == (1.0f + 2.0f + 3.0f) * 0.25f, "group g1"));
    for (float v : g2out) CHECK_OK(Expect(v == 6.0f * 0.25f, "group g2"));
    return absl::OkStatus();
  });
  EXPECT_FALSE(job.hung) << job.Summary();
  for (const auto& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

TEST(Engine, BadInputFailsTheHandleAtOnce) {
  JobSpec spec;
  spec.size = 2;
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    std::vector<int32_t> v(8);
    const auto invalid = absl::StatusCode::kInvalidArgument;
    CHECK_OK(ExpectError(
        e.AllreduceAsync("a", nullptr, v.data(), DataType::kInt32, {8}, ReduceOp::kSum).Wait(),
        invalid, {"'a'", "null"}));
    CHECK_OK(ExpectError(
        e.AllreduceAsync("b", v.data(), v.data(), DataType::kInt32, {-1}, ReduceOp::kSum).Wait(),
        invalid, {"negative"}));
    CHECK_OK(ExpectError(e.BroadcastAsync("d", v.data(), DataType::kInt32, {8}, 2).Wait(), invalid,
                         {"root rank 2"}));
    CHECK_OK(ExpectError(e.AlltoallAsync("e", v.data(), DataType::kInt32, {3}).Wait(), invalid,
                         {"multiple"}));
    CHECK_OK(ExpectError(
        e.AllreduceAsync("f", v.data(), v.data(), DataType::kInt32, {8}, ReduceOp::kSum, 1, 1, 7)
            .Wait(),
        invalid, {"process set 7"}));
    CHECK_OK(ExpectError(e.AllreduceAsync("g", reinterpret_cast<char*>(v.data()) + 1, v.data(),
                                          DataType::kInt32, {2}, ReduceOp::kSum)
                             .Wait(),
                         invalid, {"aligned"}));
    // The engine is what checks codes (the bindings pass theirs on): refused at the call,
    // naming the code and libddp's.
    Handle bad_op = e.AllreduceAsync("op9", v.data(), v.data(), DataType::kFloat32, {2},
                                     static_cast<ReduceOp>(9));
    CHECK_OK(Expect(bad_op.refused(), "an unknown op is refused at the call"));
    CHECK_OK(ExpectError(bad_op.Wait(), absl::StatusCode::kInvalidArgument,
                         {"allreduce 'op9': unknown reduce op 9", "4 product"}));
    CHECK_OK(ExpectError(e.AllgatherAsync("type9", v.data(), static_cast<DataType>(9), {1}).Wait(),
                         absl::StatusCode::kInvalidArgument,
                         {"allgather 'type9': unknown dtype code 9", "0 f32", "7 i64"}));
    // Empty tensors may come with null buffers (an empty torch tensor's data_ptr() is 0): every
    // kind succeeds, alone and next to a fused neighbour.
    std::vector<int64_t> empty = {0, 4};
    std::vector<Handle> handles = {
        e.AllreduceAsync("empty.ar", nullptr, nullptr, DataType::kFloat32, empty, ReduceOp::kSum),
        e.AllreduceAsync("empty.avg", nullptr, nullptr, DataType::kFloat32, {0}, ReduceOp::kAverage,
                         2.0, 0.5),
        e.BroadcastAsync("empty.bc", nullptr, DataType::kInt32, empty, 1),
        e.AllgatherAsync("empty.ag", nullptr, DataType::kInt32, empty),
        e.AlltoallAsync("empty.a2a", nullptr, DataType::kInt32, empty),
        e.ReduceScatterAsync("empty.rs", nullptr, DataType::kInt32, empty, ReduceOp::kMax),
        e.GroupedAllreduceAsync(
            "empty.group",
            {{"empty.g0", nullptr, nullptr, {0}}, {"empty.g1", v.data(), v.data(), {1}}},
            DataType::kInt32, ReduceOp::kSum)};
    for (const Handle& h : handles) {
      CHECK_OK(h.Wait());
      if (h.output_bytes() != 0) return absl::InternalError(h.name() + ": output not empty");
    }
    // Still usable.
    std::fill(v.begin(), v.end(), ctx.rank() + 1);
    CHECK_OK(
        e.AllreduceAsync("ok", v.data(), v.data(), DataType::kInt32, {8}, ReduceOp::kSum).Wait());
    return Expect(v[7] == 3, "sum after bad input");
  });
  for (const auto& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

TEST(Engine, IntegerScaleFactorsTruncateAndSaturate) {
  for (const char* transport : {"shm", "tcp"}) {
    JobSpec spec;
    spec.size = 2;
    spec.env["DDP_TRANSPORT"] = transport;
    JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
      Engine& e = ctx.engine();
      const int32_t big = std::numeric_limits<int32_t>::max();
      std::vector<int32_t> x = {7, -7, 100, big, 1};
      std::vector<int32_t> out(x.size());
      CHECK_OK(e.AllreduceAsync("int.scaled", x.data(), out.data(), DataType::kInt32, {5},
                                ReduceOp::kSum, /*prescale=*/0.5, /*postscale=*/3.0)
                   .Wait());
      // Each rank: 3, -3, 50, 1073741823, 0; the sum: 6, -6, 100, 2147483646, 0; times 3.
      CHECK_OK(Expect(out == std::vector<int32_t>{18, -18, 300, big, 0},
                      absl::StrCat("int32 scaled: ", absl::StrJoin(out, ", "))));
      std::vector<int64_t> a(300, -5), b(700, 9), c(4, 1);
      std::vector<int64_t> b_out(700);
      std::vector<GroupMember> members = {{"a", a.data(), a.data(), {300}},
                                          {"b", b.data(), b_out.data(), {700}},
                                          {"c", c.data(), c.data(), {4}}};
      CHECK_OK(e.GroupedAllreduceAsync("int.group", std::move(members), DataType::kInt64,
                                       ReduceOp::kAverage, /*prescale=*/1.5, /*postscale=*/-1.0)
                   .Wait());
      // trunc(-7.5) = -7 and trunc(13.5) = 13 on each rank, averaged: -7 and 13, negated.
      CHECK_OK(Expect(a[0] == 7 && a[299] == 7 && b_out[0] == -13 && b_out[699] == -13 &&
                          c[0] == -1 && c[3] == -1,
                      absl::StrCat("int64 group: ", a[0], " ", b_out[0], " ", c[0])));
      return absl::OkStatus();
    });
    ASSERT_FALSE(job.hung) << transport << ": " << job.Summary();
    for (const auto& r : job.ranks) ASSERT_TRUE(r.ok()) << transport << ": " << job.Summary();
  }
}

// Over shared memory (3 ranks) and on one rank a fused group is reduced where its tensors lie:
// members in place and out of place, sizes that cross the pipeline's steps and its ranks' slices,
// the prescale applied on a copy (the input stays as it was), each member finished with the
// group's average and postscale.
TEST(Engine, FusedInPlaceHonoursScalesAndAverages) {
  for (const int size : {3, 1}) {
    JobSpec spec;
    spec.size = size;
    JobResult job = RunWithContext(spec, [size](Context& ctx) -> absl::Status {
      Engine& e = ctx.engine();
      const std::vector<size_t> counts = {1, 7, 1000, 300007, 0, 65537, 3};
      for (double prescale : {1.0, 3.0}) {
        std::vector<std::vector<double>> in(counts.size()), out(counts.size());
        std::vector<GroupMember> members;
        for (size_t i = 0; i < counts.size(); ++i) {
          in[i].resize(counts[i]);
          for (size_t j = 0; j < counts[i]; ++j) {
            in[i][j] = static_cast<double>(ctx.rank() + 1) * static_cast<double>(j % 97 + i);
          }
          out[i].assign(counts[i], -1.0);
          double* result = i % 2 == 0 ? in[i].data() : out[i].data();
          members.push_back(
              {absl::StrCat("m", i), in[i].data(), result, {static_cast<int64_t>(counts[i])}});
        }
        CHECK_OK(e.GroupedAllreduceAsync(absl::StrCat("g", prescale), std::move(members),
                                         DataType::kFloat64, ReduceOp::kAverage, prescale, 0.5)
                     .Wait());
        // Average over the ranks of (r + 1) * v, scaled: (size + 1) / 2 * v * prescale * 0.5.
        for (size_t i = 0; i < counts.size(); ++i) {
          const std::vector<double>& got = i % 2 == 0 ? in[i] : out[i];
          for (size_t j = 0; j < counts[i]; ++j) {
            const double want = (size + 1) / 2.0 * static_cast<double>(j % 97 + i) * prescale * 0.5;
            // The epilogue multiplies by postscale / ranks: exact to the last bit or two.
            if (std::abs(got[j] - want) > 1e-12 * std::max(1.0, std::abs(want))) {
              return absl::InternalError(absl::StrCat("member ", i, " element ", j, ": ", got[j],
                                                      " instead of ", want, " (prescale ", prescale,
                                                      ")"));
            }
          }
          if (i % 2 == 1) {  // out of place: the input is untouched
            for (size_t j = 0; j < counts[i]; ++j) {
              if (in[i][j] !=
                  static_cast<double>(ctx.rank() + 1) * static_cast<double>(j % 97 + i)) {
                return absl::InternalError(absl::StrCat("member ", i, "'s input changed"));
              }
            }
          }
        }
      }
      return absl::OkStatus();
    });
    ASSERT_FALSE(job.hung) << size << " ranks: " << job.Summary();
    for (const auto& r : job.ranks) EXPECT_TRUE(r.ok()) << size << " ranks: " << job.Summary();
  }
}

// A joined rank counts in an Average with its zeros (Horovod's and torch.distributed's rule), or,
// with DDP_JOIN_AVERAGE=contributors, not at all.
TEST(Engine, AllgatherAndReduceScatterWriteIntoTheCallersOutput) {
  JobSpec spec;
  spec.size = 3;
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    const int r = ctx.rank();
    const int n = ctx.size();
    // Allgather: 2 rows of 3 per rank, into an output of every rank's rows.
    std::vector<float> mine(6), all(static_cast<size_t>(n) * 6, -1.0f);
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<float>(r * 10) + i;
    Handle ag = e.AllgatherIntoAsync("ag", mine.data(), all.data(), all.size() * sizeof(float),
                                     DataType::kFloat32, {2, 3});
    // Reduce-scatter: 7 rows of 2 (split 3, 2, 2), sum, prescaled by 2, into this rank's rows.
    std::vector<int64_t> rs(14);
    for (size_t i = 0; i < rs.size(); ++i) rs[i] = static_cast<int64_t>(i) + r;
    const int64_t my_rows = r == 0 ? 3 : 2;
    const int64_t first_row = r == 0 ? 0 : (r == 1 ? 3 : 5);
    std::vector<int64_t> rs_out(static_cast<size_t>(my_rows * 2), -1);
    Handle rsh =
        e.ReduceScatterIntoAsync("rs", rs.data(), rs_out.data(), rs_out.size() * sizeof(int64_t),
                                 DataType::kInt64, {7, 2}, ReduceOp::kSum, 2.0);
    CHECK_OK(ag.Wait());
    CHECK_OK(Expect(ag.output_bytes() == 0 && ag.output_shape() == std::vector<int64_t>{6, 3},
                    "allgather into: no engine output, the result's shape"));
    for (int src = 0; src < n; ++src) {
      for (int i = 0; i < 6; ++i) {
        CHECK_OK(Expect(all[static_cast<size_t>(src * 6 + i)] == static_cast<float>(src * 10 + i),
                        absl::StrCat("allgather into: value ", src, "/", i)));
      }
    }
    CHECK_OK(rsh.Wait());
    CHECK_OK(
        Expect(rsh.output_bytes() == 0 && rsh.output_shape() == std::vector<int64_t>{my_rows, 2},
               "reduce-scatter into: no engine output, the result's shape"));
    for (int64_t i = 0; i < my_rows * 2; ++i) {
      // sum over ranks of 2 * (idx + r) = 2 * (3 idx + 0 + 1 + 2)
      const int64_t want = 2 * (3 * (first_row * 2 + i) + 3);
      CHECK_OK(Expect(rs_out[static_cast<size_t>(i)] == want,
                      absl::StrCat("reduce-scatter into: value ", rs_out[static_cast<size_t>(i)],
                                   ", want ", want)));
    }
    // Rank i gives i + 1 rows (6 in all) but an output of n * (i + 1) rows: it fits rank 1's
    // alone; the others' fail, after the collective, and no rank waits.
    std::vector<int32_t> rows(static_cast<size_t>(r + 1), r);
    std::vector<int32_t> out(static_cast<size_t>(n * (r + 1)), -1);
    absl::Status s = e.AllgatherIntoAsync("misfit", rows.data(), out.data(),
                                          out.size() * sizeof(int32_t), DataType::kInt32, {r + 1})
                         .Wait();
    if (r == 1) {
      CHECK_OK(s);
      CHECK_OK(Expect(out == std::vector<int32_t>{0, 1, 1, 2, 2, 2}, "the output that fits"));
    } else {
      CHECK_OK(ExpectError(s, absl::StatusCode::kInvalidArgument,
                           {"'misfit'", "the result has 24 bytes", "[6]"}));
    }
    // Empty: no output is needed.
    CHECK_OK(e.AllgatherIntoAsync("empty", nullptr, nullptr, 0, DataType::kInt32, {0, 2}).Wait());
    CHECK_OK(ExpectError(
        e.AllgatherIntoAsync("null", mine.data(), nullptr, 8, DataType::kFloat32, {2, 3}).Wait(),
        absl::StatusCode::kInvalidArgument, {"'null'", "null buffer"}));
    // The engine goes on.
    std::vector<int32_t> v(4, r + 1);
    CHECK_OK(e.AllreduceAsync("after", v.data(), v.data(), DataType::kInt32, {4}, ReduceOp::kSum)
                 .Wait());
    return Expect(v[0] == 6, "allreduce after");
  });
  EXPECT_FALSE(job.hung) << job.Summary();
  for (const auto& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

}  // namespace
}  // namespace ddp::testing
