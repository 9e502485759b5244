// cotensor's bfloat16 GEMM on AMX tiles (cpu/gemm_amx.hpp says what it computes).
//
// The eight tiles, one configuration for every product: 0 to 3 the float32 sums of a block of
// 32 x 32 of C (0: rows 0-15 x columns 0-15, 1: rows 0-15 x 16-31, 2: rows 16-31 x 0-15, 3: rows
// 16-31 x 16-31), 4 and 5 a chunk of A's two halves of 16 rows (64 bytes of k a row), 6 and 7 a
// chunk of B's two halves of 16 columns (16 pairs of rows, 64 bytes a pair). A block of 16 rows
// or fewer (a decode step of one sequence) runs tiles 0, 1, 4, 6 and 7 only.
//
// Two loops over the blocks:
// - Many rows: A read in place, 64 bytes of k of each of 16 rows a tile (a last chunk past k,
//   and a last block of fewer than 32 rows, packed: zero padded); B's panels packed first unless
//   laid out beforehand. Then tiles of 64 or 256 rows x 256 columns taken from a shared cursor by
//   the workers, down each column tile in turn, k walked in blocks of 8 chunks with the sums of a
//   tile in the worker's scratch: a block of B (256 k x 32 columns, 16 KiB) stays in L1 while the
//   tile's blocks of rows read it.
// - Few rows (a decode step): A's one or two blocks packed on the calling thread; the workers
//   take B's panels, packing each for themselves unless laid out beforehand, and run every block
//   of A over a panel's two halves, k whole: B is read from memory once, as one stream, and no
//   scratch as large as B is taken.
//
// Tiles load 64-byte rows: rows that do not start on a cache line (A in place when k is not a
// multiple of 32) cost two lines a row; packed operands are aligned.
//
// The tiles' instructions are inline assembly in GCC 12 (not calls the compiler knows read or
// write memory): a compiler fence keeps stores before the loads that read them and the tiles'
// stores before the reads of the sums.

#include "cpu/gemm_amx.hpp"

#include "cpu/gemm_avx512_steps.hpp"
#include "cpu/gemm_avx512_tile.hpp"
#include "cpu/gemm_scratch.hpp"
#include "cpu/gemm_trivial.hpp"
#include "cpu/kernels.hpp"

#include <algorithm>
#include <atomic>
#include <stdexcept>

#if COTENSOR_HAVE_AVX512
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#define COTENSOR_AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512bf16")))
#endif

