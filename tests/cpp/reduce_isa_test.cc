// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Every ISA's build of the reduction kernels gives the same bits as the scalar build, for every
// type, op, count, misalignment and aliasing, on data full of special values; and the choice of
// ISA (CPU detection, DDP_REDUCE_ISA) behaves as reduce_internal.h says.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "ddp/types.h"
#include "reduce/reduce.h"
#include "reduce/reduce_internal.h"

namespace ddp::reduce {
namespace {

using internal::Isa;
using Rng = std::mt19937_64;

constexpr DataType kAllTypes[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                                  DataType::kBFloat16, DataType::kInt8,    DataType::kUInt8,
                                  DataType::kInt32,    DataType::kInt64};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                                ReduceOp::kProduct};
// Around every vector width (up to 64 bytes) and the blocks of 256 elements.
constexpr size_t kCounts[] = {0, 1, 7, 15, 16, 17, 31, 33, 255, 256, 257, 1000, 4099};
// Element offsets of dst, a and b from a 64-byte boundary: aligned, and misaligned differently.
struct Offsets {
  size_t dst, a, b;
};
constexpr Offsets kOffsets[] = {{0, 0, 0}, {1, 3, 2}, {7, 5, 1}};

uint64_t NewSeed() {
  if (const char* env = std::getenv("DDP_TEST_SEED")) return std::strtoull(env, nullptr, 10);
  std::random_device device;
  return (uint64_t{device()} << 32) | device();
}

// Random values of every class: mostly finite values over a few binades (so that sums and
// products stay interesting), with specials, subnormals, raw bit patterns (every NaN payload) and,
// for f16/bf16, pairs whose sum lies exactly halfway between two representable values.
class Data {
 public:
  explicit Data(Rng& rng) : rng_(rng) {}

  void Fill(DataType type, uint8_t* p, size_t count) {
    for (size_t i = 0; i < count; ++i) FillOne(type, p + i * DataTypeSize(type));
  }

  // b[i] becomes half a unit in the last place of a[i] (either sign) where that is representable,
  // so that a[i] + b[i] is a tie that the rounding to f16/bf16 must break to even.
  void MakeTies(DataType type, const uint8_t* a, uint8_t* b, size_t count) {
    if (type != DataType::kFloat16 && type != DataType::kBFloat16) return;
    const int mantissa_bits = type == DataType::kFloat16 ? 10 : 7;
    for (size_t i = 0; i < count; ++i) {
      if (rng_() % 2) continue;
      uint16_t bits;
      std::memcpy(&bits, a + 2 * i, 2);
      const float value = type == DataType::kFloat16 ? HalfToFloat(bits) : BFloat16ToFloat(bits);
      if (!std::isfinite(value) || value == 0) continue;
      const float half_ulp =
          std::ldexp(rng_() % 2 ? 1.0f : -1.0f, std::ilogb(value) - mantissa_bits - 1);
      const uint16_t tie =
          type == DataType::kFloat16 ? FloatToHalf(half_ulp) : FloatToBFloat16(half_ulp);
      std::memcpy(b + 2 * i, &tie, 2);
    }
  }

 private:
  template <typename T>
  T Floating() {
    using Limits = std::numeric_limits<T>;
    constexpr T kSpecials[] = {T{0},
                               -T{0},
                               Limits::infinity(),
                               -Limits::infinity(),
                               Limits::quiet_NaN(),
                               -Limits::quiet_NaN(),
                               Limits::signaling_NaN(),
                               Limits::denorm_min(),
                               -Limits::denorm_min(),
                               Limits::min() / 3,
                               Limits::max(),
                               Limits::lowest(),
                               Limits::min(),
                               T{1},
                               T{-1}};
    switch (rng_() % 8) {
      case 0:
        return kSpecials[rng_() % std::size(kSpecials)];
      case 1: {  // Any bit pattern: NaNs with payloads, subnormals, huge and tiny values.
        using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
        return std::bit_cast<T>(static_cast<Bits>(rng_()));
      }
      default: {
        const T mantissa = std::uniform_real_distribution<T>(1, 2)(rng_);
        return std::ldexp(rng_() % 2 ? mantissa : -mantissa, static_cast<int>(rng_() % 21) - 10);
      }
    }
  }

