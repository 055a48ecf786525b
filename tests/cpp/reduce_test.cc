// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Tests for the reduction kernels against scalar references written independently of them (exact
// arithmetic in double or absl::int128, rounding by nearbyint), and for the f16/bf16 conversions.
#include "reduce/reduce.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/numeric/int128.h"
#include "absl/strings/string_view.h"
#include "ddp/types.h"
#include "reduce/reduce_internal.h"

namespace ddp::reduce {
namespace {

using Rng = std::mt19937_64;

constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                                ReduceOp::kProduct};

// A fresh seed per test so repeated runs cover new data; DDP_TEST_SEED replays a failure.
uint64_t NewSeed() {
  if (const char* env = std::getenv("DDP_TEST_SEED")) return std::strtoull(env, nullptr, 10);
  std::random_device device;
  return (uint64_t{device()} << 32) | device();
}

class SeededTest : public ::testing::Test {
 protected:
  const uint64_t seed_ = NewSeed();
  const ::testing::ScopedTrace trace_{
      __FILE__, __LINE__, "seed " + std::to_string(seed_) + " (rerun with DDP_TEST_SEED=seed)"};
  Rng rng_{seed_};
};

// ---- Independent reference for the 16-bit float formats ----

struct MiniFloat {
  int mantissa_bits;
  int bias;
};
constexpr MiniFloat kHalf{10, 15};
constexpr MiniFloat kBF16{7, 127};

double RefDecode(MiniFloat f, uint16_t bits) {
  const int exp_field = (bits >> f.mantissa_bits) & (2 * f.bias + 1);
  const int mantissa = bits & ((1 << f.mantissa_bits) - 1);
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  if (exp_field == 2 * f.bias + 1) {
    return mantissa ? std::numeric_limits<double>::quiet_NaN()
                    : sign * std::numeric_limits<double>::infinity();
  }
  if (exp_field == 0) return sign * std::ldexp(mantissa, 1 - f.bias - f.mantissa_bits);
  return sign * std::ldexp(mantissa + (1 << f.mantissa_bits), exp_field - f.bias - f.mantissa_bits);
}

// Rounds x to the nearest value of the format, ties to even, overflowing to infinity.
double RefRound(MiniFloat f, double x) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  const int exp = std::max(std::ilogb(x), 1 - f.bias);
  const double quantum = std::ldexp(1.0, exp - f.mantissa_bits);
  const double rounded = std::nearbyint(std::fabs(x) / quantum) * quantum;
  const double overflow = std::ldexp(1.0, f.bias + 1);
  return std::copysign(rounded >= overflow ? HUGE_VAL : rounded, x);
}

// Encodes a value that the format represents exactly.
uint16_t RefEncode(MiniFloat f, double v) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const int max_exp_field = 2 * f.bias + 1;
  if (std::isnan(v)) return static_cast<uint16_t>(sign | (max_exp_field << f.mantissa_bits) | 1);
  if (std::isinf(v)) return static_cast<uint16_t>(sign | (max_exp_field << f.mantissa_bits));
  if (v == 0) return sign;
  const double a = std::fabs(v);
  const int exp = std::ilogb(a);
  if (exp < 1 - f.bias) {
    return static_cast<uint16_t>(sign |
                                 static_cast<int>(std::ldexp(a, f.bias - 1 + f.mantissa_bits)));
  }
  const int mantissa =
      static_cast<int>(std::ldexp(a, f.mantissa_bits - exp)) - (1 << f.mantissa_bits);
  return static_cast<uint16_t>(sign | ((exp + f.bias) << f.mantissa_bits) | mantissa);
}

// ---- Per-type reference and random data ----

double RefOp(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return a + b;
    case ReduceOp::kProduct:
      return a * b;
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
      // -0 counts as below +0 so the answer does not depend on operand order.
      if (a == b) return (std::signbit(a) == (op == ReduceOp::kMin)) ? a : b;
      return (a < b) == (op == ReduceOp::kMin) ? a : b;
  }
  return 0;
}

template <typename T>
T RefIntOp(ReduceOp op, T a, T b) {
  const absl::int128 x = a, y = b;
  absl::int128 r = 0;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      r = x + y;
      break;
    case ReduceOp::kProduct:
      r = x * y;
      break;
    case ReduceOp::kMin:
      r = std::min(x, y);
      break;
    case ReduceOp::kMax:
      r = std::max(x, y);
      break;
  }
  return static_cast<T>(absl::Int128Low64(r));  // Modular, i.e. two's complement wrap-around.
}

