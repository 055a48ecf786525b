// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The GPU path: CUDA tensors through the engine and the NCCL backend (libddp_nccl.so).
//
// Without a GPU (or without the plugin) CUDA submissions must fail at once with an error that
// says why, and CPU work must go on: that part runs everywhere. With GPUs, a job of
// min(GPUs, 4) ranks, one per device, runs every operation, dtype and op against references;
// NCCL allows one rank per GPU, so a machine with one GPU runs these as a 1-rank job.
//
// CUDA must not be initialised in the parent before the harness forks the ranks, so the number
// of GPUs is asked in a child process.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "ddp/ddp.h"
#include "nccl/device.h"
#include "support/check.h"
#include "support/data.h"
#include "support/multiprocess.h"

namespace ddp::testing {
namespace {

int GpuCount() {
  static const int count = [] {
    const pid_t pid = fork();
    if (pid == 0) _exit(std::min(nccl::DeviceCount(), 100));
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return 0;
    return WEXITSTATUS(status);
  }();
  return count;
}

absl::Status ExpectMentions(const absl::Status& s, std::vector<std::string> needles) {
  if (s.ok()) return absl::InternalError("expected an error, got OK");
  for (const auto& n : needles) {
    if (!absl::StrContains(s.message(), n)) {
      return absl::InternalError(absl::StrCat("error does not mention '", n, "': ", s.ToString()));
    }
  }
  return absl::OkStatus();
}

// A CUDA copy of host data, freed with the last reference.
struct DeviceArray {
  std::shared_ptr<void> memory;
  size_t bytes = 0;
  void* get() const { return memory.get(); }
};

absl::StatusOr<DeviceArray> Upload(int device, const void* host, size_t bytes) {
  DeviceArray a;
  auto m = nccl::DeviceAlloc(device, bytes);
  if (!m.ok()) return m.status();
  a.memory = *m;
  a.bytes = bytes;
  if (absl::Status s = nccl::CopyToDevice(a.get(), host, bytes); !s.ok()) return s;
  return a;
}

absl::StatusOr<std::vector<char>> Download(const void* device_ptr, size_t bytes) {
  std::vector<char> host(bytes);
  if (absl::Status s = nccl::CopyToHost(host.data(), device_ptr, bytes); !s.ok()) return s;
  return host;
}

void ExpectJobOk(const JobResult& job) {
  EXPECT_FALSE(job.hung) << job.Summary();
  for (const auto& r : job.ranks) EXPECT_TRUE(r.ok()) << job.Summary();
}

TEST(Nccl, WithoutTheBackendCudaTensorsFailClearlyAndCpuWorkGoesOn) {
  JobSpec spec;
  spec.size = 2;
  spec.env["DDP_NCCL_PLUGIN"] = "/nonexistent/libddp_nccl.so";
  ExpectJobOk(RunWithContext(spec, [](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    alignas(8) static char fake[64];
    Handle h = e.AllreduceAsync("grad", fake, fake, DataType::kFloat32, {4}, ReduceOp::kSum, 1.0,
                                1.0, Engine::kWorld, Device::Cuda(0));
    CHECK_OK(Expect(h.Poll(), "a CUDA submission without the backend fails at once"));
    CHECK_OK(ExpectMentions(h.Wait(), {"'grad'", "libddp_nccl.so", "DDP_WITH_NCCL"}));
    CHECK_OK(Expect(h.Wait().code() == absl::StatusCode::kUnimplemented, h.Wait().ToString()));
    // The same name is free again, and CPU work is unaffected.
    std::vector<float> x(4, 1.0f + static_cast<float>(ctx.rank()));
    CHECK_OK(e.AllreduceAsync("grad", x.data(), x.data(), DataType::kFloat32, {4}, ReduceOp::kSum)
                 .Wait());
    return Expect(x[0] == 3.0f && x[3] == 3.0f, "CPU allreduce after a refused CUDA one");
  }));
}

TEST(Nccl, WithoutAGpuCudaTensorsFailClearly) {
  if (GpuCount() > 0) GTEST_SKIP() << "this machine has a GPU";
  JobSpec spec;
  spec.size = 2;
  ExpectJobOk(RunWithContext(spec, [](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    alignas(8) static char fake[64];
    for (int i = 0; i < 2; ++i) {  // the second answer comes from the kept creation error
      Handle h = e.BroadcastAsync(absl::StrCat("weights.", i), fake, DataType::kFloat32, {4}, 0,
                                  Engine::kWorld, Device::Cuda(0));
      CHECK_OK(Expect(h.Poll(), "fails at once"));
      const absl::Status s = h.Wait();
      // Built with NCCL: no GPU. Built without: no plugin. Either way the reason is given.
      const bool said_why =
          absl::StrContains(s.message(), "GPU") || absl::StrContains(s.message(), "libddp_nccl.so");
      CHECK_OK(
          Expect(!s.ok() && said_why && absl::StrContains(s.message(), "weights"), s.ToString()));
    }
    std::vector<int32_t> x(3, ctx.rank() + 1);
    CHECK_OK(
        e.AllreduceAsync("cpu", x.data(), x.data(), DataType::kInt32, {3}, ReduceOp::kMax).Wait());
    return Expect(x[1] == 2, "CPU allreduce after refused CUDA ones");
  }));
}

// --- with GPUs ------------------------------------------------------------------------------

int GpuRanks() { return std::min(GpuCount(), 4); }

// A job of GpuRanks() ranks, one per GPU, each running `body`; every rank must succeed.
void ExpectOkOnEveryGpu(const ContextBody& body) {
  JobSpec spec;
  spec.size = GpuRanks();
  ExpectJobOk(RunWithContext(spec, body));
}

#define SKIP_WITHOUT_GPU()                                                    \
  do {                                                                        \
    if (GpuCount() == 0) GTEST_SKIP() << "no GPU here (NCCL tests need one)"; \
  } while (0)

constexpr DataType kTypes[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                               DataType::kBFloat16, DataType::kInt8,    DataType::kUInt8,
                               DataType::kInt32,    DataType::kInt64};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kProduct};

TEST(Nccl, AllreduceEveryDtypeOpAndSizeFusedAloneAndInPlace) {
  SKIP_WITHOUT_GPU();
  JobSpec spec;
  spec.size = GpuRanks();
  spec.env["DDP_FUSION_THRESHOLD"] = "4M";  // several batches, and 100003 x f64 goes alone
  const uint64_t seed = TestSeed();
  std::printf("seed %llu, %d rank(s)\n", static_cast<unsigned long long>(seed), spec.size);
  ExpectJobOk(RunWithContext(spec, [seed](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    const int r = ctx.rank();
    const int n = ctx.size();
    const Device dev = Device::Cuda(r);
    struct Case {
      std::string name;
      DataType type;
      ReduceOp op;
      size_t count;
      bool in_place;
      DataGen gen;
      DeviceArray in, out;
      Handle handle;
    };
    std::vector<Case> cases;
    uint64_t call = 0;
    for (DataType t : kTypes) {
      for (ReduceOp op : kOps) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{1023}, size_t{100003}}) {
          for (bool in_place : {false, true}) {
            Case c{absl::StrCat(DataTypeName(t), ".", ReduceOpName(op), ".", count,
                                in_place ? ".inplace" : ""),
                   t,
                   op,
                   count,
                   in_place,
                   DataGen{seed, call++},
                   {},
                   {},
                   {}};
            const size_t bytes = count * DataTypeSize(t);
            std::vector<char> host(bytes + 1);
            FillInput(c.gen, t, op, r, host.data(), count);
            DDP_ASSIGN_OR_RETURN(c.in, Upload(r, host.data(), bytes));
            if (!in_place) {
              Poison(host.data(), bytes);
              DDP_ASSIGN_OR_RETURN(c.out, Upload(r, host.data(), bytes));
            }
            cases.push_back(std::move(c));
          }
        }
      }
    }
    // Submitted in a different order on every rank: negotiation agrees, fusion packs.
    std::vector<size_t> order(cases.size());
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = (i * 7 + static_cast<size_t>(r) * 13) % order.size();
    std::sort(order.begin(), order.end());
    std::rotate(order.begin(), order.begin() + static_cast<long>(r * 17 % order.size()),
                order.end());
    for (size_t i : order) {
      Case& c = cases[i];
      void* out = c.in_place ? c.in.get() : c.out.get();
      c.handle = e.AllreduceAsync(c.name, c.in.get(), out, c.type, {static_cast<int64_t>(c.count)},
                                  c.op, 1.0, 1.0, Engine::kWorld, dev);
    }
    for (Case& c : cases) {
      CHECK_OK(c.handle.Wait());
      const void* out = c.in_place ? c.in.get() : c.out.get();
      DDP_ASSIGN_OR_RETURN(std::vector<char> host, Download(out, c.count * DataTypeSize(c.type)));
      CHECK_OK(CheckReduced(c.gen, c.type, c.op, n, host.data(), c.count, 0, c.name));
    }
    const EngineStats stats = e.stats();
    return Expect(stats.fused_tensors > 0, "some CUDA tensors went through the fusion buffer");
  }));
}

