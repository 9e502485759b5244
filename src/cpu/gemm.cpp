// GEMM on the CPU: OpenBLAS SGEMM calls on tiles that the backend's workers share.

#include "cpu/kernels.hpp"

#include <cblas.h>

#include <algorithm>

namespace cotensor::detail::cpu {

void init_blas() { openblas_set_num_threads(1); }

void matmul(
    const float* a, const float* b, float* c, std::int64_t m, std::int64_t k, std::int64_t n) {
  if (m == 0 || n == 0) {
    return;
  }
  if (k == 0) {
    fill(c, m * n, 0.0F);
    return;
  }
  // One tile per worker, each one single-threaded SGEMM call (OpenBLAS keeps its own threads
  // off), scheduled by oneTBB. Every call packs its panels of A and B again, so fewer tiles
  // cost less: at 1000^2 on 2 workers, 8 tiles ran at ~190 GFLOP/s, 4 at ~205-230, 2 at
  // ~215-240 (bench/README.md). Tiles are whole rows when there are many rows, and
  // whole-height column panels when there are few (a batch of requests: [64, 512] x [512,
  // 4096]).
  const std::int64_t workers = backend_concurrency();
  const std::int64_t tiles_wanted = workers;
  const bool small = m * n * k <= 64 * 64 * 64;
  const bool by_rows = m >= 64 * tiles_wanted;
  std::int64_t col_tile = n;
  std::int64_t row_tile = m;
  if (!small && by_rows) {
    row_tile = std::max<std::int64_t>(8, (m + tiles_wanted - 1) / tiles_wanted);
    row_tile = (row_tile + 7) / 8 * 8;
  } else if (!small) {
    col_tile = std::max<std::int64_t>(64, (n + tiles_wanted - 1) / tiles_wanted);
    col_tile = (col_tile + 63) / 64 * 64;
  }
  const std::int64_t col_tiles = (n + col_tile - 1) / col_tile;
  const std::int64_t row_tiles = (m + row_tile - 1) / row_tile;
  auto tile = [&](std::int64_t t) {
    const std::int64_t i = (t / col_tiles) * row_tile;
    const std::int64_t j = (t % col_tiles) * col_tile;
    const std::int64_t mb = std::min(row_tile, m - i);
    const std::int64_t nb = std::min(col_tile, n - j);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(mb),
                static_cast<int>(nb), static_cast<int>(k), 1.0F, a + i * k, static_cast<int>(k),
                b + j, static_cast<int>(n), 0.0F, c + i * n + j, static_cast<int>(n));
  };
  parallel_tiles(row_tiles * col_tiles, tile);
}

}  // namespace cotensor::detail::cpu
