#pragma once

// Eight float16 to float and back with F16C (vcvtph2ps, vcvtps2ph), for functions compiled with
// COTENSOR_F16C_TARGET that run only where cpu_has_f16c(). The same bits as float16_t's own
// conversions: F16C converts every half exactly and rounds to nearest even (immediate 0) as the
// software does; only NaN differs, vcvtps2ph keeping the top of a NaN's payload where
// float16_t(float) writes the one quiet NaN 0x7E00 of the NaN's sign, so store_half8 makes NaN
// lanes that NaN's float (0x7FC00000 | sign) before converting.

#include "cotensor/dtype.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define COTENSOR_HAVE_F16C 1
#define COTENSOR_F16C_TARGET __attribute__((target("avx,f16c")))
#include <immintrin.h>
#else
#define COTENSOR_HAVE_F16C 0
#endif

#if COTENSOR_HAVE_F16C
namespace cotensor::detail::cpu {

/// Whether this CPU and OS run AVX and F16C; asked once (src/cpu/half_convert.cpp).
bool cpu_has_f16c() noexcept;

/// p[0..8) as floats, exactly.
COTENSOR_F16C_TARGET inline __m256 load_half8(const float16_t* p) noexcept {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

/// p[0..8) = float16_t(x[lane]) for each lane.
COTENSOR_F16C_TARGET inline void store_half8(float16_t* p, __m256 x) noexcept {
  // Masks, not _mm256_blendv_ps, which GCC 12 lowers to a branch per lane.
  const __m256 payload = _mm256_castsi256_ps(_mm256_set1_epi32(0x003FFFFF));
  const __m256 quiet = _mm256_castsi256_ps(_mm256_set1_epi32(0x00400000));
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  x = _mm256_andnot_ps(_mm256_and_ps(nan, payload), x);
  x = _mm256_or_ps(x, _mm256_and_ps(nan, quiet));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
}

}  // namespace cotensor::detail::cpu
#endif
