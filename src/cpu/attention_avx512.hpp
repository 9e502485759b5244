#pragma once

// What the AVX-512 attention kernels share (cpu/attention_avx512.cpp, a prompt chunk's tiles;
// cpu/attention_rows_avx512.cpp, a decode step's rows): loads and stores of 16 lanes, the
// transposition of a chunk's keys, and the sums of a chunk's values in registers. Each is the
// same operations, in the same order, as cpu/attention.cpp's plain C++ (the files are compiled
// without contraction into fused multiply-adds): the same bits. Internal to src/cpu/.

#include "cpu/attention_chunk.hpp"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#if defined(__x86_64__) && defined(__GNUC__)
// GCC bug 105593 (fixed in 13), as in cpu/gemm_avx512_steps.hpp.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#define COTENSOR_ATTENTION_AVX512 1
#define COTENSOR_ATTENTION_TARGET __attribute__((target("avx512f")))
#else
#define COTENSOR_ATTENTION_AVX512 0
#endif

namespace cotensor::detail::cpu {

#if COTENSOR_ATTENTION_AVX512
namespace attention_registers {

template <class T>
COTENSOR_ATTENTION_TARGET inline __m512 load16(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm512_loadu_ps(p);
  } else if constexpr (std::is_same_v<T, bfloat16_t>) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  } else {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
}

// scalar_rows (cpu/attention_chunk.hpp) 16 elements at a time, for head sizes that are a
// multiple of 16: a query row's elements converted exactly, and the sums divided (vdivps
// rounds as divss) and rounded to bfloat16 as bfloat16_t(float) rounds (to nearest even, a
// NaN to its quiet NaN). float16's rounding stays element by element.
struct vector_rows {
  template <class T>
  COTENSOR_ATTENTION_TARGET static void to_float(float* out, const T* in, std::int64_t n) {
    for (std::int64_t i = 0; i < n; i += 16) {
      _mm512_storeu_ps(out + i, load16(in + i));
    }
  }
  template <class T>
  COTENSOR_ATTENTION_TARGET static void
  quotients(T* out, const float* sums, float total, std::int64_t n) {
    if constexpr (std::is_same_v<T, float16_t>) {
      scalar_rows::quotients(out, sums, total, n);
    } else {
      const __m512 d = _mm512_set1_ps(total);
      for (std::int64_t i = 0; i < n; i += 16) {
        const __m512 x = _mm512_div_ps(_mm512_loadu_ps(sums + i), d);
        if constexpr (std::is_same_v<T, float>) {
          _mm512_storeu_ps(out + i, x);
        } else {
          const __m512i u = _mm512_castps_si512(x);
          const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
          const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
          __m512i bits = _mm512_srli_epi32(
              _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), odd), 16);
          bits =
              _mm512_mask_or_epi32(bits, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x0040));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtepi32_epi16(bits));
        }
      }
    }
  }
};

// out[e * 16 + c] = r[c][e]: 16 rows of 16 floats transposed (about 64 shuffles).
COTENSOR_ATTENTION_TARGET __attribute__((always_inline)) inline void
transpose16(const __m512 (&r)[16], float* out) {
  __m512 t[16];
  // t[c], per 128-bit lane L: r[c][4L], r[c+1][4L], r[c][4L+1], r[c+1][4L+1]; t[c+1] the rest.
#pragma GCC unroll 8
  for (int c = 0; c < 16; c += 2) {
    t[c] = _mm512_unpacklo_ps(r[c], r[c + 1]);
    t[c + 1] = _mm512_unpackhi_ps(r[c], r[c + 1]);
  }
  // u[4g + e], lane L: keys 4g .. 4g+3 of element 4L + e.
  __m512 u[16];
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    const __m512* q = t + 4 * g;
    u[4 * g + 0] = _mm512_shuffle_ps(q[0], q[2], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * g + 1] = _mm512_shuffle_ps(q[0], q[2], _MM_SHUFFLE(3, 2, 3, 2));
    u[4 * g + 2] = _mm512_shuffle_ps(q[1], q[3], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * g + 3] = _mm512_shuffle_ps(q[1], q[3], _MM_SHUFFLE(3, 2, 3, 2));
  }
