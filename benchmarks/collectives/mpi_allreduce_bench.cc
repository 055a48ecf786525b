// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// ddp-mpi-bench: MPI_Allreduce (f32 sum) measured exactly as ddp-bench measures libddp, for
// ratios taken in the same run. Run it under mpirun.
#include <mpi.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench_values.h"

namespace {

struct Config {
  size_t min_bytes = 8;
  size_t max_bytes = size_t{64} << 20;
  double factor = 2;
  int warmup = 5;
  int iters = 20;
  int repeats = 5;
};

constexpr const char* kUsage =
    "usage: mpirun -np N ddp-mpi-bench [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-w WARMUP_ITERS]\n"
    "  [-n ITERS] [-r REPEATS]   (sizes take K, M, G suffixes: powers of 1024)\n";

std::optional<size_t> ParseBytes(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || text[0] == '-') return std::nullopt;
  size_t shift = 0;
  const std::string suffix(end);
  if (suffix == "K" || suffix == "k") shift = 10;
  if (suffix == "M" || suffix == "m") shift = 20;
  if (suffix == "G" || suffix == "g") shift = 30;
  if (shift == 0 && !suffix.empty()) return std::nullopt;
  return static_cast<size_t>(value) << shift;
}

std::optional<int> ParseInt(const std::string& text, int min) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0' || value < min || value > 1 << 30) {
    return std::nullopt;
  }
  return static_cast<int>(value);
}

// Returns an error message, or "" when every flag was understood.
std::string ParseArgs(int argc, char** argv, Config* c) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") return "help";
    if (i + 1 >= argc) return flag + " needs a value";
    const std::string value = argv[++i];
    std::optional<size_t> bytes;
    std::optional<int> num;
    if (flag == "-b" || flag == "-e") {
      if (!(bytes = ParseBytes(value))) return "bad size " + value;
      (flag == "-b" ? c->min_bytes : c->max_bytes) = *bytes;
    } else if (flag == "-f") {
      c->factor = std::atof(value.c_str());
      if (!(c->factor > 1.0)) return "-f wants a factor > 1";
    } else if (flag == "-w" || flag == "-n" || flag == "-r") {
      if (!(num = ParseInt(value, flag == "-w" ? 0 : 1))) return flag + " wants a count";
      (flag == "-w" ? c->warmup : flag == "-n" ? c->iters : c->repeats) = *num;
    } else {
      return "unknown flag " + flag;
    }
  }
  if (c->min_bytes > c->max_bytes) return "-b is larger than -e";
  return "";
}

constexpr bench::ValueType kF32 = bench::ValueType::kFloat32;
constexpr bench::Reduction kSum = bench::Reduction::kSum;

