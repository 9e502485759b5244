// The CPU's kernels for the language models (src/lm/): the key/value cache's scatter and causal
// attention over the paged cache (RMSNorm and the rotary embedding are cpu/lm_rows.cpp's). Rows in
// parallel; each row's arithmetic in a fixed order whatever the batch around it, so a sequence's
// results do not depend on the others in its step (kernel_table.hpp says what each computes).

#include "cpu/attention_chunk.hpp"
#include "cpu/gemm_dispatch.hpp"
#include "cpu/kernels.hpp"
#include "cpu/vector_clones.hpp"
#include "kernels/element.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace cotensor::detail::cpu {
namespace {

// Attention over the paged cache, query rows in tiles: up to `attention_tile` rows of one
// sequence (a prompt chunk's) and one head share each chunk of 16 keys, transposed once into
// `kt` (kt[i * 16 + c] = key c's element i), so that a row's 16 scores are one running sum per
// key, element by element, with no sum across lanes. Per row, keys in order in chunks of 16:
// the chunk's scores, the running maximum raised to theirs (the sums so far rescaled once a
// chunk), the chunk's weights (libmvec's exp, unary_span) and values added in order. A row's
// operations are the same whatever rows share its tile or its batch (batch invariance), and
// every vector width computes the same bits (the file is compiled without contraction into
// fused multiply-adds, as cpu/attention_avx512.cpp, which computes the same rows and tiles in
// AVX-512 registers where the CPU has it).
template <class T>
inline void add_scaled(float* __restrict out, float w, const T* __restrict v, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int l = 0; l < 16; ++l) {
      out[i + l] += w * static_cast<float>(v[i + l]);
    }
  }
  for (; i < n; ++i) {
    out[i] += w * static_cast<float>(v[i]);
  }
}

// kt[i * 16 + c] = rows[c * stride + i] for the 16 keys of a chunk: a transposition of 16 x 16
// blocks in registers where the CPU has AVX-512 (about 64 shuffles a block against 256 scalar
// moves), element by element elsewhere and for the last hd % 16 elements. Data movement only:
// the same floats whichever way.
void transpose_keys(const float* rows, std::int64_t stride, std::int64_t hd, float* kt) {
  if (cpu_has_avx512()) {
    transpose_keys_avx512(rows, stride, hd, kt);
    return;
  }
  for (std::int64_t i = 0; i < hd; ++i) {
    for (std::int64_t c = 0; c < 16; ++c) {
      kt[i * 16 + c] = rows[c * stride + i];
    }
  }
}

// out[i] = float(in[i]) over n elements, in blocks of 16 (vectorised at -O2).
template <class T>
inline void to_float(float* __restrict out, const T* __restrict in, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int l = 0; l < 16; ++l) {
      out[i + l] = static_cast<float>(in[i + l]);
    }
  }
  for (; i < n; ++i) {
    out[i] = static_cast<float>(in[i]);
  }
}

// How many chunks ahead a tile asks for the keys and values.
constexpr std::int64_t prefetch_chunks = 2;