template <typename T>
T RandomFloating(Rng& rng) {
  using Limits = std::numeric_limits<T>;
  constexpr T kSpecials[] = {T{0},
                             -T{0},
                             Limits::infinity(),
                             -Limits::infinity(),
                             Limits::quiet_NaN(),
                             Limits::signaling_NaN(),
                             Limits::denorm_min(),
                             -Limits::denorm_min(),
                             Limits::max(),
                             Limits::lowest(),
                             Limits::min(),
                             T{1},
                             T{-1}};
  if (rng() % 16 == 0) return kSpecials[rng() % std::size(kSpecials)];
  const T mantissa = std::uniform_real_distribution<T>(1, 2)(rng);
  const int exp = static_cast<int>(rng() % 41) - 20;
  return std::ldexp(rng() % 2 ? mantissa : -mantissa, exp);
}

template <DataType kType>
struct Traits;

template <>
struct Traits<DataType::kFloat32> {
  using S = float;
  static S Random(Rng& rng) { return RandomFloating<float>(rng); }
  static S Expected(ReduceOp op, S a, S b) { return static_cast<float>(RefOp(op, a, b)); }
  static S Divided(S x, int64_t d) { return static_cast<float>(x / static_cast<double>(d)); }
  // The product of two floats is exact in double, so one rounding to float is the f32 product.
  static S Scaled(S x, double factor) {
    return static_cast<float>(static_cast<double>(x) * static_cast<float>(factor));
  }
};

template <>
struct Traits<DataType::kFloat64> {
  using S = double;
  static S Random(Rng& rng) { return RandomFloating<double>(rng); }
  static S Expected(ReduceOp op, S a, S b) { return RefOp(op, a, b); }
  static S Divided(S x, int64_t d) { return x / static_cast<double>(d); }
  static S Scaled(S x, double factor) { return x * factor; }  // No wider type makes this exact.
};

// The kernels compute f16/bf16 in f32, so the reference rounds to f32 first and then to 16 bits.
template <const MiniFloat& kFormat>
struct MiniFloatTraits {
  using S = uint16_t;
  static S Random(Rng& rng) { return static_cast<S>(rng()); }
  static S Expected(ReduceOp op, S a, S b) {
    const double exact = RefOp(op, RefDecode(kFormat, a), RefDecode(kFormat, b));
    return RefEncode(kFormat, RefRound(kFormat, static_cast<float>(exact)));
  }
  static S Divided(S x, int64_t d) {
    const double quotient = RefDecode(kFormat, x) / static_cast<double>(d);
    return RefEncode(kFormat, RefRound(kFormat, static_cast<float>(quotient)));
  }
  static S Scaled(S x, double factor) {
    const double exact = RefDecode(kFormat, x) * static_cast<float>(factor);
    return RefEncode(kFormat, RefRound(kFormat, static_cast<float>(exact)));
  }
};
template <>
struct Traits<DataType::kFloat16> : MiniFloatTraits<kHalf> {};
template <>
struct Traits<DataType::kBFloat16> : MiniFloatTraits<kBF16> {};

template <typename T>
struct IntTraits {
  using S = T;
  static S Random(Rng& rng) { return static_cast<S>(rng()); }
  static S Expected(ReduceOp op, S a, S b) { return RefIntOp(op, a, b); }
  static S Divided(S x, int64_t d) {
    return static_cast<S>(absl::Int128Low64(absl::int128(x) / absl::int128(d)));
  }
  // Horovod's rule: the product in f64, truncated; saturated; NaN is 0.
  static S Scaled(S x, double factor) {
    const double v = std::trunc(static_cast<double>(x) * factor);
    if (std::isnan(v)) return 0;
    if (v <= static_cast<double>(std::numeric_limits<S>::lowest())) {
      return std::numeric_limits<S>::lowest();
    }
    if (v >= static_cast<double>(std::numeric_limits<S>::max())) {
      return std::numeric_limits<S>::max();
    }
    return static_cast<S>(v);
  }
};
template <>
struct Traits<DataType::kInt8> : IntTraits<int8_t> {};
template <>
struct Traits<DataType::kUInt8> : IntTraits<uint8_t> {};
template <>
struct Traits<DataType::kInt32> : IntTraits<int32_t> {};
template <>
struct Traits<DataType::kInt64> : IntTraits<int64_t> {};

