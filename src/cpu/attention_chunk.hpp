#pragma once

// What the two ways of attending over the paged cache share (cpu/attention.cpp, tiles of rows
// in plain C++; cpu/attention_avx512.cpp, the same in AVX-512 registers): the chunk
// of keys, a row's running state, and the arithmetic that turns a chunk's scores into weights.
// Both files are compiled without contraction into fused multiply-adds, so that each operation
// rounds once, the same in every clone and in the intrinsics: a row's results are the same bits
// whichever way computes them. Internal to src/cpu/.

#include "cpu/kernels.hpp"
#include "kernels/kernel_table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace cotensor::detail::cpu {

inline constexpr std::int64_t key_chunk = 16;      // keys a row's scores are computed for at once
inline constexpr std::int64_t attention_tile = 8;  // rows of one sequence sharing a chunk's keys

// Asks the L2 cache for the lines of `bytes` bytes from p before they are read (a chunk's keys
// and values of every head are more than L1 holds).
inline void prefetch(const void* p, std::int64_t bytes) {
  for (std::int64_t b = 0; b < bytes; b += 64) {
    __builtin_prefetch(static_cast<const char*>(p) + b, 0, 2);
  }
}

// Where one sequence's keys and values lie in the paged caches of element type T: key j's row
// (kv_heads * head_dim elements, every key/value head's) starts row(j) elements into either
// cache, in cache slot slot(j).
template <class T>
struct sequence_cache {
  const T* k;
  const T* v;
  const std::int64_t* table;
  std::int64_t block_size;
  std::int64_t row_width;

  sequence_cache(const paged_attention_args& a, std::int64_t sequence)
      : k(static_cast<const T*>(a.k_cache)), v(static_cast<const T*>(a.v_cache)),
        table(a.block_tables + sequence * a.table_width), block_size(a.block_size),
        row_width(a.kv_heads * a.head_dim) {}
  std::int64_t slot(std::int64_t j) const {
    return table[j / block_size] * block_size + j % block_size;
  }
  std::int64_t row(std::int64_t j) const { return slot(j) * row_width; }
};

// A tile's rows' running maximum of the scores and sum of the weights, per head.
struct tile_state {
  float top[attention_tile];
  float total[attention_tile];
};

// out[i] *= f over n elements, in blocks of 16 the compiler vectorises at -O2 (a loop of
// unknown count it leaves scalar), element by element alike in every block.
inline void scale_by(float* __restrict out, float f, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int l = 0; l < 16; ++l) {
      out[i + l] *= f;
    }
  }
  for (; i < n; ++i) {
    out[i] *= f;
  }
}

// One row's chunk of scores (the first m count) made into weights: the scores scaled, the
// running maximum `top` raised to theirs (the weights so far, `total`, and the values summed
// so far, `out`'s hd floats, rescaled once), weights[c] = exp(scores[c] - top) (libmvec's exp,
// unary_span), and their sum added to total in key order.
inline void chunk_weights(float (&scores)[key_chunk],
                          std::int64_t m,
                          float scale,
                          float& top,
                          float& total,
                          float* out,
                          std::int64_t hd,
                          float (&weights)[key_chunk]) {
  float high = top;
  for (std::int64_t c = 0; c < key_chunk; ++c) {
    scores[c] *= scale;
  }
  for (std::int64_t c = 0; c < m; ++c) {
    high = std::max(high, scores[c]);
  }
  if (high > top) {
    const float shrink = std::exp(top - high);  // 0 for the first chunk
    total *= shrink;
    scale_by(out, shrink, hd);
    top = high;
  }
  for (std::int64_t c = 0; c < key_chunk; ++c) {
    scores[c] -= top;
  }
  unary_span(unary_op::exp, scores, weights, key_chunk);
  for (std::int64_t c = 0; c < m; ++c) {
    total += weights[c];
  }
}