// Rows r0 .. r0 + rows - 1 (rows <= Rows) of one sequence, heads [h0, h1), key chunk by key
// chunk with every head inside: the chunk's keys and values of all these heads (adjacent in
// each cache row) are converted to float together, cache row by cache row in the order they
// lie in memory, and heads sharing a key/value head transpose its keys once. `acc` and `qf`
// hold (h1 - h0) * Rows * head_dim floats, `st` h1 - h0 states, `kr` and `vr` 16 * kv_heads *
// head_dim floats, `kt` 16 * head_dim. Each head's arithmetic is the same whatever heads or
// rows share its tile.
template <class T, int Rows>
COTENSOR_VECTOR_CLONES COTENSOR_FLATTEN void attend_tile(const paged_attention_args& a,
                                                         std::int64_t r0,
                                                         std::int64_t rows,
                                                         std::int64_t h0,
                                                         std::int64_t h1,
                                                         float* acc,
                                                         float* qf,
                                                         tile_state* st,
                                                         float* kr,
                                                         float* vr,
                                                         float* kt) {
  const std::int64_t hd = a.head_dim;
  const std::int64_t group = a.heads / a.kv_heads;
  const sequence_cache<T> cache(a, a.sequence[r0]);
  const auto scale = static_cast<float>(a.scale);
  std::int64_t keys[Rows];
  const std::int64_t most = start_tile<T, Rows>(a, r0, rows, h0, h1, acc, qf, st, keys);
  // The cache rows' span these heads read: key/value heads first_kv .. last_kv.
  const std::int64_t first_kv = h0 / group;
  const std::int64_t span = ((h1 - 1) / group - first_kv + 1) * hd;
  const std::int64_t span_bytes = span * static_cast<std::int64_t>(sizeof(T));
  std::int64_t slots[key_chunk];
  float scores[Rows][key_chunk];
  float weights[key_chunk];
  for (std::int64_t j0 = 0; j0 < most; j0 += key_chunk) {
    const std::int64_t n = std::min(key_chunk, most - j0);
    for (std::int64_t c = 0; c < n; ++c) {
      const std::int64_t j = j0 + c;
      slots[c] = cache.slot(j);
    }
    // The next chunks' keys and values come from memory while this one is computed (a key's
    // row of these heads is a few cache lines, rows a whole cache row apart: no prefetcher
    // follows that).
    for (std::int64_t j = j0 == 0 ? key_chunk : j0 + prefetch_chunks * key_chunk;
         j < std::min(most, j0 + (prefetch_chunks + 1) * key_chunk); ++j) {
      const std::int64_t at = cache.row(j) + first_kv * hd;
      prefetch(cache.k + at, span_bytes);
      prefetch(cache.v + at, span_bytes);
    }
    for (std::int64_t c = 0; c < key_chunk; ++c) {
      if (c < n) {
        const std::int64_t at = slots[c] * cache.row_width + first_kv * hd;
        to_float(kr + c * span, cache.k + at, span);
        to_float(vr + c * span, cache.v + at, span);
      } else {
        std::fill(kr + c * span, kr + (c + 1) * span, 0.0F);
      }
    }
    std::int64_t transposed = -1;  // the key/value head whose keys kt holds
    for (std::int64_t h = h0; h < h1; ++h) {
      const std::int64_t kv_at = (h / group - first_kv) * hd;  // in a cache row's span
      if (h / group != transposed) {
        transpose_keys(kr + kv_at, span, hd, kt);
        transposed = h / group;
      }
      const float* q = qf + (h - h0) * Rows * hd;
      tile_state& state = st[h - h0];
      for (int r = 0; r < Rows; ++r) {
        for (std::int64_t c = 0; c < key_chunk; ++c) {
          scores[r][c] = 0.0F;
        }
      }
      for (std::int64_t i = 0; i < hd; ++i) {
        for (int r = 0; r < Rows; ++r) {
          const float qi = q[r * hd + i];
          for (std::int64_t c = 0; c < key_chunk; ++c) {
            scores[r][c] += qi * kt[i * key_chunk + c];
          }
        }
      }
      for (int r = 0; r < Rows; ++r) {
        const std::int64_t m = std::min(key_chunk, keys[r] - j0);
        if (m <= 0) {
          continue;
        }
        float* __restrict out = acc + ((h - h0) * Rows + r) * hd;
        chunk_weights(scores[r], m, scale, state.top[r], state.total[r], out, hd, weights);
        for (std::int64_t c = 0; c < m; ++c) {
          add_scaled(out, weights[c], vr + c * span + kv_at, hd);
        }
      }
    }
  }
  end_tile<T, Rows>(a, r0, rows, h0, h1, acc, st);
}

// One piece of work: a tile of rows and a range of heads.
struct attention_item {
  std::int64_t row0;
  std::int64_t rows;
  std::int64_t h0;
  std::int64_t h1;
};