// Equal bits, or both NaN with the actual one quiet (payloads may legitimately differ).
template <DataType kType, typename S>
bool SameValue(S actual, S expected) {
  if constexpr (kType == DataType::kFloat32 || kType == DataType::kFloat64) {
    using Bits = std::conditional_t<sizeof(S) == 4, uint32_t, uint64_t>;
    if (std::isnan(expected)) {
      const Bits quiet = Bits{1} << (std::numeric_limits<S>::digits - 2);
      return std::isnan(actual) && (std::bit_cast<Bits>(actual) & quiet) != 0;
    }
    return std::bit_cast<Bits>(actual) == std::bit_cast<Bits>(expected);
  } else if constexpr (kType == DataType::kFloat16 || kType == DataType::kBFloat16) {
    const MiniFloat f = kType == DataType::kFloat16 ? kHalf : kBF16;
    const uint16_t quiet = static_cast<uint16_t>(1 << (f.mantissa_bits - 1));
    if (std::isnan(RefDecode(f, expected))) {
      return std::isnan(RefDecode(f, actual)) && (actual & quiet) != 0;
    }
    return actual == expected;
  } else {
    return actual == expected;
  }
}

template <DataType kType, typename S>
void ExpectAllSame(const S* actual, const S* expected, size_t count, const std::string& what) {
  size_t mismatches = 0;
  for (size_t i = 0; i < count; ++i) {
    if (SameValue<kType>(actual[i], expected[i])) continue;
    if (++mismatches <= 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << +actual[i] << ", expected "
                    << +expected[i];
    }
  }
  EXPECT_EQ(mismatches, 0u) << what;
}

// The kernels under test: the public entry points (on the ISA that the CPU and DDP_REDUCE_ISA
// choose), or one ISA's build beneath them.
struct Kernels {
  std::string name;
  std::optional<internal::Isa> isa;  // nullopt: the public entry points

  void Combine(DataType type, ReduceOp op, void* dst, const void* a, const void* b,
               size_t count) const {
    if (isa) return internal::CombineWith(*isa, type, op, dst, a, b, count);
    reduce::Combine(type, op, dst, a, b, count);
  }
  void DivideBy(DataType type, void* buf, size_t count, int64_t divisor) const {
    if (isa) return internal::DivideByWith(*isa, type, buf, count, divisor);
    reduce::DivideBy(type, buf, count, divisor);
  }
  void Scale(DataType type, void* dst, const void* src, size_t count, double factor) const {
    if (isa) return internal::ScaleWith(*isa, type, dst, src, count, factor);
    reduce::Scale(type, dst, src, count, factor);
  }
};
const Kernels kDispatched{"dispatched", std::nullopt};

template <DataType kType>
void CheckCombine(const Kernels& kernels, Rng& rng, ReduceOp op, size_t count) {
  using S = typename Traits<kType>::S;
  const auto combine = [&kernels](auto... args) { kernels.Combine(args...); };
  const std::string what = kernels.name + " " + std::string(DataTypeName(kType)) + " " +
                           std::string(ReduceOpName(op)) + " count " + std::to_string(count);
  // Element offsets 1, 3 and 2 make the three arrays differently misaligned; the guard elements
  // around dst catch writes past either end.
  std::vector<S> a(count + 4), b(count + 4), expected(count);
  for (S& v : a) v = Traits<kType>::Random(rng);
  for (S& v : b) v = Traits<kType>::Random(rng);
  const S* pa = a.data() + 1;
  const S* pb = b.data() + 3;
  for (size_t i = 0; i < count; ++i) expected[i] = Traits<kType>::Expected(op, pa[i], pb[i]);

  const S guard = static_cast<S>(0x5a);
  std::vector<S> dst(count + 4, guard);
  combine(kType, op, dst.data() + 2, pa, pb, count);
  ExpectAllSame<kType>(dst.data() + 2, expected.data(), count, what);
  for (size_t i : {size_t{0}, size_t{1}, count + 2, count + 3}) {
    EXPECT_EQ(dst[i], guard) << what << ": wrote outside dst at " << i;
  }

  // In place, either way round: same answer (NaN payloads aside).
  std::vector<S> io(a);
  combine(kType, op, io.data() + 1, io.data() + 1, pb, count);
  ExpectAllSame<kType>(io.data() + 1, expected.data(), count, what + " dst==a");
  io = b;
  combine(kType, op, io.data() + 3, pa, io.data() + 3, count);
  ExpectAllSame<kType>(io.data() + 3, expected.data(), count, what + " dst==b");

  // Both inputs the same array, with and without dst being it too.
  for (size_t i = 0; i < count; ++i) expected[i] = Traits<kType>::Expected(op, pa[i], pa[i]);
  combine(kType, op, dst.data() + 2, pa, pa, count);
  ExpectAllSame<kType>(dst.data() + 2, expected.data(), count, what + " a==b");
  io = a;
  combine(kType, op, io.data() + 1, io.data() + 1, io.data() + 1, count);
  ExpectAllSame<kType>(io.data() + 1, expected.data(), count, what + " dst==a==b");
}

