#pragma once

// Eight float16 or bfloat16 to float and back in AVX2 registers, for functions compiled with
// COTENSOR_HALF8_TARGET that run only where cpu_has_half8(). The same bits as float16_t's and
// bfloat16_t's own conversions:
// - float16 through F16C (vcvtph2ps, vcvtps2ph), which converts every half exactly and rounds
//   to nearest even (immediate 0) as the software does. Only NaN differs: vcvtps2ph keeps the
//   top of a NaN's payload where float16_t(float) writes the one quiet NaN 0x7E00 of the NaN's
//   sign, so store_half8 first makes NaN lanes that NaN's float (0x7FC00000 | sign).
// - bfloat16 by shifts, bfloat16_bits_from_float's rounding and NaN rule in lanes.

#include "cotensor/dtype.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define COTENSOR_HAVE_HALF8 1
#define COTENSOR_HALF8_TARGET __attribute__((target("avx2,f16c")))
#include <immintrin.h>
#else
#define COTENSOR_HAVE_HALF8 0
#endif

#if COTENSOR_HAVE_HALF8
namespace cotensor::detail::cpu {

/// Whether this CPU and OS run AVX2 and F16C; asked once (src/cpu/half_convert.cpp).
bool cpu_has_half8() noexcept;

/// p[0..8) as floats, exactly.
COTENSOR_HALF8_TARGET inline __m256 load_half8(const float16_t* p) noexcept {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
/// p[0..8) as floats, exactly.
COTENSOR_HALF8_TARGET inline __m256 load_half8(const bfloat16_t* p) noexcept {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

/// p[0..8) = float16_t(x[lane]) for each lane.
COTENSOR_HALF8_TARGET inline void store_half8(float16_t* p, __m256 x) noexcept {
  // Masks, not _mm256_blendv_ps, which GCC 12 lowers to a branch per lane.
  const __m256 payload = _mm256_castsi256_ps(_mm256_set1_epi32(0x003FFFFF));
  const __m256 quiet = _mm256_castsi256_ps(_mm256_set1_epi32(0x00400000));
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  x = _mm256_andnot_ps(_mm256_and_ps(nan, payload), x);
  x = _mm256_or_ps(x, _mm256_and_ps(nan, quiet));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
}
/// p[0..8) = bfloat16_t(x[lane]) for each lane.
COTENSOR_HALF8_TARGET inline void store_half8(bfloat16_t* p, __m256 x) noexcept {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), odd), 16);
  const __m256i quieted = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x0040));
  const __m256i bits =
      _mm256_or_si256(_mm256_and_si256(nan, quieted), _mm256_andnot_si256(nan, rounded));
  // Each lane is below 2^16, so the saturating pack is exact; it packs within 128-bit halves,
  // and the permute brings the two groups of four together.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0x08);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
}

}  // namespace cotensor::detail::cpu
#endif