namespace cotensor::detail::cpu {

#if COTENSOR_HAVE_AVX512
namespace {

using avx512::bf16_steps;
using avx512::lanes;
using avx512::nr;
using element = std::uint16_t;
using word = std::uint32_t;

constexpr std::int64_t half_rows = 16;                         // rows of a tile of A or C
constexpr std::int64_t block_rows = 2 * half_rows;             // rows of a block of C
constexpr std::int64_t block_cols = 32;                        // columns of a block of C
constexpr std::int64_t chunk_k = 32;                           // k one tdpbf16ps multiplies
constexpr std::int64_t chunk_elements = block_rows * chunk_k;  // a packed chunk of A's block
constexpr std::int64_t block_sums = block_rows * block_cols;   // a block's float32 sums
constexpr std::int64_t tile_sums = half_rows * half_rows;      // a tile's float32 sums
constexpr std::int64_t b_pair_bytes = nr * sizeof(word);       // a packed panel's row of pairs
// Rows up to which the workers share B's panels rather than tiles of C (a decode step).
constexpr std::int64_t few_rows = 64;
// A worker's tile of C for many rows is mc x nc, k walked in blocks of kc_chunks chunks. The
// workers go down a column tile's rows together, B's column tile (nc columns of every k) read
// from L2 by each tile after the first: up to 1 MiB of it, tiles of 64 rows (A's 64 rows then
// stream from L3 at 1/256 of a byte per multiply-add); past it (k > 2048) tiles of 256 rows,
// which read B's column tile from L3 four times less often. Measured on a Sapphire Rapids VM
// (docs/performance.md): at 2000² the 64-row tiles 8.4-8.7 ms, 256 rows 9.4-11; at 4000² 64
// rows 78-80 ms, 256 rows 66-68.
constexpr std::int64_t nc = 8 * block_cols;
constexpr std::int64_t kc_chunks = 8;
constexpr std::int64_t b_column_tile_in_l2 = std::int64_t{1} << 20;
std::int64_t tile_rows(std::int64_t k) {
  return nc * k * static_cast<std::int64_t>(sizeof(element)) <= b_column_tile_in_l2
             ? 2 * block_rows
             : 8 * block_rows;
}

// The tiles' shapes (palette 1): every tile 16 rows of 64 bytes.
struct alignas(64) tile_config {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t bytes_per_row[16] = {};
  std::uint8_t rows[16] = {};
};

// The tiles configured for this thread while it lives, released (back to their initial state,
// so that the kernel need not save them) when it goes.
class tile_scope {
public:
  COTENSOR_AMX_TARGET tile_scope() {
    tile_config config;
    for (int t = 0; t < 8; ++t) {
      config.bytes_per_row[t] = 64;
      config.rows[t] = half_rows;
    }
    // Not _tile_loadconfig: GCC 12's tells the compiler it reads the first 8 bytes only, and the
    // stores of the shapes are then dropped as dead.
    asm volatile("ldtilecfg %0" : : "m"(config));
  }
  tile_scope(const tile_scope&) = delete;
  tile_scope& operator=(const tile_scope&) = delete;
  COTENSOR_AMX_TARGET ~tile_scope() { _tile_release(); }
};

inline void compiler_fence() noexcept { std::atomic_signal_fence(std::memory_order_seq_cst); }

// Where a block of A's chunks lies: chunk q's 32 rows of 32 k from a + q * step, rows
// `stride` bytes apart. Packed: (1024 elements, 64 bytes); in place: (32 elements, 2k bytes).
struct a_chunks {
  const element* a;
  std::int64_t step;
  std::int64_t stride;
};

// One chunk into the tiles: A's chunk at a (rows `stride` bytes apart), B's 16 pairs at b.
template <bool lower>
COTENSOR_AMX_TARGET inline void
chunk_product(const element* a, std::int64_t stride, const word* b) {
  _tile_loadd(4, a, stride);
  _tile_loadd(6, b, b_pair_bytes);
  _tile_loadd(7, b + half_rows, b_pair_bytes);
  _tile_dpbf16ps(0, 4, 6);
  _tile_dpbf16ps(1, 4, 7);
  if constexpr (lower) {
    _tile_loadd(5, reinterpret_cast<const char*>(a) + half_rows * stride, stride);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
}

// sums (a block's 4 tiles of 16 x 16, tile after tile) = the sums there (zero when `first`) +
// `chunks` chunks of A's block from `a` times those of B's panel from `b` (the block's first
// column in a panel, its pairs b_pair_bytes apart), then, when `tail` is set, one more chunk of
// A packed there (a last chunk past k, zero padded). `lower`: rows 16-31 too.
template <bool lower>
COTENSOR_AMX_TARGET void block_product(
    a_chunks a, std::int64_t chunks, const element* tail, const word* b, float* sums, bool first) {
  compiler_fence();
  if (first) {
    _tile_zero(0);
    _tile_zero(1);
    if constexpr (lower) {
      _tile_zero(2);
      _tile_zero(3);
    }
  } else {
    _tile_loadd(0, sums, 64);
    _tile_loadd(1, sums + tile_sums, 64);
    if constexpr (lower) {
      _tile_loadd(2, sums + 2 * tile_sums, 64);
      _tile_loadd(3, sums + 3 * tile_sums, 64);
    }
  }
  for (std::int64_t q = 0; q < chunks; ++q) {
    chunk_product<lower>(a.a + q * a.step, a.stride, b + q * half_rows * nr);
  }
  if (tail != nullptr) {
    chunk_product<lower>(tail, chunk_k * sizeof(element), b + chunks * half_rows * nr);
  }
  _tile_stored(0, sums, 64);
  _tile_stored(1, sums + tile_sums, 64);
  if constexpr (lower) {
    _tile_stored(2, sums + 2 * tile_sums, 64);
    _tile_stored(3, sums + 3 * tile_sums, 64);
  }
  compiler_fence();
}

void block_product(a_chunks a,
                   std::int64_t chunks,
                   const element* tail,
                   const word* b,
                   float* sums,
                   bool first,
                   std::int64_t rows) {
  rows > half_rows ? block_product<true>(a, chunks, tail, b, sums, first)
                   : block_product<false>(a, chunks, tail, b, sums, first);
}

// sums (4 tiles of 16 x 16: columns 0-15, 16-31, 32-47, 48-63, tile after tile) = the
// `chunks` chunks of A's packed block of 16 rows from `a` times a whole panel of B from `b`,
// zero first: a product of at most 16 rows reads each 256-byte row of pairs of the panel once,
// in order (B from memory as one stream), two tiles of B at a time.
COTENSOR_AMX_TARGET void
panel_product(const element* a, const word* b, std::int64_t chunks, float* sums) {
  compiler_fence();
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (std::int64_t q = 0; q < chunks; ++q) {
    const word* bq = b + q * half_rows * nr;
    _tile_loadd(4, a + q * chunk_elements, 64);
    _tile_loadd(6, bq, b_pair_bytes);
    _tile_loadd(7, bq + half_rows, b_pair_bytes);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(6, bq + 2 * half_rows, b_pair_bytes);
    _tile_loadd(7, bq + 3 * half_rows, b_pair_bytes);
    _tile_dpbf16ps(2, 4, 6);
    _tile_dpbf16ps(3, 4, 7);
  }
  _tile_stored(0, sums, 64);
  _tile_stored(1, sums + tile_sums, 64);
  _tile_stored(2, sums + 2 * tile_sums, 64);
  _tile_stored(3, sums + 3 * tile_sums, 64);
  compiler_fence();
}

// C's `rows` x `cols` (at most 16 x 64) at c = panel_product's sums rounded to bfloat16, plus
// `bias` (when set) as store_block adds it.
COTENSOR_AMX_TARGET void store_panel(const float* sums,
                                     element* c,
                                     std::int64_t ldc,
                                     std::int64_t rows,
                                     std::int64_t cols,
                                     const element* bias) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t t = 0; t < 4 && t * half_rows < cols; ++t) {
      avx512::store_plus_bias<bf16_steps>(
          c + r * ldc + t * half_rows, _mm512_loadu_ps(sums + t * tile_sums + r * half_rows),
          lanes(cols - t * half_rows), bias == nullptr ? nullptr : bias + t * half_rows);
    }
  }
}