TEST(Nccl, ScaleFactorsGroupsAndMixedCpuAndCudaTensors) {
  SKIP_WITHOUT_GPU();
  ExpectOkOnEveryGpu([](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    const int r = ctx.rank();
    const int n = ctx.size();
    const Device dev = Device::Cuda(r);
    // f32 and bf16 with prescale 2 and postscale 0.25, average: (2 * mean(x)) * 0.25.
    std::vector<float> x(1000);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) + static_cast<float>(r);
    DDP_ASSIGN_OR_RETURN(DeviceArray dx, Upload(r, x.data(), x.size() * 4));
    Handle h1 = e.AllreduceAsync("scaled", dx.get(), dx.get(), DataType::kFloat32, {1000},
                                 ReduceOp::kAverage, 2.0, 0.25, Engine::kWorld, dev);
    // A grouped allreduce (three members, one unit) and CPU tensors submitted in between.
    std::vector<int64_t> g0(5, r + 1), g1(7, 2 * (r + 1)), g2(3, 10);
    DDP_ASSIGN_OR_RETURN(DeviceArray d0, Upload(r, g0.data(), g0.size() * 8));
    DDP_ASSIGN_OR_RETURN(DeviceArray d1, Upload(r, g1.data(), g1.size() * 8));
    DDP_ASSIGN_OR_RETURN(DeviceArray d2, Upload(r, g2.data(), g2.size() * 8));
    std::vector<float> cpu(33, 1.5f);
    Handle hc =
        e.AllreduceAsync("cpu", cpu.data(), cpu.data(), DataType::kFloat32, {33}, ReduceOp::kSum);
    Handle hg =
        e.GroupedAllreduceAsync("group",
                                {{"a", d0.get(), d0.get(), {5}},
                                 {"b", d1.get(), d1.get(), {7}},
                                 {"c", d2.get(), d2.get(), {3}}},
                                DataType::kInt64, ReduceOp::kSum, 1.0, 1.0, Engine::kWorld, dev);
    CHECK_OK(h1.Wait());
    CHECK_OK(hg.Wait());
    CHECK_OK(hc.Wait());
    DDP_ASSIGN_OR_RETURN(std::vector<char> got, Download(dx.get(), x.size() * 4));
    const float* f = reinterpret_cast<const float*>(got.data());
    for (size_t i = 0; i < x.size(); ++i) {
      const double mean = static_cast<double>(i % 17) + (n - 1) / 2.0;
      CHECK_OK(Expect(std::abs(f[i] - 2.0 * mean * 0.25) < 1e-4,
                      absl::StrCat("scaled[", i, "] = ", f[i])));
    }
    const int64_t sum_r1 = static_cast<int64_t>(n) * (n + 1) / 2;  // sum of r+1
    DDP_ASSIGN_OR_RETURN(got, Download(d0.get(), 5 * 8));
    CHECK_OK(Expect(reinterpret_cast<int64_t*>(got.data())[4] == sum_r1, "group member a"));
    DDP_ASSIGN_OR_RETURN(got, Download(d1.get(), 7 * 8));
    CHECK_OK(Expect(reinterpret_cast<int64_t*>(got.data())[6] == 2 * sum_r1, "group member b"));
    DDP_ASSIGN_OR_RETURN(got, Download(d2.get(), 3 * 8));
    CHECK_OK(Expect(reinterpret_cast<int64_t*>(got.data())[0] == 10 * n, "group member c"));
    return Expect(cpu[32] == 1.5f * static_cast<float>(n), "the CPU tensor beside them");
  });
}