#pragma GCC unroll 4
  for (int e = 0; e < 4; ++e) {
    const __m512 v = _mm512_shuffle_f32x4(u[e], u[4 + e], 0x88);  // lanes 0 and 2
    const __m512 w = _mm512_shuffle_f32x4(u[e], u[4 + e], 0xDD);  // lanes 1 and 3
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0x88);
    const __m512 w2 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0xDD);
    _mm512_storeu_ps(out + e * 16, _mm512_shuffle_f32x4(v, v2, 0x88));
    _mm512_storeu_ps(out + (8 + e) * 16, _mm512_shuffle_f32x4(v, v2, 0xDD));
    _mm512_storeu_ps(out + (4 + e) * 16, _mm512_shuffle_f32x4(w, w2, 0x88));
    _mm512_storeu_ps(out + (12 + e) * 16, _mm512_shuffle_f32x4(w, w2, 0xDD));
  }
}

// kt[i * 16 + c] = float(key c's element at + i) for i < hd (a multiple of 16); keys past n
// are zeros, as cpu/attention.cpp's padding rows.
template <class T>
COTENSOR_ATTENTION_TARGET void transpose_from_cache(const T* const (&keys)[key_chunk],
                                                    std::int64_t n,
                                                    std::int64_t at,
                                                    std::int64_t hd,
                                                    float* kt) {
  for (std::int64_t i0 = 0; i0 < hd; i0 += 16) {
    __m512 r[16];
#pragma GCC unroll 16
    for (std::int64_t c = 0; c < key_chunk; ++c) {
      r[c] = c < n ? load16(keys[c] + at + i0) : _mm512_setzero_ps();
    }
    transpose16(r, kt + i0 * 16);
  }
}

// out[i] += weights[c] * float(values[c][at + i]) for c < m in order, i < hd (a multiple of
// 16): cpu/attention.cpp's add_scaled, with the sums kept in registers across the keys.
template <class T>
COTENSOR_ATTENTION_TARGET void add_values(float* out,
                                          const float (&weights)[key_chunk],
                                          std::int64_t m,
                                          const T* const (&values)[key_chunk],
                                          std::int64_t at,
                                          std::int64_t hd) {
  for (std::int64_t i0 = 0; i0 < hd; i0 += 64) {
    const std::int64_t vectors = std::min<std::int64_t>(4, (hd - i0) / 16);
    __m512 o[4];
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u) {
      o[u] = u < vectors ? _mm512_loadu_ps(out + i0 + 16 * u) : _mm512_setzero_ps();
    }
    for (std::int64_t c = 0; c < m; ++c) {
      const __m512 w = _mm512_set1_ps(weights[c]);
      const T* v = values[c] + at + i0;
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) {
        if (u < vectors) {
          o[u] = _mm512_add_ps(o[u], _mm512_mul_ps(w, load16(v + 16 * u)));
        }
      }
    }
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u) {
      if (u < vectors) {
        _mm512_storeu_ps(out + i0 + 16 * u, o[u]);
      }
    }
  }
}