// C's `rows` x `cols` (at most 32 x 32) at c (row stride ldc) = a block's sums rounded to
// bfloat16, plus `bias` (when set) as operator+ adds it to the rounded product.
COTENSOR_AMX_TARGET void store_block(const float* sums,
                                     element* c,
                                     std::int64_t ldc,
                                     std::int64_t rows,
                                     std::int64_t cols,
                                     const element* bias) {
  const __mmask16 mask[2] = {lanes(cols), lanes(cols - half_rows)};
  for (std::int64_t r = 0; r < std::min(rows, block_rows); ++r) {
    for (std::int64_t h = 0; h < 2 && h * half_rows < cols; ++h) {
      avx512::store_plus_bias<bf16_steps>(
          c + r * ldc + h * half_rows,
          _mm512_loadu_ps(sums + (r / half_rows * 2 + h) * tile_sums + r % half_rows * half_rows),
          mask[h], bias == nullptr ? nullptr : bias + h * half_rows);
    }
  }
}

// out = chunks [q0, q1) of A's block `block` packed: chunk q's row r (32 k) at
// out[(q - q0) * 1024 + r * 32], zeros past m and k; only the first 16 rows when the block has no
// more (block_product<false> reads no further).
COTENSOR_AMX_TARGET void pack_a_block(const element* a,
                                      std::int64_t m,
                                      std::int64_t k,
                                      std::int64_t block,
                                      std::int64_t q0,
                                      std::int64_t q1,
                                      element* out) {
  const std::int64_t row0 = block * block_rows;
  const std::int64_t rows = m - row0 > half_rows ? block_rows : half_rows;
  for (std::int64_t r = 0; r < rows; ++r) {
    element* const row_out = out + r * chunk_k;
    if (row0 + r >= m) {
      for (std::int64_t q = q0; q < q1; ++q) {
        _mm512_storeu_si512(row_out + (q - q0) * chunk_elements, _mm512_setzero_si512());
      }
      continue;
    }
    const element* row = a + (row0 + r) * k;
    for (std::int64_t q = q0; q < q1; ++q) {
      const std::int64_t left = k - q * chunk_k;
      const __mmask32 mask =
          left >= chunk_k ? ~__mmask32{0} : static_cast<__mmask32>((std::uint32_t{1} << left) - 1U);
      _mm512_storeu_si512(row_out + (q - q0) * chunk_elements,
                          _mm512_maskz_loadu_epi16(mask, row + q * chunk_k));
    }
  }
}

