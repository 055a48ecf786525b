// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// ddp-bench: nccl-tests-style benchmark of libddp collectives; with -np N it launches the ranks.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "bench_values.h"
#include "ddp/ddp.h"
#include "launcher.h"

namespace {

using ddp::DataType;
using ddp::ReduceOp;

enum class Op { kAllreduce, kAllgather, kBroadcast, kReduceScatter, kAlltoall };
constexpr const char* kOpNames[] = {"allreduce", "allgather", "broadcast", "reducescatter",
                                    "alltoall"};

const char* OpName(Op op) { return kOpNames[static_cast<int>(op)]; }
bool IsReduction(Op op) { return op == Op::kAllreduce || op == Op::kReduceScatter; }
// Ops whose -b/-e size is the whole buffer, split into one block per rank.
bool IsBlocked(Op op) { return op != Op::kAllreduce && op != Op::kBroadcast; }

struct Config {
  int np = 0;  // > 0: this process is the launcher
  Op op = Op::kAllreduce;
  size_t min_bytes = 8;
  size_t max_bytes = size_t{64} << 20;
  double factor = 2;
  DataType dtype = DataType::kFloat32;
  ReduceOp redop = ReduceOp::kSum;
  std::optional<std::string> transport;  // only when given, so DDP_TRANSPORT wins otherwise
  std::optional<std::string> algo;
  int warmup = 5;
  int iters = 20;
  int repeats = 5;
  bool inplace = false;
  bool check = true;
};

constexpr const char* kUsage =
    "usage: ddp-bench [-np N] [--op allreduce|allgather|broadcast|reducescatter|alltoall]\n"
    "  [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [--dtype f32|f64|f16|bf16|i8|u8|i32|i64]\n"
    "  [--redop sum|average|min|max|product] [--transport auto|tcp|shm|mpi|ofi] [--algo "
    "auto|ring|rd|hier]\n"
    "  [-w WARMUP_ITERS] [-n ITERS] [-r REPEATS] [--inplace] [--check 0|1]\n"
    "Sizes take K, M, G suffixes (powers of 1024). Without -np it runs as one rank of a job\n"
    "described by DDP_* variables (or alone).\n";

std::string Str(absl::string_view s) { return std::string(s); }

// ----------------------------------------------------------------------------- command line

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

std::optional<Op> ParseOp(const std::string& text) {
  for (int i = 0; i < 5; ++i) {
    if (text == kOpNames[i]) return static_cast<Op>(i);
  }
  return std::nullopt;
}

// Applies one flag; returns an error message, or "" when it was understood.
std::string ApplyFlag(const std::string& flag, const std::string& v, Config* c) {
  std::optional<size_t> bytes;
  std::optional<int> num;
  if (flag == "-np" || flag == "--np") {
    if (!(num = ParseInt(v, 1))) return "-np wants a rank count >= 1";
    c->np = *num;
  } else if (flag == "--op") {
    auto op = ParseOp(v);
    if (!op) return "unknown --op " + v;
    c->op = *op;
  } else if (flag == "-b" || flag == "-e") {
    if (!(bytes = ParseBytes(v))) return "bad size " + v;
    (flag == "-b" ? c->min_bytes : c->max_bytes) = *bytes;
  } else if (flag == "-f") {
    c->factor = std::atof(v.c_str());
    if (!(c->factor > 1.0)) return "-f wants a factor > 1";
  } else if (flag == "--dtype") {
    auto t = ddp::ParseDataType(v);
    if (!t.ok()) return "unknown --dtype " + v;
    c->dtype = *t;
  } else if (flag == "--redop") {
    auto r = ddp::ParseReduceOp(v);
    if (!r.ok()) return "unknown --redop " + v;
    c->redop = *r;
  } else if (flag == "--transport") {
    if (v != "auto" && v != "tcp" && v != "shm" && v != "mpi" && v != "ofi") {
      return "--transport wants auto, tcp, shm, mpi or ofi (mpi needs mpirun; ofi takes "
             "DDP_OFI_PROVIDER)";
    }
    c->transport = v;
  } else if (flag == "--algo") {
    if (v != "auto" && v != "ring" && v != "rd" && v != "hier") {
      return "--algo wants auto, ring, rd or hier";
    }
    c->algo = v;
  } else if (flag == "-w" || flag == "-n" || flag == "-r") {
    if (!(num = ParseInt(v, flag == "-w" ? 0 : 1))) return flag + " wants a count";
    (flag == "-w" ? c->warmup : flag == "-n" ? c->iters : c->repeats) = *num;
  } else if (flag == "--check") {
    if (v != "0" && v != "1") return "--check wants 0 or 1";
    c->check = v == "1";
  } else {
    return "unknown flag " + flag;
  }
  return "";
}

// Fills `config`; `child_args` receives argv minus -np, for the ranks a launcher starts.
bool ParseArgs(int argc, char** argv, Config* config, std::vector<std::string>* child_args) {
  child_args->push_back(argv[0]);
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (flag == "--inplace") {
      config->inplace = true;
      child_args->push_back(flag);
      continue;
    }
    std::string value;
    const size_t eq = flag.find('=');
    const bool joined = flag.rfind("--", 0) == 0 && eq != std::string::npos;
    if (joined) {
      value = flag.substr(eq + 1);
      flag.resize(eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      std::fprintf(stderr, "ddp-bench: %s needs a value\n%s", flag.c_str(), kUsage);
      return false;
    }
    if (std::string error = ApplyFlag(flag, value, config); !error.empty()) {
      std::fprintf(stderr, "ddp-bench: %s\n%s", error.c_str(), kUsage);
      return false;
    }
    if (flag != "-np" && flag != "--np") {
      child_args->push_back(flag);
      child_args->push_back(value);
    }
  }
  if (config->min_bytes > config->max_bytes) {
    std::fprintf(stderr, "ddp-bench: -b is larger than -e\n");
    return false;
  }
  return true;
}

// ----------------------------------------------------------------------------- element values

// The shared value code's names for libddp's element types and reductions.
bench::ValueType ValueTypeOf(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return bench::ValueType::kFloat32;
    case DataType::kFloat64:
      return bench::ValueType::kFloat64;
    case DataType::kFloat16:
      return bench::ValueType::kFloat16;
    case DataType::kBFloat16:
      return bench::ValueType::kBFloat16;
    case DataType::kInt8:
      return bench::ValueType::kInt8;
    case DataType::kUInt8:
      return bench::ValueType::kUInt8;
    case DataType::kInt32:
      return bench::ValueType::kInt32;
    case DataType::kInt64:
      return bench::ValueType::kInt64;
  }
  std::abort();
}

