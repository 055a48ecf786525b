// f16 reduction kernels that convert with the x86 F16C instructions, chosen at run time.
//
// The portable f16 loop spends most of its time in the software conversions; F16C does the
// same conversion (bit for bit) in one instruction per 8 elements. Each group of 8 is widened to
// f32, combined by the same element ops as the portable kernels (vectorized by GCC), and
// narrowed back.
#include <cstdlib>
#include <cstring>

#include "reduce/ops.h"
#include "reduce/reduce_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define DDP_REDUCE_HAVE_F16C_KERNELS
#endif

namespace ddp::reduce::internal {

#ifdef DDP_REDUCE_HAVE_F16C_KERNELS
namespace {

#define DDP_F16C_INLINE [[gnu::always_inline, gnu::target("avx2,f16c")]] inline

// One 256-bit vector of floats. Working in blocks this small lets GCC keep the f32 scratch in
// registers: the kernel compiles to convert, operate, convert with no stack round trip.
constexpr size_t kLanes = 8;

DDP_F16C_INLINE void Widen(float* out, const uint16_t* in) {
  _mm256_storeu_ps(out, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in))));
}

// The rounding mode is in the instruction, so MXCSR cannot change the result.
DDP_F16C_INLINE void Narrow(uint16_t* out, const float* in) {
  const __m128i half = _mm256_cvtps_ph(_mm256_loadu_ps(in), _MM_FROUND_TO_NEAREST_INT);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), half);
}

// Both inputs are read in full before dst is written, so dst may be a or b.
template <typename Op>
DDP_F16C_INLINE void CombineLanes(uint16_t* dst, const uint16_t* a, const uint16_t* b) {
  float wide_a[kLanes];
  float wide_b[kLanes];
  Widen(wide_a, a);
  Widen(wide_b, b);
  for (size_t i = 0; i < kLanes; ++i) wide_a[i] = Op::Apply(wide_a[i], wide_b[i]);
  Narrow(dst, wide_a);
}

DDP_F16C_INLINE void DivideLanes(uint16_t* io, float divisor) {
  float wide[kLanes];
  Widen(wide, io);
  for (size_t i = 0; i < kLanes; ++i) wide[i] = wide[i] / divisor;
  Narrow(io, wide);
}

template <typename Op>
[[gnu::target("avx2,f16c")]] void CombineSpan(uint16_t* dst, const uint16_t* a, const uint16_t* b,
                                              size_t count) {
  const size_t full = count - count % kLanes;
  for (size_t i = 0; i < full; i += kLanes) CombineLanes<Op>(dst + i, a + i, b + i);
  const size_t rest = count - full;
  if (rest == 0) return;
  // The tail goes through zero-padded copies so no load or store passes the end of an array.
  uint16_t tail_a[kLanes] = {};
  uint16_t tail_b[kLanes] = {};
  std::memcpy(tail_a, a + full, rest * sizeof(uint16_t));
  std::memcpy(tail_b, b + full, rest * sizeof(uint16_t));
  CombineLanes<Op>(tail_a, tail_a, tail_b);
  std::memcpy(dst + full, tail_a, rest * sizeof(uint16_t));
}

}  // namespace

bool HaveF16c() {
  static const bool kHave = [] {
    // The avx2 check includes the OS saving YMM state, which F16C also needs. The F16C bit is
    // read with cpuid because Clang's __builtin_cpu_supports does not know "f16c".
    __builtin_cpu_init();
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 &&
           (ecx & bit_F16C) != 0;
  }();
  return kHave;
}

void CombineHalfF16c(ReduceOp op, uint16_t* dst, const uint16_t* a, const uint16_t* b,
                     size_t count) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return CombineSpan<Sum>(dst, a, b, count);
    case ReduceOp::kMin:
      return CombineSpan<Min>(dst, a, b, count);
    case ReduceOp::kMax:
      return CombineSpan<Max>(dst, a, b, count);
    case ReduceOp::kProduct:
      return CombineSpan<Product>(dst, a, b, count);
  }
  std::abort();  // Combine only routes valid ops here.
}

[[gnu::target("avx2,f16c")]] void DivideHalfF16c(uint16_t* buf, size_t count, int64_t divisor) {
  const auto d = static_cast<float>(divisor);
  const size_t full = count - count % kLanes;
  for (size_t i = 0; i < full; i += kLanes) DivideLanes(buf + i, d);
  const size_t rest = count - full;
  if (rest == 0) return;
  uint16_t tail[kLanes] = {};
  std::memcpy(tail, buf + full, rest * sizeof(uint16_t));
  DivideLanes(tail, d);
  std::memcpy(buf + full, tail, rest * sizeof(uint16_t));
}

#else  // No F16C kernels on this platform; HaveF16c() keeps the callers away from the stubs.

bool HaveF16c() { return false; }

void CombineHalfF16c(ReduceOp, uint16_t*, const uint16_t*, const uint16_t*, size_t) {
  std::abort();
}

void DivideHalfF16c(uint16_t*, size_t, int64_t) { std::abort(); }

#endif

}  // namespace ddp::reduce::internal
