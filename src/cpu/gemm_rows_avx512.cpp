// cotensor's AVX-512 GEMMs for few rows (a decode step's matrix-vector products): B read in
// place, a tile of 256 columns a worker, never packed and no scratch as large as B. Each element
// is summed with the tiled path's instructions in its order, so a row's bits never depend on
// the rows around it (gemm_avx512_steps.hpp has the kinds of step).

#include "cpu/gemm_avx512_steps.hpp"
#include "cpu/kernels.hpp"

#include <algorithm>

namespace cotensor::detail::cpu::avx512 {

#if COTENSOR_HAVE_AVX512

// Rows [0, rows) of c at columns [col0, col0 + 16 · vectors) (fewer at B's end): B read in
// place, no scratch. Each element is the same sum as the tiled path's, step by step in k order
// from 0 with the same instruction, so a row's result does not depend on the rows around it or
// on which path ran.
template <class Steps, int rows, int vectors>
COTENSOR_AVX512_TARGET void row_panel(const typename Steps::element* a,
                                      const typename Steps::element* b,
                                      typename Steps::element* c,
                                      std::int64_t k,
                                      std::int64_t n,
                                      std::int64_t col0) {
  using word = typename Steps::word;
  constexpr std::int64_t width = 16 * vectors;
  // B's words two vectors at a time, their sums permuted until the end (bfloat16).
  constexpr bool pairs = [] {
    if constexpr (requires { Steps::loads_pairs; }) {
      return Steps::loads_pairs && vectors % 2 == 0;
    }
    return false;
  }();
  const std::int64_t cols = std::min(width, n - col0);
  __m512 acc[rows][vectors];
  for (int r = 0; r < rows; ++r) {
    for (int v = 0; v < vectors; ++v) {
      acc[r][v] = _mm512_setzero_ps();
    }
  }
  alignas(64) word tail[width];
  if (cols < width) {
    std::fill(tail, tail + width, word{0});
  }
  const std::int64_t steps = Steps::steps(k);
  constexpr std::int64_t rows_per_step = Steps::b_rows_per_step;
  constexpr std::int64_t ahead = Steps::b_prefetch_steps * rows_per_step;
  const std::int64_t row_bytes = cols * static_cast<std::int64_t>(sizeof(*b));
  for (std::int64_t p = 0; p < steps; ++p) {
    // B's rows `ahead` rows on, this panel's columns of them (a few hundred bytes a row,
    // rows n elements apart).
    if constexpr (ahead > 0) {
      if (rows_per_step * p + ahead < k) {
        const auto* next =
            reinterpret_cast<const char*>(b + (rows_per_step * p + ahead) * n + col0);
        for (std::int64_t byte = 0; byte < row_bytes; byte += 64) {
          _mm_prefetch(next + byte, _MM_HINT_T0);
        }
      }
    }
    decltype(Steps::load_b(tail)) bv[vectors];
    if (cols == width) {
      if constexpr (pairs) {
#pragma GCC unroll 8
        for (int v = 0; v < vectors; v += 2) {
          Steps::load_b_pair(b, k, n, p, col0 + 16 * v, bv[v], bv[v + 1]);
        }
      } else {
#pragma GCC unroll 16
        for (int v = 0; v < vectors; ++v) {
          bv[v] = Steps::load_b_row(b, k, n, p, col0 + 16 * v);
        }
      }
    } else {
      for (std::int64_t j = 0; j < cols; j += nr) {
        Steps::pack_b_row(b, k, n, p, col0 + j, std::min(nr, cols - j), tail + j);
      }
      for (int v = 0; v < vectors; ++v) {
        bv[v] = Steps::load_b(tail + 16 * v);
      }
    }
#pragma GCC unroll 6
    for (int r = 0; r < rows; ++r) {
      const auto ar = Steps::broadcast(Steps::a_word(a + r * k, p, k));
#pragma GCC unroll 16
      for (int v = 0; v < vectors; ++v) {
        acc[r][v] = Steps::step(acc[r][v], ar, bv[v]);
      }
    }
  }
  alignas(64) float sums[width];
  for (int r = 0; r < rows; ++r) {
    if constexpr (pairs) {
      if (cols == width) {
        for (int v = 0; v < vectors; v += 2) {
          Steps::in_column_order(acc[r][v], acc[r][v + 1]);
        }
      }
    }
    for (int v = 0; v < vectors; ++v) {
      _mm512_store_ps(sums + 16 * v, acc[r][v]);
    }
    Steps::store_row(sums, c + r * n + col0, cols);
  }
}

// row_panel for `rows` (1 to 6) rows at columns [col0, col0 + width): a whole tile of 256
// columns at once for one row (one contiguous kilobyte of B per step for the prefetcher), else
// 64 at a time.
template <class Steps>
void row_tile(const typename Steps::element* a,
              const typename Steps::element* b,
              typename Steps::element* c,
              std::int64_t rows,
              std::int64_t k,
              std::int64_t n,
              std::int64_t col0,
              std::int64_t width) {
  if (rows == 1 && width == 4 * nr) {
    row_panel<Steps, 1, 16>(a, b, c, k, n, col0);
    return;
  }
  using panel = void (*)(const typename Steps::element*, const typename Steps::element*,
                         typename Steps::element*, std::int64_t, std::int64_t, std::int64_t);
  static constexpr panel by_rows[] = {row_panel<Steps, 1, 4>, row_panel<Steps, 2, 4>,
                                      row_panel<Steps, 3, 4>, row_panel<Steps, 4, 4>,
                                      row_panel<Steps, 5, 4>, row_panel<Steps, 6, 4>};
  for (std::int64_t j = col0; j < std::min(n, col0 + width); j += nr) {
    by_rows[rows - 1](a, b, c, k, n, j);
  }
}

// c = a · b for rows up to row_path_rows (a decode step's products): a worker takes a tile of
// columns and runs every group of 6 rows over it, the tile's part of B (at most 512 KiB) read
// from memory by the first group and from the core's L2 cache by the others. B is never packed.
// Products small enough run on the calling thread.
template <class Steps>
void row_gemm(const typename Steps::element* a,
              const typename Steps::element* b,
              typename Steps::element* c,
              std::int64_t m,
              std::int64_t k,
              std::int64_t n) {
  const auto groups = [&](std::int64_t col0, std::int64_t width) {
    for (std::int64_t i0 = 0; i0 < m; i0 += mr) {
      row_tile<Steps>(a + i0 * k, b, c + i0 * n, std::min(mr, m - i0), k, n, col0, width);
    }
  };
  if (m * n * k <= small_product) {
    for (std::int64_t j = 0; j < n; j += 4 * nr) {
      groups(j, 4 * nr);
    }
    return;
  }
  // Tiles of 256 columns for one group of rows; for more, as wide as 512 KiB of B allows; and
  // narrow enough for two tiles a worker.
  const std::int64_t bytes_per_column = k * static_cast<std::int64_t>(sizeof(*b));
  const std::int64_t fits = m <= mr ? 4 * nr : (std::int64_t{512} << 10) / bytes_per_column;
  const std::int64_t share = (n + 2 * backend_concurrency() - 1) / (2 * backend_concurrency());
  const std::int64_t width =
      std::clamp(std::min(fits, (share + nr - 1) / nr * nr) / nr * nr, nr, 4 * nr);
  parallel_tiles((n + width - 1) / width, [&](std::int64_t t) { groups(t * width, width); });
}

template void
row_gemm<f32_steps>(const float*, const float*, float*, std::int64_t, std::int64_t, std::int64_t);
template void row_gemm<bf16_steps>(const std::uint16_t*,
                                   const std::uint16_t*,
                                   std::uint16_t*,
                                   std::int64_t,
                                   std::int64_t,
                                   std::int64_t);
template void row_gemm<bf16_fma_steps>(const std::uint16_t*,
                                       const std::uint16_t*,
                                       std::uint16_t*,
                                       std::int64_t,
                                       std::int64_t,
                                       std::int64_t);
template void row_gemm<f16_steps>(const std::uint16_t*,
                                  const std::uint16_t*,
                                  std::uint16_t*,
                                  std::int64_t,
                                  std::int64_t,
                                  std::int64_t);
#endif

}  // namespace cotensor::detail::cpu::avx512
