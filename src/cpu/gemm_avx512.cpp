// cotensor's AVX-512 GEMMs (cpu/gemm_avx512.hpp says what they compute).
//
// One driver for three kinds of step along k:
// - float32: a step is one k; A's word is a[r][p], B's panel row is b[p][j..j+64).
// - bfloat16: a step is a pair of k; A's word is (a[r][2p], a[r][2p+1]), one 32-bit word, and
//   B's packed row holds (b[2p][j], b[2p+1][j]) in each 32-bit lane, the two bfloat16 that one
//   vdpbf16ps lane multiplies by A's two and adds.
// - bfloat16 on float32 multiply-adds: the same words, each split into its two floats and added
//   by two vfmadd231ps, the first k first.
// The register tile is 6 rows x 64 columns (24 zmm accumulators); each step broadcasts one word
// of each of the 6 rows of A and loads 4 vectors of B. A's rows are read in place when its
// words lie in them (always for float32; for bfloat16 when k is even); a last panel of fewer
// than 6 rows, or every panel when k is odd, is packed first. Padding is zeros, so the kernel
// has no edge cases: a last panel of B narrower than 64 columns runs with fewer vectors, and the
// stores of the last block, rounded to C's type, are masked to C's rows and columns. Over B laid
// out beforehand, 2 to 32 rows (a decode step) run in groups of 4 rows over each block of a
// panel of B held in L1 instead, so that B streams from memory once while the multiply-adds run.

#include "cpu/gemm_avx512.hpp"

#include "cpu/gemm_avx512_steps.hpp"
#include "cpu/gemm_avx512_tile.hpp"
#include "cpu/gemm_scratch.hpp"
#include "cpu/gemm_trivial.hpp"
#include "cpu/kernels.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace cotensor::detail::cpu {