  // Half the values spread over every bit pattern; half are small numbers (exponent near 0), so
  // that products neither overflow nor underflow all the time.
  uint16_t Narrow(int exp_bias, int mantissa_bits) {
    const auto bits = static_cast<uint16_t>(rng_());
    if (rng_() % 2) return bits;
    const auto exp = static_cast<uint16_t>(exp_bias - 4 + static_cast<int>(rng_() % 9));
    const uint16_t mantissa = bits & ((1u << mantissa_bits) - 1);
    return static_cast<uint16_t>((bits & 0x8000u) | (exp << mantissa_bits) | mantissa);
  }

  template <typename T>
  T Integer() {
    constexpr T kSpecials[] = {0, 1, static_cast<T>(-1), std::numeric_limits<T>::min(),
                               std::numeric_limits<T>::max()};
    if (rng_() % 8 == 0) return kSpecials[rng_() % std::size(kSpecials)];
    return static_cast<T>(rng_());
  }

  void FillOne(DataType type, uint8_t* p) {
    auto put = [p](auto v) { std::memcpy(p, &v, sizeof(v)); };
    switch (type) {
      case DataType::kFloat32:
        return put(Floating<float>());
      case DataType::kFloat64:
        return put(Floating<double>());
      case DataType::kFloat16:
        return put(Narrow(15, 10));
      case DataType::kBFloat16:
        return put(Narrow(127, 7));
      case DataType::kInt8:
        return put(Integer<int8_t>());
      case DataType::kUInt8:
        return put(Integer<uint8_t>());
      case DataType::kInt32:
        return put(Integer<int32_t>());
      case DataType::kInt64:
        return put(Integer<int64_t>());
    }
  }

  Rng& rng_;
};

// A buffer whose element 0 starts on a 64-byte boundary, with guard bytes after the end.
class Buffer {
 public:
  static constexpr uint8_t kGuard = 0xa5;
  Buffer(DataType type, size_t count, size_t offset)
      : size_(DataTypeSize(type)), bytes_((offset + count) * size_ + 64 + kGuardBytes, kGuard) {
    const auto address = reinterpret_cast<uintptr_t>(bytes_.data());
    begin_ = (64 - address % 64) % 64 + offset * size_;
    end_ = begin_ + count * size_;
  }
  uint8_t* data() { return bytes_.data() + begin_; }
  bool GuardsIntact() const {
    for (size_t i = 0; i < begin_; ++i) {
      if (bytes_[i] != kGuard) return false;
    }
    for (size_t i = end_; i < end_ + kGuardBytes; ++i) {
      if (bytes_[i] != kGuard) return false;
    }
    return true;
  }

 private:
  static constexpr size_t kGuardBytes = 64;
  size_t size_;
  std::vector<uint8_t> bytes_;
  size_t begin_ = 0;
  size_t end_ = 0;
};

// Equal bits, element by element: NaN payloads included (reduce.h: a NaN result is the first NaN
// operand, made quiet).
void ExpectSameBits(DataType type, const uint8_t* actual, const uint8_t* expected, size_t count,
                    const std::string& what) {
  const size_t size = DataTypeSize(type);
  size_t mismatches = 0;
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* x = actual + i * size;
    const uint8_t* y = expected + i * size;
    if (std::memcmp(x, y, size) == 0) continue;
    if (++mismatches > 5) continue;
    std::string x_hex, y_hex;
    for (size_t k = size; k-- > 0;) {
      absl::StrAppend(&x_hex, absl::Hex(x[k], absl::kZeroPad2));
      absl::StrAppend(&y_hex, absl::Hex(y[k], absl::kZeroPad2));
    }
    ADD_FAILURE() << what << ": element " << i << " is 0x" << x_hex << ", scalar gives 0x" << y_hex;
  }
  EXPECT_EQ(mismatches, 0u) << what;
}

class ReduceIsaBitsTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!internal::IsaSupported(GetParam())) {
      GTEST_SKIP() << "the " << internal::IsaName(GetParam())
                   << " kernels cannot run on this CPU (or were not built for it), so they are "
                      "not compared here";
    }
  }

  const uint64_t seed_ = NewSeed();
  const ::testing::ScopedTrace trace_{
      __FILE__, __LINE__, "seed " + std::to_string(seed_) + " (rerun with DDP_TEST_SEED=seed)"};
  Rng rng_{seed_};
  Data data_{rng_};
};

