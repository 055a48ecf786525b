// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The entry points of reduce.h, and the choice of the instruction set their kernels use.
//
// The kernels are one source (isa/kernels.inc) built once per ISA, each build in a translation
// unit of its own with its own -m options (libddp/CMakeLists.txt), each exporting a table of
// function pointers (isa/kernels.h). The first call picks a table from CPUID and DDP_REDUCE_ISA;
// after that a call is a lookup by type and op and one indirect call. Explicit tables rather than
// GNU ifunc or target_clones: they work under every sanitizer (ifunc resolvers run before TSan's
// runtime is up), off glibc, and let tests and benchmarks run every build in one process.
#include "reduce/reduce.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "reduce/half.h"
#include "reduce/isa/kernels.h"
#include "reduce/reduce_internal.h"

#if defined(DDP_REDUCE_X86_KERNELS)
#include <cpuid.h>
#endif

namespace ddp::reduce {
namespace internal {
namespace {

constexpr const char* kIsaNames[kNumIsas] = {"scalar", "avx2", "avx512"};

// A bad type, op or divisor can only come from memory corruption or a missing validation
// upstream; silently leaving dst unchanged would corrupt training, so stop loudly instead.
[[noreturn]] void DieInvalid(const char* what, int value) {
  std::fprintf(stderr, "ddp::reduce: invalid %s %d\n", what, value);
  std::abort();
}

// __builtin_cpu_supports reports AVX2 and AVX-512 features only when the OS saves the register
// state they need (XCR0: YMM for AVX2, opmask and all of ZMM for AVX-512), in GCC since 7.4 and
// in Clang. F16C is read from CPUID directly because Clang's __builtin_cpu_supports does not know
// it; its YMM state is the one AVX2 needs.
Isa DetectBestIsa() {
#if defined(DDP_REDUCE_X86_KERNELS)
  __builtin_cpu_init();
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !f16c) {
    return Isa::kScalar;
  }
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512vl")) {
    return Isa::kAvx2;
  }
  return Isa::kAvx512;
#else
  return Isa::kScalar;
#endif
}

const KernelTable& Table(Isa isa) {
  if (!IsaSupported(isa)) {
    std::fprintf(stderr, "ddp::reduce: the %s kernels cannot run on this CPU or were not built\n",
                 IsaName(isa));
    std::abort();
  }
  switch (isa) {
#if defined(DDP_REDUCE_X86_KERNELS)
    case Isa::kAvx512:
      return kAvx512Kernels;
    case Isa::kAvx2:
      return kAvx2Kernels;
#endif
    default:
      return kScalarKernels;
  }
}

const KernelTable& ActiveTable() {
  static const KernelTable& table = Table(ActiveIsa());
  return table;
}

const TypeKernels& ForType(const KernelTable& table, DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return table.f32;
    case DataType::kFloat64:
      return table.f64;
    case DataType::kFloat16:
      return table.f16;
    case DataType::kBFloat16:
      return table.bf16;
    case DataType::kInt8:
      return table.i8;
    case DataType::kUInt8:
      return table.u8;
    case DataType::kInt32:
      return table.i32;
    case DataType::kInt64:
      return table.i64;
  }
  DieInvalid("DataType", static_cast<int>(type));
}

TypeKernels::CombineFn ForOp(const TypeKernels& kernels, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:  // The collective finishes it with DivideBy.
      return kernels.sum;
    case ReduceOp::kMin:
      return kernels.min;
    case ReduceOp::kMax:
      return kernels.max;
    case ReduceOp::kProduct:
      return kernels.product;
  }
  DieInvalid("ReduceOp", static_cast<int>(op));
}

void DoCombine(const KernelTable& table, DataType type, ReduceOp op, void* dst, const void* a,
               const void* b, size_t count) {
  ForOp(ForType(table, type), op)(dst, a, b, count);
}

void DoDivideBy(const KernelTable& table, DataType type, void* buf, size_t count, int64_t divisor) {
  // Integer division by zero is undefined behaviour; an average over zero ranks is a caller bug.
  if (divisor == 0) DieInvalid("divisor", 0);
  ForType(table, type).divide_by(buf, count, divisor);
}