#if COTENSOR_HAVE_AVX512
namespace {

using namespace avx512;

// The steps along k of the block that starts at step p0: kc, or all that are left when they are
// few more than kc (a short last block costs a pass over the tile's sums for little work).
constexpr std::int64_t k_block(std::int64_t p0, std::int64_t steps) noexcept {
  return steps - p0 <= kc + kc / 3 ? steps - p0 : kc;
}

// A worker's float32 partial sums of one tile (at most mc x few_rows_nc), kept for its next tile.
float* partial_sums(std::int64_t count) {
  return static_cast<float*>(thread_scratch(static_cast<std::size_t>(count) * sizeof(float)));
}

// How far the packing of one column tile of B has come: panels claimed by a worker, and packed
// (two counters a column tile, in GEMM scratch, used through std::atomic_ref).
struct column_packing {
  std::int64_t claimed;
  std::int64_t packed;
};

// c = a · b; `prepacked` (when set) is B already in panels (pack_b), and `b` is then unused;
// `bias` (when set, with `prepacked`) [n] is added to c's rows as its tiles are stored.
template <class Steps>
void gemm(const typename Steps::element* a,
          const typename Steps::element* b,
          typename Steps::element* c,
          std::int64_t m,
          std::int64_t k,
          std::int64_t n,
          const typename Steps::word* prepacked = nullptr,
          const typename Steps::element* bias = nullptr) {
  using word = typename Steps::word;
  const bool packs = prepacked == nullptr;  // B packed here, for this product
  if (packs && (m <= row_path_rows || m * n * k <= small_product)) {
    row_gemm<Steps>(a, b, c, m, k, n);
    return;
  }
  const std::int64_t steps = Steps::steps(k);
  const std::int64_t panel_words = Steps::panel_steps(k) * nr;  // a packed panel of B
  const std::int64_t a_panels = (m + mr - 1) / mr;
  const std::int64_t b_panels = (n + nr - 1) / nr;

  // A's panels in place, but a last one of fewer rows (or all, when A's rows do not hold its
  // words), packed first: out[p * 6 + r] = row r's word p.
  const std::int64_t first_packed = Steps::a_in_place(k) ? m / mr : 0;
  const std::int64_t packed_panels = a_panels - first_packed;
  const gemm_scratch<word> packed_a(packed_panels * steps * mr);
  const auto pack_a = [&](std::int64_t t) {
    word* out = packed_a.get() + t * steps * mr;
    const std::int64_t row0 = (first_packed + t) * mr;
    for (std::int64_t r = 0; r < mr; ++r) {
      const bool row = row0 + r < m;
      for (std::int64_t p = 0; p < steps; ++p) {
        out[p * mr + r] = row ? Steps::a_word(a + (row0 + r) * k, p, k) : word{0};
      }
    }
  };
  if (packed_panels == 1) {
    pack_a(0);
  } else if (packed_panels > 1) {
    parallel_tiles(packed_panels, pack_a);
  }
  const std::int64_t words_per_row =
      k * static_cast<std::int64_t>(sizeof(*a)) / static_cast<std::int64_t>(sizeof(word));
  const auto panel_of_a = [&](std::int64_t panel, std::int64_t p0) {
    if (panel < first_packed) {
      return a_panel<Steps>{reinterpret_cast<const word*>(a) + panel * mr * words_per_row + p0,
                            words_per_row, 1};
    }
    return a_panel<Steps>{packed_a.get() + (panel - first_packed) * steps * mr + p0 * mr, 1, mr};
  };

  // Column tiles of nc columns; over B laid out beforehand, few rows take tiles of up to
  // few_rows_nc columns (two a worker at least), their width the one that gives the busiest
  // worker fewest panels (6 of GPT-2's 36 panels a tile, not 8: one worker had 20, the other
  // 16), or a wider one within 1/16 of it: their time is B's reading, which the workers share by
  // columns.
  const std::int64_t workers = std::max(1, backend_concurrency());
  std::int64_t tile_panels = nc / nr;
  if (!packs && m <= mc) {
    std::int64_t fewest = 0;
    for (std::int64_t width = few_rows_nc / nr; width >= 1; --width) {
      const std::int64_t tiles = (b_panels + width - 1) / width;
      const std::int64_t busiest = (tiles + workers - 1) / workers * width;
      if (width > 1 && tiles < std::min(2 * workers, b_panels)) {
        continue;
      }
      if (fewest == 0 || 16 * busiest < 15 * fewest) {
        tile_panels = width;
        fewest = busiest;
      }
    }
  }
  const std::int64_t tile_cols = tile_panels * nr;
  const std::int64_t col_tiles = (n + tile_cols - 1) / tile_cols;
  // B (unless laid out beforehand) is packed as the workers reach it, a column tile's panels by
  // the workers that first need them: no pass over B before the first product, and the workers
  // that start on a column tile pack its panels together.
  const gemm_scratch<word> packed_scratch(packs ? b_panels * panel_words : 0);
  const word* const packed_b = packs ? packed_scratch.get() : prepacked;
  const std::int64_t packing_tiles = packs ? col_tiles : 0;
  const gemm_scratch<column_packing> packing(packing_tiles);
  std::fill(packing.get(), packing.get() + packing_tiles, column_packing{0, 0});
  const auto pack_columns = [&](std::int64_t tile) {
    if (!packs) {
      return;
    }
    const std::atomic_ref claimed(packing.get()[tile].claimed);
    const std::atomic_ref packed(packing.get()[tile].packed);
    const std::int64_t first = tile * tile_panels;
    const std::int64_t panels = std::min(tile_panels, b_panels - first);
    if (packed.load(std::memory_order_acquire) == panels) {
      return;
    }
    for (std::int64_t i = 0; (i = claimed.fetch_add(1, std::memory_order_relaxed)) < panels;) {
      pack_b_panel<Steps>(b, k, n, (first + i) * nr, steps,
                          packed_scratch.get() + (first + i) * panel_words);
      packed.fetch_add(1, std::memory_order_release);
    }
    // The panels left are being packed by other workers, one panel each at most.
    while (packed.load(std::memory_order_acquire) < panels) {
      std::this_thread::yield();
    }
  };

  // A tile: `panels` panels of A from `panel0` over column tile `col_tile`, k block by block,
  // the float32 sums in the worker's scratch until the last block rounds them into C. (Sums
  // kept in a float32 C itself, 1000 columns apart, measured 10 % slower at 1000².)
  const auto run_tile = [&](std::int64_t col_tile, std::int64_t panel0, std::int64_t panels) {
    pack_columns(col_tile);
    const std::int64_t i0 = panel0 * mr;
    const std::int64_t j0 = col_tile * tile_cols;
    const std::int64_t rows = std::min(panels * mr, m - i0);
    const std::int64_t cols = std::min(tile_cols, n - j0);
    const std::int64_t col_panels = (cols + nr - 1) / nr;
    const std::int64_t lds = col_panels * nr;
    float* const sums = partial_sums(panels * mr * lds);
    // Panel ip of A over panel jp of B, the k block of `block` steps from p0.
    const auto run = [&](std::int64_t ip, std::int64_t jp, std::int64_t p0, std::int64_t block,
                         b_ahead ahead) {
      const tile_sums<Steps> io{sums + ip * mr * lds + jp * nr,
                                lds,
                                p0 == 0,
                                p0 + block == steps ? c + (i0 + ip * mr) * n + j0 + jp * nr
                                                    : nullptr,
                                n,
                                std::min(mr, rows - ip * mr),
                                std::min(nr, cols - jp * nr),
                                bias == nullptr ? nullptr : bias + j0 + jp * nr};
      micro_tile_columns<Steps>(panel_of_a(panel0 + ip, p0),
                                packed_b + (j0 / nr + jp) * panel_words + p0 * nr, block, io,
                                ahead);
    };
    if (packs || panels == 1 || m > row_path_rows) {
      // A's panel of 6 rows in L1 while a block of B's panels streams from L2.
      for (std::int64_t p0 = 0, block = 0; p0 < steps; p0 += block) {
        block = k_block(p0, steps);
        for (std::int64_t ip = 0; ip < panels; ++ip) {
          for (std::int64_t jp = 0; jp < col_panels; ++jp) {
            run(ip, jp, p0, block, {});
          }
        }
      }
      return;
    }
    // Few rows over packed B (a decode step of many sequences), where B's reading is most of
    // the time: each block of a panel of B (96 KiB, 128 at most) read from memory by the first
    // panel of A, from L2 by the others, which meanwhile ask for the next block, so that memory and
    // the multiply-adds overlap.
    for (std::int64_t jp = 0; jp < col_panels; ++jp) {
      for (std::int64_t p0 = 0, end = 0; p0 < steps; p0 = end) {
        end = p0 + k_block(p0, steps);
        const std::int64_t next_jp = end < steps ? jp : jp + 1;
        const std::int64_t next_p0 = end < steps ? end : 0;
        const std::int64_t next_bytes =
            next_jp < col_panels
                ? k_block(next_p0, steps) * nr * static_cast<std::int64_t>(sizeof(word))
                : 0;
        const auto* next = reinterpret_cast<const char*>(
            packed_b + (j0 / nr + next_jp) * panel_words + next_p0 * nr);
        const std::int64_t share = (next_bytes + panels - 1) / panels;
        const std::int64_t block = end - p0;
        const std::int64_t per_step = (share + 64 * block - 1) / (64 * block) * 64;
        for (std::int64_t ip = 0; ip < panels; ++ip) {
          run(ip, jp, p0, block,
              next_bytes == 0 ? b_ahead{} : b_ahead{next + ip * share, per_step});
        }
      }
    }
  };

  // Few rows over B laid out beforehand (a decode step of 2 to 32 sequences), A's rows in place:
  // each block of a panel of B (column_kc steps, 16 KiB, in L1) is read by groups of up to
  // group_rows rows in turn, every group's sums for the panel's 64 columns in registers
  // (the sums between blocks in the worker's scratch); the first group reads the block from L2,
  // the others from L1, and each asks for its share of B's next block. B then comes from memory
  // as one stream that the multiply-adds overlap.
  if (!packs && m > 1 && m <= column_rows && Steps::a_in_place(k)) {
    const auto* const a_words = reinterpret_cast<const word*>(a);
    const std::int64_t groups = (m + group_rows - 1) / group_rows;
    parallel_tiles(col_tiles, [&](std::int64_t t) {
      float* const sums = partial_sums(column_rows * nr);
      const std::int64_t end = std::min(n, (t + 1) * tile_cols);
      for (std::int64_t j = t * tile_cols; j < end; j += nr) {
        const word* const panel = packed_b + j / nr * panel_words;
        const std::int64_t panel_cols = std::min(nr, end - j);
        for (std::int64_t p0 = 0; p0 < steps; p0 += column_kc) {
          const std::int64_t block = std::min(column_kc, steps - p0);
          // B's next block lies right after this one in this panel, or past its padding at the
          // next one's start: one stream, a share of it asked for by each group. (A prefetch
          // past B's end is harmless: it never faults.)
          const auto* const next = reinterpret_cast<const char*>(
              p0 + block < steps ? panel + (p0 + block) * nr : panel + panel_words);
          const std::int64_t share = block * nr * static_cast<std::int64_t>(sizeof(word)) / groups;
          const std::int64_t per_step = (share + 64 * block - 1) / (64 * block) * 64;
          for (std::int64_t g = 0; g < groups; ++g) {
            const std::int64_t row0 = g * group_rows;
            const tile_sums<Steps> io{sums + row0 * nr,
                                      nr,
                                      p0 == 0,
                                      p0 + block == steps ? c + row0 * n + j : nullptr,
                                      n,
                                      std::min(group_rows, m - row0),
                                      panel_cols,
                                      bias == nullptr ? nullptr : bias + j};
            micro_tile_group<Steps>({a_words + row0 * words_per_row + p0, words_per_row, 1},
                                    panel + p0 * nr, block, io, {next + g * share, per_step});
          }
        }
      }
    });
    return;
  }

  // The workers take tiles from a shared cursor over (column tile, panel of A), column tile by
  // column tile: 16 panels (96 rows) a tile, fewer as the work left shrinks, so that the
  // workers end within a panel's time of each other whatever the shape and however late a
  // worker joins.
  const std::int64_t work = col_tiles * a_panels;
  std::atomic<std::int64_t> cursor{0};
  parallel_tiles(std::min(workers, work), [&](std::int64_t) {
    std::int64_t q = cursor.load(std::memory_order_relaxed);
    for (;;) {
      std::int64_t take = 0;
      do {
        if (q >= work) {
          return;
        }
        take = std::clamp<std::int64_t>((work - q) / (2 * workers), 1, mc / mr);
        take = std::min(take, a_panels - q % a_panels);
      } while (!cursor.compare_exchange_weak(q, q + take, std::memory_order_relaxed));
      run_tile(q / a_panels, q % a_panels, take);
      q = cursor.load(std::memory_order_relaxed);
    }
  });
}

}  // namespace