// The inputs ddp-bench uses for an f32 sum.
void FillInputs(int rank, int n, float* send, int count) {
  bench::StoreValues(kF32, send, count,
                     [&](int64_t i) { return bench::ReduceInput(kSum, rank, n, i); });
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// Microseconds per call: median over timed groups on this rank, then the slowest rank.
double TimeCalls(const Config& c, const float* send, float* recv, int count) {
  for (int i = 0; i < c.warmup; ++i) {
    MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  std::vector<double> per_call_us;
  for (int r = 0; r < c.repeats; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    for (int i = 0; i < c.iters; ++i) {
      MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    per_call_us.push_back((MPI_Wtime() - start) * 1e6 / c.iters);
  }
  const double mine = Median(per_call_us);
  double slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

// Elements wrong on all ranks together, from one fresh call on poisoned output.
long long CheckCall(int rank, int n, float* send, float* recv, int count) {
  FillInputs(rank, n, send, count);
  std::memset(recv, 0xff, sizeof(float) * static_cast<size_t>(count));
  MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  const long long wrong =
      bench::CountWrongValues(kF32, bench::Tolerance(kF32, kSum), recv, count,
                              [&](int64_t i) { return bench::ReduceExpected(kSum, n, i); });
  long long total = 0;
  MPI_Allreduce(&wrong, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

void PrintHeader(const Config& c, int n) {
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(version, &length);
  const std::string first_line(version, std::strcspn(version, "\n,"));
  std::printf("# ddp-mpi-bench: %s\n", first_line.c_str());
  std::printf("# op: allreduce  ranks: %d  transport: mpi  dtype: f32  redop: sum  inplace: 0\n",
              n);
  std::printf("# sizes: %zu..%zu bytes x%g  warmup: %d  iters: %d  repeats: %d  check: 1\n",
              c.min_bytes, c.max_bytes, c.factor, c.warmup, c.iters, c.repeats);
  std::printf("# time: median over repeats of (group time / iters), max over ranks\n#\n");
  std::printf("# %10s  %12s  %6s  %7s  %10s  %8s  %8s  %6s\n", "size", "count", "type", "redop",
              "time_us", "algbw", "busbw", "#wrong");
  std::printf("# %10s  %12s  %6s  %7s  %10s  %8s  %8s  %6s\n", "(B)", "(elements)", "", "", "(us)",
              "(GB/s)", "(GB/s)", "");
  std::fflush(stdout);
}

// Runs every size; returns the total of wrong elements.
long long RunSizes(const Config& c, int rank, int n) {
  const size_t max_count = std::max<size_t>(c.max_bytes / sizeof(float), 1);
  std::vector<float> send(max_count);
  std::vector<float> recv(max_count);
  if (rank == 0) PrintHeader(c, n);
  long long total_wrong = 0;
  double busbw_sum = 0;
  int rows = 0;
  size_t last_count = 0;
  for (size_t bytes = c.min_bytes; bytes <= c.max_bytes;
       bytes = std::max(bytes + 1, static_cast<size_t>(static_cast<double>(bytes) * c.factor))) {
    const size_t count = bytes / sizeof(float);
    if (count == 0 || count == last_count) continue;
    last_count = count;
    const int icount = static_cast<int>(count);
    FillInputs(rank, n, send.data(), icount);
    std::memset(recv.data(), 0xff, sizeof(float) * count);
    const double us = TimeCalls(c, send.data(), recv.data(), icount);
    const long long wrong = CheckCall(rank, n, send.data(), recv.data(), icount);
    total_wrong += wrong;
    const double algbw = static_cast<double>(count * sizeof(float)) / us / 1e3;
    const double busbw = algbw * 2.0 * (n - 1) / n;
    busbw_sum += busbw;
    ++rows;
    if (rank != 0) continue;
    std::printf("  %10zu  %12zu  %6s  %7s  %10.2f  %8.3f  %8.3f  %6lld\n", count * sizeof(float),
                count, "f32", "sum", us, algbw, busbw, wrong);
    std::fflush(stdout);
  }
  if (rank == 0) {
    std::printf("# Out of bounds values : %lld %s\n", total_wrong,
                total_wrong == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth : %.3f\n#\n", rows > 0 ? busbw_sum / rows : 0.0);
    std::fflush(stdout);
  }
  return total_wrong;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  Config config;
  if (const std::string error = ParseArgs(argc, argv, &config); !error.empty()) {
    if (rank == 0) {
      if (error != "help") std::fprintf(stderr, "ddp-mpi-bench: %s\n", error.c_str());
      std::fputs(kUsage, error == "help" ? stdout : stderr);
    }
    MPI_Finalize();
    return error == "help" ? 0 : 2;
  }
  if (static_cast<double>(config.max_bytes) / sizeof(float) > 2147483647.0) {
    if (rank == 0) std::fprintf(stderr, "ddp-mpi-bench: -e is beyond MPI's int count\n");
    MPI_Finalize();
    return 2;
  }
  const long long wrong = RunSizes(config, rank, n);
  if (wrong > 0 && rank == 0) std::fprintf(stderr, "ddp-mpi-bench: %lld wrong elements\n", wrong);
  MPI_Finalize();
  return wrong > 0 && rank == 0 ? 1 : 0;
}
