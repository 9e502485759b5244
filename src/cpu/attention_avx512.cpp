// A decode step's attention in AVX-512 registers (cpu/attention_chunk.hpp says what it
// computes). cpu/attention.cpp converts a chunk's keys and values into float rows, transposes
// the keys from there and sums each head's scores along one chain of adds; a decode row spent
// most of its time in those passes over buffers larger than L1, and in the chain. Here each
// key/value head's 16 x head_dim keys go from the cache through registers into a transposed
// block, four heads' scores are summed side by side (four chains of the same adds), the values
// are summed into registers as they are read, and the next chunk's rows are asked of memory a
// head at a time: the same operations on the same floats. 16 rows' decode attention over
// GPT-2 small's bfloat16 cache (192 keys, 12 layers) on AMD Zen 4: 10-11.5 ms -> 5.0-5.8 ms,
// 20-23 GB/s of the cache read; the 16-stream decode step of GPT-2 small 17-21 % faster.
// A prompt chunk's tiles of 8 rows the same way, the query heads of a key/value head at a time:
// 16 prompts of 128 ids in a step (GPT-2 small, bfloat16, 12 layers), 88 -> 48-52 us of
// attention a row.

#include "cpu/attention_chunk.hpp"
#include "cpu/gemm_dispatch.hpp"
#include "support/assert.hpp"
#include "support/environment.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
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
namespace {

// Heads whose scores are summed side by side: one head's is a chain of head_dim dependent adds,
// four keep the adders busy.
constexpr int heads_at_once = 4;

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

// add_values for a tile's `Rows` rows over all 16 float value rows of a chunk: out + r * hd
// gets weights[r][c] * values[c][i] added for c in order, each value vector loaded once for all
// the rows, 32 columns at a time (two vectors a row in registers). Each row's operations are
// add_values' own, in the same order: the same bits.
template <int Rows>
COTENSOR_ATTENTION_TARGET void add_values_rows(float* out,
                                               const float (&weights)[Rows][key_chunk],
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
        o[r][0] = _mm512_add_ps(o[r][0], _mm512_mul_ps(w, v0));
        o[r][1] = _mm512_add_ps(o[r][1], _mm512_mul_ps(w, v1));
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

template <class T>
COTENSOR_ATTENTION_TARGET void attend_row(const paged_attention_args& a,
                                          std::int64_t row,
                                          std::int64_t h0,
                                          std::int64_t h1,
                                          float* acc,
                                          float* qf,
                                          tile_state* st,
                                          float* kt) {
  const std::int64_t hd = a.head_dim;
  const std::int64_t row_width = a.kv_heads * hd;
  const std::int64_t width = a.heads * hd;
  const std::int64_t group = a.heads / a.kv_heads;
  const auto* kc = static_cast<const T*>(a.k_cache);
  const auto* vc = static_cast<const T*>(a.v_cache);
  const auto scale = static_cast<float>(a.scale);
  const std::int64_t* table = a.block_tables + a.sequence[row] * a.table_width;
  const std::int64_t keys = a.context[row];
  const auto cache_row = [&](std::int64_t j) {  // key j's row in the caches
    return (table[j / a.block_size] * a.block_size + j % a.block_size) * row_width;
  };
  for (std::int64_t h = h0; h < h1; ++h) {
    vector_rows::to_float(qf + (h - h0) * hd, static_cast<const T*>(a.q) + row * width + h * hd,
                          hd);
    st[h - h0].top[0] = -std::numeric_limits<float>::infinity();
    st[h - h0].total[0] = 0.0F;
  }
  std::fill(acc, acc + (h1 - h0) * hd, 0.0F);
  const std::int64_t first_kv = h0 / group;
  const std::int64_t head_bytes = hd * static_cast<std::int64_t>(sizeof(T));
  const T* key_rows[key_chunk];
  const T* value_rows[key_chunk];
  float scores[key_chunk];
  float weights[key_chunk];
  for (std::int64_t j0 = 0; j0 < keys; j0 += key_chunk) {
    const std::int64_t n = std::min(key_chunk, keys - j0);
    for (std::int64_t c = 0; c < n; ++c) {
      key_rows[c] = kc + cache_row(j0 + c);
      value_rows[c] = vc + cache_row(j0 + c);
    }
    // The next chunk's keys and values, asked of memory a key/value head at a time, its keys as
    // this chunk's are transposed and its values as this chunk's are summed: each head reads a
    // few cache lines of a row, rows a cache row apart, which no prefetcher follows. (A whole
    // chunk's lines at once, as cpu/attention.cpp asks, stalls on the misses in flight: 16 rows'
    // decode attention over GPT-2 small's cache, 192 keys, read it at 12-14 GB/s that way and at
    // 20-23 a head at a time one chunk ahead, on AMD Zen 4; two, three or four chunks ahead
    // measured 3-15 % slower. The values asked for with the keys, in one burst, read 224 keys
    // at 23-24 GB/s on Zen 5, and at 28-31 GB/s asked for apart.)
    const std::int64_t ahead0 = std::min(keys, j0 + key_chunk);
    const std::int64_t ahead = std::max<std::int64_t>(0, std::min(key_chunk, keys - ahead0));
    std::int64_t ahead_at[key_chunk];
    for (std::int64_t c = 0; c < ahead; ++c) {
      ahead_at[c] = cache_row(ahead0 + c);
    }
    std::int64_t transposed = first_kv - 1;  // the last key/value head transposed this chunk
    for (std::int64_t hg = h0; hg < h1; hg += heads_at_once) {
      // The group's heads (the last repeated past h1: computed, not used) and their keys.
      const float* q[heads_at_once];
      const float* k[heads_at_once];
      for (int g = 0; g < heads_at_once; ++g) {
        const std::int64_t h = std::min(hg + g, h1 - 1);
        const std::int64_t kv = h / group;
        if (kv > transposed) {
          for (std::int64_t c = 0; c < ahead; ++c) {
            prefetch(kc + ahead_at[c] + kv * hd, head_bytes);
          }
          transpose_from_cache(key_rows, n, kv * hd, hd, kt + (kv - first_kv) * key_chunk * hd);
          transposed = kv;
        }
        q[g] = qf + (h - h0) * hd;
        k[g] = kt + (kv - first_kv) * key_chunk * hd;
      }
      __m512 s[heads_at_once];
#pragma GCC unroll 4
      for (auto& x : s) {
        x = _mm512_setzero_ps();
      }
      for (std::int64_t i = 0; i < hd; ++i) {
#pragma GCC unroll 4
        for (int g = 0; g < heads_at_once; ++g) {
          s[g] = _mm512_add_ps(
              s[g], _mm512_mul_ps(_mm512_set1_ps(q[g][i]), _mm512_loadu_ps(k[g] + i * 16)));
        }
      }
      for (int g = 0; g < heads_at_once && hg + g < h1; ++g) {
        const std::int64_t h = hg + g;
        float* out = acc + (h - h0) * hd;
        _mm512_storeu_ps(scores, s[g]);
        chunk_weights(scores, n, scale, st[h - h0].top[0], st[h - h0].total[0], out, hd, weights);
        if (h % group == 0 || h == h0) {  // the first of its key/value head's heads here
          for (std::int64_t c = 0; c < ahead; ++c) {
            prefetch(vc + ahead_at[c] + h / group * hd, head_bytes);
          }
        }
        add_values(out, weights, n, value_rows, h / group * hd, hd);
      }
    }
  }
  for (std::int64_t h = h0; h < h1; ++h) {
    vector_rows::quotients(static_cast<T*>(a.out) + row * width + h * hd, acc + (h - h0) * hd,
                           st[h - h0].total[0], hd);
  }
}

// Rows r0 .. r0 + rows - 1 (rows <= attention_tile) of one sequence, heads [h0, h1): a prompt
// chunk's tile, computed as cpu/attention.cpp's attend_tile computes it, in registers: each
// chunk's keys of a key/value head go from the cache into a transposed block and its values into
// float rows once, the tile's rows' scores are eight chains of the same adds side by side, and a
// row's values are summed in registers across the chunk. `acc` and `qf` hold (h1 - h0) *
// attention_tile * head_dim floats, `st` h1 - h0 states, `kt` and `vr` 16 * head_dim floats.
template <class T>
COTENSOR_ATTENTION_TARGET void attend_tile(const paged_attention_args& a,
                                           std::int64_t r0,
                                           std::int64_t rows,
                                           std::int64_t h0,
                                           std::int64_t h1,
                                           float* acc,
                                           float* qf,
                                           tile_state* st,
                                           float* kt,
                                           float* vr) {
  constexpr int tile = static_cast<int>(attention_tile);
  const std::int64_t hd = a.head_dim;
  const std::int64_t row_width = a.kv_heads * hd;
  const std::int64_t group = a.heads / a.kv_heads;
  const auto* kc = static_cast<const T*>(a.k_cache);
  const auto* vc = static_cast<const T*>(a.v_cache);
  const auto scale = static_cast<float>(a.scale);
  const std::int64_t* table = a.block_tables + a.sequence[r0] * a.table_width;
  std::int64_t keys[tile];
  const std::int64_t most =
      start_tile<T, tile, vector_rows>(a, r0, rows, h0, h1, acc, qf, st, keys);
  const T* key_rows[key_chunk];
  const float* value_rows[key_chunk];
  for (std::int64_t c = 0; c < key_chunk; ++c) {
    value_rows[c] = vr + c * hd;
  }
  float scores[tile][key_chunk];
  float weights[tile][key_chunk];
  for (std::int64_t j0 = 0; j0 < most; j0 += key_chunk) {
    const std::int64_t n = std::min(key_chunk, most - j0);
    for (std::int64_t c = 0; c < n; ++c) {
      const std::int64_t j = j0 + c;
      key_rows[c] = kc + (table[j / a.block_size] * a.block_size + j % a.block_size) * row_width;
    }
    bool full = rows == tile;
    for (int r = 0; r < tile; ++r) {
      full = full && keys[r] - j0 >= key_chunk;
    }
    std::int64_t transposed = -1;  // the key/value head whose keys kt and values vr hold
    for (std::int64_t h = h0; h < h1; ++h) {
      const std::int64_t kv = h / group;
      if (kv != transposed) {
        transpose_from_cache(key_rows, n, kv * hd, hd, kt);
        for (std::int64_t c = 0; c < n; ++c) {
          const T* v = vc + (key_rows[c] - kc) + kv * hd;
          for (std::int64_t i = 0; i < hd; i += 16) {
            _mm512_storeu_ps(vr + c * hd + i, load16(v + i));
          }
        }
        transposed = kv;
      }
      const float* q = qf + (h - h0) * tile * hd;
      __m512 s[tile];
#pragma GCC unroll 8
      for (auto& x : s) {
        x = _mm512_setzero_ps();
      }
      for (std::int64_t i = 0; i < hd; ++i) {
        const __m512 k = _mm512_loadu_ps(kt + i * 16);
#pragma GCC unroll 8
        for (int r = 0; r < tile; ++r) {
          s[r] = _mm512_add_ps(s[r], _mm512_mul_ps(_mm512_set1_ps(q[r * hd + i]), k));
        }
      }
      tile_state& state = st[h - h0];
      float* const out = acc + (h - h0) * tile * hd;
      if (full) {  // every row has the chunk's 16 keys: the rows' weights together
#pragma GCC unroll 8
        for (int r = 0; r < tile; ++r) {
          _mm512_storeu_ps(scores[r], s[r]);
        }
        chunk_weights_rows(scores, scale, state.top, state.total, out, hd, weights);
        add_values_rows(out, weights, vr, hd);
        continue;
      }
      for (int r = 0; r < tile; ++r) {
        const std::int64_t m = std::min(key_chunk, keys[r] - j0);
        if (m <= 0) {
          continue;
        }
        _mm512_storeu_ps(scores[r], s[r]);
        chunk_weights(scores[r], m, scale, state.top[r], state.total[r], out + r * hd, hd,
                      weights[r]);
        add_values(out + r * hd, weights[r], m, value_rows, 0, hd);
      }
    }
  }
  end_tile<T, tile, vector_rows>(a, r0, rows, h0, h1, acc, st);
}

}  // namespace

COTENSOR_ATTENTION_TARGET void
transpose_keys_avx512(const float* rows, std::int64_t stride, std::int64_t hd, float* kt) {
  std::int64_t i0 = 0;
  for (; i0 + 16 <= hd; i0 += 16) {
    __m512 r[16];
#pragma GCC unroll 16
    for (int c = 0; c < 16; ++c) {
      r[c] = _mm512_loadu_ps(rows + c * stride + i0);
    }
    transpose16(r, kt + i0 * 16);
  }
  for (; i0 < hd; ++i0) {
    for (std::int64_t c = 0; c < 16; ++c) {
      kt[i0 * 16 + c] = rows[c * stride + i0];
    }
  }
}
#else
void transpose_keys_avx512(const float*, std::int64_t, std::int64_t, float*) {
  COTENSOR_ASSERT(false && "transpose_keys_avx512 without AVX-512");
}
#endif

bool attention_rows_avx512(dtype t, std::int64_t head_dim) {
  const bool fits =
      head_dim % 16 == 0 && (t == dtype::float32 || t == dtype::bfloat16 || t == dtype::float16);
  const auto forced = environment_variable("COTENSOR_ATTENTION");
  if (forced && *forced == "generic") {
    return false;
  }
  if (forced && !forced->empty() && *forced != "auto" && *forced != "avx512") {
    bad_environment_variable("COTENSOR_ATTENTION", *forced, "auto, avx512 or generic");
  }
  if (forced && *forced == "avx512" && !cpu_has_avx512()) {
    throw std::runtime_error("cotensor: COTENSOR_ATTENTION=avx512, but this CPU has no AVX-512");
  }
  return COTENSOR_ATTENTION_AVX512 && fits && cpu_has_avx512();
}

void attend_row_avx512([[maybe_unused]] const paged_attention_args& a,
                       [[maybe_unused]] std::int64_t row,
                       [[maybe_unused]] std::int64_t h0,
                       [[maybe_unused]] std::int64_t h1,
                       [[maybe_unused]] float* acc,
                       [[maybe_unused]] float* qf,
                       [[maybe_unused]] tile_state* st,
                       [[maybe_unused]] float* kt) {
#if COTENSOR_ATTENTION_AVX512
  switch (a.t) {
  case dtype::float32:
    return attend_row<float>(a, row, h0, h1, acc, qf, st, kt);
  case dtype::bfloat16:
    return attend_row<bfloat16_t>(a, row, h0, h1, acc, qf, st, kt);
  case dtype::float16:
    return attend_row<float16_t>(a, row, h0, h1, acc, qf, st, kt);
  default:
    break;
  }
#endif
  COTENSOR_ASSERT(false && "attend_row_avx512 where attention_rows_avx512 says no");
}

void attend_tile_avx512([[maybe_unused]] const paged_attention_args& a,
                        [[maybe_unused]] std::int64_t r0,
                        [[maybe_unused]] std::int64_t rows,
                        [[maybe_unused]] std::int64_t h0,
                        [[maybe_unused]] std::int64_t h1,
                        [[maybe_unused]] float* acc,
                        [[maybe_unused]] float* qf,
                        [[maybe_unused]] tile_state* st,
                        [[maybe_unused]] float* kt,
                        [[maybe_unused]] float* vr) {
#if COTENSOR_ATTENTION_AVX512
  switch (a.t) {
  case dtype::float32:
    return attend_tile<float>(a, r0, rows, h0, h1, acc, qf, st, kt, vr);
  case dtype::bfloat16:
    return attend_tile<bfloat16_t>(a, r0, rows, h0, h1, acc, qf, st, kt, vr);
  case dtype::float16:
    return attend_tile<float16_t>(a, r0, rows, h0, h1, acc, qf, st, kt, vr);
  default:
    break;
  }
#endif
  COTENSOR_ASSERT(false && "attend_tile_avx512 where attention_rows_avx512 says no");
}

}  // namespace cotensor::detail::cpu