// Compressed allreduces of CUDA tensors (docs/compression.md): staged through host memory by the
// engine, the same codecs as on the CPU. The elementwise codecs give the bits of the CPU path
// for the same values, plain and stream-ordered; PowerSGD (its warm start seeded by the tensor's
// name) the same bits on every rank.
TEST(Nccl, CompressedCudaTensorsGiveTheBitsOfTheCpuPath) {
  SKIP_WITHOUT_GPU();
  ExpectOkOnEveryGpu([](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    const int r = ctx.rank();
    constexpr int64_t kRows = 40, kCols = 25;
    std::vector<float> x(kRows * kCols);
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = std::sin(0.1f * static_cast<float>(i) + static_cast<float>(r));
    }
    const Compression codecs[] = {Codec::kInt8, Codec::kBf16, Codec::kFp16,
                                  Compression::PowerSgd(2)};
    for (const Compression& c : codecs) {
      for (const bool ordered : {false, true}) {
        Device dev = Device::Cuda(r);
        dev.stream_ordered = ordered;
        const std::string tag = absl::StrCat(CompressionName(c), ordered ? ".ordered" : "");
        DDP_ASSIGN_OR_RETURN(DeviceArray dx, Upload(r, x.data(), x.size() * 4));
        std::vector<float> cpu = x;
        Handle hd =
            e.AllreduceAsync(absl::StrCat("cuda.", tag), dx.get(), dx.get(), DataType::kFloat32,
                             {kRows, kCols}, ReduceOp::kAverage, 1.0, 1.0, Engine::kWorld, dev, c);
        Handle hc =
            e.AllreduceAsync(absl::StrCat("cpu.", tag), cpu.data(), cpu.data(), DataType::kFloat32,
                             {kRows, kCols}, ReduceOp::kAverage, 1.0, 1.0, Engine::kWorld, {}, c);
        CHECK_OK(hd.Wait());
        CHECK_OK(hc.Wait());
        CHECK_OK(hd.WaitOnStream(nullptr));
        DDP_ASSIGN_OR_RETURN(std::vector<char> got, Download(dx.get(), x.size() * 4));
        if (c.codec != Codec::kPowerSgd) {
          CHECK_OK(Expect(std::memcmp(got.data(), cpu.data(), got.size()) == 0,
                          absl::StrCat(tag, ": the CUDA result differs from the CPU one")));
          continue;
        }
        // Every rank's bits alike: their sum of the 32-bit words, the least and the most.
        int64_t words = 0;
        for (size_t i = 0; i + 4 <= got.size(); i += 4) {
          uint32_t w = 0;
          std::memcpy(&w, got.data() + i, 4);
          words += w;
        }
        int64_t lo = words, hi = words;
        CHECK_OK(e.AllreduceAsync(absl::StrCat("lo.", tag), &lo, &lo, DataType::kInt64, {1},
                                  ReduceOp::kMin)
                     .Wait());
        CHECK_OK(e.AllreduceAsync(absl::StrCat("hi.", tag), &hi, &hi, DataType::kInt64, {1},
                                  ReduceOp::kMax)
                     .Wait());
        CHECK_OK(Expect(lo == hi, absl::StrCat(tag, ": ranks hold different results")));
      }
    }
    return absl::OkStatus();
  });
}

