// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The AVX2 build of the kernels (isa/kernels.inc), compiled with -mavx2 -mfma -mf16c (see
// libddp/CMakeLists.txt) and run only where reduce.cc found all three. f16 converts with F16C, 8
// lanes at a time, and bf16 with integer operations, 16 at a time.
#if !defined(__AVX2__) || !defined(__F16C__)
#error "compile with -mavx2 -mfma -mf16c"
#endif

#include <immintrin.h>

#define DDP_REDUCE_ISA avx2
#include "reduce/isa/kernels.inc"

namespace ddp::reduce::internal {
namespace avx2 {
namespace {

// The rounding mode is in the instruction, so MXCSR cannot change the result. vcvtph2ps quiets a
// signaling NaN and keeps its payload; vcvtps2ph keeps the top of the payload and sets the quiet
// bit: the same as half.h.
struct HalfLanes {
  static constexpr size_t kLanes = 8;
  [[gnu::always_inline]] static void Widen(float* out, const uint16_t* in) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in));
    _mm256_storeu_ps(out, _mm256_cvtph_ps(h));
  }
  [[gnu::always_inline]] static void Narrow(uint16_t* out, const float* in) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), h);
  }
};

// bf16 is the top half of an f32, so 16 elements widen with two operations: the even ones shifted
// into the top halves, the odd ones masked in place (hence the lane order even, then odd).
// Narrowing is half.h's FloatToBFloat16Bits per lane (add 0x7fff plus the lowest kept bit, or
// for a NaN set the quiet bit), after which the top halves are merged back into place.
struct BFloat16Lanes {
  static constexpr size_t kLanes = 16;
  [[gnu::always_inline]] static void Widen(float* out, const uint16_t* in) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in));
    _mm256_storeu_ps(out, _mm256_castsi256_ps(_mm256_slli_epi32(b, 16)));
    const __m256i odd = _mm256_and_si256(b, _mm256_set1_epi32(static_cast<int>(0xffff0000u)));
    _mm256_storeu_ps(out + 8, _mm256_castsi256_ps(odd));
  }
  // The bf16 value of each lane in its top 16 bits; the bottom 16 are garbage.
  [[gnu::always_inline]] static __m256i RoundToTop(__m256 f) {
    const __m256i u = _mm256_castps_si256(f);
    const __m256i lowest_kept = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded =
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lowest_kept);
    const __m256i quiet_nan = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
    const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
    return _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
  }
  [[gnu::always_inline]] static void Narrow(uint16_t* out, const float* in) {
    const __m256i even = _mm256_srli_epi32(RoundToTop(_mm256_loadu_ps(in)), 16);
    const __m256i odd = RoundToTop(_mm256_loadu_ps(in + 8));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_blend_epi16(even, odd, 0xaa));
  }
};

}  // namespace
}  // namespace avx2

constinit const KernelTable kAvx2Kernels =
    avx2::MakeKernelTable<avx2::Lanes<avx2::HalfLanes>, avx2::Lanes<avx2::BFloat16Lanes>>();

}  // namespace ddp::reduce::internal
