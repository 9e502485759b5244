#pragma once

// The micro tile of cotensor's tiled AVX-512 GEMMs (gemm_avx512.cpp says how the driver uses
// it): a register tile of 6 rows (fewer in a last panel of A) x 64 columns over a panel of A
// and a packed panel of B, its sums' edges masked, and the packing of B's panels. Internal to
// gemm_avx512.cpp.

#include "cpu/gemm_avx512_steps.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace cotensor::detail::cpu::avx512 {

#if COTENSOR_HAVE_AVX512

// Where a panel of 6 rows of A is: row r's word at step p is a[r * row_stride + p * step].
// A packed panel has (1, 6); rows of A used in place, (words per row, 1).
template <class Steps>
struct a_panel {
  const typename Steps::word* a;
  std::int64_t row_stride;
  std::int64_t step;
};

// Where a micro tile's sums come from and go: the float32 sums of the blocks before in `sums`
// (row stride lds; none when `first`), the sums after this block back there, or, when `out` is
// set (the last block), to C's elements (row stride ldo) as Steps::store rounds them, plus the
// tile's columns of `bias` where it is set (each element rounded, the bias added in float, the
// sum rounded: operator+'s bits). Only the first `rows` rows and `cols` columns are read or
// written: the tiles at C's edges run the same instructions with fewer lanes stored.
template <class Steps>
struct tile_sums {
  float* sums;
  std::int64_t lds;
  bool first;
  typename Steps::element* out;
  std::int64_t ldo;
  std::int64_t rows;
  std::int64_t cols;
  const typename Steps::element* bias;
};

// B's words that a micro tile asks the L2 cache for as it runs, for the tile after it: from
// `next`, `bytes_per_step` bytes a step (none when 0).
struct b_ahead {
  const char* next = nullptr;
  std::int64_t bytes_per_step = 0;
};

// The lanes of a vector whose first column is `left` columns before the tile's last.
COTENSOR_AVX512_TARGET inline __mmask16 lanes(std::int64_t left) {
  return left >= 16 ? __mmask16{0xFFFF}
                    : static_cast<__mmask16>(
                          (1U << static_cast<unsigned>(std::max<std::int64_t>(left, 0))) - 1U);
}

// The lanes of `mask` of sums x to out as Steps::store rounds them, plus the lanes of `bias`
// where it is set: each sum rounded, the bias added in float, the sum rounded (operator+'s bits).
template <class Steps>
COTENSOR_AVX512_TARGET inline void store_plus_bias(typename Steps::element* out,
                                                   __m512 x,
                                                   __mmask16 mask,
                                                   const typename Steps::element* bias) {
  if (bias != nullptr) {
    x = _mm512_add_ps(Steps::rounded(x), Steps::load_elements(bias, mask));
  }
  Steps::store(out, x, mask);
}

// The sums of a `rows` x (16 * vectors) tile over `steps` steps from a.a, from and to `io`;
// `vectors` is 4 but in the last panel of a narrower B, `rows` 6 but in a last panel of A with
// fewer rows (a decode step's products, one row or 32 sequences' 6 x 5 + 2: no multiply-adds on
// padding rows, which would hold back the loads of B), or a group of up to 4 of 2 to 32 rows
// (micro_tile_group).
template <class Steps, int vectors, int rows>
COTENSOR_AVX512_TARGET void micro_tile(a_panel<Steps> a,
                                       const typename Steps::word* b,
                                       std::int64_t steps,
                                       const tile_sums<Steps>& io,
                                       b_ahead ahead) {
  __mmask16 mask[vectors];
#pragma GCC unroll 4
  for (int v = 0; v < vectors; ++v) {
    mask[v] = lanes(io.cols - 16 * v);
  }
  __m512 acc[rows][vectors];
#pragma GCC unroll 6
  for (std::int64_t r = 0; r < rows; ++r) {
    const bool zero = io.first || r >= io.rows;
#pragma GCC unroll 4
    for (int v = 0; v < vectors; ++v) {
      acc[r][v] = zero ? _mm512_setzero_ps()
                       : _mm512_maskz_loadu_ps(mask[v], io.sums + r * io.lds + 16 * v);
    }
  }
  const typename Steps::word* ap = a.a;
  for (std::int64_t p = 0; p < steps; ++p) {
    for (std::int64_t byte = 0; byte < ahead.bytes_per_step; byte += 64) {
      _mm_prefetch(ahead.next + byte, _MM_HINT_T1);
    }
    ahead.next += ahead.bytes_per_step;
    decltype(Steps::load_b(b)) bv[vectors];
#pragma GCC unroll 4
    for (int v = 0; v < vectors; ++v) {
      bv[v] = Steps::load_b(b + 16 * v);
    }
#pragma GCC unroll 6
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto ar = Steps::broadcast(ap[r * a.row_stride]);
#pragma GCC unroll 4
      for (int v = 0; v < vectors; ++v) {
        acc[r][v] = Steps::step(acc[r][v], ar, bv[v]);
      }
    }
    ap += a.step;
    b += nr;
  }
