// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Throughput of the reduction kernels, per ISA build this CPU can run, next to memcpy on the same
// buffers sizes: one array in cache (256 KiB) and one far beyond it (64 MiB).
//
// Each kernel runs in place, as a collective's reduce step does: a = a + b over `count` elements,
// counted as 3 * count * element size bytes (two reads, one write). memcpy counts 2 * size (one
// read, one write). Names read Combine/<isa>/<type>/sum/<count> and Memcpy/<bytes>.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "ddp/types.h"
#include "reduce/reduce.h"
#include "reduce/reduce_internal.h"

namespace {

using ddp::DataType;
using ddp::reduce::internal::Isa;

constexpr size_t kSizes[] = {size_t{256} << 10, size_t{64} << 20};  // Bytes per array.
constexpr DataType kTypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16,
                               DataType::kFloat64, DataType::kInt32};

// A 64-byte aligned array, as tensor allocators give. Alignment matters more than one would
// think: glibc's memcpy (rep movsb) on the AMD EPYC these numbers were first taken on runs 14x
// slower into a destination 16 bytes off a 64-byte boundary, which malloc'd vectors are.
class Array {
 public:
  explicit Array(size_t bytes)
      : data_(static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64))) {
    std::memset(data_.get(), 0, bytes);  // Touches every page before the timing starts.
  }
  uint8_t* data() const { return data_.get(); }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> data_;
};

// Finite values in [1, 2) of the type, so that no subnormal slows the float units down.
Array RandomArray(DataType type, size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(1.0f, 2.0f);
  Array array(count * ddp::DataTypeSize(type));
  for (size_t i = 0; i < count; ++i) {
    const float value = dist(rng);
    uint8_t* p = array.data() + i * ddp::DataTypeSize(type);
    switch (type) {
      case DataType::kFloat32:
        std::memcpy(p, &value, 4);
        break;
      case DataType::kFloat64: {
        const double d = value;
        std::memcpy(p, &d, 8);
        break;
      }
      case DataType::kFloat16: {
        const uint16_t h = ddp::reduce::FloatToHalf(value);
        std::memcpy(p, &h, 2);
        break;
      }
      case DataType::kBFloat16: {
        const uint16_t b = ddp::reduce::FloatToBFloat16(value);
        std::memcpy(p, &b, 2);
        break;
      }
      default: {
        const auto n = static_cast<int32_t>(rng());
        std::memcpy(p, &n, 4);
        break;
      }
    }
  }
  return array;
}

void BM_Combine(benchmark::State& state, Isa isa, DataType type, size_t count) {
  const Array a = RandomArray(type, count, 1);
  const Array b = RandomArray(type, count, 2);
  for (auto _ : state) {
    ddp::reduce::internal::CombineWith(isa, type, ddp::ReduceOp::kSum, a.data(), a.data(), b.data(),
                                       count);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 3 *
                          static_cast<int64_t>(count * ddp::DataTypeSize(type)));
}

void BM_Memcpy(benchmark::State& state, size_t bytes) {
  const Array src(bytes);
  const Array dst(bytes);
  std::memset(src.data(), 1, bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 *
                          static_cast<int64_t>(bytes));
}

void RegisterAll() {
  for (size_t bytes : kSizes) {
    benchmark::RegisterBenchmark(absl::StrCat("Memcpy/", bytes).c_str(), BM_Memcpy, bytes);
  }
  for (int i = 0; i < ddp::reduce::internal::kNumIsas; ++i) {
    const auto isa = static_cast<Isa>(i);
    if (!ddp::reduce::internal::IsaSupported(isa)) continue;
    for (DataType type : kTypes) {
      for (size_t bytes : kSizes) {
        const size_t count = bytes / ddp::DataTypeSize(type);
        const std::string name = absl::StrCat("Combine/", ddp::reduce::internal::IsaName(isa), "/",
                                              ddp::DataTypeName(type), "/sum/", count);
        benchmark::RegisterBenchmark(name.c_str(), BM_Combine, isa, type, count);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  RegisterAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::string supported, unsupported;
  for (int i = 0; i < ddp::reduce::internal::kNumIsas; ++i) {
    const auto isa = static_cast<Isa>(i);
    absl::StrAppend(ddp::reduce::internal::IsaSupported(isa) ? &supported : &unsupported, " ",
                    ddp::reduce::internal::IsaName(isa));
  }
  benchmark::AddCustomContext("reduce_isas_run", supported);
  benchmark::AddCustomContext("reduce_isas_not_supported_here", unsupported);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
