// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Compression (docs/compression.md): the codecs' round trips within their stated error, and the
// engine's compressed allreduces: results within the codecs' error of the exact sum and bitwise
// identical on every rank, the bytes counted, error feedback converging where plain int8
// stalls, and what is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "compress/codec.h"
#include "compress/lowrank.h"
#include "ddp/ddp.h"
#include "reduce/reduce.h"
#include "support/check.h"
#include "support/data.h"
#include "support/multiprocess.h"

namespace ddp::testing {
namespace {

constexpr Codec kCodecs[] = {Codec::kBf16, Codec::kFp16, Codec::kInt8};

std::vector<float> Normal(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// The stated error of one encoding of x (codec.h): bf16 and fp16 round to nearest (half an ulp:
// 2^-9 and 2^-12 of |x| for normal values; fp16's subnormals 2^-25 apart); int8 half a step of
// its block's scale.
double Bound(Codec c, float x, float block_largest) {
  switch (c) {
    case Codec::kBf16:
      return std::fabs(x) * std::ldexp(1.0, -8) + 1e-38;
    case Codec::kFp16:
      return std::fabs(x) * std::ldexp(1.0, -11) + std::ldexp(1.0, -24);
    default:
      return block_largest / 127.0 * 0.5 * (1 + 1e-6) + 1e-30;
  }
}

TEST(Codec, RoundTripsWithinTheStatedErrorAtOddSizes) {
  for (Codec c : kCodecs) {
    const compress::Coder& codec = *compress::CoderFor(c);
    EXPECT_EQ(codec.id(), c);
    for (size_t n : {size_t{0}, size_t{1}, size_t{255}, size_t{256}, size_t{257}, size_t{1000},
                     size_t{4099}}) {
      std::vector<float> x = Normal(n, n + 7, 3.0f);
      if (n > 3) x[3] = 1e-3f;  // small beside its block's largest: int8's hard case
      std::vector<uint8_t> bytes(codec.EncodedBytes(n));
      codec.Encode(x.data(), n, bytes.data());
      std::vector<uint8_t> again(bytes.size());
      codec.Encode(x.data(), n, again.data());
      EXPECT_EQ(bytes, again) << CompressionName(c) << " " << n;  // deterministic
      std::vector<float> y(n);
      codec.Decode(bytes.data(), n, y.data());
      for (size_t i = 0; i < n; ++i) {
        const size_t first = i / compress::kInt8Block * compress::kInt8Block;
        float largest = 0;
        for (size_t j = first; j < std::min(n, first + compress::kInt8Block); ++j) {
          largest = std::max(largest, std::fabs(x[j]));
        }
        ASSERT_LE(std::fabs(double{y[i]} - x[i]), Bound(c, x[i], largest))
            << CompressionName(c) << " n=" << n << " i=" << i << " x=" << x[i];
      }
      // The same bytes with the loss kept (error feedback), and exactly what was lost; decoding
      // onto a sum adds exactly the decoding.
      std::vector<float> lost(n, 0.25f), sum(n, 1.0f);
      codec.Encode(x.data(), n, again.data(), lost.data());
      EXPECT_EQ(bytes, again) << CompressionName(c) << " " << n;
      codec.DecodeAdd(bytes.data(), n, sum.data());
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(lost[i], 0.25f + (x[i] - y[i])) << CompressionName(c) << " n=" << n << " " << i;
        ASSERT_EQ(sum[i], 1.0f + y[i]) << CompressionName(c) << " n=" << n << " " << i;
      }
    }
  }
  EXPECT_EQ(compress::CoderFor(Codec::kNone), nullptr);
  EXPECT_EQ(compress::CoderFor(Codec::kInt8)->EncodedBytes(257), 2 * 4 + 257u);
  EXPECT_EQ(compress::CoderFor(Codec::kBf16)->EncodedBytes(257), 514u);
}

TEST(Codec, Int8ZeroBlocksAndNonFiniteValues) {
  const compress::Coder& int8 = *compress::CoderFor(Codec::kInt8);
  std::vector<float> x(600, 0.0f);
  x[300] = std::nanf("");
  x[520] = 2.0f;
  std::vector<uint8_t> bytes(int8.EncodedBytes(x.size()));
  int8.Encode(x.data(), x.size(), bytes.data());
  std::vector<float> y(x.size(), -1.0f);
  int8.Decode(bytes.data(), x.size(), y.data());
  EXPECT_EQ(y[0], 0.0f);                                  // a block of zeros stays zeros
  EXPECT_TRUE(std::isnan(y[256]) && std::isnan(y[511]));  // a NaN's block: NaN throughout
  EXPECT_EQ(y[520], 2.0f);                                // its block's largest is exact
  EXPECT_EQ(y[521], 0.0f);
  // A non-finite value's block keeps no loss (it would poison every later step).
  std::vector<float> lost(x.size(), 0.0f);
  int8.Encode(x.data(), x.size(), bytes.data(), lost.data());
  for (float l : lost) ASSERT_EQ(l, 0.0f);
  // A block too small to invert its largest (under 3.7e-37: dead units' gradients) sends zeros
  // and keeps all of itself as loss, never a NaN (which once stopped a training run); one just
  // above it is encoded as usual.
  for (float tiny : {1e-38f, 3e-45f, 4e-37f}) {
    std::vector<float> small(300, 0.0f), small_lost(300, 0.0f), small_back(300);
    small[7] = tiny;
    small[8] = -tiny / 3;
    std::vector<uint8_t> small_bytes(int8.EncodedBytes(small.size()));
    int8.Encode(small.data(), small.size(), small_bytes.data(), small_lost.data());
    int8.Decode(small_bytes.data(), small.size(), small_back.data());
    for (size_t i = 0; i < small.size(); ++i) {
      ASSERT_TRUE(std::isfinite(small_back[i]) && std::isfinite(small_lost[i])) << tiny << " " << i;
      ASSERT_EQ(small_lost[i], small[i] - small_back[i]) << tiny << " " << i;
    }
    if (tiny > 3.8e-37f) {  // its scale is subnormal: close, not exact
      EXPECT_NEAR(small_back[7], tiny, tiny * 0.01f);
    } else {
      EXPECT_EQ(small_back[7], 0.0f) << tiny;
    }
  }
  // Ties round to even: a block whose largest is 127 has scale 1.
  std::vector<float> ties = {127.0f, 2.5f, 3.5f, -2.5f, -0.5f, 0.5f, 1.5f, 126.5f};
  std::vector<uint8_t> tie_bytes(int8.EncodedBytes(ties.size()));
  int8.Encode(ties.data(), ties.size(), tie_bytes.data());
  std::vector<float> rounded(ties.size());
  int8.Decode(tie_bytes.data(), ties.size(), rounded.data());
  EXPECT_EQ(rounded, (std::vector<float>{127.0f, 2.0f, 4.0f, -2.0f, -0.0f, 0.0f, 2.0f, 126.0f}));
  // fp16 past its range: infinity on the wire, and no loss kept.
  const compress::Coder& fp16 = *compress::CoderFor(Codec::kFp16);
  const std::vector<float> huge = {1e6f, -1e6f, 3.0f};
  std::vector<uint8_t> half_bytes(fp16.EncodedBytes(3));
  std::vector<float> half_lost(3, 0.0f), back(3);
  fp16.Encode(huge.data(), 3, half_bytes.data(), half_lost.data());
  fp16.Decode(half_bytes.data(), 3, back.data());
  EXPECT_TRUE(std::isinf(back[0]) && std::isinf(back[1]));
  EXPECT_EQ(half_lost, (std::vector<float>{0.0f, 0.0f, 0.0f}));
}

void SetElement(DataType type, void* buf, size_t i, float v) {
  switch (type) {
    case DataType::kFloat64:
      static_cast<double*>(buf)[i] = v;
      return;
    case DataType::kFloat16:
      static_cast<uint16_t*>(buf)[i] = reduce::FloatToHalf(v);
      return;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(buf)[i] = reduce::FloatToBFloat16(v);
      return;
    default:
      static_cast<float*>(buf)[i] = v;
  }
}

double GetElement(DataType type, const void* buf, size_t i) {
  switch (type) {
    case DataType::kFloat64:
      return static_cast<const double*>(buf)[i];
    case DataType::kFloat16:
      return reduce::HalfToFloat(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kBFloat16:
      return reduce::BFloat16ToFloat(static_cast<const uint16_t*>(buf)[i]);
    default:
      return static_cast<const float*>(buf)[i];
  }
}

// Each rank's contribution: seeded by rank, scaled so that the sum spans several magnitudes.
std::vector<float> Contribution(int rank, size_t n) { return Normal(n, 100 + rank, 1.0f + rank); }

// Every rank OK, and `want` distinct "digest NAME HEX" lines over all ranks' outputs: each name
// printed with the same bits by every rank.
void ExpectIdenticalDigests(const JobResult& job, size_t want) {
  ASSERT_FALSE(job.hung) << job.Summary();
  std::set<std::string> digests;
  for (const RankResult& r : job.ranks) {
    ASSERT_TRUE(r.ok()) << job.Summary();
    for (absl::string_view line : absl::StrSplit(r.output, '\n')) {
      if (absl::StartsWith(line, "digest ")) digests.insert(std::string(line));
    }
  }
  EXPECT_EQ(digests.size(), want) << job.Summary();
}

// Every codec, every floating dtype, a fused batch and a tensor alone: within the error of
// (ranks + 1) encodings of the exact sum's magnitude, and the same bits on every rank.
TEST(CompressedAllreduce, WithinTheCodecsErrorAndIdenticalOnEveryRank) {
  JobSpec spec;
  spec.size = 3;
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    const size_t n = 1031;
    for (Codec c : kCodecs) {
      for (DataType type :
           {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16}) {
        std::vector<double> exact(n, 0.0);
        double largest = 0;
        for (int r = 0; r < ctx.size(); ++r) {
          const std::vector<float> x = Contribution(r, n);
          for (size_t i = 0; i < n; ++i) exact[i] += x[i];
        }
        for (double v : exact) largest = std::max(largest, std::fabs(v));
        const std::vector<float> mine = Contribution(ctx.rank(), n);
        std::vector<char> in(n * DataTypeSize(type)), out(in.size());
        for (size_t i = 0; i < n; ++i) SetElement(type, in.data(), i, mine[i]);
        const std::string name = absl::StrCat(CompressionName(c), DataTypeName(type));
        // Two halves submitted together: fused into one compressed allreduce.
        const size_t half = n / 2;
        Handle a =
            e.AllreduceAsync(name + ".a", in.data(), out.data(), type, {static_cast<int64_t>(half)},
                             ReduceOp::kSum, 1.0, 1.0, Engine::kWorld, {}, c);
        const size_t at = half * DataTypeSize(type);
        Handle b = e.AllreduceAsync(name + ".b", in.data() + at, out.data() + at, type,
                                    {static_cast<int64_t>(n - half)}, ReduceOp::kSum, 1.0, 1.0,
                                    Engine::kWorld, {}, c);
        CHECK_OK(a.Wait());
        CHECK_OK(b.Wait());
        // int8: each encoding within half a step of its block's largest (at most the sum's);
        // the halves: their dtype's own rounding on top.
        const double step = c == Codec::kInt8 ? largest / 127 * 0.5 * (ctx.size() + 1)
                                              : largest * std::ldexp(1.0, -7) * 4;
        const double own = type == DataType::kBFloat16  ? largest * std::ldexp(1.0, -7)
                           : type == DataType::kFloat16 ? largest * std::ldexp(1.0, -10)
                                                        : 0.0;
        for (size_t i = 0; i < n; ++i) {
          const double got = GetElement(type, out.data(), i);
          if (std::fabs(got - exact[i]) > step + own + 1e-3) {
            return absl::InternalError(absl::StrCat(name, "[", i, "]: ", got, " vs exact ",
                                                    exact[i], " (bound ", step + own, ")"));
          }
        }
        std::printf("digest %s %llx\n", name.c_str(),
                    static_cast<unsigned long long>(Digest(out.data(), out.size())));
      }
    }
    const EngineStats stats = e.stats();
    for (Codec c : kCodecs) {
      CHECK_OK(Expect(stats.sent_bytes[static_cast<size_t>(c)] > 0 &&
                          stats.received_bytes[static_cast<size_t>(c)] > 0,
                      "bytes counted by codec"));
    }
    // On a large tensor: each rank sends 2 (n-1)/n of it, as the ring does in float32, at a
    // quarter of the bytes for int8 (and its scales), half for bf16 and fp16.
    const size_t big = size_t{1} << 16;
    std::vector<float> large(big, 1.0f);
    const double f32_bytes = 2.0 * (ctx.size() - 1) / ctx.size() * big * 4;
    for (Codec c : kCodecs) {
      const uint64_t before = e.stats().sent_bytes[static_cast<size_t>(c)];
      CHECK_OK(e.AllreduceAsync(absl::StrCat("large.", CompressionName(c)), large.data(),
                                large.data(), DataType::kFloat32, {static_cast<int64_t>(big)},
                                ReduceOp::kAverage, 1.0, 1.0, Engine::kWorld, {}, c)
                   .Wait());
      const double ratio = (e.stats().sent_bytes[static_cast<size_t>(c)] - before) / f32_bytes;
      const double want = c == Codec::kInt8 ? 0.26 : 0.51;
      CHECK_OK(Expect(ratio > want - 0.02 && ratio < want,
                      absl::StrCat(CompressionName(c), " sent ", ratio, " of float32's bytes")));
    }
    CHECK_OK(Expect(e.stats().residual_floats == 3u * 4 * 1031 + 3 * big, "a residual per tensor"));
    return absl::OkStatus();
  });
  ExpectIdenticalDigests(job, std::size(kCodecs) * 4);
}

// Gradient descent on a quadratic, 0.5 |w - t|^2 summed over 2 ranks, whose gradients carry a
// large term that cancels between the ranks (+-50 on w[0]): each rank's int8 scale is then too
// coarse for the small components (0.05 against a step of 0.39), so plain int8 never moves them
// (simulated here with the same codec); with the engine's error feedback they converge.
constexpr size_t kDims = 256;
constexpr float kSmall = 0.05f;
constexpr int kSteps = 300;
// A decaying rate: error feedback gets the average right, and the iterates' swing around it
// (a quantization step times the rate) then shrinks.
float Rate(int step) { return 0.5f * 20.0f / (20.0f + static_cast<float>(step)); }

std::vector<float> Gradient(const std::vector<float>& w, int rank) {
  std::vector<float> g(kDims);
  for (size_t i = 0; i < kDims; ++i) g[i] = w[i] - (i == 0 ? 0.0f : kSmall);
  g[0] += rank == 0 ? 50.0f : -50.0f;
  return g;
}

double Distance(const std::vector<float>& w) {
  double d = 0;
  for (size_t i = 1; i < kDims; ++i) d += (w[i] - kSmall) * (w[i] - kSmall);
  return std::sqrt(d);
}

TEST(CompressedAllreduce, ErrorFeedbackConvergesWherePlainInt8Stalls) {
  const compress::Coder& int8 = *compress::CoderFor(Codec::kInt8);
  std::vector<float> plain(kDims, 0.0f);
  for (int step = 0; step < kSteps; ++step) {  // the same steps without error feedback
    std::vector<float> sum(kDims, 0.0f), decoded(kDims);
    std::vector<uint8_t> bytes(int8.EncodedBytes(kDims));
    for (int r = 0; r < 2; ++r) {
      int8.Encode(Gradient(plain, r).data(), kDims, bytes.data());
      int8.Decode(bytes.data(), kDims, decoded.data());
      for (size_t i = 0; i < kDims; ++i) sum[i] += decoded[i];
    }
    int8.Encode(sum.data(), kDims, bytes.data());
    int8.Decode(bytes.data(), kDims, decoded.data());
    for (size_t i = 0; i < kDims; ++i) plain[i] -= Rate(step) * decoded[i] / 2;
  }
  const double start = Distance(std::vector<float>(kDims, 0.0f));
  EXPECT_GT(Distance(plain), 0.99 * start);  // stalled: the small components never moved

  JobSpec spec;
  spec.size = 2;
  JobResult job = RunWithContext(spec, [start](Context& ctx) -> absl::Status {
    std::vector<float> w(kDims, 0.0f), last(kDims, 0.0f);  // last: the last 50 iterates' mean
    for (int step = 0; step < kSteps; ++step) {
      std::vector<float> g = Gradient(w, ctx.rank());
      CHECK_OK(ctx.engine()
                   .AllreduceAsync("grad", g.data(), g.data(), DataType::kFloat32,
                                   {static_cast<int64_t>(kDims)}, ReduceOp::kAverage, 1.0, 1.0,
                                   Engine::kWorld, {}, Codec::kInt8)
                   .Wait());
      for (size_t i = 0; i < kDims; ++i) w[i] -= Rate(step) * g[i];
      if (step >= kSteps - 50) {
        for (size_t i = 0; i < kDims; ++i) last[i] += w[i] / 50;
      }
    }
    std::printf("distance %g (last iterate %g) of %g\n", Distance(last), Distance(w), start);
    return Expect(Distance(last) < 0.1 * start && Distance(w) < 0.25 * start,
                  absl::StrCat("converged: distance ", Distance(last), " (last iterate ",
                               Distance(w), ") of ", start));
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (const RankResult& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

// The factors are kept transposed (lowrank.h): pt[k * rows + i] is P's (i, k), qt[k * cols + j]
// is Q's (j, k). Sizes that are not multiples of the kernels' lanes (16) and pieces (64).
TEST(LowRank, OrthogonalizesAndMultipliesAsTheReferenceDoes) {
  const size_t rows = 37, cols = 83, r = 3;
  const std::vector<float> m = Normal(rows * cols, 1), qt = Normal(cols * r, 2);
  std::vector<float> pt(rows * r), back(cols * r), out(rows * cols);
  compress::MultiplyRight(m.data(), rows, cols, qt.data(), r, pt.data());
  for (size_t i = 0; i < rows; ++i) {
    for (size_t k = 0; k < r; ++k) {
      double want = 0;
      for (size_t j = 0; j < cols; ++j) want += double{m[i * cols + j]} * qt[k * cols + j];
      EXPECT_NEAR(pt[k * rows + i], want, 1e-4);
    }
  }
  compress::Orthogonalize(pt.data(), rows, r);
  for (size_t a = 0; a < r; ++a) {
    for (size_t b = 0; b < r; ++b) {
      double dot = 0;
      for (size_t i = 0; i < rows; ++i) dot += double{pt[a * rows + i]} * pt[b * rows + i];
      EXPECT_NEAR(dot, a == b ? 1.0 : 0.0, 1e-5) << a << " " << b;
    }
  }
  compress::MultiplyTransposed(m.data(), rows, cols, pt.data(), r, back.data());
  for (size_t j = 0; j < cols; ++j) {
    for (size_t k = 0; k < r; ++k) {
      double want = 0;
      for (size_t i = 0; i < rows; ++i) want += double{m[i * cols + j]} * pt[k * rows + i];
      EXPECT_NEAR(back[k * cols + j], want, 1e-4);
    }
  }
  compress::Product(pt.data(), back.data(), rows, cols, r, out.data());
  // P P^T M: the projection of M on P's columns; M less it is orthogonal to them.
  for (size_t k = 0; k < r; ++k) {
    for (size_t j = 0; j < cols; ++j) {
      double dot = 0;
      for (size_t i = 0; i < rows; ++i)
        dot += (double{m[i * cols + j]} - out[i * cols + j]) * pt[k * rows + i];
      EXPECT_NEAR(dot, 0.0, 1e-4);
    }
  }
  // Reconstruct: the loss against one Q and the product with another, in one pass, with the
  // bits of Product's.
  std::vector<float> x = m, lost(rows * cols, 0.5f), row(cols), summed(rows * cols);
  compress::Product(pt.data(), qt.data(), rows, cols, r, summed.data());
  compress::Reconstruct(x.data(), lost.data(), pt.data(), back.data(), qt.data(), rows, cols, r,
                        row.data());
  for (size_t i = 0; i < rows * cols; ++i) {
    ASSERT_EQ(x[i], summed[i]) << i;
    ASSERT_EQ(lost[i], m[i] - out[i]) << i;
  }
  std::vector<float> zero(rows * r, 0.0f);
  compress::Orthogonalize(zero.data(), rows, r);  // nothing to keep: zeros, not NaN
  for (float v : zero) EXPECT_EQ(v, 0.0f);
  std::vector<float> a(5), b(5);
  compress::Seeded(42, a.data(), 5);
  compress::Seeded(42, b.data(), 5);
  EXPECT_EQ(a, b);
  for (float v : a) EXPECT_TRUE(v >= -1.0f && v < 1.0f);
}

// PowerSGD across 3 ranks on 3 hosts (TCP): a sum of rank 2 is found exactly at rank 2 and the
// same bits on every rank; a full-rank one, sent again and again, adds up to the exact sum over
// the steps (error feedback); only P and Q travel; what it cannot take is refused.
// A zero step (an unused layer) and a step with a NaN leave PowerSGD working: its next warm
// start would be all zeros (then every later step too) or NaN, so the next step starts from the
// seed; the NaN keeps no residual. The steps after find a rank-1 sum again, the same on both ranks.
TEST(CompressedAllreduce, PowerSgdRecoversFromAZeroAndANonFiniteStep) {
  JobSpec spec;
  spec.size = 2;
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    const size_t rows = 16, cols = 24;
    const std::vector<int64_t> shape = {static_cast<int64_t>(rows), static_cast<int64_t>(cols)};
    auto step = [&](std::vector<float> x) -> absl::StatusOr<std::vector<float>> {
      std::vector<float> out(x.size());
      absl::Status s = ctx.engine()
                           .AllreduceAsync("robust", x.data(), out.data(), DataType::kFloat32,
                                           shape, ReduceOp::kSum, 1.0, 1.0, Engine::kWorld, {},
                                           Compression::PowerSgd(1))
                           .Wait();
      if (!s.ok()) return s;
      return out;
    };
    // Rank r sends (r + 1) u v^T: the sum, 3 u v^T, has rank 1.
    const std::vector<float> u = Normal(rows, 3), v = Normal(cols, 4);
    std::vector<float> one(rows * cols);
    for (size_t i = 0; i < rows; ++i) {
      for (size_t j = 0; j < cols; ++j) {
        one[i * cols + j] = static_cast<float>(ctx.rank() + 1) * u[i] * v[j];
      }
    }
    auto found = [&](const std::vector<float>& out, double times) -> absl::Status {
      for (size_t i = 0; i < rows; ++i) {
        for (size_t j = 0; j < cols; ++j) {
          const double want = times * 3.0 * u[i] * v[j];
          if (!(std::fabs(out[i * cols + j] - want) <= 1e-4 * (1 + std::fabs(want)))) {
            return absl::InternalError(
                absl::StrCat("(", i, ", ", j, ") = ", out[i * cols + j], ", want ", want));
          }
        }
      }
      return absl::OkStatus();
    };
    absl::StatusOr<std::vector<float>> out = step(std::vector<float>(rows * cols, 0.0f));
    CHECK_OK(out.status());
    for (float y : *out) CHECK_OK(Expect(y == 0.0f, "a zero step gives zeros"));
    out = step(one);
    CHECK_OK(out.status());
    CHECK_OK(found(*out, 1));  // not stuck at zero
    std::vector<float> bad = one;
    if (ctx.rank() == 0) bad[5] = std::nanf("");
    out = step(bad);
    CHECK_OK(out.status());
    out = step(one);
    CHECK_OK(out.status());
    for (float y : *out) CHECK_OK(Expect(std::isfinite(y), "finite after a NaN step"));
    std::printf("digest after-nan %llx\n",
                static_cast<unsigned long long>(Digest(out->data(), out->size() * 4)));
    // What the NaN step could not send came back in this one; the next is the plain sum.
    out = step(one);
    CHECK_OK(out.status());
    return found(*out, 1);
  });
  ExpectIdenticalDigests(job, 1);
}

TEST(CompressedAllreduce, PowerSgdFindsLowRankSumsAndFeedsBackTheRest) {
  JobSpec spec;
  spec.size = 3;
  spec.hosts = {"h0", "h1", "h2"};
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    const size_t rows = 64, cols = 96;
    const Compression rank2 = Compression::PowerSgd(2);
    // Rank r contributes u1 v_r^T + u2 w_r^T: the sum has rank 2.
    const std::vector<float> u1 = Normal(rows, 7), u2 = Normal(rows, 8);
    std::vector<double> exact(rows * cols, 0.0);
    std::vector<float> mine(rows * cols);
    for (int r = 0; r < ctx.size(); ++r) {
      const std::vector<float> v = Normal(cols, 20 + r), w = Normal(cols, 40 + r);
      for (size_t i = 0; i < rows; ++i) {
        for (size_t j = 0; j < cols; ++j) {
          const float x = u1[i] * v[j] + u2[i] * w[j];
          exact[i * cols + j] += x;
          if (r == ctx.rank()) mine[i * cols + j] = x;
        }
      }
    }
    std::vector<float> out(rows * cols);
    CHECK_OK(e.AllreduceAsync("lowrank", mine.data(), out.data(), DataType::kFloat32,
                              {static_cast<int64_t>(rows), static_cast<int64_t>(cols)},
                              ReduceOp::kSum, 1.0, 1.0, Engine::kWorld, {}, rank2)
                 .Wait());
    double worst = 0, largest = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      worst = std::max(worst, std::fabs(out[i] - exact[i]));
      largest = std::max(largest, std::fabs(exact[i]));
    }
    CHECK_OK(Expect(worst < 1e-4 * largest, absl::StrCat("rank 2 found: off by ", worst)));
    std::printf("digest lowrank %llx\n",
                static_cast<unsigned long long>(Digest(out.data(), out.size() * 4)));
    // A full-rank sum at rank 4, 40 times: the outputs add up to 40 sums, less what the
    // residuals hold (one step's loss at most).
    const std::vector<float> full = Normal(rows * cols, 90 + ctx.rank());
    std::vector<double> total(rows * cols, 0.0), sum(rows * cols, 0.0);
    for (int r = 0; r < ctx.size(); ++r) {
      const std::vector<float> x = Normal(rows * cols, 90 + r);
      for (size_t i = 0; i < x.size(); ++i) sum[i] += x[i];
    }
    const uint64_t before = e.stats().sent_bytes[static_cast<size_t>(Codec::kPowerSgd)];
    const int steps = 40;
    // Without error feedback every step would send the same rank-4 part of a flat spectrum
    // (about 97% of it lost, the total off by as much); with it, the residuals hold one step's
    // loss at most, so the total's error falls as 1 / steps.
    auto off_by = [&](int t) {
      double off = 0, size = 0;
      for (size_t i = 0; i < total.size(); ++i) {
        off += (total[i] - t * sum[i]) * (total[i] - t * sum[i]);
        size += t * sum[i] * t * sum[i];
      }
      return std::sqrt(off / size);
    };
    double at_half = 0;
    for (int t = 0; t < steps; ++t) {
      CHECK_OK(e.AllreduceAsync("full", full.data(), out.data(), DataType::kFloat32,
                                {static_cast<int64_t>(rows), static_cast<int64_t>(cols)},
                                ReduceOp::kSum, 1.0, 1.0, Engine::kWorld, {},
                                Compression::PowerSgd(4))
                   .Wait());
      for (size_t i = 0; i < out.size(); ++i) total[i] += out[i];
      if (t + 1 == steps / 2) at_half = off_by(t + 1);
    }
    const double at_end = off_by(steps);
    CHECK_OK(Expect(at_end < 0.35 && at_end < 0.7 * at_half,
                    absl::StrCat("error feedback: the outputs' total is off by ", at_end,
                                 " of the sums' (", at_half, " halfway)")));
    // P and Q: (64 + 96) x 4 floats a step, where the matrix is 64 x 96: 9.6 times fewer (less
    // on some ranks: P and Q are small, and small allreduces trade bytes for fewer rounds).
    const double sent =
        static_cast<double>(e.stats().sent_bytes[static_cast<size_t>(Codec::kPowerSgd)] - before);
    const double ring = 2.0 * (ctx.size() - 1) / ctx.size() * rows * cols * 4 * steps;
    CHECK_OK(Expect(sent > 0 && sent < ring / 4, absl::StrCat("sent ", sent, " of ", ring)));
    // Refused: a vector, a rank the matrix does not allow, a rank of 0.
    std::vector<float> small(3 * 64, 1.0f);
    CHECK_OK(ExpectError(e.AllreduceAsync("bias", small.data(), small.data(), DataType::kFloat32,
                                          {64}, ReduceOp::kSum, 1.0, 1.0, Engine::kWorld, {}, rank2)
                             .Wait(),
                         absl::StatusCode::kInvalidArgument,
                         {"'bias'",
                          "powersgd(rank=2) approximates matrices; this tensor has "
                          "shape [64]"}));
    CHECK_OK(ExpectError(
        e.AllreduceAsync("thin", small.data(), small.data(), DataType::kFloat32, {3, 64},
                         ReduceOp::kSum, 1.0, 1.0, Engine::kWorld, {}, Compression::PowerSgd(4))
            .Wait(),
        absl::StatusCode::kInvalidArgument,
        {"powersgd(rank=4) is more than the matrix allows: shape [3, 64] is 3 x 64, whose rank "
         "is at most 3"}));
    CHECK_OK(ExpectError(
        e.AllreduceAsync("zero", small.data(), small.data(), DataType::kFloat32, {3, 64},
                         ReduceOp::kSum, 1.0, 1.0, Engine::kWorld, {}, Compression::PowerSgd(0))
            .Wait(),
        absl::StatusCode::kInvalidArgument, {"PowerSGD needs a rank of 1 or more"}));
    return absl::OkStatus();
  });
  ExpectIdenticalDigests(job, 1);
}

