// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The AVX-512 build of the kernels (isa/kernels.inc), compiled with -mavx512f -mavx512bw
// -mavx512vl (plus the AVX2 set) and a preference for 512-bit vectors (see libddp/CMakeLists.txt),
// and run only where reduce.cc found them all and the OS saves the ZMM state. f16 converts with
// the zmm forms of vcvtph2ps/vcvtps2ph, 16 lanes at a time, and bf16 with integer operations, 32
// at a time.
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__)
#error "compile with -mavx512f -mavx512bw -mavx512vl"
#endif

// GCC 12's avx512fintrin.h seeds many intrinsics with _mm512_undefined_*(), which it then reports
// as maybe-uninitialized once inlined (GCC bug 105593, fixed in GCC 13).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#define DDP_REDUCE_ISA avx512
#include "reduce/isa/kernels.inc"

namespace ddp::reduce::internal {
namespace avx512 {
namespace {

// As in isa/avx2.cc, on 16 lanes: the rounding mode is in the instruction, and NaNs come out as
// half.h makes them.
struct HalfLanes {
  static constexpr size_t kLanes = 16;
  [[gnu::always_inline]] static void Widen(float* out, const uint16_t* in) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in));
    _mm512_storeu_ps(out, _mm512_cvtph_ps(h));
  }
  [[gnu::always_inline]] static void Narrow(uint16_t* out, const float* in) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(in), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), h);
  }
};

// As in isa/avx2.cc, on 32 lanes: even elements shifted into the top halves, odd ones masked in
// place; narrowing rounds each lane's top half and merges the halves back.
struct BFloat16Lanes {
  static constexpr size_t kLanes = 32;
  [[gnu::always_inline]] static void Widen(float* out, const uint16_t* in) {
    const __m512i b = _mm512_loadu_si512(in);
    _mm512_storeu_ps(out, _mm512_castsi512_ps(_mm512_slli_epi32(b, 16)));
    const __m512i odd = _mm512_and_si512(b, _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
    _mm512_storeu_ps(out + 16, _mm512_castsi512_ps(odd));
  }
  // The bf16 value of each lane in its top 16 bits; the bottom 16 are garbage.
  [[gnu::always_inline]] static __m512i RoundToTop(__m512 f) {
    const __m512i u = _mm512_castps_si512(f);
    const __m512i lowest_kept = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded =
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lowest_kept);
    const __mmask16 is_nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
    return _mm512_mask_or_epi32(rounded, is_nan, u, _mm512_set1_epi32(0x00400000));
  }
  [[gnu::always_inline]] static void Narrow(uint16_t* out, const float* in) {
    const __m512i even = _mm512_srli_epi32(RoundToTop(_mm512_loadu_ps(in)), 16);
    const __m512i odd = RoundToTop(_mm512_loadu_ps(in + 16));
    _mm512_storeu_si512(out, _mm512_mask_blend_epi16(0xaaaaaaaau, even, odd));
  }
};

}  // namespace
}  // namespace avx512

constinit const KernelTable kAvx512Kernels =
    avx512::MakeKernelTable<avx512::Lanes<avx512::HalfLanes>,
                            avx512::Lanes<avx512::BFloat16Lanes>>();

}  // namespace ddp::reduce::internal