// The five ways dst, a and b can share memory that reduce.h allows.
enum class Aliasing { kDistinct, kDstIsA, kDstIsB, kAIsB, kAll };
constexpr Aliasing kAllAliasings[] = {Aliasing::kDistinct, Aliasing::kDstIsA, Aliasing::kDstIsB,
                                      Aliasing::kAIsB, Aliasing::kAll};
const char* AliasingName(Aliasing aliasing) {
  constexpr const char* kNames[] = {"distinct", "dst==a", "dst==b", "a==b", "dst==a==b"};
  return kNames[static_cast<int>(aliasing)];
}

// Runs Combine on one ISA and on the scalar build, from the same inputs laid out the same way.
void CompareCombine(Isa isa, Data& data, DataType type, ReduceOp op, size_t count, Offsets offsets,
                    Aliasing aliasing) {
  const size_t size = DataTypeSize(type);
  Buffer a(type, count, offsets.a), b(type, count, offsets.b);
  data.Fill(type, a.data(), count);
  data.Fill(type, b.data(), count);
  data.MakeTies(type, a.data(), b.data(), count);
  if (aliasing == Aliasing::kAIsB || aliasing == Aliasing::kAll) {
    std::memcpy(b.data(), a.data(), count * size);
  }

  // Each run gets fresh copies of the inputs, placed where the aliasing case puts them.
  auto run = [&](Isa which, Buffer& out) {
    Buffer in_a(type, count, offsets.a), in_b(type, count, offsets.b);
    std::memcpy(in_a.data(), a.data(), count * size);
    std::memcpy(in_b.data(), b.data(), count * size);
    switch (aliasing) {
      case Aliasing::kDistinct:
        internal::CombineWith(which, type, op, out.data(), in_a.data(), in_b.data(), count);
        return;
      case Aliasing::kDstIsA:
        internal::CombineWith(which, type, op, in_a.data(), in_a.data(), in_b.data(), count);
        break;
      case Aliasing::kDstIsB:
        internal::CombineWith(which, type, op, in_b.data(), in_a.data(), in_b.data(), count);
        std::memcpy(out.data(), in_b.data(), count * size);
        EXPECT_TRUE(in_b.GuardsIntact());
        return;
      case Aliasing::kAIsB:
        internal::CombineWith(which, type, op, out.data(), in_a.data(), in_a.data(), count);
        return;
      case Aliasing::kAll:
        internal::CombineWith(which, type, op, in_a.data(), in_a.data(), in_a.data(), count);
        break;
    }
    std::memcpy(out.data(), in_a.data(), count * size);
    EXPECT_TRUE(in_a.GuardsIntact());
  };
  Buffer got(type, count, offsets.dst), want(type, count, offsets.dst);
  run(isa, got);
  run(Isa::kScalar, want);
  const std::string what = absl::StrCat(
      internal::IsaName(isa), " ", DataTypeName(type), " ", ReduceOpName(op), " count ", count,
      " offsets ", offsets.dst, "/", offsets.a, "/", offsets.b, " ", AliasingName(aliasing));
  EXPECT_TRUE(got.GuardsIntact()) << what << ": wrote outside dst";
  ExpectSameBits(type, got.data(), want.data(), count, what);
}

TEST_P(ReduceIsaBitsTest, CombineMatchesScalarBitForBit) {
  for (DataType type : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      for (size_t count : kCounts) {
        for (const Offsets& offsets : kOffsets) {
          for (Aliasing aliasing : kAllAliasings) {
            CompareCombine(GetParam(), data_, type, op, count, offsets, aliasing);
          }
        }
      }
    }
  }
}

TEST_P(ReduceIsaBitsTest, DivideByMatchesScalarBitForBit) {
  const int64_t kDivisors[] = {1,  2,    3,         4,        -1, -7, 1000, int64_t{1} << 40,
                               65, 1025, INT32_MIN, INT64_MIN};
  for (DataType type : kAllTypes) {
    for (int64_t divisor : kDivisors) {
      for (size_t count : kCounts) {
        for (const Offsets& offsets : kOffsets) {
          const size_t bytes = count * DataTypeSize(type);
          Buffer got(type, count, offsets.a), want(type, count, offsets.a);
          data_.Fill(type, got.data(), count);
          std::memcpy(want.data(), got.data(), bytes);
          internal::DivideByWith(GetParam(), type, got.data(), count, divisor);
          internal::DivideByWith(Isa::kScalar, type, want.data(), count, divisor);
          const std::string what =
              absl::StrCat(internal::IsaName(GetParam()), " ", DataTypeName(type), " / ", divisor,
                           " count ", count, " offset ", offsets.a);
          EXPECT_TRUE(got.GuardsIntact()) << what;
          ExpectSameBits(type, got.data(), want.data(), count, what);
        }
      }
    }
  }
}