// chunk_weights for Rows rows of a tile at once, row r with the chunk's first m[r] keys (all
// key_chunk of them when Full; none when m[r] <= 0: its state is left as it was), row r's state
// top[r] and total[r], its summed values out + r * hd: each row's operations are chunk_weights'
// own, in the same order (the same bits), the rows' chains of maxima and of sums interleaved in
// registers and their exponentials one call, so that their latencies overlap. (The weights of
// keys past m[r] are computed and never used.)
template <int Rows, bool Full>
inline void chunk_weights_rows(float (&scores)[Rows][key_chunk],
                               const std::int64_t (&m)[Rows],
                               float scale,
                               float* top,
                               float* total,
                               float* out,
                               std::int64_t hd,
                               float (&weights)[Rows][key_chunk]) {
  float high[Rows];
  float sum[Rows];
#pragma GCC unroll 8
  for (int r = 0; r < Rows; ++r) {
    high[r] = top[r];
    sum[r] = total[r];
    for (std::int64_t c = 0; c < key_chunk; ++c) {
      scores[r][c] *= scale;
    }
  }
  for (std::int64_t c = 0; c < key_chunk; ++c) {
#pragma GCC unroll 8
    for (int r = 0; r < Rows; ++r) {
      if (Full || c < m[r]) {
        high[r] = std::max(high[r], scores[r][c]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < Rows; ++r) {
    if (high[r] > top[r]) {
      const float shrink = std::exp(top[r] - high[r]);  // 0 for the first chunk
      sum[r] *= shrink;
      scale_by(out + r * hd, shrink, hd);
      top[r] = high[r];
    }
    for (std::int64_t c = 0; c < key_chunk; ++c) {
      scores[r][c] -= top[r];
    }
  }
  unary_span(unary_op::exp, scores[0], weights[0], Rows * key_chunk);
  for (std::int64_t c = 0; c < key_chunk; ++c) {
#pragma GCC unroll 8
    for (int r = 0; r < Rows; ++r) {
      if (Full || c < m[r]) {
        sum[r] += weights[r][c];
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < Rows; ++r) {
    total[r] = sum[r];
  }
}

// How a tile's rows are converted: a query row to float, and a row of sums over their total,
// rounded once, to T. Element by element here; cpu/attention_avx512.cpp has the same in
// registers.
struct scalar_rows {
  template <class T>
  static void to_float(float* out, const T* in, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) {
      out[i] = static_cast<float>(in[i]);
    }
  }
  template <class T>
  static void quotients(T* out, const float* sums, float total, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) {
      out[i] = T(sums[i] / total);
    }
  }
};

// A tile's start, the same in both ways: the key counts of rows r0 .. r0 + rows - 1 of one
// sequence in `keys` (0 past `rows`); their queries of heads [h0, h1) in float in `qf`, head by
// head, Rows rows of head_dim each (rows past `rows` repeat the last: computed, never used);
// each head's running state reset and its sums in `acc` zeroed. Returns the most keys of a row.
template <class T, int Rows, class Convert = scalar_rows>
std::int64_t start_tile(const paged_attention_args& a,
                        std::int64_t r0,
                        std::int64_t rows,
                        std::int64_t h0,
                        std::int64_t h1,
                        float* acc,
                        float* qf,
                        tile_state* st,
                        std::int64_t (&keys)[Rows]) {
  const std::int64_t hd = a.head_dim;
  const std::int64_t width = a.heads * hd;
  std::int64_t most = 0;
  for (int r = 0; r < Rows; ++r) {
    const std::int64_t row = r0 + std::min<std::int64_t>(r, rows - 1);
    keys[r] = r < rows ? a.context[row] : 0;
    most = std::max(most, keys[r]);
    for (std::int64_t h = h0; h < h1; ++h) {
      Convert::to_float(qf + ((h - h0) * Rows + r) * hd,
                        static_cast<const T*>(a.q) + row * width + h * hd, hd);
    }
  }
  for (std::int64_t h = h0; h < h1; ++h) {
    for (int r = 0; r < Rows; ++r) {
      st[h - h0].top[r] = -std::numeric_limits<float>::infinity();
      st[h - h0].total[r] = 0.0F;
    }
  }
  std::fill(acc, acc + (h1 - h0) * Rows * hd, 0.0F);
  return most;
}

// A tile's end: each row's sums over its weights' total, rounded once to T, into the output.
template <class T, int Rows, class Convert = scalar_rows>
void end_tile(const paged_attention_args& a,
              std::int64_t r0,
              std::int64_t rows,
              std::int64_t h0,
              std::int64_t h1,
              const float* acc,
              const tile_state* st) {
  const std::int64_t hd = a.head_dim;
  const std::int64_t width = a.heads * hd;
  for (std::int64_t h = h0; h < h1; ++h) {
    for (std::int64_t r = 0; r < rows; ++r) {
      Convert::quotients(static_cast<T*>(a.out) + (r0 + r) * width + h * hd,
                         acc + ((h - h0) * Rows + r) * hd, st[h - h0].total[r], hd);
    }
  }
}

// kt[i * 16 + c] = rows[c * stride + i] for the 16 keys of a chunk and hd elements: 16 x 16
// blocks transposed in registers, the last hd % 16 elements one by one. Needs AVX-512.
void transpose_keys_avx512(const float* rows, std::int64_t stride, std::int64_t hd, float* kt);

// Whether a paged attention's rows run in AVX-512 registers (a decode step's single rows
// attend_row_avx512, a prompt chunk's tiles attend_tile_avx512): the CPU has AVX-512, the head
// size is a multiple of 16 and the type float32, bfloat16 or float16. COTENSOR_ATTENTION=generic
// says never; avx512 says wherever type and head size fit, and throws std::runtime_error on a
// CPU without AVX-512; auto (or unset) as above; another value throws std::invalid_argument.
// Reads the environment once an op.
bool attention_rows_avx512(dtype t, std::int64_t head_dim);

// Attention of one query row (a decode step's) over its sequence's cache, heads [h0, h1), in
// AVX-512 registers: keys transposed and values summed straight from the cache, several heads'
// scores at once; where 4 or more query heads share a key/value head, those heads together as
// a prompt tile's rows. The same operations, in the same order, as cpu/attention.cpp's tiles:
// the same bits. `acc` and `qf` hold (h1 - h0) * head_dim floats, `st` h1 - h0 states, `kt`
// and `vr` 16 * kv_heads * head_dim floats each. Only where attention_rows_avx512 says so.
void attend_row_avx512(const paged_attention_args& a,
                       std::int64_t row,
                       std::int64_t h0,
                       std::int64_t h1,
                       float* acc,
                       float* qf,
                       tile_state* st,
                       float* kt,
                       float* vr);

// A prompt chunk's tile of rows r0 .. r0 + rows - 1 (rows <= attention_tile, one sequence),
// heads [h0, h1), in AVX-512 registers: cpu/attention.cpp's attend_tile, the same bits. `acc`
// and `qf` hold (h1 - h0) * attention_tile * head_dim floats, `st` h1 - h0 states, `kt` and `vr`
// 16 * head_dim floats each. Only where attention_rows_avx512 says so.
void attend_tile_avx512(const paged_attention_args& a,
                        std::int64_t r0,
                        std::int64_t rows,
                        std::int64_t h0,
                        std::int64_t h1,
                        float* acc,
                        float* qf,
                        tile_state* st,
                        float* kt,
                        float* vr);

}  // namespace cotensor::detail::cpu