// Device::stream_ordered (ddp.torch's way): the handle finishes once the collective is enqueued;
// WaitOnStream orders a stream after it (or the host waits for the GPU: WaitDoneOnDevice),
// DoneOnDevice says when the GPU is through. Fused and alone; the handle of a plain CUDA
// submission has nothing to order.
TEST(Nccl, StreamOrderedAllreducesFinishWhenEnqueuedAndOrderTheStream) {
  SKIP_WITHOUT_GPU();
  ExpectOkOnEveryGpu([](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    const int r = ctx.rank();
    const int n = ctx.size();
    const Device ordered = Device::Cuda(r, nullptr, /*stream_ordered=*/true);
    for (int round = 0; round < 3; ++round) {
      std::vector<Handle> handles;
      std::vector<DeviceArray> arrays;
      for (int t = 0; t < 4; ++t) {  // submitted together: fused
        std::vector<float> x(1 << 18, static_cast<float>(r + 1 + t));
        DDP_ASSIGN_OR_RETURN(DeviceArray d, Upload(r, x.data(), x.size() * 4));
        handles.push_back(e.AllreduceAsync(absl::StrCat("ordered.", round, ".", t), d.get(),
                                           d.get(), DataType::kFloat32, {1 << 18}, ReduceOp::kSum,
                                           1.0, 1.0, Engine::kWorld, ordered));
        arrays.push_back(std::move(d));
      }
      for (size_t t = 0; t < handles.size(); ++t) {
        if (round < 2) {
          // The legacy default stream, on which Download copies, waits for the result.
          CHECK_OK(handles[t].WaitOnStream(nullptr));
        } else {
          // The host waits for the GPU: any copy after sees the result.
          CHECK_OK(Expect(handles[t].WaitDoneOnDevice(absl::Seconds(60)), "done on the device"));
        }
        CHECK_OK(Expect(handles[t].stream_ordered_device() == r, "the handle's device"));
        DDP_ASSIGN_OR_RETURN(std::vector<char> got, Download(arrays[t].get(), 4 << 18));
        const float* f = reinterpret_cast<const float*>(got.data());
        const float want = static_cast<float>(n * (n + 1) / 2 + n * static_cast<int>(t));
        CHECK_OK(Expect(f[0] == want && f[(1 << 18) - 1] == want,
                        absl::StrCat("ordered[", t, "] = ", f[0], ", want ", want)));
        CHECK_OK(Expect(handles[t].DoneOnDevice(), "done on the device after the copy"));
      }
    }
    std::vector<float> y(100, 1.0f);
    DDP_ASSIGN_OR_RETURN(DeviceArray dy, Upload(r, y.data(), y.size() * 4));
    Handle plain = e.AllreduceAsync("not.ordered", dy.get(), dy.get(), DataType::kFloat32, {100},
                                    ReduceOp::kSum, 1.0, 1.0, Engine::kWorld, Device::Cuda(r));
    CHECK_OK(plain.Wait());
    CHECK_OK(Expect(plain.stream_ordered_device() == -1 && plain.DoneOnDevice(),
                    "a plain CUDA allreduce is done when finished"));
    DDP_ASSIGN_OR_RETURN(std::vector<char> got, Download(dy.get(), 400));
    return Expect(reinterpret_cast<const float*>(got.data())[99] == static_cast<float>(n),
                  "the plain allreduce's result");
  });
}