TEST_P(ReduceIsaBitsTest, ScaleMatchesScalarBitForBit) {
  const double kFactors[] = {
      1.0,     0.5,      -2.0,      3.0,
      1.0 / 3, 1e-3,     65504.0,   1e30,
      1e-30,   1e-40,    1e-320,    0.0,
      -0.0,    HUGE_VAL, -HUGE_VAL, std::numeric_limits<double>::quiet_NaN()};
  for (DataType type : kAllTypes) {
    const size_t size = DataTypeSize(type);
    for (double factor : kFactors) {
      for (size_t count : kCounts) {
        for (const Offsets& offsets : kOffsets) {
          for (bool in_place : {false, true}) {
            Buffer src(type, count, offsets.a);
            data_.Fill(type, src.data(), count);
            auto run = [&](Isa isa, Buffer& out) {
              if (!in_place)
                return internal::ScaleWith(isa, type, out.data(), src.data(), count, factor);
              Buffer io(type, count, offsets.dst);
              std::memcpy(io.data(), src.data(), count * size);
              internal::ScaleWith(isa, type, io.data(), io.data(), count, factor);
              std::memcpy(out.data(), io.data(), count * size);
            };
            Buffer got(type, count, offsets.dst), want(type, count, offsets.dst);
            run(GetParam(), got);
            run(Isa::kScalar, want);
            const std::string what = absl::StrCat(
                internal::IsaName(GetParam()), " ", DataTypeName(type), " * ", factor, " count ",
                count, " offsets ", offsets.dst, "/", offsets.a, in_place ? " in place" : "");
            EXPECT_TRUE(got.GuardsIntact()) << what;
            ExpectSameBits(type, got.data(), want.data(), count, what);
          }
        }
      }
    }
  }
}

// Every f16 and bf16 value against every other would be 2^32 pairs; instead, every value against
// a fixed set that reaches each class (zeros, subnormals, normals, infinities, NaNs), one
// element per lane position, through each ISA's conversions and ops.
TEST_P(ReduceIsaBitsTest, EverySixteenBitValueMatchesScalar) {
  const uint16_t kHalfPartners[] = {0x0000, 0x8000, 0x0001, 0x83ff, 0x3c00, 0xbc01, 0x7bff,
                                    0x7c00, 0xfc00, 0x7e00, 0x7d01, 0x1000, 0x0400, 0x5640};
  const uint16_t kBFloat16Partners[] = {0x0000, 0x8000, 0x0001, 0x807f, 0x3f80, 0xbf81, 0x7f7f,
                                        0x7f80, 0xff80, 0x7fc0, 0x7f81, 0x3380, 0x0080, 0x4b00};
  for (DataType type : {DataType::kFloat16, DataType::kBFloat16}) {
    const auto& partners = type == DataType::kFloat16 ? kHalfPartners : kBFloat16Partners;
    std::vector<uint16_t> a(65536);
    for (uint32_t i = 0; i < 65536; ++i) a[i] = static_cast<uint16_t>(i);
    for (uint16_t partner : partners) {
      std::vector<uint16_t> b(65536, partner), got(65536), want(65536);
      for (ReduceOp op : kAllOps) {
        internal::CombineWith(GetParam(), type, op, got.data(), a.data(), b.data(), a.size());
        internal::CombineWith(Isa::kScalar, type, op, want.data(), a.data(), b.data(), a.size());
        ExpectSameBits(type, reinterpret_cast<const uint8_t*>(got.data()),
                       reinterpret_cast<const uint8_t*>(want.data()), a.size(),
                       absl::StrCat(internal::IsaName(GetParam()), " ", DataTypeName(type), " ",
                                    ReduceOpName(op), " with 0x", absl::Hex(partner)));
      }
    }
    for (int64_t divisor : {int64_t{2}, int64_t{3}, int64_t{-5}, int64_t{1} << 20}) {
      std::vector<uint16_t> got(a), want(a);
      internal::DivideByWith(GetParam(), type, got.data(), got.size(), divisor);
      internal::DivideByWith(Isa::kScalar, type, want.data(), want.size(), divisor);
      ExpectSameBits(
          type, reinterpret_cast<const uint8_t*>(got.data()),
          reinterpret_cast<const uint8_t*>(want.data()), a.size(),
          absl::StrCat(internal::IsaName(GetParam()), " ", DataTypeName(type), " / ", divisor));
    }
  }
}

