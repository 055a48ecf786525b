// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// ddp-mem-ceiling: the memory-bandwidth ceiling of an allreduce among N ranks on this machine.
//
// An allreduce must at least read its input and write its output on every rank: it cannot be
// faster than every rank copying its buffer once, all at the same time (they share the memory
// bus and the cores). This program forks N processes that do exactly that with memcpy, in
// lockstep, and prints the nccl-tests-style table of ddp-bench with that copy time as "time":
// busbw = size/time x 2(N-1)/N is then the busbw an allreduce running at memory speed would
// have. Same flags and statistics as ddp-bench (median of timed groups, slowest rank).
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Shared {
  std::atomic<int> arrived{0};
  std::atomic<int> generation{0};
  double time_us[64][64];  // [rank][size index]
};

void Barrier(Shared* s, int n) {
  const int gen = s->generation.load();
  if (s->arrived.fetch_add(1) + 1 == n) {
    s->arrived.store(0);
    s->generation.fetch_add(1);
  } else {
    while (s->generation.load() == gen) sched_yield();
  }
}

size_t ParseBytes(const char* text) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  switch (*end) {
    case 'K':
    case 'k':
      v *= 1024;
      break;
    case 'M':
    case 'm':
      v *= 1024 * 1024;
      break;
    case 'G':
    case 'g':
      v *= 1024.0 * 1024 * 1024;
      break;
    default:
      break;
  }
  return static_cast<size_t>(v);
}

}  // namespace

int main(int argc, char** argv) {
  int n = 2;
  size_t min_bytes = 4096;
  size_t max_bytes = 64 << 20;
  double factor = 4;
  int warmup = 5;
  int iters = 20;
  int repeats = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "-np")
      n = std::atoi(argv[i + 1]);
    else if (flag == "-b")
      min_bytes = ParseBytes(argv[i + 1]);
    else if (flag == "-e")
      max_bytes = ParseBytes(argv[i + 1]);
    else if (flag == "-f")
      factor = std::atof(argv[i + 1]);
    else if (flag == "-w")
      warmup = std::atoi(argv[i + 1]);
    else if (flag == "-n")
      iters = std::atoi(argv[i + 1]);
    else if (flag == "-r")
      repeats = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr,
                   "usage: ddp-mem-ceiling [-np N] [-b MIN] [-e MAX] [-f FACTOR] [-w W] [-n ITERS] "
                   "[-r REPEATS]\n");
      return 2;
    }
  }
  if (n < 1 || n > 64 || factor <= 1 || min_bytes < 4) return 2;
  std::vector<size_t> sizes;
  for (double s = static_cast<double>(min_bytes); s <= static_cast<double>(max_bytes) * 1.0001;
       s *= factor) {
    sizes.push_back(static_cast<size_t>(s) / 4 * 4);
  }
  if (sizes.size() > 64) return 2;
  void* mem =
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED || mem == nullptr) return 1;
  // Placement new is noexcept, so its result may be null to the compiler (GCC 13's
  // -Wnull-dereference says so about every use below): check it.
  auto* shared = new (mem) Shared();
  if (shared == nullptr) return 1;
  for (int rank = 0; rank < n; ++rank) {
    if (fork() != 0) continue;
    std::vector<char> src(max_bytes, static_cast<char>(rank + 1));
    std::vector<char> dst(max_bytes, 0);
    for (size_t k = 0; k < sizes.size(); ++k) {
      const size_t bytes = sizes[k];
      for (int w = 0; w < warmup; ++w) std::memcpy(dst.data(), src.data(), bytes);
      std::vector<double> groups;
      for (int r = 0; r < repeats; ++r) {
        Barrier(shared, n);
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) {
          std::memcpy(dst.data(), src.data(), bytes);
          // Keep the copies from being merged or dropped.
          asm volatile("" : : "r"(dst.data()) : "memory");
        }
        const auto t1 = std::chrono::steady_clock::now();
        groups.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / iters);
      }
      std::sort(groups.begin(), groups.end());
      shared->time_us[rank][k] = groups[groups.size() / 2];
    }
    Barrier(shared, n);
    _exit(0);
  }
  int failed = 0;
  for (int i = 0; i < n; ++i) {
    int status = 0;
    wait(&status);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
  }
  if (failed) return 1;
  std::printf(
      "# ddp-mem-ceiling: %d processes each copying its buffer once (memcpy) at the same "
      "time\n",
      n);
  std::printf("# time: median over %d repeats of (group time / %d iters), max over ranks\n",
              repeats, iters);
  std::printf("#%11s  %12s  %6s  %7s  %10s  %8s  %8s  %6s\n", "size", "count", "type", "redop",
              "time_us", "algbw", "busbw", "#wrong");
  for (size_t k = 0; k < sizes.size(); ++k) {
    double t = 0;
    for (int r = 0; r < n; ++r) t = std::max(t, shared->time_us[r][k]);
    const double algbw = static_cast<double>(sizes[k]) / t / 1e3;
    const double busbw = algbw * (n > 1 ? 2.0 * (n - 1) / n : 1.0);
    std::printf("%12zu  %12zu  %6s  %7s  %10.2f  %8.3f  %8.3f  %6s\n", sizes[k], sizes[k] / 4,
                "f32", "sum", t, algbw, busbw, "N/A");
  }
  return 0;
}