void DoScale(const KernelTable& table, DataType type, void* dst, const void* src, size_t count,
             double factor) {
  ForType(table, type).scale(dst, src, count, factor);
}

}  // namespace

const char* IsaName(Isa isa) {
  const int index = static_cast<int>(isa);
  return index < kNumIsas ? kIsaNames[index] : "unknown";
}

Isa BestIsa() {
  static const Isa best = DetectBestIsa();
  return best;
}

bool IsaSupported(Isa isa) {
  return static_cast<int>(isa) < kNumIsas && static_cast<int>(isa) <= static_cast<int>(BestIsa());
}

IsaChoice ChooseIsa(absl::string_view requested, Isa best) {
  const std::string name = absl::AsciiStrToLower(requested);
  if (name.empty() || name == "auto") return {best, ""};
  for (int i = 0; i < kNumIsas; ++i) {
    const auto isa = static_cast<Isa>(i);
    if (name != kIsaNames[i]) continue;
    if (static_cast<int>(isa) <= static_cast<int>(best)) return {isa, ""};
    return {best, absl::StrFormat("DDP_REDUCE_ISA=%s: this CPU cannot run the %s kernels (or they "
                                  "were not built for it); using %s",
                                  requested, kIsaNames[i], IsaName(best))};
  }
  return {best, absl::StrFormat("DDP_REDUCE_ISA=%s is not one of auto, scalar, avx2, avx512; "
                                "using %s",
                                requested, IsaName(best))};
}

Isa ActiveIsa() {
  static const Isa active = [] {
    const char* env = std::getenv("DDP_REDUCE_ISA");
    const IsaChoice choice = ChooseIsa(env == nullptr ? "" : env, BestIsa());
    if (!choice.warning.empty()) DDP_LOG(kWarning, "%s", choice.warning);
    DDP_LOG(kDebug, "reduce kernels: %s", IsaName(choice.isa));
    return choice.isa;
  }();
  return active;
}

void CombineWith(Isa isa, DataType type, ReduceOp op, void* dst, const void* a, const void* b,
                 size_t count) {
  DoCombine(Table(isa), type, op, dst, a, b, count);
}

void DivideByWith(Isa isa, DataType type, void* buf, size_t count, int64_t divisor) {
  DoDivideBy(Table(isa), type, buf, count, divisor);
}

void ScaleWith(Isa isa, DataType type, void* dst, const void* src, size_t count, double factor) {
  DoScale(Table(isa), type, dst, src, count, factor);
}

void DotsWith(Isa isa, const float* x, const float* ys, size_t n, size_t r, float* out) {
  Table(isa).linear.dots(x, ys, n, r, out);
}

void AxpysWith(Isa isa, const float* a, const float* x, float* ys, size_t n, size_t r) {
  Table(isa).linear.axpys(a, x, ys, n, r);
}

void CombinationWith(Isa isa, const float* a, const float* xs, size_t n, size_t r, float* out) {
  Table(isa).linear.combination(a, xs, n, r, out);
}

}  // namespace internal

namespace {

thread_local bool t_timing = false;
thread_local int64_t t_combine_ns = 0;
thread_local std::vector<CombineTimer::Interval> t_intervals;

int64_t SteadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Calls closer than this are one interval: the ring's chunks are reduced back to back.
constexpr int64_t kJoinNanos = 1000;

void Note(int64_t start, int64_t end) {
  t_combine_ns += end - start;
  if (!t_intervals.empty() && start - t_intervals.back().end < kJoinNanos) {
    t_intervals.back().end = end;
    t_intervals.back().busy += end - start;
    return;
  }
  if (t_intervals.size() >= CombineTimer::kMaxIntervals) {
    MergeToAtMost(t_intervals, CombineTimer::kMaxIntervals / 2);
  }
  t_intervals.push_back({start, end, end - start});
}

}  // namespace