std::vector<uint32_t> Bits(const std::vector<float>& values) {
  std::vector<uint32_t> bits;
  for (float v : values) bits.push_back(std::bit_cast<uint32_t>(v));
  return bits;
}

// PowerSGD's linear algebra (reduce.h's Dots, Axpys, Combination): the same bits as the scalar
// build at every length around the kernels' lanes (16) and pieces (64) and every row count.
TEST_P(ReduceIsaBitsTest, LinearKernelsMatchScalarBitForBit) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{63}, size_t{64},
                   size_t{65}, size_t{200}, size_t{1000}}) {
    for (size_t r : {size_t{1}, size_t{3}, size_t{4}, size_t{5}, size_t{8}}) {
      std::vector<float> x(n), ys(n * r), a(r);
      for (float& v : x) v = normal(rng_);
      for (float& v : ys) v = normal(rng_);
      for (float& v : a) v = normal(rng_);
      const std::string what = absl::StrCat(internal::IsaName(GetParam()), " n ", n, " r ", r);
      std::vector<float> got(r), want(r);
      internal::DotsWith(GetParam(), x.data(), ys.data(), n, r, got.data());
      internal::DotsWith(Isa::kScalar, x.data(), ys.data(), n, r, want.data());
      EXPECT_EQ(Bits(got), Bits(want)) << "dots " << what;
      std::vector<float> got_ys = ys, want_ys = ys;
      internal::AxpysWith(GetParam(), a.data(), x.data(), got_ys.data(), n, r);
      internal::AxpysWith(Isa::kScalar, a.data(), x.data(), want_ys.data(), n, r);
      EXPECT_EQ(Bits(got_ys), Bits(want_ys)) << "axpys " << what;
      std::vector<float> got_out(n), want_out(n);
      internal::CombinationWith(GetParam(), a.data(), ys.data(), n, r, got_out.data());
      internal::CombinationWith(Isa::kScalar, a.data(), ys.data(), n, r, want_out.data());
      EXPECT_EQ(Bits(got_out), Bits(want_out)) << "combination " << what;
    }
  }
}

// Only the ISAs above scalar: the scalar build is the one they are compared with (and is checked
// against the reference in reduce_test.cc).
std::string IsaParamName(const ::testing::TestParamInfo<internal::Isa>& param) {
  return internal::IsaName(param.param);
}

INSTANTIATE_TEST_SUITE_P(VectorIsas, ReduceIsaBitsTest, ::testing::Values(Isa::kAvx2, Isa::kAvx512),
                         IsaParamName);

// ---- Choosing the ISA ----

TEST(ReduceIsaChoiceTest, NamesRoundTrip) {
  for (int i = 0; i < internal::kNumIsas; ++i) {
    const auto isa = static_cast<Isa>(i);
    const internal::IsaChoice choice = internal::ChooseIsa(internal::IsaName(isa), Isa::kAvx512);
    EXPECT_EQ(choice.isa, isa) << internal::IsaName(isa);
    EXPECT_EQ(choice.warning, "") << internal::IsaName(isa);
  }
  EXPECT_STREQ(internal::IsaName(Isa::kScalar), "scalar");
  EXPECT_STREQ(internal::IsaName(Isa::kAvx2), "avx2");
  EXPECT_STREQ(internal::IsaName(Isa::kAvx512), "avx512");
}

TEST(ReduceIsaChoiceTest, AutoOrUnsetPicksTheBestQuietly) {
  for (int i = 0; i < internal::kNumIsas; ++i) {
    const auto best = static_cast<Isa>(i);
    for (absl::string_view requested : {"", "auto", "AUTO"}) {
      const internal::IsaChoice choice = internal::ChooseIsa(requested, best);
      EXPECT_EQ(choice.isa, best) << requested;
      EXPECT_EQ(choice.warning, "") << requested;
    }
  }
}