// c = a · b; `prepacked` (when set) is B laid out by pack_b_avx512, and `b` is then unused.
void gemm(const element* a,
          const element* b,
          element* c,
          std::int64_t m,
          std::int64_t k,
          std::int64_t n,
          const word* prepacked,
          const element* bias) {
  const std::int64_t chunks = (k + chunk_k - 1) / chunk_k;
  const std::int64_t steps = bf16_steps::steps(k);
  const std::int64_t panel_words = bf16_steps::panel_steps(k) * nr;  // chunks * 16 pairs
  const std::int64_t blocks = (m + block_rows - 1) / block_rows;
  const std::int64_t panels = (n + nr - 1) / nr;
  const std::int64_t workers = std::max(1, backend_concurrency());
  const auto bias_at = [&](std::int64_t col) { return bias == nullptr ? nullptr : bias + col; };

  if (m <= few_rows) {
    const gemm_scratch<element> packed_a(blocks * chunks * chunk_elements);
    for (std::int64_t block = 0; block < blocks; ++block) {
      pack_a_block(a, m, k, block, 0, chunks, packed_a.get() + block * chunks * chunk_elements);
    }
    // Tiles of whole panels, four a worker or more: up to 16 rows a panel at a time
    // (panel_product), else each panel's two halves of 32 columns in turn under every block of A
    // (the second half's pairs from L2 after the first's).
    const std::int64_t tiles_wanted = std::min(panels, 4 * workers);
    const std::int64_t tile_panels = (panels + tiles_wanted - 1) / tiles_wanted;
    parallel_tiles((panels + tile_panels - 1) / tile_panels, [&](std::int64_t t) {
      const tile_scope tiles;
      alignas(64) float sums[block_sums];
      word* const own = prepacked == nullptr
                            ? static_cast<word*>(thread_scratch(
                                  static_cast<std::size_t>(panel_words) * sizeof(word)))
                            : nullptr;
      const std::int64_t end = std::min(panels, (t + 1) * tile_panels);
      for (std::int64_t j = t * tile_panels; j < end; ++j) {
        const word* panel = own;
        if (prepacked != nullptr) {
          panel = prepacked + j * panel_words;
        } else {
          avx512::pack_b_panel<bf16_steps>(b, k, n, j * nr, steps, own);
        }
        if (m <= half_rows) {
          panel_product(packed_a.get(), panel, chunks, sums);
          store_panel(sums, c + j * nr, n, m, std::min(nr, n - j * nr), bias_at(j * nr));
          continue;
        }
        for (std::int64_t col = j * nr; col < std::min(n, (j + 1) * nr); col += block_cols) {
          for (std::int64_t block = 0; block < blocks; ++block) {
            const std::int64_t rows = std::min(block_rows, m - block * block_rows);
            block_product({packed_a.get() + block * chunks * chunk_elements, chunk_elements, 64},
                          chunks, nullptr, panel + col % nr, sums, true, rows);
            store_block(sums, c + block * block_rows * n + col, n, rows,
                        std::min(block_cols, n - col), bias_at(col));
          }
        }
      }
    });
    return;
  }

  // Many rows. A's whole blocks are read in place, their chunks 32 k of each row, but for a
  // last chunk past k, packed (zero padded: A's next elements could be infinite, and
  // infinity times B's zero padding is NaN); a last block of fewer rows is packed whole. B's
  // panels are packed first (unless laid out beforehand); then tiles of C from a shared cursor.
  const std::int64_t whole_blocks = m / block_rows;
  const std::int64_t whole_chunks = k / chunk_k;
  const bool tails = whole_chunks < chunks;
  const std::int64_t packed_blocks = blocks - whole_blocks;
  const gemm_scratch<element> packed_a((packed_blocks * chunks + (tails ? whole_blocks : 0)) *
                                       chunk_elements);
  element* const tail_chunks = packed_a.get() + packed_blocks * chunks * chunk_elements;
  const gemm_scratch<word> packed_scratch(prepacked == nullptr ? panels * panel_words : 0);
  const word* const packed_b = prepacked == nullptr ? packed_scratch.get() : prepacked;
  // The blocks with something to pack: every block when k has a last chunk, else the last
  // block of fewer rows alone (if any).
  const std::int64_t first_packing = tails ? 0 : whole_blocks;
  const std::int64_t a_packing = blocks - first_packing;
  parallel_tiles(a_packing + (prepacked == nullptr ? panels : 0), [&](std::int64_t t) {
    if (t >= a_packing) {
      avx512::pack_b_panel<bf16_steps>(b, k, n, (t - a_packing) * nr, steps,
                                       packed_scratch.get() + (t - a_packing) * panel_words);
      return;
    }
    const std::int64_t block = first_packing + t;
    if (block >= whole_blocks) {
      pack_a_block(a, m, k, block, 0, chunks,
                   packed_a.get() + (block - whole_blocks) * chunks * chunk_elements);
    } else {
      pack_a_block(a, m, k, block, whole_chunks, chunks, tail_chunks + block * chunk_elements);
    }
  });
  // Block `block`'s chunks [q0, q0 + count) as block_product takes them.
  const auto product = [&](std::int64_t block, std::int64_t q0, std::int64_t count, const word* bq,
                           float* sums) {
    const std::int64_t rows = m - block * block_rows;
    if (block >= whole_blocks) {
      block_product({packed_a.get() + ((block - whole_blocks) * chunks + q0) * chunk_elements,
                     chunk_elements, 64},
                    count, nullptr, bq, sums, q0 == 0, rows);
      return;
    }
    const std::int64_t own = std::min(count, whole_chunks - q0);
    block_product({a + block * block_rows * k + q0 * chunk_k, chunk_k,
                   k * static_cast<std::int64_t>(sizeof(element))},
                  own, own < count ? tail_chunks + block * chunk_elements : nullptr, bq, sums,
                  q0 == 0, rows);
  };
  const std::int64_t mc = tile_rows(k);
  const std::int64_t row_tiles = (m + mc - 1) / mc;
  const std::int64_t work = row_tiles * ((n + nc - 1) / nc);
  std::atomic<std::int64_t> cursor{0};
  parallel_tiles(std::min(workers, work), [&](std::int64_t) {
    const tile_scope tiles;
    auto* const sums = static_cast<float*>(thread_scratch(
        static_cast<std::size_t>(mc / block_rows * nc / block_cols * block_sums) * sizeof(float)));
    for (std::int64_t t = 0; (t = cursor.fetch_add(1, std::memory_order_relaxed)) < work;) {
      const std::int64_t i0 = t % row_tiles * mc;
      const std::int64_t j0 = t / row_tiles * nc;
      const std::int64_t row_blocks = (std::min(mc, m - i0) + block_rows - 1) / block_rows;
      const std::int64_t col_blocks = (std::min(nc, n - j0) + block_cols - 1) / block_cols;
      for (std::int64_t q0 = 0; q0 < chunks; q0 += kc_chunks) {
        const std::int64_t count = std::min(kc_chunks, chunks - q0);
        for (std::int64_t jb = 0; jb < col_blocks; ++jb) {
          const std::int64_t col = j0 + jb * block_cols;
          const word* const bq = packed_b + col / nr * panel_words + col % nr + q0 * half_rows * nr;
          for (std::int64_t ib = 0; ib < row_blocks; ++ib) {
            product(i0 / block_rows + ib, q0, count, bq,
                    sums + (ib * col_blocks + jb) * block_sums);
          }
        }
      }
      for (std::int64_t ib = 0; ib < row_blocks; ++ib) {
        for (std::int64_t jb = 0; jb < col_blocks; ++jb) {
          const std::int64_t row = i0 + ib * block_rows;
          const std::int64_t col = j0 + jb * block_cols;
          store_block(sums + (ib * col_blocks + jb) * block_sums, c + row * n + col, n, m - row,
                      std::min(block_cols, n - col), bias_at(col));
        }
      }
    }
  });
}

}  // namespace