TEST(Nccl, BroadcastAllgatherAlltoallReduceScatter) {
  SKIP_WITHOUT_GPU();
  ExpectOkOnEveryGpu([](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    const int r = ctx.rank();
    const int n = ctx.size();
    const Device dev = Device::Cuda(r);
    // Broadcast from the last rank.
    std::vector<double> b(9, r == n - 1 ? 3.25 : -1.0);
    DDP_ASSIGN_OR_RETURN(DeviceArray db, Upload(r, b.data(), b.size() * 8));
    Handle hb =
        e.BroadcastAsync("bc", db.get(), DataType::kFloat64, {9}, n - 1, Engine::kWorld, dev);
    // Allgather, uneven: rank i has i+1 rows of 2 (and, separately, an even one).
    std::vector<int32_t> rows(static_cast<size_t>((r + 1) * 2));
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = r * 100 + static_cast<int32_t>(i);
    DDP_ASSIGN_OR_RETURN(DeviceArray dr, Upload(r, rows.data(), rows.size() * 4));
    Handle hag =
        e.AllgatherAsync("ag", dr.get(), DataType::kInt32, {r + 1, 2}, Engine::kWorld, dev);
    Handle hag2 =
        e.AllgatherAsync("ag.even", dr.get(), DataType::kInt32, {1, 2}, Engine::kWorld, dev);
    // Alltoall: 2 rows of 3 per destination.
    std::vector<int64_t> a(static_cast<size_t>(n * 6));
    for (size_t i = 0; i < a.size(); ++i) a[i] = r * 1000 + static_cast<int64_t>(i);
    DDP_ASSIGN_OR_RETURN(DeviceArray da, Upload(r, a.data(), a.size() * 8));
    Handle hat =
        e.AlltoallAsync("a2a", da.get(), DataType::kInt64, {n * 2, 3}, Engine::kWorld, dev);
    // Reduce-scatter: 2n+1 rows of 2 (uneven), average with scale factors; and an even one.
    const int64_t nrows = 2 * n + 1;
    std::vector<float> rs(static_cast<size_t>(nrows * 2));
    for (size_t i = 0; i < rs.size(); ++i) rs[i] = static_cast<float>(i + static_cast<size_t>(r));
    DDP_ASSIGN_OR_RETURN(DeviceArray drs, Upload(r, rs.data(), rs.size() * 4));
    Handle hrs = e.ReduceScatterAsync("rs", drs.get(), DataType::kFloat32, {nrows, 2},
                                      ReduceOp::kAverage, 2.0, 0.5, Engine::kWorld, dev);
    Handle hrs2 = e.ReduceScatterAsync("rs.even", drs.get(), DataType::kFloat32, {n, 2},
                                       ReduceOp::kMax, 1.0, 1.0, Engine::kWorld, dev);

    CHECK_OK(hb.Wait());
    DDP_ASSIGN_OR_RETURN(std::vector<char> got, Download(db.get(), 9 * 8));
    for (int i = 0; i < 9; ++i) {
      CHECK_OK(Expect(reinterpret_cast<double*>(got.data())[i] == 3.25, "broadcast value"));
    }
    CHECK_OK(hag.Wait());
    CHECK_OK(Expect(hag.output_device() == r, "allgather output is on this rank's GPU"));
    CHECK_OK(
        Expect(hag.output_shape() == std::vector<int64_t>{n * (n + 1) / 2, 2}, "allgather shape"));
    DDP_ASSIGN_OR_RETURN(got, Download(hag.output(), hag.output_bytes()));
    const auto* ag = reinterpret_cast<const int32_t*>(got.data());
    size_t at = 0;
    for (int src = 0; src < n; ++src) {
      for (int i = 0; i < (src + 1) * 2; ++i) {
        CHECK_OK(Expect(ag[at++] == src * 100 + i, "allgather value"));
      }
    }
    CHECK_OK(hag2.Wait());
    DDP_ASSIGN_OR_RETURN(got, Download(hag2.output(), hag2.output_bytes()));
    for (int src = 0; src < n; ++src) {
      CHECK_OK(Expect(reinterpret_cast<int32_t*>(got.data())[src * 2 + 1] == src * 100 + 1,
                      "even allgather value"));
    }
    CHECK_OK(hat.Wait());
    DDP_ASSIGN_OR_RETURN(got, Download(hat.output(), hat.output_bytes()));
    const auto* a2 = reinterpret_cast<const int64_t*>(got.data());
    for (int src = 0; src < n; ++src) {
      for (int k = 0; k < 6; ++k) {
        CHECK_OK(Expect(a2[src * 6 + k] == src * 1000 + r * 6 + k, "alltoall value"));
      }
    }
    CHECK_OK(hrs.Wait());
    int64_t first = 0;
    for (int i = 0; i < r; ++i) first += nrows / n + (i < nrows % n ? 1 : 0);
    const int64_t mine = nrows / n + (r < nrows % n ? 1 : 0);
    CHECK_OK(Expect(hrs.output_shape() == std::vector<int64_t>{mine, 2}, "reducescatter shape"));
    DDP_ASSIGN_OR_RETURN(got, Download(hrs.output(), hrs.output_bytes()));
    for (int64_t i = 0; i < mine * 2; ++i) {
      // mean over ranks of 2 * (idx + r), times 0.5 = idx + mean(r).
      const double want = static_cast<double>(first * 2 + i) + (n - 1) / 2.0;
      const float v = reinterpret_cast<const float*>(got.data())[i];
      CHECK_OK(Expect(std::abs(v - want) < 1e-4, absl::StrCat("reducescatter value ", v)));
    }
    CHECK_OK(hrs2.Wait());
    DDP_ASSIGN_OR_RETURN(got, Download(hrs2.output(), hrs2.output_bytes()));
    const float v = reinterpret_cast<const float*>(got.data())[1];
    return Expect(v == static_cast<float>(r * 2 + 1 + (n - 1)), absl::StrCat("even rs ", v));
  });
}