bench::Reduction ReductionOf(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return bench::Reduction::kSum;
    case ReduceOp::kAverage:
      return bench::Reduction::kAverage;
    case ReduceOp::kMin:
      return bench::Reduction::kMin;
    case ReduceOp::kMax:
      return bench::Reduction::kMax;
    case ReduceOp::kProduct:
      return bench::Reduction::kProduct;
  }
  std::abort();
}

// One collective call at one size, from this rank's point of view.
struct Plan {
  Op op;
  DataType dtype;
  ReduceOp redop;
  int rank;
  int n;
  size_t count;  // the `count` argument of the call (per rank for blocked ops)
  size_t esize;

  size_t SendCount() const {
    return op == Op::kReduceScatter || op == Op::kAlltoall ? count * n : count;
  }
  size_t RecvCount() const {
    return op == Op::kAllgather || op == Op::kAlltoall ? count * n : count;
  }
  size_t TotalBytes() const { return count * esize * (IsBlocked(op) ? n : 1); }

  int64_t Input(int64_t i) const {
    if (IsReduction(op)) return bench::ReduceInput(ReductionOf(redop), rank, n, i);
    if (op == Op::kAlltoall) {
      const auto c = static_cast<int64_t>(count);
      return bench::AlltoallData(rank, static_cast<int>(i / c), i % c);
    }
    return bench::RankData(rank, i);
  }
  int64_t Expected(int64_t i) const {
    const int64_t block = i / static_cast<int64_t>(count);
    const int64_t offset = i % static_cast<int64_t>(count);
    switch (op) {
      case Op::kAllreduce:
        return bench::ReduceExpected(ReductionOf(redop), n, i);
      case Op::kReduceScatter:
        return bench::ReduceExpected(ReductionOf(redop), n, rank * static_cast<int64_t>(count) + i);
      case Op::kAllgather:
        return bench::RankData(static_cast<int>(block), offset);
      case Op::kBroadcast:
        return bench::RankData(0, i);
      case Op::kAlltoall:
        return bench::AlltoallData(static_cast<int>(block), rank, offset);
    }
    return 0;
  }
};