void sgemm_avx512(
    const float* a, const float* b, float* c, std::int64_t m, std::int64_t k, std::int64_t n) {
  if (!trivial_gemm(c, m, k, n)) {
    gemm<f32_steps>(a, b, c, m, k, n);
  }
}

namespace {

// c = a · b for bfloat16 on the kind of step `Steps` (vdpbf16ps, or the pairs split on FMAs).
template <class Steps>
void bf16_gemm(const bfloat16_t* a,
               const bfloat16_t* b,
               bfloat16_t* c,
               std::int64_t m,
               std::int64_t k,
               std::int64_t n) {
  auto* c16 = reinterpret_cast<std::uint16_t*>(c);
  if (!trivial_gemm(c16, m, k, n)) {
    gemm<Steps>(reinterpret_cast<const std::uint16_t*>(a),
                reinterpret_cast<const std::uint16_t*>(b), c16, m, k, n);
  }
}

}  // namespace

void bf16_gemm_avx512(const bfloat16_t* a,
                      const bfloat16_t* b,
                      bfloat16_t* c,
                      std::int64_t m,
                      std::int64_t k,
                      std::int64_t n) {
  bf16_gemm<bf16_steps>(a, b, c, m, k, n);
}

void bf16_gemm_avx512_fma(const bfloat16_t* a,
                          const bfloat16_t* b,
                          bfloat16_t* c,
                          std::int64_t m,
                          std::int64_t k,
                          std::int64_t n) {
  bf16_gemm<bf16_fma_steps>(a, b, c, m, k, n);
}