void MergeToAtMost(std::vector<CombineTimer::Interval>& intervals, size_t most) {
  if (intervals.size() <= most || most == 0) return;
  std::vector<int64_t> gaps;
  gaps.reserve(intervals.size() - 1);
  for (size_t i = 1; i < intervals.size(); ++i) {
    gaps.push_back(intervals[i].start - intervals[i - 1].end);
  }
  // The (most - 1)-th longest gap: longer ones are kept, and of those as long, as many as fit.
  std::vector<int64_t> order = gaps;
  const size_t keep = most - 1;
  int64_t threshold = std::numeric_limits<int64_t>::max();
  size_t at_threshold = 0;
  if (keep > 0) {
    std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep - 1),
                     order.end(), std::greater<>());
    threshold = order[keep - 1];
    const auto longer = static_cast<size_t>(
        std::count_if(gaps.begin(), gaps.end(), [&](int64_t g) { return g > threshold; }));
    at_threshold = keep - longer;
  }
  std::vector<CombineTimer::Interval> merged;
  merged.reserve(most);
  merged.push_back(intervals[0]);
  for (size_t i = 1; i < intervals.size(); ++i) {
    const int64_t gap = gaps[i - 1];
    bool kept = gap > threshold;
    if (!kept && gap == threshold && at_threshold > 0) {
      kept = true;
      --at_threshold;
    }
    if (kept) {
      merged.push_back(intervals[i]);
    } else {
      merged.back().end = intervals[i].end;
      merged.back().busy += intervals[i].busy;
    }
  }
  intervals = std::move(merged);
}

CombineTimer::CombineTimer() {
  t_timing = true;
  t_combine_ns = 0;
  t_intervals.clear();
}

CombineTimer::~CombineTimer() { t_timing = false; }

int64_t CombineTimer::nanos() const { return t_combine_ns; }

const std::vector<CombineTimer::Interval>& CombineTimer::intervals() const { return t_intervals; }

void Combine(DataType type, ReduceOp op, void* dst, const void* a, const void* b, size_t count) {
  if (!t_timing) {
    internal::DoCombine(internal::ActiveTable(), type, op, dst, a, b, count);
    return;
  }
  const int64_t start = SteadyNanos();
  internal::DoCombine(internal::ActiveTable(), type, op, dst, a, b, count);
  Note(start, SteadyNanos());
}

void DivideBy(DataType type, void* buf, size_t count, int64_t divisor) {
  internal::DoDivideBy(internal::ActiveTable(), type, buf, count, divisor);
}

void Scale(DataType type, void* dst, const void* src, size_t count, double factor) {
  internal::DoScale(internal::ActiveTable(), type, dst, src, count, factor);
}

void Dots(const float* x, const float* ys, size_t n, size_t r, float* out) {
  internal::ActiveTable().linear.dots(x, ys, n, r, out);
}

void Axpys(const float* a, const float* x, float* ys, size_t n, size_t r) {
  internal::ActiveTable().linear.axpys(a, x, ys, n, r);
}

void Combination(const float* a, const float* xs, size_t n, size_t r, float* out) {
  internal::ActiveTable().linear.combination(a, xs, n, r, out);
}

float HalfToFloat(uint16_t h) { return internal::HalfBitsToFloat(h); }
uint16_t FloatToHalf(float f) { return internal::FloatToHalfBits(f); }
float BFloat16ToFloat(uint16_t b) { return internal::BFloat16BitsToFloat(b); }
uint16_t FloatToBFloat16(float f) { return internal::FloatToBFloat16Bits(f); }

void FloatsToHalves(const float* in, uint16_t* out, size_t count) {
  for (size_t i = 0; i < count; ++i) out[i] = internal::FloatToHalfBits(in[i]);
}

void HalvesToFloats(const uint16_t* in, float* out, size_t count) {
  for (size_t i = 0; i < count; ++i) out[i] = internal::HalfBitsToFloat(in[i]);
}

void FloatsToBFloat16s(const float* in, uint16_t* out, size_t count) {
  for (size_t i = 0; i < count; ++i) out[i] = internal::FloatToBFloat16Bits(in[i]);
}

void BFloat16sToFloats(const uint16_t* in, float* out, size_t count) {
  for (size_t i = 0; i < count; ++i) out[i] = internal::BFloat16BitsToFloat(in[i]);
}

}  // namespace ddp::reduce
