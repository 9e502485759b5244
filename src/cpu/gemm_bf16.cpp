// bfloat16 GEMM through vdpbf16ps (cpu/gemm_bf16.hpp says what it computes).
//
// The layout, GotoBLAS's with pairs along k:
// - A is read in panels of 12 rows: a row's pair p, (a[r][2p], a[r][2p+1]), is one 32-bit
//   word, broadcast to every lane. With k even those words are A's rows as they lie; a last
//   panel of fewer rows, or every panel when k is odd, is packed first: for each pair, the 12
//   rows' words.
// - B is packed into panels of 32 columns: for each pair p, the 32 columns' words
//   (b[2p][j], b[2p+1][j]): two 512-bit loads.
// - The register tile is 12 x 32 floats (24 zmm accumulators); each pair is 24 vdpbf16ps.
// - Workers take tiles of 96 rows x 512 columns of C. A tile walks k in blocks of 512 (256
//   pairs): A's block (96 KB) stays in L2, a panel of B's block (32 KB) in L1 while the 8 row
//   panels pass over it, and the float32 partial sums in a scratch tile between blocks.
// What is packed is packed once per GEMM, by all workers, and shared; padding is zeros, so the
// kernel has no edge cases: only the last copy to C skips the padding.

#include "cpu/gemm_bf16.hpp"

#include "cpu/gemm_scratch.hpp"
#include "cpu/kernels.hpp"
#include "support/environment.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
// GCC 12 reports its own _mm512_undefined_epi32() inside the AVX-512 intrinsics as used
// (or maybe used) uninitialised (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#define COTENSOR_HAVE_AVX512_BF16 1
#define COTENSOR_AVX512_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))
#else
#define COTENSOR_HAVE_AVX512_BF16 0
#endif

namespace cotensor::detail::cpu {

std::string_view to_string(bf16_gemm_kernel k) noexcept {
  return k == bf16_gemm_kernel::avx512_bf16 ? "avx512_bf16" : "convert";
}

bool cpu_has_avx512_bf16() noexcept {
#if COTENSOR_HAVE_AVX512_BF16
  static const bool has = [] {
    __builtin_cpu_init();
    unsigned eax = 0;
    unsigned ebx = 0;
    unsigned ecx = 0;
    unsigned edx = 0;
    // CPUID leaf 7, sub-leaf 1, EAX bit 5: AVX512_BF16. __builtin_cpu_supports("avx512f") also
    // checks that the OS saves the zmm registers.
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1U << 5)) != 0;
  }();
  return has;
#else
  return false;
#endif
}

bf16_gemm_kernel bf16_gemm_kernel_for_this_call() {
  constexpr const char* variable = "COTENSOR_GEMM_BF16";
  const auto value = environment_variable(variable);
  if (!value || value->empty() || *value == "auto") {
    return cpu_has_avx512_bf16() ? bf16_gemm_kernel::avx512_bf16 : bf16_gemm_kernel::convert;
  }
  if (*value == "convert") {
    return bf16_gemm_kernel::convert;
  }
  if (*value == "avx512_bf16") {
    if (!cpu_has_avx512_bf16()) {
      throw std::runtime_error(
          "cotensor: COTENSOR_GEMM_BF16=avx512_bf16, but this CPU has no AVX-512 BF16");
    }
    return bf16_gemm_kernel::avx512_bf16;
  }
  bad_environment_variable(variable, *value, "auto, avx512_bf16 or convert");
}

#if COTENSOR_HAVE_AVX512_BF16
namespace {

constexpr std::int64_t mr = 12;         // rows of the register tile
constexpr std::int64_t nr = 32;         // columns of the register tile (two zmm)
constexpr std::int64_t mc = 8 * mr;     // rows of a worker's tile
constexpr std::int64_t nc = 16 * nr;    // columns of a worker's tile
constexpr std::int64_t kc_pairs = 256;  // pairs of k in a block

// The word of pair p of a row of k bfloat16: (row[2p], row[2p+1]), zero past k.
inline std::uint32_t pair_word(const std::uint16_t* row, std::int64_t p, std::int64_t k) {
  const std::uint32_t lo = row[2 * p];
  const std::uint32_t hi = 2 * p + 1 < k ? row[2 * p + 1] : 0U;
  return lo | (hi << 16);
}

// Panel `panel` of A: out[p * mr + r] = pair p of row panel * mr + r.
void pack_a_panel(const std::uint16_t* a,
                  std::int64_t m,
                  std::int64_t k,
                  std::int64_t pairs,
                  std::int64_t panel,
                  std::uint32_t* out) {
  const std::int64_t row0 = panel * mr;
  const std::int64_t rows = std::min(mr, m - row0);
  const std::int64_t whole_pairs = k / 2;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::uint16_t* row = a + (row0 + r) * k;
    std::int64_t p = 0;
    for (; p < whole_pairs; ++p) {
      std::uint32_t w = 0;
      std::memcpy(&w, row + 2 * p, sizeof w);
      out[p * mr + r] = w;
    }
    for (; p < pairs; ++p) {
      out[p * mr + r] = pair_word(row, p, k);
    }
  }
  for (std::int64_t r = rows; r < mr; ++r) {
    for (std::int64_t p = 0; p < pairs; ++p) {
      out[p * mr + r] = 0;
    }
  }
}