struct Buffers {
  std::unique_ptr<std::byte, decltype(&std::free)> send{nullptr, &std::free};
  std::unique_ptr<std::byte, decltype(&std::free)> recv{nullptr, &std::free};
};

// Send and receive pointers for `plan`; in place, both point into the receive buffer.
std::pair<std::byte*, std::byte*> Pointers(const Plan& p, bool inplace, const Buffers& b) {
  std::byte* recv = b.recv.get();
  if (!inplace) return {b.send.get(), recv};
  if (p.op == Op::kAllgather) return {recv + p.rank * p.count * p.esize, recv};
  return {recv, recv};
}

// Poisons the output, then writes the inputs (after, so in-place inputs survive).
void Prepare(const Plan& p, std::byte* send, std::byte* recv) {
  std::memset(recv, 0xff, p.RecvCount() * p.esize);
  bench::StoreValues(ValueTypeOf(p.dtype), send, static_cast<int64_t>(p.SendCount()),
                     [&](int64_t i) { return p.Input(i); });
}

int64_t CountWrong(const Plan& p, const std::byte* recv) {
  const bench::ValueType type = ValueTypeOf(p.dtype);
  return bench::CountWrongValues(type, bench::Tolerance(type, ReductionOf(p.redop)), recv,
                                 static_cast<int64_t>(p.RecvCount()),
                                 [&](int64_t i) { return p.Expected(i); });
}

// ----------------------------------------------------------------------------- measuring

absl::Status RunOnce(ddp::Context& ctx, const Plan& p, const std::byte* send, std::byte* recv) {
  switch (p.op) {
    case Op::kAllreduce:
      return ctx.Allreduce(send, recv, p.count, p.dtype, p.redop);
    case Op::kAllgather:
      return ctx.Allgather(send, recv, p.count, p.dtype);
    case Op::kBroadcast:
      return ctx.Broadcast(send, recv, p.count, p.dtype, /*root=*/0);
    case Op::kReduceScatter:
      return ctx.ReduceScatter(send, recv, p.count, p.dtype, p.redop);
    case Op::kAlltoall:
      return ctx.Alltoall(send, recv, p.count, p.dtype);
  }
  return absl::InternalError("unknown op");
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// Microseconds per call: median over timed groups on this rank, then the slowest rank.
absl::StatusOr<double> TimeCalls(ddp::Context& ctx, const Config& c, const Plan& p,
                                 const std::byte* send, std::byte* recv) {
  for (int i = 0; i < c.warmup; ++i) {
    if (absl::Status s = RunOnce(ctx, p, send, recv); !s.ok()) return s;
  }
  std::vector<double> per_call_us;
  for (int r = 0; r < c.repeats; ++r) {
    if (absl::Status s = ctx.Barrier(); !s.ok()) return s;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < c.iters; ++i) {
      if (absl::Status s = RunOnce(ctx, p, send, recv); !s.ok()) return s;
    }
    const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
    per_call_us.push_back(took.count() / c.iters);
  }
  double us = Median(per_call_us);
  if (absl::Status s = ctx.Allreduce(&us, &us, 1, DataType::kFloat64, ReduceOp::kMax); !s.ok()) {
    return s;
  }
  return us;
}