TEST(Nccl, BadDevicesAreRefusedAndTheEngineGoesOn) {
  SKIP_WITHOUT_GPU();
  ExpectOkOnEveryGpu([](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    const int r = ctx.rank();
    std::vector<float> x(8, 1.0f);
    DDP_ASSIGN_OR_RETURN(DeviceArray dx, Upload(r, x.data(), 32));
    Handle bad = e.AllreduceAsync("t", dx.get(), dx.get(), DataType::kFloat32, {8}, ReduceOp::kSum,
                                  1.0, 1.0, Engine::kWorld, Device::Cuda(99));
    CHECK_OK(ExpectMentions(bad.Wait(), {"'t'", "cuda:99 does not exist"}));
    CHECK_OK(e.AllreduceAsync("t", dx.get(), dx.get(), DataType::kFloat32, {8}, ReduceOp::kSum, 1.0,
                              1.0, Engine::kWorld, Device::Cuda(r))
                 .Wait());
    if (nccl::DeviceCount() > 1) {
      const int other = (r + 1) % nccl::DeviceCount();
      Handle h = e.AllreduceAsync("u", dx.get(), dx.get(), DataType::kFloat32, {8}, ReduceOp::kSum,
                                  1.0, 1.0, Engine::kWorld, Device::Cuda(other));
      CHECK_OK(ExpectMentions(h.Wait(), {"one device"}));
    }
    DDP_ASSIGN_OR_RETURN(std::vector<char> got, Download(dx.get(), 32));
    return Expect(reinterpret_cast<float*>(got.data())[7] == static_cast<float>(ctx.size()),
                  "the good allreduce after a refused one");
  });
}