template <DataType kType>
void CheckDivide(const Kernels& kernels, Rng& rng, int64_t divisor, size_t count) {
  using S = typename Traits<kType>::S;
  std::vector<S> buf(count + 1), expected(count);
  for (S& v : buf) v = Traits<kType>::Random(rng);
  for (size_t i = 0; i < count; ++i) expected[i] = Traits<kType>::Divided(buf[i + 1], divisor);
  kernels.DivideBy(kType, buf.data() + 1, count, divisor);
  ExpectAllSame<kType>(buf.data() + 1, expected.data(), count,
                       kernels.name + " " + std::string(DataTypeName(kType)) + " / " +
                           std::to_string(divisor) + " count " + std::to_string(count));
}

// Out of place (src and dst differently misaligned) and in place.
template <DataType kType>
void CheckScale(const Kernels& kernels, Rng& rng, double factor, size_t count) {
  using S = typename Traits<kType>::S;
  std::vector<S> src(count + 1), dst(count + 2), expected(count);
  for (S& v : src) v = Traits<kType>::Random(rng);
  for (size_t i = 0; i < count; ++i) expected[i] = Traits<kType>::Scaled(src[i + 1], factor);
  const std::string what = kernels.name + " " + std::string(DataTypeName(kType)) + " * " +
                           std::to_string(factor) + " count " + std::to_string(count);
  kernels.Scale(kType, dst.data() + 2, src.data() + 1, count, factor);
  ExpectAllSame<kType>(dst.data() + 2, expected.data(), count, what);
  kernels.Scale(kType, src.data() + 1, src.data() + 1, count, factor);
  ExpectAllSame<kType>(src.data() + 1, expected.data(), count, what + " in place");
}

// The counts for the public entry points: the edges, and sizes well past any block or cache.
constexpr size_t kCombineCounts[] = {0, 1, 7, 1000, 1000003};
constexpr size_t kDivideCounts[] = {0, 1, 7, 1000, 100003};
// The counts for each ISA's build: around every vector width and block size (kBlock = 256).
constexpr size_t kIsaCounts[] = {0, 1, 7, 15, 16, 17, 31, 33, 255, 256, 257, 1000, 4099};

template <DataType kType>
void CheckType(Rng& rng, const Kernels& kernels, std::span<const size_t> combine_counts,
               std::span<const size_t> divide_counts) {
  for (ReduceOp op : kAllOps) {
    for (size_t count : combine_counts) CheckCombine<kType>(kernels, rng, op, count);
  }
  for (int64_t divisor : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{-1}, int64_t{-7},
                          int64_t{1000}, int64_t{1} << 40, std::numeric_limits<int64_t>::min()}) {
    for (size_t count : divide_counts) CheckDivide<kType>(kernels, rng, divisor, count);
  }
  for (double factor : {1.0, 0.5, -3.0, 1.0 / 3, 1e-3, 1e30, 1e-40, -0.0, HUGE_VAL,
                        std::numeric_limits<double>::quiet_NaN()}) {
    for (size_t count : divide_counts) CheckScale<kType>(kernels, rng, factor, count);
  }
}

template <DataType kType>
void CheckDispatched(Rng& rng) {
  CheckType<kType>(rng, kDispatched, kCombineCounts, kDivideCounts);
}

using ReduceTest = SeededTest;

TEST_F(ReduceTest, Float32MatchesReference) { CheckDispatched<DataType::kFloat32>(rng_); }
TEST_F(ReduceTest, Float64MatchesReference) { CheckDispatched<DataType::kFloat64>(rng_); }
TEST_F(ReduceTest, Float16MatchesReference) { CheckDispatched<DataType::kFloat16>(rng_); }
TEST_F(ReduceTest, BFloat16MatchesReference) { CheckDispatched<DataType::kBFloat16>(rng_); }
TEST_F(ReduceTest, Int8MatchesReference) { CheckDispatched<DataType::kInt8>(rng_); }
TEST_F(ReduceTest, UInt8MatchesReference) { CheckDispatched<DataType::kUInt8>(rng_); }
TEST_F(ReduceTest, Int32MatchesReference) { CheckDispatched<DataType::kInt32>(rng_); }
TEST_F(ReduceTest, Int64MatchesReference) { CheckDispatched<DataType::kInt64>(rng_); }