TEST(ReduceIsaChoiceTest, NamesAreCaseInsensitive) {
  EXPECT_EQ(internal::ChooseIsa("AVX2", Isa::kAvx512).isa, Isa::kAvx2);
  EXPECT_EQ(internal::ChooseIsa("Scalar", Isa::kAvx2).isa, Isa::kScalar);
}

TEST(ReduceIsaChoiceTest, AnIsaTheCpuLacksFallsBackToTheBestWithAWarning) {
  internal::IsaChoice choice = internal::ChooseIsa("avx512", Isa::kAvx2);
  EXPECT_EQ(choice.isa, Isa::kAvx2);
  EXPECT_NE(choice.warning.find("DDP_REDUCE_ISA=avx512"), std::string::npos) << choice.warning;
  EXPECT_NE(choice.warning.find("using avx2"), std::string::npos) << choice.warning;

  choice = internal::ChooseIsa("avx2", Isa::kScalar);
  EXPECT_EQ(choice.isa, Isa::kScalar);
  EXPECT_NE(choice.warning.find("using scalar"), std::string::npos) << choice.warning;

  // A lower ISA than the best is honoured: that is what the variable is for.
  choice = internal::ChooseIsa("scalar", Isa::kAvx512);
  EXPECT_EQ(choice.isa, Isa::kScalar);
  EXPECT_EQ(choice.warning, "");
}

TEST(ReduceIsaChoiceTest, AnUnknownNameFallsBackToTheBestListingTheChoices) {
  for (absl::string_view requested : {"sse2", "avx", "avx-512", "native", " avx2"}) {
    const internal::IsaChoice choice = internal::ChooseIsa(requested, Isa::kAvx2);
    EXPECT_EQ(choice.isa, Isa::kAvx2) << requested;
    EXPECT_NE(choice.warning.find(absl::StrCat("DDP_REDUCE_ISA=", requested)), std::string::npos)
        << choice.warning;
    EXPECT_NE(choice.warning.find("auto, scalar, avx2, avx512"), std::string::npos)
        << choice.warning;
  }
}

TEST(ReduceIsaSupportTest, SupportedIsasAreAPrefixStartingWithScalar) {
  EXPECT_TRUE(internal::IsaSupported(Isa::kScalar));
  for (int i = 0; i < internal::kNumIsas; ++i) {
    const auto isa = static_cast<Isa>(i);
    EXPECT_EQ(internal::IsaSupported(isa), i <= static_cast<int>(internal::BestIsa()))
        << internal::IsaName(isa);
  }
  EXPECT_FALSE(internal::IsaSupported(static_cast<Isa>(internal::kNumIsas)));
  EXPECT_TRUE(internal::IsaSupported(internal::ActiveIsa()));
}

// Checked against the CPU's own answer, independently of reduce.cc's detection.
TEST(ReduceIsaSupportTest, AnIsaTheCpuLacksIsReportedUnsupported) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    EXPECT_FALSE(internal::IsaSupported(Isa::kAvx2));
  }
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512vl")) {
    EXPECT_FALSE(internal::IsaSupported(Isa::kAvx512));
  }
#else
  EXPECT_FALSE(internal::IsaSupported(Isa::kAvx2));
  EXPECT_FALSE(internal::IsaSupported(Isa::kAvx512));
#endif
  std::string supported;
  for (int i = 0; i < internal::kNumIsas; ++i) {
    if (internal::IsaSupported(static_cast<Isa>(i))) {
      absl::StrAppend(&supported, " ", internal::IsaName(static_cast<Isa>(i)));
    }
  }
  RecordProperty("supported_isas", supported);
  RecordProperty("active_isa", internal::IsaName(internal::ActiveIsa()));
}

TEST(ReduceIsaSupportTest, ActiveIsaFollowsTheEnvironment) {
  const char* env = std::getenv("DDP_REDUCE_ISA");
  EXPECT_EQ(internal::ActiveIsa(),
            internal::ChooseIsa(env == nullptr ? "" : env, internal::BestIsa()).isa);
}

}  // namespace
}  // namespace ddp::reduce
