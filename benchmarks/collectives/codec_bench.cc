// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// What the compression codecs cost per step (docs/compression.md), next to the memory's own
// bound (memcpy of the same floats), on one core:
//
//   Encode/<codec>/<count>     one encoding with its loss kept (error feedback), as each rank
//                              does once for its contribution and once for its share's sum;
//                              bytes counted: the float32 input.
//   DecodeAdd/<codec>/<count>  one contribution decoded onto a sum (n - 1 per share and step).
//   PowerSgd/<rows>x<cols>/r<r>  a whole step's arithmetic on one matrix: M Q, orthogonalizing
//                              P, M^T P and the fused reconstruction (no communication).
//   Memcpy/<count>             count floats copied: read and written once.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compress/codec.h"
#include "compress/lowrank.h"

namespace {

using ddp::Codec;

constexpr size_t kCount = size_t{12} << 20;  // the 12M-parameter MLP's gradients, fused

std::vector<float> Gradients(size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1e-3f);
  std::vector<float> x(count);
  for (float& v : x) v = dist(rng);
  return x;
}

void SetFloats(benchmark::State& state, size_t count) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(count * sizeof(float)));
}

void BM_Encode(benchmark::State& state, Codec codec, size_t count) {
  const ddp::compress::Coder& coder = *ddp::compress::CoderFor(codec);
  const std::vector<float> x = Gradients(count, 1);
  std::vector<float> lost(count, 0.0f);
  std::vector<uint8_t> out(coder.EncodedBytes(count));
  for (auto _ : state) {
    coder.Encode(x.data(), count, out.data(), lost.data());
    benchmark::ClobberMemory();
  }
  SetFloats(state, count);
}

void BM_DecodeAdd(benchmark::State& state, Codec codec, size_t count) {
  const ddp::compress::Coder& coder = *ddp::compress::CoderFor(codec);
  const std::vector<float> x = Gradients(count, 2);
  std::vector<uint8_t> bytes(coder.EncodedBytes(count));
  coder.Encode(x.data(), count, bytes.data());
  std::vector<float> sum(count, 0.0f);
  for (auto _ : state) {
    coder.DecodeAdd(bytes.data(), count, sum.data());
    benchmark::ClobberMemory();
  }
  SetFloats(state, count);
}

void BM_PowerSgd(benchmark::State& state, size_t rows, size_t cols, size_t r) {
  namespace compress = ddp::compress;
  const std::vector<float> m0 = Gradients(rows * cols, 3);
  std::vector<float> m = m0, lost(rows * cols, 0.0f), qt(cols * r), pt(rows * r), mine(cols * r);
  std::vector<float> row(cols);
  compress::Seeded(7, qt.data(), qt.size());
  for (auto _ : state) {
    state.PauseTiming();
    m = m0;
    state.ResumeTiming();
    compress::MultiplyRight(m.data(), rows, cols, qt.data(), r, pt.data());
    compress::Orthogonalize(pt.data(), rows, r);
    compress::MultiplyTransposed(m.data(), rows, cols, pt.data(), r, mine.data());
    compress::Reconstruct(m.data(), lost.data(), pt.data(), mine.data(), mine.data(), rows, cols, r,
                          row.data());
    benchmark::ClobberMemory();
  }
  SetFloats(state, rows * cols);
}

void BM_Memcpy(benchmark::State& state, size_t count) {
  const std::vector<float> src = Gradients(count, 4);
  std::vector<float> dst(count);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), count * sizeof(float));
    benchmark::ClobberMemory();
  }
  SetFloats(state, count);
}

void RegisterAll() {
  benchmark::RegisterBenchmark(absl::StrCat("Memcpy/", kCount).c_str(), BM_Memcpy, kCount);
  for (Codec codec : {Codec::kBf16, Codec::kFp16, Codec::kInt8}) {
    const std::string name(ddp::CodecName(codec));
    benchmark::RegisterBenchmark(absl::StrCat("Encode/", name, "/", kCount).c_str(), BM_Encode,
                                 codec, kCount);
    benchmark::RegisterBenchmark(absl::StrCat("DecodeAdd/", name, "/", kCount).c_str(),
                                 BM_DecodeAdd, codec, kCount);
  }
  // The benchmark MLP's largest layer (3400 x 3400) and a 4096 x 1024 one, at ranks 1, 4 and 8.
  for (size_t r : {size_t{1}, size_t{4}, size_t{8}}) {
    for (auto [rows, cols] : {std::pair<size_t, size_t>{3400, 3400}, {4096, 1024}}) {
      benchmark::RegisterBenchmark(absl::StrCat("PowerSgd/", rows, "x", cols, "/r", r).c_str(),
                                   BM_PowerSgd, rows, cols, r);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  RegisterAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