// Panel `panel` of B: out[p * nr + j] = (b[2p][col], b[2p+1][col]) for col = panel * nr + j.
COTENSOR_AVX512_BF16_TARGET void pack_b_panel(const std::uint16_t* b,
                                              std::int64_t k,
                                              std::int64_t n,
                                              std::int64_t pairs,
                                              std::int64_t panel,
                                              std::uint32_t* out) {
  const std::int64_t col0 = panel * nr;
  const std::int64_t cols = std::min(nr, n - col0);
  for (std::int64_t p = 0; p < pairs; ++p) {
    const std::uint16_t* lo = b + 2 * p * n + col0;
    const std::uint16_t* hi = 2 * p + 1 < k ? lo + n : nullptr;
    std::uint32_t* o = out + p * nr;
    if (cols == nr) {
      for (std::int64_t j = 0; j < nr; j += 16) {
        const __m512i l =
            _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo + j)));
        const __m512i h = hi == nullptr ? _mm512_setzero_si512()
                                        : _mm512_cvtepu16_epi32(_mm256_loadu_si256(
                                              reinterpret_cast<const __m256i*>(hi + j)));
        _mm512_storeu_si512(o + j, _mm512_or_si512(l, _mm512_slli_epi32(h, 16)));
      }
    } else {
      for (std::int64_t j = 0; j < nr; ++j) {
        const std::uint32_t l = j < cols ? lo[j] : 0U;
        const std::uint32_t h = j < cols && hi != nullptr ? hi[j] : 0U;
        o[j] = l | (h << 16);
      }
    }
  }
}

// Where a panel of 12 rows of A is: row r's pair p is the word at a[r * row_stride + p *
// pair_stride]. A packed panel has (1, 12); rows of A used in place, (k / 2, 1).
struct a_panel {
  const std::uint32_t* a;
  std::int64_t row_stride;
  std::int64_t pair_stride;
};

// c[12, 32] (row stride ldc) = (first ? 0 : c) + a · b_panel over `pairs` pairs from a.a.
COTENSOR_AVX512_BF16_TARGET void micro_tile(
    a_panel a, const std::uint32_t* b, std::int64_t pairs, float* c, std::int64_t ldc, bool first) {
  __m512 acc[mr][2];
#pragma GCC unroll 12
  for (std::int64_t r = 0; r < mr; ++r) {
    acc[r][0] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + r * ldc);
    acc[r][1] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + r * ldc + 16);
  }
  const std::uint32_t* ap = a.a;
  for (std::int64_t p = 0; p < pairs; ++p) {
    const auto b0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b));
    const auto b1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + 16));
#pragma GCC unroll 12
    for (std::int64_t r = 0; r < mr; ++r) {
      const auto word = static_cast<int>(ap[r * a.row_stride]);
      const auto ar = reinterpret_cast<__m512bh>(_mm512_set1_epi32(word));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], ar, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], ar, b1);
    }
    ap += a.pair_stride;
    b += nr;
  }
#pragma GCC unroll 12
  for (std::int64_t r = 0; r < mr; ++r) {
    _mm512_storeu_ps(c + r * ldc, acc[r][0]);
    _mm512_storeu_ps(c + r * ldc + 16, acc[r][1]);
  }
}