namespace {

template <class Steps>
std::int64_t packed_words(std::int64_t k, std::int64_t n) {
  return (n + nr - 1) / nr * Steps::panel_steps(k) * nr;
}

template <class Steps>
void pack_b(const void* b, void* out, std::int64_t k, std::int64_t n) {
  const std::int64_t steps = Steps::steps(k);
  const auto* e = static_cast<const typename Steps::element*>(b);
  auto* w = static_cast<typename Steps::word*>(out);
  parallel_tiles((n + nr - 1) / nr, [&](std::int64_t j) {
    pack_b_panel<Steps>(e, k, n, j * nr, steps, w + j * Steps::panel_steps(k) * nr);
  });
}

template <class Steps>
void gemm_packed(const void* a,
                 const void* packed,
                 void* c,
                 std::int64_t m,
                 std::int64_t k,
                 std::int64_t n,
                 const void* bias) {
  using element = typename Steps::element;
  auto* ce = static_cast<element*>(c);
  if (bias != nullptr && k == 0) {
    throw std::invalid_argument("cotensor: a GEMM's bias needs k > 0");  // the frontend adds it
  }
  if (!trivial_gemm(ce, m, k, n)) {
    gemm<Steps>(static_cast<const element*>(a), nullptr, ce, m, k, n,
                static_cast<const typename Steps::word*>(packed),
                static_cast<const element*>(bias));
  }
}

}  // namespace

