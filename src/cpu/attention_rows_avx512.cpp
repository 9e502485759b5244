// A decode step's attention in AVX-512 registers (cpu/attention_chunk.hpp says what it
// computes): one query row over its sequence's cache. cpu/attention.cpp converts a chunk's keys
// and values into float rows, transposes the keys from there and sums each head's scores along
// one chain of adds; a decode row spent most of its time in those passes over buffers larger
// than L1, and in the chain. Here each key/value head's 16 x head_dim keys go from the cache
// through registers into a transposed block, four heads' scores are summed side by side (four
// chains of the same adds), the values are summed into registers as they are read, and the
// next chunk's rows are asked of memory a head at a time: the same operations on the same
// floats. 16 rows' decode attention over GPT-2 small's bfloat16 cache (192 keys, 12 layers) on
// AMD Zen 4: 10-11.5 ms -> 5.0-5.8 ms, 20-23 GB/s of the cache read; the 16-stream decode step
// of GPT-2 small 17-21 % faster. Where 4 or more query heads share a key/value head, those
// heads go together as a prompt tile's rows go (attend_heads): 16 rows over 160 keys of
// Qwen2-0.5B's bfloat16 cache (14 heads over 2, 24 layers) on AMD Zen 5, 3.1-3.2 -> 2.4 ms.

#include "cpu/attention_avx512.hpp"
#include "support/assert.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <limits>
#include <utility>