// The same reference checks on every ISA's build of the kernels that this CPU can run, whatever
// the dispatch would choose.
class ReduceIsaTest : public SeededTest, public ::testing::WithParamInterface<internal::Isa> {
 protected:
  void SetUp() override {
    if (!internal::IsaSupported(GetParam())) {
      GTEST_SKIP() << "the " << internal::IsaName(GetParam())
                   << " kernels cannot run on this CPU (or were not built for it), so they are "
                      "not tested here";
    }
  }
  template <DataType kType>
  void Check() {
    const internal::Isa isa = GetParam();
    CheckType<kType>(rng_, Kernels{internal::IsaName(isa), isa}, kIsaCounts, kIsaCounts);
  }
};

TEST_P(ReduceIsaTest, Float32MatchesReference) { Check<DataType::kFloat32>(); }
TEST_P(ReduceIsaTest, Float64MatchesReference) { Check<DataType::kFloat64>(); }
TEST_P(ReduceIsaTest, Float16MatchesReference) { Check<DataType::kFloat16>(); }
TEST_P(ReduceIsaTest, BFloat16MatchesReference) { Check<DataType::kBFloat16>(); }
TEST_P(ReduceIsaTest, Int8MatchesReference) { Check<DataType::kInt8>(); }
TEST_P(ReduceIsaTest, UInt8MatchesReference) { Check<DataType::kUInt8>(); }
TEST_P(ReduceIsaTest, Int32MatchesReference) { Check<DataType::kInt32>(); }
TEST_P(ReduceIsaTest, Int64MatchesReference) { Check<DataType::kInt64>(); }

std::string IsaParamName(const ::testing::TestParamInfo<internal::Isa>& param) {
  return internal::IsaName(param.param);
}

INSTANTIATE_TEST_SUITE_P(EveryIsa, ReduceIsaTest,
                         ::testing::Values(internal::Isa::kScalar, internal::Isa::kAvx2,
                                           internal::Isa::kAvx512),
                         IsaParamName);

TEST(ReduceEdgeTest, ZeroCountTouchesNothing) {
  for (ReduceOp op : kAllOps) Combine(DataType::kFloat32, op, nullptr, nullptr, nullptr, 0);
  DivideBy(DataType::kInt64, nullptr, 0, 3);
}

template <typename T>
T CombineOne(DataType type, ReduceOp op, T a, T b) {
  T out{};
  Combine(type, op, &out, &a, &b, 1);
  return out;
}

TEST(ReduceEdgeTest, MinMaxPropagateNanEitherSide) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
    for (auto [a, b] : {std::pair{nan, 1.0f}, {1.0f, nan}, {nan, nan}, {-inf, nan}, {nan, inf}}) {
      EXPECT_TRUE(std::isnan(CombineOne(DataType::kFloat32, op, a, b))) << a << " " << b;
      EXPECT_TRUE(std::isnan(CombineOne(DataType::kFloat64, op, double{a}, double{b})));
      EXPECT_TRUE(std::isnan(
          HalfToFloat(CombineOne(DataType::kFloat16, op, FloatToHalf(a), FloatToHalf(b)))));
      EXPECT_TRUE(std::isnan(BFloat16ToFloat(
          CombineOne(DataType::kBFloat16, op, FloatToBFloat16(a), FloatToBFloat16(b)))));
    }
  }
}

TEST(ReduceEdgeTest, SignedZeroDoesNotDependOnOrder) {
  for (auto [a, b] : {std::pair{0.0f, -0.0f}, {-0.0f, 0.0f}}) {
    EXPECT_TRUE(std::signbit(CombineOne(DataType::kFloat32, ReduceOp::kMin, a, b)));
    EXPECT_FALSE(std::signbit(CombineOne(DataType::kFloat32, ReduceOp::kMax, a, b)));
    EXPECT_EQ(CombineOne(DataType::kFloat16, ReduceOp::kMin, FloatToHalf(a), FloatToHalf(b)),
              0x8000);
    EXPECT_EQ(
        CombineOne(DataType::kBFloat16, ReduceOp::kMax, FloatToBFloat16(a), FloatToBFloat16(b)),
        0x0000);
  }
}