template <class T>
void paged_attention_typed(const paged_attention_args& a) {
  // The tiles: runs of up to `attention_tile` consecutive rows of one sequence. A tile of several
  // rows (a prompt's) is a piece of work per key/value head (the query heads that share it); a
  // row alone (a decode step's) takes all its heads at once, or as few as leave two pieces of
  // work a worker.
  const std::int64_t group = a.heads / a.kv_heads;
  std::vector<std::int64_t> starts;
  std::int64_t single = 0;
  for (std::int64_t r = 0; r < a.tokens;) {
    starts.push_back(r);
    std::int64_t e = r + 1;
    while (e < a.tokens && e - r < attention_tile && a.sequence[e] == a.sequence[r]) {
      ++e;
    }
    single += e - r == 1 ? 1 : 0;
    r = e;
  }
  starts.push_back(a.tokens);
  const std::int64_t wanted = 2 * static_cast<std::int64_t>(backend_concurrency());
  const std::int64_t splits =
      single == 0 ? 1 : std::clamp((wanted + single - 1) / single, std::int64_t{1}, a.heads);
  const std::int64_t per_item = (a.heads + splits - 1) / splits;
  std::vector<attention_item> items;
  for (std::size_t t = 0; t + 1 < starts.size(); ++t) {
    const std::int64_t rows = starts[t + 1] - starts[t];
    // A tile's heads of one key/value head together: each chunk's keys are transposed and its
    // values converted once for them all (Qwen2.5-0.5B: 7 heads a key/value head).
    const std::int64_t step = rows == 1 ? per_item : group;
    for (std::int64_t h = 0; h < a.heads; h += step) {
      items.push_back({starts[t], rows, h, std::min(a.heads, h + step)});
    }
  }
  // Rows in AVX-512 registers where they can be (the same bits).
  const bool registers = attention_rows_avx512(a.t, a.head_dim);
  parallel_chunks(
      static_cast<std::int64_t>(items.size()), 1, [&](std::int64_t lo, std::int64_t hi) {
        const auto hd = static_cast<std::size_t>(a.head_dim);
        // A piece's rows of heads: a row alone of per_item heads, or a tile of a group's.
        const auto most_rows =
            static_cast<std::size_t>(std::max<std::int64_t>(per_item, group * attention_tile));
        std::vector<float> acc(most_rows * hd);
        std::vector<float> qf(most_rows * hd);
        std::vector<tile_state> st(static_cast<std::size_t>(std::max(per_item, group)));
        const auto span = static_cast<std::size_t>(a.kv_heads) * hd;
        std::vector<float> kr(key_chunk * span);
        std::vector<float> vr(key_chunk * span);
        std::vector<float> kt(key_chunk * hd);
        for (std::int64_t w = lo; w < hi; ++w) {
          const attention_item& it = items[static_cast<std::size_t>(w)];
          if (it.rows == 1 && registers) {
            // kr, which the registers' path does not use as such, holds its transposed keys.
            attend_row_avx512(a, it.row0, it.h0, it.h1, acc.data(), qf.data(), st.data(), kr.data(),
                              vr.data());
          } else if (it.rows == 1) {
            attend_tile<T, 1>(a, it.row0, 1, it.h0, it.h1, acc.data(), qf.data(), st.data(),
                              kr.data(), vr.data(), kt.data());
          } else if (registers) {
            attend_tile_avx512(a, it.row0, it.rows, it.h0, it.h1, acc.data(), qf.data(), st.data(),
                               kt.data(), vr.data());
          } else {
            attend_tile<T, attention_tile>(a, it.row0, it.rows, it.h0, it.h1, acc.data(), qf.data(),
                                           st.data(), kr.data(), vr.data(), kt.data());
          }
        }
      });
}

}  // namespace

void scatter_rows(const scatter_rows_args& args) {
  for (std::int64_t r = 0; r < args.rows; ++r) {
    if (args.index[r] < 0 || args.index[r] >= args.out_rows) {
      throw std::out_of_range("cotensor::scatter_rows: index " + std::to_string(args.index[r]) +
                              " is outside [0, " + std::to_string(args.out_rows) + ")");
    }
  }
  for (std::int64_t r = 0; r < args.rows; ++r) {
    std::memcpy(static_cast<char*>(args.out) + args.index[r] * args.row_bytes,
                static_cast<const char*>(args.in) + r * args.row_bytes, args.row_bytes);
  }
}

void paged_attention(const paged_attention_args& args) {
  const std::int64_t capacity = args.table_width * args.block_size;
  for (std::int64_t r = 0; r < args.tokens; ++r) {
    const std::int64_t s = args.sequence[r];
    const std::int64_t keys = args.context[r];
    if (s < 0 || s >= args.sequences || keys < 1 || keys > capacity) {
      throw std::out_of_range("cotensor::paged_attention: row " + std::to_string(r) +
                              " names sequence " + std::to_string(s) + " with " +
                              std::to_string(keys) + " keys (" + std::to_string(args.sequences) +
                              " sequences, at most " + std::to_string(capacity) + " keys)");
    }
    for (std::int64_t b = 0; b < (keys + args.block_size - 1) / args.block_size; ++b) {
      const std::int64_t block = args.block_tables[s * args.table_width + b];
      if (block < 0 || block >= args.blocks) {
        throw std::out_of_range("cotensor::paged_attention: sequence " + std::to_string(s) +
                                " names block " + std::to_string(block) + " of " +
                                std::to_string(args.blocks));
      }
    }
  }
  visit_float(args.t, [&](auto tag) { paged_attention_typed<typename decltype(tag)::type>(args); });
}

}  // namespace cotensor::detail::cpu