#pragma GCC unroll 6
  for (std::int64_t r = 0; r < rows; ++r) {
    if (r >= io.rows) {
      break;
    }
#pragma GCC unroll 4
    for (int v = 0; v < vectors; ++v) {
      if (io.out != nullptr) {
        store_plus_bias<Steps>(io.out + r * io.ldo + 16 * v, acc[r][v], mask[v],
                               io.bias == nullptr ? nullptr : io.bias + 16 * v);
      } else {
        _mm512_mask_storeu_ps(io.sums + r * io.lds + 16 * v, mask[v], acc[r][v]);
      }
    }
  }
}

// micro_tile over the panel's first io.cols (1 to 64) columns, rounded up to 16.
template <class Steps>
COTENSOR_AVX512_TARGET void micro_tile_columns(a_panel<Steps> a,
                                               const typename Steps::word* b,
                                               std::int64_t steps,
                                               const tile_sums<Steps>& io,
                                               b_ahead ahead = {}) {
  if (io.rows == 1) {
    switch ((io.cols + 15) / 16) {
    case 1:
      return micro_tile<Steps, 1, 1>(a, b, steps, io, ahead);
    case 2:
      return micro_tile<Steps, 2, 1>(a, b, steps, io, ahead);
    case 3:
      return micro_tile<Steps, 3, 1>(a, b, steps, io, ahead);
    default:
      return micro_tile<Steps, 4, 1>(a, b, steps, io, ahead);
    }
  }
  if (io.cols > 48 && io.rows < mr) {
    // A last panel of A with fewer rows: no multiply-adds on its padding rows.
    switch (io.rows) {
    case 2:
      return micro_tile<Steps, 4, 2>(a, b, steps, io, ahead);
    case 3:
      return micro_tile<Steps, 4, 3>(a, b, steps, io, ahead);
    case 4:
      return micro_tile<Steps, 4, 4>(a, b, steps, io, ahead);
    default:
      return micro_tile<Steps, 4, 5>(a, b, steps, io, ahead);
    }
  }
  switch ((io.cols + 15) / 16) {
  case 1:
    return micro_tile<Steps, 1, mr>(a, b, steps, io, ahead);
  case 2:
    return micro_tile<Steps, 2, mr>(a, b, steps, io, ahead);
  case 3:
    return micro_tile<Steps, 3, mr>(a, b, steps, io, ahead);
  default:
    return micro_tile<Steps, 4, mr>(a, b, steps, io, ahead);
  }
}

// micro_tile over a panel's 64 columns (io.cols of them stored) for io.rows rows, 1 to
// group_rows: a group of a product of a few more rows than mr (gemm_avx512.cpp).
template <class Steps>
COTENSOR_AVX512_TARGET void micro_tile_group(a_panel<Steps> a,
                                             const typename Steps::word* b,
                                             std::int64_t steps,
                                             const tile_sums<Steps>& io,
                                             b_ahead ahead) {
  static_assert(group_rows == 4);
  switch (io.rows) {
  case 1:
    return micro_tile<Steps, 4, 1>(a, b, steps, io, ahead);
  case 2:
    return micro_tile<Steps, 4, 2>(a, b, steps, io, ahead);
  case 3:
    return micro_tile<Steps, 4, 3>(a, b, steps, io, ahead);
  default:
    return micro_tile<Steps, 4, 4>(a, b, steps, io, ahead);
  }
}

// out[p * 64 + j] = B's word of step p at column col0 + j, for the `steps` steps, and zeros up
// to Steps::panel_steps(k): a panel.
template <class Steps>
COTENSOR_AVX512_TARGET void pack_b_panel(const typename Steps::element* b,
                                         std::int64_t k,
                                         std::int64_t n,
                                         std::int64_t col0,
                                         std::int64_t steps,
                                         typename Steps::word* out) {
  const std::int64_t cols = std::min(nr, n - col0);
  for (std::int64_t p = 0; p < steps; ++p) {
    Steps::pack_b_row(b, k, n, p, col0, cols, out + p * nr);
  }
  std::fill(out + steps * nr, out + Steps::panel_steps(k) * nr, typename Steps::word{0});
}

#endif

}  // namespace cotensor::detail::cpu::avx512