TEST(ReduceEdgeTest, IntegersWrapAround) {
  using I32 = std::numeric_limits<int32_t>;
  using I64 = std::numeric_limits<int64_t>;
  EXPECT_EQ(CombineOne<int8_t>(DataType::kInt8, ReduceOp::kSum, 127, 1), -128);
  EXPECT_EQ(CombineOne<int8_t>(DataType::kInt8, ReduceOp::kProduct, -128, -1), -128);
  EXPECT_EQ(CombineOne<uint8_t>(DataType::kUInt8, ReduceOp::kSum, 255, 1), 0);
  EXPECT_EQ(CombineOne<uint8_t>(DataType::kUInt8, ReduceOp::kProduct, 16, 16), 0);
  EXPECT_EQ(CombineOne<int32_t>(DataType::kInt32, ReduceOp::kSum, I32::max(), 1), I32::min());
  EXPECT_EQ(CombineOne<int32_t>(DataType::kInt32, ReduceOp::kProduct, 65536, 65536), 0);
  EXPECT_EQ(CombineOne<int64_t>(DataType::kInt64, ReduceOp::kSum, I64::max(), 1), I64::min());
  EXPECT_EQ(CombineOne<int64_t>(DataType::kInt64, ReduceOp::kProduct, I64::min(), -1), I64::min());
}

TEST(ReduceEdgeTest, IntegerDivisionTruncatesTowardZero) {
  std::vector<int8_t> i8 = {-7, 7, -1, -128};
  DivideBy(DataType::kInt8, i8.data(), i8.size(), 2);
  EXPECT_EQ(i8, (std::vector<int8_t>{-3, 3, 0, -64}));
  std::vector<int32_t> i32 = {-7, 7, -1, std::numeric_limits<int32_t>::min()};
  DivideBy(DataType::kInt32, i32.data(), i32.size(), -2);
  EXPECT_EQ(i32, (std::vector<int32_t>{3, -3, 0, 1 << 30}));
  std::vector<int64_t> i64 = {-7, 7, -1, std::numeric_limits<int64_t>::min()};
  DivideBy(DataType::kInt64, i64.data(), i64.size(), 2);
  EXPECT_EQ(i64, (std::vector<int64_t>{-3, 3, 0, std::numeric_limits<int64_t>::min() / 2}));
  DivideBy(DataType::kInt64, i64.data(), i64.size(), -1);  // MIN / -1 wraps instead of trapping.
  EXPECT_EQ(i64, (std::vector<int64_t>{3, -3, 0, -(std::numeric_limits<int64_t>::min() / 2)}));
  std::vector<uint8_t> u8 = {255, 7};
  DivideBy(DataType::kUInt8, u8.data(), u8.size(), 2);
  EXPECT_EQ(u8, (std::vector<uint8_t>{127, 3}));
}

// ---- Conversions ----

struct FormatCase {
  MiniFloat format;
  float (*to_float)(uint16_t);
  uint16_t (*from_float)(float);
  uint16_t max_finite;  // Bits of the largest finite positive value.
};
const FormatCase kFormats[] = {{kHalf, HalfToFloat, FloatToHalf, 0x7bff},
                               {kBF16, BFloat16ToFloat, FloatToBFloat16, 0x7f7f}};

TEST(ConversionTest, AllBitPatternsDecodeAndRoundTrip) {
  for (const FormatCase& c : kFormats) {
    const uint16_t quiet = static_cast<uint16_t>(1 << (c.format.mantissa_bits - 1));
    for (uint32_t i = 0; i <= 0xffff; ++i) {
      const auto bits = static_cast<uint16_t>(i);
      const float f = c.to_float(bits);
      const double ref = RefDecode(c.format, bits);
      if (std::isnan(ref)) {
        ASSERT_TRUE(std::isnan(f)) << bits;
        ASSERT_NE(std::bit_cast<uint32_t>(f) & 0x00400000u, 0u) << bits << " not quiet";
        // Payload and sign survive; only the quiet bit is forced on.
        ASSERT_EQ(c.from_float(f), bits | quiet) << bits;
      } else {
        ASSERT_EQ(f, ref) << bits;
        ASSERT_EQ(std::signbit(f), std::signbit(ref)) << bits;
        ASSERT_EQ(c.from_float(f), bits) << bits;
      }
    }
  }
}