// add_values for a tile's `Rows` rows over the 16 float value rows of a chunk, row r over the
// first m[r] of them (all 16 when Full): out + r * hd gets weights[r][c] * values[c][i] added
// for c in order, each value vector loaded once for all the rows, 32 columns at a time (two
// vectors a row in registers; a row's adds past its m[r] masked off). Each row's operations are
// add_values' own, in the same order: the same bits.
template <int Rows, bool Full>
COTENSOR_ATTENTION_TARGET void add_values_rows(float* out,
                                               const float (&weights)[Rows][key_chunk],
                                               const std::int64_t (&m)[Rows],
                                               const float* values,
                                               std::int64_t hd) {
  for (std::int64_t i0 = 0; i0 < hd; i0 += 32) {
    const bool two = hd - i0 >= 32;
    __m512 o[Rows][2];
#pragma GCC unroll 8
    for (int r = 0; r < Rows; ++r) {
      o[r][0] = _mm512_loadu_ps(out + r * hd + i0);
      o[r][1] = two ? _mm512_loadu_ps(out + r * hd + i0 + 16) : _mm512_setzero_ps();
    }
    for (std::int64_t c = 0; c < key_chunk; ++c) {
      const __m512 v0 = _mm512_loadu_ps(values + c * hd + i0);
      const __m512 v1 = two ? _mm512_loadu_ps(values + c * hd + i0 + 16) : _mm512_setzero_ps();
#pragma GCC unroll 8
      for (int r = 0; r < Rows; ++r) {
        const __m512 w = _mm512_set1_ps(weights[r][c]);
        if constexpr (Full) {
          o[r][0] = _mm512_add_ps(o[r][0], _mm512_mul_ps(w, v0));
          o[r][1] = _mm512_add_ps(o[r][1], _mm512_mul_ps(w, v1));
        } else {
          const auto k = static_cast<__mmask16>(c < m[r] ? 0xFFFF : 0);
          o[r][0] = _mm512_mask_add_ps(o[r][0], k, o[r][0], _mm512_mul_ps(w, v0));
          o[r][1] = _mm512_mask_add_ps(o[r][1], k, o[r][1], _mm512_mul_ps(w, v1));
        }
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < Rows; ++r) {
      _mm512_storeu_ps(out + r * hd + i0, o[r][0]);
      if (two) {
        _mm512_storeu_ps(out + r * hd + i0 + 16, o[r][1]);
      }
    }
  }
}

// vr[c * hd + i] = float(value c's element at + i), for the n keys whose places in the key
// cache are key_rows (a key's value lies at the same offset in the value cache).
template <class T>
COTENSOR_ATTENTION_TARGET void values_to_float(const sequence_cache<T>& cache,
                                               const T* const (&key_rows)[key_chunk],
                                               std::int64_t n,
                                               std::int64_t at,
                                               std::int64_t hd,
                                               float* vr) {
  for (std::int64_t c = 0; c < n; ++c) {
    const T* v = cache.v + (key_rows[c] - cache.k) + at;
    for (std::int64_t i = 0; i < hd; i += 16) {
      _mm512_storeu_ps(vr + c * hd + i, load16(v + i));
    }
  }
}

// One chunk for Rows rows that read the same keys and values (a tile's rows of a head, or a
// decode row's query heads of a key/value head): their queries q (Rows rows of hd floats),
// the chunk's transposed keys kt and float values vr; row r sees the chunk's first m[r] keys
// (none when m[r] <= 0). The scores are Rows chains of adds side by side, the rows' weights and
// values together (chunk_weights_rows, add_values_rows; a row's keys past m[r] left out by
// masks unless every row sees all 16): each row's operations are chunk_weights' and
// add_values' own. Row r's state is top[r] and total[r], its sums out + r * hd.
template <int Rows>
COTENSOR_ATTENTION_TARGET void chunk_rows(const float* q,
                                          const float* kt,
                                          const float* vr,
                                          const std::int64_t (&m)[Rows],
                                          float scale,
                                          float* top,
                                          float* total,
                                          float* out,
                                          std::int64_t hd) {
  __m512 s[Rows];
#pragma GCC unroll 8
  for (auto& x : s) {
    x = _mm512_setzero_ps();
  }
  for (std::int64_t i = 0; i < hd; ++i) {
    const __m512 k = _mm512_loadu_ps(kt + i * 16);
#pragma GCC unroll 8
    for (int r = 0; r < Rows; ++r) {
      s[r] = _mm512_add_ps(s[r], _mm512_mul_ps(_mm512_set1_ps(q[r * hd + i]), k));
    }
  }
  float scores[Rows][key_chunk];
  float weights[Rows][key_chunk];
  bool full = true;
#pragma GCC unroll 8
  for (int r = 0; r < Rows; ++r) {
    _mm512_storeu_ps(scores[r], s[r]);
    full = full && m[r] == key_chunk;
  }
  if (full) {
    chunk_weights_rows<Rows, true>(scores, m, scale, top, total, out, hd, weights);
    add_values_rows<Rows, true>(out, weights, m, vr, hd);
  } else {
    chunk_weights_rows<Rows, false>(scores, m, scale, top, total, out, hd, weights);
    add_values_rows<Rows, false>(out, weights, m, vr, hd);
  }
}

// f(T{}) for the element types the registers' kernels take (float32, bfloat16, float16);
// false for any other (attention_rows_avx512 never picks them).
template <class F>
bool visit_register_type(dtype t, F&& f) {
  switch (t) {
  case dtype::float32:
    f(float{});
    return true;
  case dtype::bfloat16:
    f(bfloat16_t{});
    return true;
  case dtype::float16:
    f(float16_t{});
    return true;
  default:
    return false;
  }
}

}  // namespace attention_registers
#endif

}  // namespace cotensor::detail::cpu