// Ranks that compress a tensor differently are named, as the other disagreements are; integer
// tensors, max and min are refused at submission.
TEST(CompressedAllreduce, DisagreementsAreNamedAndWhatCannotBeCompressedRefused) {
  JobSpec spec;
  spec.size = 2;
  JobResult job = RunWithContext(spec, [](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    std::vector<float> x(64, 1.0f);
    const Compression mine = ctx.rank() == 0 ? Codec::kInt8 : Codec::kBf16;
    CHECK_OK(
        ExpectError(e.AllreduceAsync("g", x.data(), x.data(), DataType::kFloat32, {64},
                                     ReduceOp::kSum, 1.0, 1.0, Engine::kWorld, {}, mine)
                        .Wait(),
                    absl::StatusCode::kInvalidArgument,
                    {"'g'", "ranks disagree on the compression (rank 1: bf16; rank 0: int8)"}));
    std::vector<int32_t> ints(8, 1);
    CHECK_OK(ExpectError(
        e.AllreduceAsync("i", ints.data(), ints.data(), DataType::kInt32, {8}, ReduceOp::kSum, 1.0,
                         1.0, Engine::kWorld, {}, Codec::kInt8)
            .Wait(),
        absl::StatusCode::kInvalidArgument,
        {"allreduce 'i'", "int8 compression is for floating-point tensors; this one is i32"}));
    CHECK_OK(ExpectError(
        e.AllreduceAsync("m", x.data(), x.data(), DataType::kFloat32, {64}, ReduceOp::kMax, 1.0,
                         1.0, Engine::kWorld, {}, Codec::kBf16)
            .Wait(),
        absl::StatusCode::kInvalidArgument, {"bf16 compression sums (sum or average), not max"}));
    // The job goes on: the same tensor, agreed this time.
    CHECK_OK(e.AllreduceAsync("g2", x.data(), x.data(), DataType::kFloat32, {64},
                              ReduceOp::kAverage, 1.0, 1.0, Engine::kWorld, {}, Codec::kInt8)
                 .Wait());
    return Expect(x[0] == 1.0f && x[63] == 1.0f, "the average of ones");
  });
  ASSERT_FALSE(job.hung) << job.Summary();
  for (const RankResult& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

}  // namespace
}  // namespace ddp::testing