// Every midpoint between adjacent values (the ties), and the floats just either side of it,
// including the one between the largest finite value and the overflow threshold.
TEST(ConversionTest, TiesRoundToEvenAndNeighboursRoundToNearest) {
  for (const FormatCase& c : kFormats) {
    for (uint32_t lo = 0; lo <= c.max_finite; ++lo) {
      const double lo_value = RefDecode(c.format, static_cast<uint16_t>(lo));
      const double hi_value = lo == c.max_finite
                                  ? std::ldexp(1.0, c.format.bias + 1)
                                  : RefDecode(c.format, static_cast<uint16_t>(lo + 1));
      const auto mid = static_cast<float>((lo_value + hi_value) / 2);
      ASSERT_EQ(static_cast<double>(mid), (lo_value + hi_value) / 2) << "midpoint not exact";
      for (uint32_t sign : {0u, 0x8000u}) {
        const float s = sign ? -1.0f : 1.0f;
        const auto want_lo = static_cast<uint16_t>(lo | sign);
        const auto want_hi = static_cast<uint16_t>((lo + 1) | sign);
        ASSERT_EQ(c.from_float(s * mid), lo % 2 == 0 ? want_lo : want_hi) << lo;
        ASSERT_EQ(c.from_float(s * std::nextafter(mid, 0.0f)), want_lo) << lo;
        ASSERT_EQ(c.from_float(s * std::nextafter(mid, HUGE_VALF)), want_hi) << lo;
      }
    }
  }
}

using ConversionRandomTest = SeededTest;

TEST_F(ConversionRandomTest, FloatsRoundLikeReference) {
  for (const FormatCase& c : kFormats) {
    for (int i = 0; i < 2'000'000; ++i) {
      // Half the draws spread over all floats; half concentrate on the half-precision range.
      auto bits = static_cast<uint32_t>(rng_());
      if (i % 2) bits = (bits & 0x807fffffu) | ((100u + static_cast<uint32_t>(rng_() % 46)) << 23);
      const float f = std::bit_cast<float>(bits);
      const uint16_t got = c.from_float(f);
      if (std::isnan(f)) {
        ASSERT_TRUE(std::isnan(RefDecode(c.format, got))) << bits;
        continue;
      }
      ASSERT_EQ(got, RefEncode(c.format, RefRound(c.format, f))) << "float bits " << bits;
    }
  }
}

// ---- DataType / ReduceOp helpers ----

TEST(TypesTest, NamesRoundTripAndSizes) {
  const size_t sizes[] = {4, 8, 2, 2, 1, 1, 4, 8};
  for (int i = 0; i < kNumDataTypes; ++i) {
    const auto type = static_cast<DataType>(i);
    EXPECT_TRUE(IsValid(type));
    EXPECT_EQ(DataTypeSize(type), sizes[i]);
    EXPECT_EQ(*ParseDataType(DataTypeName(type)), type);
  }
  for (int i = 0; i < kNumReduceOps; ++i) {
    const auto op = static_cast<ReduceOp>(i);
    EXPECT_TRUE(IsValid(op));
    EXPECT_EQ(*ParseReduceOp(ReduceOpName(op)), op);
  }
  EXPECT_FALSE(IsValid(static_cast<DataType>(kNumDataTypes)));
  EXPECT_FALSE(IsValid(static_cast<ReduceOp>(kNumReduceOps)));
}

TEST(TypesTest, ParsesLongNamesCaseInsensitively) {
  EXPECT_EQ(*ParseDataType("Float32"), DataType::kFloat32);
  EXPECT_EQ(*ParseDataType("DOUBLE"), DataType::kFloat64);
  EXPECT_EQ(*ParseDataType("half"), DataType::kFloat16);
  EXPECT_EQ(*ParseDataType("BFloat16"), DataType::kBFloat16);
  EXPECT_EQ(*ParseDataType("uint8"), DataType::kUInt8);
  EXPECT_EQ(*ParseDataType("int"), DataType::kInt32);
  EXPECT_EQ(*ParseDataType("long"), DataType::kInt64);
  EXPECT_EQ(*ParseReduceOp("Mean"), ReduceOp::kAverage);
  EXPECT_EQ(*ParseReduceOp("avg"), ReduceOp::kAverage);
  EXPECT_EQ(*ParseReduceOp("PROD"), ReduceOp::kProduct);
}