// out[0, n) = bfloat16_t(in[i]): rounded to nearest even, NaN to the quiet NaN of its payload
// (bfloat16_bits_from_float in lanes; vcvtneps2bf16 would flush denormals).
COTENSOR_AVX512_BF16_TARGET void round_row(const float* in, std::uint16_t* out, std::int64_t n) {
  std::int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 x = _mm512_loadu_ps(in + j);
    const __m512i u = _mm512_castps_si512(x);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i bits = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), odd), 16);
    bits = _mm512_mask_or_epi32(bits, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x0040));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), _mm512_cvtepi32_epi16(bits));
  }
  for (; j < n; ++j) {
    out[j] = bfloat16_bits_from_float(in[j]);
  }
}

}  // namespace

void bf16_gemm_avx512(const bfloat16_t* a,
                      const bfloat16_t* b,
                      bfloat16_t* c,
                      std::int64_t m,
                      std::int64_t k,
                      std::int64_t n) {
  if (m == 0 || n == 0) {
    return;
  }
  if (k == 0) {
    std::fill(c, c + m * n, bfloat16_t(0.0F));
    return;
  }
  const auto* a16 = reinterpret_cast<const std::uint16_t*>(a);
  const auto* b16 = reinterpret_cast<const std::uint16_t*>(b);
  auto* c16 = reinterpret_cast<std::uint16_t*>(c);
  const std::int64_t pairs = (k + 1) / 2;
  const std::int64_t a_panels = (m + mr - 1) / mr;
  const std::int64_t b_panels = (n + nr - 1) / nr;
  // With k even, a row's pairs are its words: whole panels of A are used in place. A panel of
  // fewer than 12 rows, or all of them when k is odd, is packed (zeros where A has none).
  const std::int64_t first_packed = k % 2 == 0 ? m / mr : 0;
  const std::int64_t packed_panels = a_panels - first_packed;
  const gemm_scratch<std::uint32_t> packed_a(packed_panels * pairs * mr);
  const gemm_scratch<std::uint32_t> packed_b(b_panels * pairs * nr);
  parallel_tiles(packed_panels + b_panels, [&](std::int64_t t) {
    if (t < packed_panels) {
      pack_a_panel(a16, m, k, pairs, first_packed + t, packed_a.get() + t * pairs * mr);
    } else {
      pack_b_panel(b16, k, n, pairs, t - packed_panels,
                   packed_b.get() + (t - packed_panels) * pairs * nr);
    }
  });
  const auto panel_of_a = [&](std::int64_t panel, std::int64_t p0) {
    if (panel < first_packed) {
      return a_panel{reinterpret_cast<const std::uint32_t*>(a16) + panel * mr * pairs + p0, pairs,
                     1};
    }
    return a_panel{packed_a.get() + (panel - first_packed) * pairs * mr + p0 * mr, 1, mr};
  };

  const std::int64_t row_tiles = (m + mc - 1) / mc;
  const std::int64_t col_tiles = (n + nc - 1) / nc;
  parallel_tiles(row_tiles * col_tiles, [&](std::int64_t t) {
    const std::int64_t i0 = (t / col_tiles) * mc;
    const std::int64_t j0 = (t % col_tiles) * nc;
    const std::int64_t rows = std::min(mc, m - i0);
    const std::int64_t cols = std::min(nc, n - j0);
    const std::int64_t row_panels = (rows + mr - 1) / mr;
    const std::int64_t col_panels = (cols + nr - 1) / nr;
    const std::int64_t ldc = col_panels * nr;
    const gemm_scratch<float> partial(row_panels * mr * ldc);
    for (std::int64_t p0 = 0; p0 < pairs; p0 += kc_pairs) {
      const std::int64_t block = std::min(kc_pairs, pairs - p0);
      for (std::int64_t jp = 0; jp < col_panels; ++jp) {
        const std::uint32_t* bp = packed_b.get() + (j0 / nr + jp) * pairs * nr + p0 * nr;
        for (std::int64_t ip = 0; ip < row_panels; ++ip) {
          micro_tile(panel_of_a(i0 / mr + ip, p0), bp, block,
                     partial.get() + ip * mr * ldc + jp * nr, ldc, p0 == 0);
        }
      }
    }
    for (std::int64_t i = 0; i < rows; ++i) {
      round_row(partial.get() + i * ldc, c16 + (i0 + i) * n + j0, cols);
    }
  });
}
#else
void bf16_gemm_avx512(
    const bfloat16_t*, const bfloat16_t*, bfloat16_t*, std::int64_t, std::int64_t, std::int64_t) {
  throw std::runtime_error("cotensor: the AVX-512 BF16 GEMM is not built for this CPU");
}
#endif

}  // namespace cotensor::detail::cpu
