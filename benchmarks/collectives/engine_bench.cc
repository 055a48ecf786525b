// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// ddp-engine-bench: what the fusion engine buys a training step. One step is T gradients of K KiB
// (f32, sum, a ResNet-like set by default: 200 x 40 KiB), measured three ways in the same job:
//   engine    all T submitted to the engine by name, then waited for (as a backward pass does)
//   blocking  one blocking Context::Allreduce per gradient
//   single    one blocking allreduce of all T*K bytes (the floor fusion aims for)
// Reports medians over steps and the ratios (goal: blocking/engine >= 5), plus the engine's
// cache hits, collectives per step and overhead over `single`. With -np N it launches the ranks.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ddp/ddp.h"
#include "launcher.h"

namespace {

struct Config {
  int np = 0;
  int tensors = 200;
  int kib = 40;
  int steps = 30;
  int warmup = 5;
};

constexpr const char* kUsage =
    "usage: ddp-engine-bench [-np N] [--tensors T] [--kib K] [--steps S] [--warmup W]\n"
    "Engine settings come from the environment (DDP_FUSION_THRESHOLD, DDP_CYCLE_TIME_MS, ...).\n";

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

bool ParseArgs(int argc, char** argv, Config* c) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fputs(kUsage, stderr);
      return false;
    }
    const int v = std::atoi(argv[++i]);
    if (a == "-np") {
      c->np = v;
    } else if (a == "--tensors") {
      c->tensors = v;
    } else if (a == "--kib") {
      c->kib = v;
    } else if (a == "--steps") {
      c->steps = v;
    } else if (a == "--warmup") {
      c->warmup = v;
    } else {
      std::fputs(kUsage, stderr);
      return false;
    }
    if (v < 0 || (a != "--warmup" && v == 0)) {
      std::fprintf(stderr, "ddp-engine-bench: bad value for %s\n", a.c_str());
      return false;
    }
  }
  return true;
}

struct Buffers {
  std::vector<std::vector<float>> grads;
  std::vector<float> flat;
};

absl::Status EngineStep(ddp::Context& ctx, Buffers& b) {
  std::vector<ddp::Handle> handles;
  handles.reserve(b.grads.size());
  for (size_t i = 0; i < b.grads.size(); ++i) {
    auto& g = b.grads[i];
    handles.push_back(ctx.engine().AllreduceAsync(
        absl::StrCat("grad.", i), g.data(), g.data(), ddp::DataType::kFloat32,
        {static_cast<int64_t>(g.size())}, ddp::ReduceOp::kSum));
  }
  for (auto& h : handles) {
    if (absl::Status s = h.Wait(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status BlockingStep(ddp::Context& ctx, Buffers& b) {
  for (auto& g : b.grads) {
    absl::Status s =
        ctx.Allreduce(g.data(), g.data(), g.size(), ddp::DataType::kFloat32, ddp::ReduceOp::kSum);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status SingleStep(ddp::Context& ctx, Buffers& b) {
  return ctx.Allreduce(b.flat.data(), b.flat.data(), b.flat.size(), ddp::DataType::kFloat32,
                       ddp::ReduceOp::kSum);
}

// Median seconds per step of `step`, after warm-up; ranks start each step together.
template <typename Step>
absl::StatusOr<double> Time(ddp::Context& ctx, const Config& c, Buffers& b, Step step) {
  std::vector<double> times;
  for (int i = 0; i < c.warmup + c.steps; ++i) {
    if (absl::Status s = ctx.Barrier(); !s.ok()) return s;
    const double t0 = Now();
    if (absl::Status s = step(ctx, b); !s.ok()) return s;
    double dt = Now() - t0;
    // The slowest rank's time is the step's time.
    if (absl::Status s = ctx.Allreduce(&dt, &dt, 1, ddp::DataType::kFloat64, ddp::ReduceOp::kMax);
        !s.ok()) {
      return s;
    }
    if (i >= c.warmup) times.push_back(dt);
  }
  return Median(times);
}

absl::Status Run(ddp::Context& ctx, const Config& c) {
  Buffers b;
  const size_t count = static_cast<size_t>(c.kib) * 1024 / sizeof(float);
  b.grads.assign(static_cast<size_t>(c.tensors), std::vector<float>(count, 1.0f));
  b.flat.assign(count * static_cast<size_t>(c.tensors), 1.0f);
  const auto before = ctx.engine().stats();
  absl::StatusOr<double> engine = Time(ctx, c, b, EngineStep);
  if (!engine.ok()) return engine.status();
  const auto after = ctx.engine().stats();
  absl::StatusOr<double> blocking = Time(ctx, c, b, BlockingStep);
  if (!blocking.ok()) return blocking.status();
  absl::StatusOr<double> single = Time(ctx, c, b, SingleStep);
  if (!single.ok()) return single.status();
  if (ctx.rank() != 0) return absl::OkStatus();
  const double steps = c.steps + c.warmup;
  const double mib = static_cast<double>(count * sizeof(float)) * c.tensors / (1 << 20);
  std::printf(
      "# ddp-engine-bench: %d ranks, %d tensors x %d KiB f32 (%.2f MiB per step), "
      "fusion threshold %lld B, cycle time %.2f ms, median of %d steps after %d warm-up\n",
      ctx.size(), c.tensors, c.kib, mib, static_cast<long long>(after.fusion_threshold),
      after.cycle_time_ms, c.steps, c.warmup);
  std::printf("%-10s %12s\n", "way", "step_ms");
  std::printf("%-10s %12.3f\n", "engine", *engine * 1e3);
  std::printf("%-10s %12.3f\n", "blocking", *blocking * 1e3);
  std::printf("%-10s %12.3f\n", "single", *single * 1e3);
  std::printf("speedup_vs_blocking %.2f\n", *blocking / *engine);
  std::printf("engine_over_single %.3f ms (x%.2f)\n", (*engine - *single) * 1e3, *engine / *single);
  std::printf("collectives_per_step %.2f\n",
              static_cast<double>(after.collectives - before.collectives) / steps);
  std::printf("cache_hits_per_step %.2f\n",
              static_cast<double>(after.cache_hits - before.cache_hits) / steps);
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  if (!ParseArgs(argc, argv, &c)) return 2;
  if (c.np > 0) {
    std::vector<std::string> args;
    for (int i = 0; i < argc; ++i) {
      if (std::strcmp(argv[i], "-np") == 0) {
        ++i;
        continue;
      }
      args.push_back(argv[i]);
    }
    return bench::LaunchRanks({c.np, std::nullopt, std::nullopt}, args);
  }
  auto ctx = ddp::Context::CreateFromEnvironment();
  if (!ctx.ok()) {
    std::fprintf(stderr, "ddp-engine-bench: %s\n", ctx.status().ToString().c_str());
    return 1;
  }
  absl::Status s = Run(**ctx, c);
  if (!s.ok()) {
    std::fprintf(stderr, "ddp-engine-bench: rank %d: %s\n", (*ctx)->rank(), s.ToString().c_str());
    (*ctx)->Abort(s);
    return 1;
  }
  return (*ctx)->Shutdown().ok() ? 0 : 1;
}