TEST(TypesTest, BadNamesAreInvalidArgumentListingChoices) {
  for (const char* name : {"", "f8", "float128", "f32 ", "complex64"}) {
    const absl::StatusOr<DataType> type = ParseDataType(name);
    ASSERT_FALSE(type.ok()) << name;
    EXPECT_EQ(type.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(type.status().message().find("bfloat16"), absl::string_view::npos);
  }
  const absl::StatusOr<ReduceOp> op = ParseReduceOp("median");
  ASSERT_FALSE(op.ok());
  EXPECT_EQ(op.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(op.status().message().find("product"), absl::string_view::npos);
}

// The timeline's reduction time: counted on this thread only while a CombineTimer lives.
TEST(CombineTimer, CountsTheTimeInCombineWhileItLives) {
  std::vector<float> a(1 << 20, 1.0f), b(1 << 20, 2.0f);
  {
    CombineTimer timer;
    EXPECT_EQ(timer.nanos(), 0);
    for (int i = 0; i < 4; ++i)
      Combine(DataType::kFloat32, ReduceOp::kSum, a.data(), a.data(), b.data(), a.size());
    EXPECT_GT(timer.nanos(), 0);
  }
  CombineTimer later;  // a new timer starts from zero; none was counting in between
  Combine(DataType::kFloat32, ReduceOp::kSum, a.data(), a.data(), b.data(), a.size());
  EXPECT_GT(later.nanos(), 0);
  EXPECT_EQ(a[0], 11.0f);
}

// The timeline's REDUCE slices: when this thread was in Combine, calls back to back as one.
TEST(CombineTimer, NotesWhenThisThreadWasInCombine) {
  std::vector<float> a(1 << 16, 1.0f), b(1 << 16, 2.0f);
  CombineTimer timer;
  EXPECT_TRUE(timer.intervals().empty());
  for (int i = 0; i < 3; ++i) {
    Combine(DataType::kFloat32, ReduceOp::kSum, a.data(), a.data(), b.data(), a.size());
    ::usleep(3000);  // a transfer's time, say
  }
  const std::vector<CombineTimer::Interval>& seen = timer.intervals();
  ASSERT_EQ(seen.size(), 3u);
  int64_t in_combine = 0;
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_LT(seen[i].start, seen[i].end);
    EXPECT_EQ(seen[i].busy, seen[i].end - seen[i].start);
    if (i > 0) {
      EXPECT_GE(seen[i].start - seen[i - 1].end, 3'000'000);
    }
    in_combine += seen[i].busy;
  }
  EXPECT_EQ(in_combine, timer.nanos());
}

// Past kMaxIntervals the closest intervals merge: the longest gap (a stall) stays a gap, and
// the busy time is all still there.
TEST(CombineTimer, PastItsCapMergesTheClosestAndKeepsTheLongestGaps) {
  std::vector<float> a(8, 1.0f), b(8, 2.0f);
  auto spin = [](int64_t nanos) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(nanos);
    while (std::chrono::steady_clock::now() < until) {
    }
  };
  CombineTimer timer;
  int64_t stall_from = 0;
  for (size_t i = 0; i < CombineTimer::kMaxIntervals + 500; ++i) {
    Combine(DataType::kFloat32, ReduceOp::kSum, a.data(), a.data(), b.data(), a.size());
    if (i == 3000) {
      stall_from = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::steady_clock::now().time_since_epoch())
                       .count();
      ::usleep(20000);
    } else {
      spin(3000);  // apart: not joined as back to back
    }
  }
  const std::vector<CombineTimer::Interval>& seen = timer.intervals();
  EXPECT_LE(seen.size(), CombineTimer::kMaxIntervals);
  int64_t busy = 0;
  bool stall_kept = false;
  for (size_t i = 0; i < seen.size(); ++i) {
    busy += seen[i].busy;
    if (i > 0 && seen[i - 1].end <= stall_from && seen[i].start - seen[i - 1].end >= 20'000'000) {
      stall_kept = true;
    }
  }
  EXPECT_EQ(busy, timer.nanos());
  EXPECT_TRUE(stall_kept);
  std::vector<CombineTimer::Interval> few = seen;
  MergeToAtMost(few, 2);  // the stall is the longest gap
  ASSERT_EQ(few.size(), 2u);
  EXPECT_GE(few[1].start - few[0].end, 20'000'000);
  EXPECT_EQ(few[0].busy + few[1].busy, timer.nanos());
  MergeToAtMost(few, 1);
  ASSERT_EQ(few.size(), 1u);
  EXPECT_EQ(few[0].busy, timer.nanos());
}

}  // namespace
}  // namespace ddp::reduce