std::int64_t packed_b_elements_avx512(dtype t, std::int64_t k, std::int64_t n) {
  return t == dtype::bfloat16 ? 2 * packed_words<bf16_steps>(k, n) : packed_words<f32_steps>(k, n);
}

void pack_b_avx512(dtype t, const void* b, void* packed, std::int64_t k, std::int64_t n) {
  if (k > 0 && n > 0) {
    t == dtype::bfloat16 ? pack_b<bf16_steps>(b, packed, k, n) : pack_b<f32_steps>(b, packed, k, n);
  }
}

void gemm_packed_avx512(dtype t,
                        const void* a,
                        const void* packed,
                        void* c,
                        std::int64_t m,
                        std::int64_t k,
                        std::int64_t n,
                        const void* bias) {
  t == dtype::bfloat16 ? gemm_packed<bf16_steps>(a, packed, c, m, k, n, bias)
                       : gemm_packed<f32_steps>(a, packed, c, m, k, n, bias);
}

void gemm_packed_bf16_avx512_fma(const bfloat16_t* a,
                                 const void* packed,
                                 bfloat16_t* c,
                                 std::int64_t m,
                                 std::int64_t k,
                                 std::int64_t n,
                                 const bfloat16_t* bias) {
  gemm_packed<bf16_fma_steps>(a, packed, c, m, k, n, bias);
}

bool f16_gemm_rows_avx512(const float16_t* a,
                          const float16_t* b,
                          float16_t* c,
                          std::int64_t m,
                          std::int64_t k,
                          std::int64_t n) {
  if (m > row_path_rows) {
    return false;
  }
  auto* c16 = reinterpret_cast<std::uint16_t*>(c);
  if (!trivial_gemm(c16, m, k, n)) {
    row_gemm<f16_steps>(reinterpret_cast<const std::uint16_t*>(a),
                        reinterpret_cast<const std::uint16_t*>(b), c16, m, k, n);
  }
  return true;
}
#else
bool f16_gemm_rows_avx512(
    const float16_t*, const float16_t*, float16_t*, std::int64_t, std::int64_t, std::int64_t) {
  return false;
}
void sgemm_avx512(const float*, const float*, float*, std::int64_t, std::int64_t, std::int64_t) {
  throw std::runtime_error("cotensor: the AVX-512 GEMM is not built for this CPU");
}
std::int64_t packed_b_elements_avx512(dtype, std::int64_t, std::int64_t) { return 0; }
void pack_b_avx512(dtype, const void*, void*, std::int64_t, std::int64_t) {
  throw std::runtime_error("cotensor: the AVX-512 GEMM is not built for this CPU");
}
void gemm_packed_avx512(
    dtype, const void*, const void*, void*, std::int64_t, std::int64_t, std::int64_t, const void*) {
  throw std::runtime_error("cotensor: the AVX-512 GEMM is not built for this CPU");
}
void bf16_gemm_avx512(
    const bfloat16_t*, const bfloat16_t*, bfloat16_t*, std::int64_t, std::int64_t, std::int64_t) {
  throw std::runtime_error("cotensor: the AVX-512 BF16 GEMM is not built for this CPU");
}
void bf16_gemm_avx512_fma(
    const bfloat16_t*, const bfloat16_t*, bfloat16_t*, std::int64_t, std::int64_t, std::int64_t) {
  throw std::runtime_error("cotensor: the AVX-512 GEMM is not built for this CPU");
}
void gemm_packed_bf16_avx512_fma(const bfloat16_t*,
                                 const void*,
                                 bfloat16_t*,
                                 std::int64_t,
                                 std::int64_t,
                                 std::int64_t,
                                 const bfloat16_t*) {
  throw std::runtime_error("cotensor: the AVX-512 GEMM is not built for this CPU");
}
#endif

}  // namespace cotensor::detail::cpu