void bf16_gemm_amx(const bfloat16_t* a,
                   const bfloat16_t* b,
                   bfloat16_t* c,
                   std::int64_t m,
                   std::int64_t k,
                   std::int64_t n) {
  if (trivial_gemm(c, m, k, n)) {
    return;
  }
  gemm(reinterpret_cast<const element*>(a), reinterpret_cast<const element*>(b),
       reinterpret_cast<element*>(c), m, k, n, nullptr, nullptr);
}

void gemm_packed_amx(const bfloat16_t* a,
                     const void* packed,
                     bfloat16_t* c,
                     std::int64_t m,
                     std::int64_t k,
                     std::int64_t n,
                     const bfloat16_t* bias) {
  if (bias != nullptr && k == 0) {
    throw std::invalid_argument("cotensor: a GEMM's bias needs k > 0");  // the frontend adds it
  }
  if (trivial_gemm(c, m, k, n)) {
    return;
  }
  gemm(reinterpret_cast<const element*>(a), nullptr, reinterpret_cast<element*>(c), m, k, n,
       static_cast<const word*>(packed), reinterpret_cast<const element*>(bias));
}
#else
void bf16_gemm_amx(
    const bfloat16_t*, const bfloat16_t*, bfloat16_t*, std::int64_t, std::int64_t, std::int64_t) {
  throw std::runtime_error("cotensor: the AMX GEMM is not built for this CPU");
}
void gemm_packed_amx(const bfloat16_t*,
                     const void*,
                     bfloat16_t*,
                     std::int64_t,
                     std::int64_t,
                     std::int64_t,
                     const bfloat16_t*) {
  throw std::runtime_error("cotensor: the AMX GEMM is not built for this CPU");
}
#endif

}  // namespace cotensor::detail::cpu