// Elements that came out wrong on all ranks together, from one fresh call.
absl::StatusOr<int64_t> CheckCall(ddp::Context& ctx, const Plan& p, std::byte* send,
                                  std::byte* recv) {
  Prepare(p, send, recv);
  if (absl::Status s = RunOnce(ctx, p, send, recv); !s.ok()) return s;
  int64_t wrong = CountWrong(p, recv);
  if (absl::Status s = ctx.Allreduce(&wrong, &wrong, 1, DataType::kInt64, ReduceOp::kSum);
      !s.ok()) {
    return s;
  }
  return wrong;
}

void PrintHeader(const ddp::Context& ctx, const Config& c) {
  const ddp::Options& o = ctx.options();
  std::printf("# ddp-bench: libddp %s\n", DDP_VERSION_STRING);
  std::printf("# op: %s  ranks: %d  transport: %s  algo: %s  dtype: %s  redop: %s  inplace: %d\n",
              OpName(c.op), ctx.size(), Str(ddp::TransportKindName(o.transport)).c_str(),
              Str(ddp::AlgorithmName(o.algorithm)).c_str(), Str(ddp::DataTypeName(c.dtype)).c_str(),
              Str(ddp::ReduceOpName(c.redop)).c_str(), c.inplace ? 1 : 0);
  std::printf("# sizes: %zu..%zu bytes x%g  warmup: %d  iters: %d  repeats: %d  check: %d\n",
              c.min_bytes, c.max_bytes, c.factor, c.warmup, c.iters, c.repeats, c.check ? 1 : 0);
  std::printf("# time: median over repeats of (group time / iters), max over ranks\n#\n");
  std::printf("# %10s  %12s  %6s  %7s  %10s  %8s  %8s  %6s\n", "size", "count", "type", "redop",
              "time_us", "algbw", "busbw", "#wrong");
  std::printf("# %10s  %12s  %6s  %7s  %10s  %8s  %8s  %6s\n", "(B)", "(elements)", "", "", "(us)",
              "(GB/s)", "(GB/s)", "");
  std::fflush(stdout);
}

double BusFactor(Op op, int n) {
  if (op == Op::kAllreduce) return 2.0 * (n - 1) / n;
  if (op == Op::kBroadcast) return 1.0;
  return static_cast<double>(n - 1) / n;
}

// Runs every size; returns the total of wrong elements (0 when unchecked).
absl::StatusOr<int64_t> RunSizes(ddp::Context& ctx, const Config& c) {
  const int n = ctx.size();
  const size_t esize = ddp::DataTypeSize(c.dtype);
  const size_t alloc = (std::max(c.max_bytes, esize * n) + 4095) / 4096 * 4096;
  Buffers buffers;
  buffers.send.reset(static_cast<std::byte*>(std::aligned_alloc(4096, alloc)));
  buffers.recv.reset(static_cast<std::byte*>(std::aligned_alloc(4096, alloc)));
  if (!buffers.send || !buffers.recv) return absl::ResourceExhaustedError("out of memory");
  if (ctx.rank() == 0) PrintHeader(ctx, c);
  int64_t total_wrong = 0;
  double busbw_sum = 0;
  int rows = 0;
  size_t last_bytes = SIZE_MAX;
  for (size_t bytes = c.min_bytes; bytes <= c.max_bytes;
       bytes = std::max(bytes + 1, static_cast<size_t>(static_cast<double>(bytes) * c.factor))) {
    const size_t count = bytes / esize / (IsBlocked(c.op) ? n : 1);
    const Plan p{c.op, c.dtype, c.redop, ctx.rank(), n, count, esize};
    if (count == 0 || p.TotalBytes() == last_bytes) continue;
    last_bytes = p.TotalBytes();
    auto [send, recv] = Pointers(p, c.inplace, buffers);
    Prepare(p, send, recv);
    absl::StatusOr<double> us = TimeCalls(ctx, c, p, send, recv);
    if (!us.ok()) return us.status();
    absl::StatusOr<int64_t> wrong = c.check ? CheckCall(ctx, p, send, recv) : 0;
    if (!wrong.ok()) return wrong.status();
    total_wrong += *wrong;
    const double algbw = static_cast<double>(p.TotalBytes()) / *us / 1e3;
    const double busbw = algbw * BusFactor(c.op, n);
    busbw_sum += busbw;
    ++rows;
    if (ctx.rank() != 0) continue;
    const std::string wrong_text = c.check ? std::to_string(*wrong) : "N/A";
    std::printf("  %10zu  %12zu  %6s  %7s  %10.2f  %8.3f  %8.3f  %6s\n", p.TotalBytes(),
                p.TotalBytes() / esize, Str(ddp::DataTypeName(c.dtype)).c_str(),
                IsReduction(c.op) ? Str(ddp::ReduceOpName(c.redop)).c_str() : "none", *us, algbw,
                busbw, wrong_text.c_str());
    std::fflush(stdout);
  }
  if (ctx.rank() == 0) {
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(total_wrong),
                total_wrong == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth : %.3f\n#\n", rows > 0 ? busbw_sum / rows : 0.0);
    std::fflush(stdout);
  }
  return total_wrong;
}