namespace cotensor::detail::cpu {

#if COTENSOR_ATTENTION_AVX512
namespace {

using namespace attention_registers;

// Heads whose scores are summed side by side: one head's is a chain of head_dim dependent adds,
// four keep the adders busy.
constexpr int heads_at_once = 4;

// A decode row's sums for heads [h0, h1), their queries in float at qf and states in st:
// chunk by chunk, every head inside, heads_at_once heads' scores side by side.
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
  const std::int64_t group = a.heads / a.kv_heads;
  const sequence_cache<T> cache(a, a.sequence[row]);
  const auto* kc = cache.k;
  const auto* vc = cache.v;
  const auto scale = static_cast<float>(a.scale);
  const std::int64_t keys = a.context[row];
  const std::int64_t first_kv = h0 / group;
  const std::int64_t head_bytes = hd * static_cast<std::int64_t>(sizeof(T));
  const T* key_rows[key_chunk];
  const T* value_rows[key_chunk];
  float scores[key_chunk];
  float weights[key_chunk];
  for (std::int64_t j0 = 0; j0 < keys; j0 += key_chunk) {
    const std::int64_t n = std::min(key_chunk, keys - j0);
    for (std::int64_t c = 0; c < n; ++c) {
      key_rows[c] = kc + cache.row(j0 + c);
      value_rows[c] = vc + cache.row(j0 + c);
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
      ahead_at[c] = cache.row(ahead0 + c);
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
}

// One row's query heads that share key/value head `kv` (G of them, their queries in float at
// qf, G rows of head_dim; their sums at out, their states in top and total), over the row's
// keys: a prompt tile's arithmetic (attend_tile) with the heads as its rows. Each chunk's keys
// of the head are transposed and its values converted once for the G heads (chunk_rows: their
// scores G chains side by side, their weights and values together when the chunk holds 16
// keys): each head's operations are attend_row's, in the same order — the same bits.
template <class T, int G>
COTENSOR_ATTENTION_TARGET void attend_heads(const paged_attention_args& a,
                                            std::int64_t row,
                                            std::int64_t kv,
                                            const float* qf,
                                            float* out,
                                            float* top,
                                            float* total,
                                            float* kt,
                                            float* vr) {
  const std::int64_t hd = a.head_dim;
  const sequence_cache<T> cache(a, a.sequence[row]);
  const auto scale = static_cast<float>(a.scale);
  const std::int64_t keys = a.context[row];
  const std::int64_t head_bytes = hd * static_cast<std::int64_t>(sizeof(T));
  const T* key_rows[key_chunk];
  for (std::int64_t j0 = 0; j0 < keys; j0 += key_chunk) {
    const std::int64_t n = std::min(key_chunk, keys - j0);
    for (std::int64_t c = 0; c < n; ++c) {
      key_rows[c] = cache.k + cache.row(j0 + c) + kv * hd;
    }
    // The next chunk's keys and values of this head, from memory while this one is computed.
    for (std::int64_t j = j0 + key_chunk; j < std::min(keys, j0 + 2 * key_chunk); ++j) {
      prefetch(cache.k + cache.row(j) + kv * hd, head_bytes);
      prefetch(cache.v + cache.row(j) + kv * hd, head_bytes);
    }
    transpose_from_cache(key_rows, n, 0, hd, kt);
    values_to_float(cache, key_rows, n, 0, hd, vr);
    std::int64_t m[G];
    std::fill(m, m + G, n);
    chunk_rows(qf, kt, vr, m, scale, top, total, out, hd);
  }
}

// The most query heads of a key/value head attend_heads takes at once (a group of more, as 16
// heads over 1, goes in parts).
constexpr int heads_together = 8;

// attend_heads<T, G> for G = 1 .. heads_together, by G - 1.
template <class T, std::size_t... I>
constexpr auto heads_kernels(std::index_sequence<I...> /*counts*/) {
  return std::array{&attend_heads<T, static_cast<int>(I) + 1>...};
}

// attend_row for models whose query heads share key/value heads in groups of 4 or more
// (Qwen2.5-0.5B's 7, Llama 3's 4): key/value head by key/value head, its query heads among
// [h0, h1) together, heads_together at most at once (attend_heads), each head's total then in
// its state. `kt` and `vr` hold 16 * head_dim floats.
template <class T>
COTENSOR_ATTENTION_TARGET void attend_row_grouped(const paged_attention_args& a,
                                                  std::int64_t row,
                                                  std::int64_t h0,
                                                  std::int64_t h1,
                                                  float* acc,
                                                  const float* qf,
                                                  tile_state* st,
                                                  float* kt,
                                                  float* vr) {
  const std::int64_t hd = a.head_dim;
  const std::int64_t group = a.heads / a.kv_heads;
  for (std::int64_t hs = h0; hs < h1;) {
    const std::int64_t kv = hs / group;
    const std::int64_t he = std::min({h1, (kv + 1) * group, hs + heads_together});
    float top[heads_together];
    float total[heads_together];
    std::fill(top, top + heads_together, -std::numeric_limits<float>::infinity());
    std::fill(total, total + heads_together, 0.0F);
    static constexpr auto kernels = heads_kernels<T>(std::make_index_sequence<heads_together>{});
    kernels[static_cast<std::size_t>(he - hs - 1)](a, row, kv, qf + (hs - h0) * hd,
                                                   acc + (hs - h0) * hd, top, total, kt, vr);
    for (std::int64_t h = hs; h < he; ++h) {
      st[h - h0].total[0] = total[h - hs];
    }
    hs = he;
  }
}

// A decode row: its queries of heads [h0, h1) in float and their states reset, the heads'
// sums by attend_row or, where 4 or more query heads share a key/value head, by
// attend_row_grouped, then each head's sums over its total, rounded once to T, into the output.
template <class T>
COTENSOR_ATTENTION_TARGET void attend_decode_row(const paged_attention_args& a,
                                                 std::int64_t row,
                                                 std::int64_t h0,
                                                 std::int64_t h1,
                                                 float* acc,
                                                 float* qf,
                                                 tile_state* st,
                                                 float* kt,
                                                 float* vr) {
  const std::int64_t hd = a.head_dim;
  const std::int64_t width = a.heads * hd;
  for (std::int64_t h = h0; h < h1; ++h) {
    vector_rows::to_float(qf + (h - h0) * hd, static_cast<const T*>(a.q) + row * width + h * hd,
                          hd);
    st[h - h0].top[0] = -std::numeric_limits<float>::infinity();
    st[h - h0].total[0] = 0.0F;
  }
  std::fill(acc, acc + (h1 - h0) * hd, 0.0F);
  if (a.heads / a.kv_heads >= 4) {
    attend_row_grouped<T>(a, row, h0, h1, acc, qf, st, kt, vr);
  } else {
    attend_row<T>(a, row, h0, h1, acc, qf, st, kt);
  }
  for (std::int64_t h = h0; h < h1; ++h) {
    vector_rows::quotients(static_cast<T*>(a.out) + row * width + h * hd, acc + (h - h0) * hd,
                           st[h - h0].total[0], hd);
  }
}

}  // namespace
#endif

void attend_row_avx512([[maybe_unused]] const paged_attention_args& a,
                       [[maybe_unused]] std::int64_t row,
                       [[maybe_unused]] std::int64_t h0,
                       [[maybe_unused]] std::int64_t h1,
                       [[maybe_unused]] float* acc,
                       [[maybe_unused]] float* qf,
                       [[maybe_unused]] tile_state* st,
                       [[maybe_unused]] float* kt,
                       [[maybe_unused]] float* vr) {
#if COTENSOR_ATTENTION_AVX512
  if (visit_register_type(a.t, [&](auto tag) {
        attend_decode_row<decltype(tag)>(a, row, h0, h1, acc, qf, st, kt, vr);
      })) {
    return;
  }
#endif
  COTENSOR_ASSERT(false && "attend_row_avx512 where attention_rows_avx512 says no");
}

}  // namespace cotensor::detail::cpu
