// A prompt chunk's attention in AVX-512 registers (cpu/attention_chunk.hpp says what it
// computes; cpu/attention_rows_avx512.cpp has a decode step's rows): tiles of 8 rows of one
// sequence, the query heads of a key/value head at a time, each chunk's keys transposed and its
// values converted once for the tile, the rows' scores eight chains side by side, and their
// weights and values together (a row's keys past its own masked off), the next chunk's keys and
// values and the next piece's queries asked for ahead. 16 prompts of 128 ids in a step (GPT-2
// small, bfloat16, 12 layers), 88 -> 48-52 us of attention a row (AMD Zen 4); 4 prompts of 128
// ids, 12 layers of GPT-2 small's shape, 15.9 -> 10.8-11.6 ms, 24 of Qwen2-0.5B's 29.6 -> 19.0
// ms (AMD Zen 5); the masks and the prefetches, one layer of 15 such prompts 6.71 -> 5.63 ms
// (AMD Zen 4).

#include "cpu/attention_avx512.hpp"

#include "cpu/gemm_dispatch.hpp"
#include "support/assert.hpp"
#include "support/environment.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace cotensor::detail::cpu {

#if COTENSOR_ATTENTION_AVX512
namespace {

using namespace attention_registers;

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
  const std::int64_t group = a.heads / a.kv_heads;
  const sequence_cache<T> cache(a, a.sequence[r0]);
  const auto scale = static_cast<float>(a.scale);
  std::int64_t keys[tile];
  const std::int64_t most =
      start_tile<T, tile, vector_rows>(a, r0, rows, h0, h1, acc, qf, st, keys);
  // The queries of the piece of work likely next on this worker (the next heads of these rows,
  // or the next tile's first heads), asked for while this one runs: a head's part of a row is
  // a line or two of a long row, which the prefetchers do not follow.
  const std::int64_t width = a.heads * hd;
  const bool last_heads = h1 == a.heads;
  const std::int64_t next_r0 = last_heads ? r0 + rows : r0;
  const std::int64_t next_at = last_heads ? 0 : h1 * hd;
  const std::int64_t next_q_bytes = (last_heads ? h1 - h0 : std::min(h1 - h0, a.heads - h1)) * hd *
                                    static_cast<std::int64_t>(sizeof(T));
  for (std::int64_t r = next_r0; r < std::min(next_r0 + tile, a.tokens); ++r) {
    prefetch(static_cast<const T*>(a.q) + r * width + next_at, next_q_bytes);
  }
  const T* key_rows[key_chunk];
  for (std::int64_t j0 = 0; j0 < most; j0 += key_chunk) {
    const std::int64_t n = std::min(key_chunk, most - j0);
    for (std::int64_t c = 0; c < n; ++c) {
      key_rows[c] = cache.k + cache.row(j0 + c);
    }
    std::int64_t m[tile];
    for (int r = 0; r < tile; ++r) {
      m[r] = std::min(key_chunk, keys[r] - j0);  // keys[r] is 0 past `rows`
    }
    // The next chunk's keys and values of these heads, asked for ahead: likewise a line or
    // two of each key's row.
    const std::int64_t kv0 = h0 / group * hd;
    const std::int64_t kv_bytes =
        ((h1 - 1) / group + 1 - h0 / group) * hd * static_cast<std::int64_t>(sizeof(T));
    for (std::int64_t c = 0; c < std::min(key_chunk, most - j0 - key_chunk); ++c) {
      const std::int64_t at = cache.row(j0 + key_chunk + c) + kv0;
      prefetch(cache.k + at, kv_bytes);
      prefetch(cache.v + at, kv_bytes);
    }
    std::int64_t transposed = -1;  // the key/value head whose keys kt and values vr hold
    for (std::int64_t h = h0; h < h1; ++h) {
      const std::int64_t kv = h / group;
      if (kv != transposed) {
        transpose_from_cache(key_rows, n, kv * hd, hd, kt);
        values_to_float(cache, key_rows, n, kv * hd, hd, vr);
        transposed = kv;
      }
      tile_state& state = st[h - h0];
      chunk_rows(qf + (h - h0) * tile * hd, kt, vr, m, scale, state.top, state.total,
                 acc + (h - h0) * tile * hd, hd);
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
  if (visit_register_type(a.t, [&](auto tag) {
        attend_tile<decltype(tag)>(a, r0, rows, h0, h1, acc, qf, st, kt, vr);
      })) {
    return;
  }
#endif
  COTENSOR_ASSERT(false && "attend_tile_avx512 where attention_rows_avx512 says no");
}

}  // namespace cotensor::detail::cpu