int RunRank(const Config& config) {
  absl::StatusOr<ddp::Options> options = ddp::Options::FromEnvironment();
  if (!options.ok()) {
    std::fprintf(stderr, "ddp-bench: %s\n", options.status().ToString().c_str());
    return 1;
  }
  if (config.transport) {
    const std::string& t = *config.transport;
    options->transport = t == "tcp"   ? ddp::TransportKind::kTcp
                         : t == "shm" ? ddp::TransportKind::kShm
                         : t == "mpi" ? ddp::TransportKind::kMpi
                         : t == "ofi" ? ddp::TransportKind::kOfi
                                      : ddp::TransportKind::kAuto;
    absl::Status valid = options->Validate();
    if (!valid.ok()) {
      std::fprintf(stderr, "ddp-bench: %s\n", valid.ToString().c_str());
      return 1;
    }
  }
  if (config.algo) {
    options->algorithm = *config.algo == "ring"   ? ddp::Algorithm::kRing
                         : *config.algo == "rd"   ? ddp::Algorithm::kRecursiveDoubling
                         : *config.algo == "hier" ? ddp::Algorithm::kHierarchical
                                                  : ddp::Algorithm::kAuto;
  }
  const int rank = options->rank;
  absl::StatusOr<std::unique_ptr<ddp::Context>> ctx = ddp::Context::Create(*options);
  if (!ctx.ok()) {
    std::fprintf(stderr, "ddp-bench: rank %d: %s\n", rank, ctx.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<int64_t> wrong = RunSizes(**ctx, config);
  if (!wrong.ok()) {
    std::fprintf(stderr, "ddp-bench: rank %d: %s\n", rank, wrong.status().ToString().c_str());
    (*ctx)->Abort(wrong.status());
    return 1;
  }
  if (absl::Status s = (*ctx)->Shutdown(); !s.ok()) {
    std::fprintf(stderr, "ddp-bench: rank %d: shutdown: %s\n", rank, s.ToString().c_str());
    return 1;
  }
  // Rank 0 alone reports wrong results, so that a launcher does not stop it mid-table.
  if (*wrong == 0 || rank != 0) return 0;
  std::fprintf(stderr, "ddp-bench: %lld wrong elements\n", static_cast<long long>(*wrong));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Config config;
  std::vector<std::string> child_args;
  if (!ParseArgs(argc, argv, &config, &child_args)) return 2;
  if (config.np > 0) {
    return bench::LaunchRanks({config.np, config.transport, config.algo}, child_args);
  }
  return RunRank(config);
}