TEST(Nccl, JoinedRanksContributeTheIdentityOnTheGpu) {
  SKIP_WITHOUT_GPU();
  if (GpuRanks() < 2) GTEST_SKIP() << "needs 2 GPUs";
  ExpectOkOnEveryGpu([](Context& ctx) -> absl::Status {
    Engine& e = ctx.engine();
    const int r = ctx.rank();
    const int n = ctx.size();
    if (r == 0) return e.JoinAsync().Wait();  // rank 0 has no data at all
    std::vector<float> x(100, static_cast<float>(r));
    DDP_ASSIGN_OR_RETURN(DeviceArray dx, Upload(r, x.data(), 400));
    CHECK_OK(e.AllreduceAsync("avg", dx.get(), dx.get(), DataType::kFloat32, {100},
                              ReduceOp::kAverage, 1.0, 1.0, Engine::kWorld, Device::Cuda(r))
                 .Wait());
    CHECK_OK(e.JoinAsync().Wait());
    DDP_ASSIGN_OR_RETURN(std::vector<char> got, Download(dx.get(), 400));
    const double want = (n * (n - 1) / 2.0) / n;  // ranks 1..n-1's sum; rank 0 counts with 0
    const float v = reinterpret_cast<float*>(got.data())[99];
    return Expect(std::abs(v - want) < 1e-5, absl::StrCat("joined average ", v));
  });
}

}  // namespace
}  // namespace ddp::testing
