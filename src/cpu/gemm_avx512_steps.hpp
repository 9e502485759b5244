#pragma once

// What cotensor's AVX-512 GEMMs share (gemm_avx512.cpp, the tiles over packed B;
// gemm_rows_avx512.cpp, few rows over B in place): the register tile, the kinds of step along k
// and how each reads A and B. Internal to src/cpu/.
//
// A kind of step (a `Steps`): float32 and float16, one k a step; bfloat16, a pair of k a step,
// A's word holding (a[r][2p], a[r][2p+1]) and B's the same two rows of a column, the two bfloat16
// that one vdpbf16ps lane multiplies and adds.

#include "cotensor/dtype.hpp"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// GCC 12 reports its own _mm512_undefined_epi32() inside the AVX-512 intrinsics as used
// (or maybe used) uninitialised (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#define COTENSOR_HAVE_AVX512 1
// One target for both kinds of step (a template's attribute cannot depend on its argument):
// the float32 functions use no BF16 instruction (GCC 12 emits those only for their intrinsics),
// so they run on any CPU with AVX-512 F and BW.
#define COTENSOR_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))
#else
#define COTENSOR_HAVE_AVX512 0
#endif

namespace cotensor::detail::cpu::avx512 {

#if COTENSOR_HAVE_AVX512
constexpr std::int64_t mr = 6;        // rows of the register tile
constexpr std::int64_t nr = 64;       // columns of the register tile (four zmm)
constexpr std::int64_t mc = 16 * mr;  // rows of a worker's tile
// Columns of a worker's tile and steps along k in a block: the block of B's tile that the tile's
// panels of A stream (384 x 256 words, 384 KiB) with the tile's sums (96 x 256 float32, 96 KiB)
// in AMD Zen 4's 1 MiB L2. Measured on Zen 4 (2026-12-03, six alternated rounds) against
// 256 x 512: float32 6 % faster at 1000² and at 4000², bfloat16 7 % and 2 %. A last block of up
// to kc / 3 steps joins the one before (gemm_avx512.cpp's k_block): 512 steps, 512 KiB, at most.
constexpr std::int64_t nc = 4 * nr;
constexpr std::int64_t kc = 384;
// The widest column tile over B laid out beforehand for up to mc rows, where the driver picks
// the width that shares B's reading best between the workers (gemm_avx512.cpp).
constexpr std::int64_t few_rows_nc = 8 * nr;
// m · n · k up to which a GEMM runs on the calling thread, unpacked (as the MLP steps of the
// tests and benchmarks: [8, 16] · [16, 32]).
constexpr std::int64_t small_product = 8192;
// Rows up to which B is read in place rather than packed (a decode step of up to 64 sequences):
// packing reads B, writes it and reads it again, and needs scratch as large as B (a model's
// head: hundreds of megabytes); the row path reads each tile of B from memory once and from the
// core's cache for the other rows.
constexpr std::int64_t row_path_rows = 64;
// Over B laid out beforehand, products of 2 to column_rows rows run in groups of group_rows rows
// over each block of column_kc steps of a panel (16 KiB: it stays in L1 while the groups read
// it), asking for B's next block as they go (gemm_avx512.cpp). Measured with GPT-2 small's
// products on AMD Zen 5: at 48 rows the panels of 6 rows are faster, at 2 to 32 the groups (one
// row alike either way); at 16 rows groups of 4 beat 6 + 6 + 4, and blocks of 64 steps those of
// 128 and 192.
constexpr std::int64_t column_rows = 32;
constexpr std::int64_t column_kc = 64;
constexpr std::int64_t group_rows = 4;

// What the kinds whose word is one float32 share (float32, float16): a step is one k, its product
// a vfmadd231ps.
struct float_word_steps {
  using word = float;
  static constexpr std::int64_t b_rows_per_step = 1;  // rows of B a step reads
  static std::int64_t steps(std::int64_t k) { return k; }
  static std::int64_t panel_steps(std::int64_t k) { return k; }
  COTENSOR_AVX512_TARGET static __m512 broadcast(word w) { return _mm512_set1_ps(w); }
  COTENSOR_AVX512_TARGET static __m512 load_b(const word* b) { return _mm512_loadu_ps(b); }
  COTENSOR_AVX512_TARGET static __m512 step(__m512 acc, __m512 a, __m512 b) {
    return _mm512_fmadd_ps(a, b, acc);
  }
};

// float32: a step is one k.
struct f32_steps : float_word_steps {
  using element = float;
  // How many steps ahead the row path asks for B's rows (0: never). Measured with GPT-2
  // small's products on AMD Zen 4: float32 8-11 % faster at 1 and 16 rows with 8 steps;
  // bfloat16 within the noise, so left to the hardware.
  static constexpr std::int64_t b_prefetch_steps = 8;
  static bool a_in_place(std::int64_t /*k*/) { return true; }
  static word a_word(const element* row, std::int64_t p, std::int64_t /*k*/) { return row[p]; }
  static float to_float(element e) { return e; }

  // out[j] = b[p][col0 + j] for j < cols, 0 past them.
  COTENSOR_AVX512_TARGET static void pack_b_row(const element* b,
                                                std::int64_t /*k*/,
                                                std::int64_t n,
                                                std::int64_t p,
                                                std::int64_t col0,
                                                std::int64_t cols,
                                                word* out) {
    const element* row = b + p * n + col0;
    if (cols == nr) {
      for (std::int64_t j = 0; j < nr; j += 16) {
        _mm512_storeu_ps(out + j, _mm512_loadu_ps(row + j));
      }
      return;
    }
    for (std::int64_t j = 0; j < nr; ++j) {
      out[j] = j < cols ? row[j] : 0.0F;
    }
  }

  // The 16 words of step p at columns [col, col + 16) of B, read in place (all in B).
  COTENSOR_AVX512_TARGET static __m512 load_b_row(
      const element* b, std::int64_t /*k*/, std::int64_t n, std::int64_t p, std::int64_t col) {
    return _mm512_loadu_ps(b + p * n + col);
  }

  static void store_row(const float* in, element* out, std::int64_t n) {
    std::memcpy(out, in, static_cast<std::size_t>(n) * sizeof(float));
  }
  // The lanes of `mask` of x to out.
  COTENSOR_AVX512_TARGET static void store(element* out, __m512 x, __mmask16 mask) {
    _mm512_mask_storeu_ps(out, mask, x);
  }
  // x as store would round it, in float; and the lanes of `mask` of elements at p, in float: a
  // sum plus a bias rounded as operator+ rounds it (the product's element, then the sum).
  COTENSOR_AVX512_TARGET static __m512 rounded(__m512 x) { return x; }
  COTENSOR_AVX512_TARGET static __m512 load_elements(const element* p, __mmask16 mask) {
    return _mm512_maskz_loadu_ps(mask, p);
  }
};

// bfloat16's layout, whatever multiplies it: a step is a pair of k, one 32-bit word of A and
// of each column of B (B's panels, which cpu/gemm_amx.cpp's tiles read too), and the rounding
// of the float32 sums to bfloat16.
struct bf16_word_steps {
  using element = std::uint16_t;
  using word = std::uint32_t;
  static constexpr std::int64_t b_rows_per_step = 2;
  static constexpr std::int64_t b_prefetch_steps = 0;
  static std::int64_t steps(std::int64_t k) { return (k + 1) / 2; }
  // The rows of a packed panel of B: the steps, zero padded to a whole number of AMX tiles of 16
  // pairs (cpu/gemm_amx.hpp reads the same panels).
  static std::int64_t panel_steps(std::int64_t k) { return (steps(k) + 15) / 16 * 16; }
  static bool a_in_place(std::int64_t k) { return k % 2 == 0; }
  static float to_float(element e) { return float_from_bfloat16_bits(e); }
  // (row[2p], row[2p+1]), zero past k.
  static word a_word(const element* row, std::int64_t p, std::int64_t k) {
    const word lo = row[2 * p];
    const word hi = 2 * p + 1 < k ? row[2 * p + 1] : 0U;
    return lo | (hi << 16);
  }

  // out[j] = (b[2p][col0 + j], b[2p+1][col0 + j]) for j < cols, 0 past them.
  COTENSOR_AVX512_TARGET static void pack_b_row(const element* b,
                                                std::int64_t k,
                                                std::int64_t n,
                                                std::int64_t p,
                                                std::int64_t col0,
                                                std::int64_t cols,
                                                word* out) {
    const element* lo = b + 2 * p * n + col0;
    const element* hi = 2 * p + 1 < k ? lo + n : nullptr;
    if (cols == nr) {
      // 32 columns of both rows a 64-byte load each, interleaved by two vpermt2w.
      alignas(64) static constexpr std::int16_t interleave[32] = {
          0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
          8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
      const __m512i first = _mm512_load_si512(interleave);
      const __m512i second = _mm512_add_epi16(first, _mm512_set1_epi16(16));
      for (std::int64_t j = 0; j < nr; j += 32) {
        const __m512i l = _mm512_loadu_si512(lo + j);
        const __m512i h = hi == nullptr ? _mm512_setzero_si512() : _mm512_loadu_si512(hi + j);
        _mm512_storeu_si512(out + j, _mm512_permutex2var_epi16(l, first, h));
        _mm512_storeu_si512(out + j + 16, _mm512_permutex2var_epi16(l, second, h));
      }
      return;
    }
    for (std::int64_t j = 0; j < nr; ++j) {
      const word l = j < cols ? lo[j] : 0U;
      const word h = j < cols && hi != nullptr ? hi[j] : 0U;
      out[j] = l | (h << 16);
    }
  }

  // bfloat16_t(x) in the low half of each lane: rounded to nearest even, NaN to the quiet NaN
  // of its payload (bfloat16_bits_from_float in lanes; vcvtneps2bf16 would flush denormals).
  COTENSOR_AVX512_TARGET static __m512i bits_of(__m512 x) {
    const __m512i u = _mm512_castps_si512(x);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i bits = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), odd), 16);
    return _mm512_mask_or_epi32(bits, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x0040));
  }
  // out[j] = bfloat16_t(in[j]).
  COTENSOR_AVX512_TARGET static void store_row(const float* in, element* out, std::int64_t n) {
    std::int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j),
                          _mm512_cvtepi32_epi16(bits_of(_mm512_loadu_ps(in + j))));
    }
    for (; j < n; ++j) {
      out[j] = bfloat16_bits_from_float(in[j]);
    }
  }
  // bfloat16_t of the lanes of `mask` of x to out.
  COTENSOR_AVX512_TARGET static void store(element* out, __m512 x, __mmask16 mask) {
    _mm512_mask_cvtepi32_storeu_epi16(out, mask, bits_of(x));
  }
  // As f32_steps: x rounded to bfloat16_t, in float; the lanes of `mask` at p, in float.
  COTENSOR_AVX512_TARGET static __m512 rounded(__m512 x) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(bits_of(x), 16));
  }
  COTENSOR_AVX512_TARGET static __m512 load_elements(const element* p, __mmask16 mask) {
    const __m256i halves = _mm512_castsi512_si256(_mm512_maskz_loadu_epi16(mask, p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(halves), 16));
  }
};

// bfloat16 by vdpbf16ps (AVX-512 BF16): each lane's pair of A times its pair of B, both added
// to the sum in one instruction.
struct bf16_steps : bf16_word_steps {
  // The 16 words of step p at columns [col, col + 16) of B, read in place (all in B): the
  // words pack_b_row writes.
  COTENSOR_AVX512_TARGET static __m512bh
  load_b_row(const element* b, std::int64_t k, std::int64_t n, std::int64_t p, std::int64_t col) {
    const element* lo = b + 2 * p * n + col;
    const __m512i l =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo)));
    const __m512i h =
        2 * p + 1 < k
            ? _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo + n)))
            : _mm512_setzero_si512();
    return reinterpret_cast<__m512bh>(_mm512_or_si512(l, _mm512_slli_epi32(h, 16)));
  }

  // The words of step p at columns [col, col + 32) of B, read in place, as two vectors from one
  // 64-byte load of each row and one unpack each (against load_b_row's two loads, two
  // widenings, a shift and an or a vector): `first` holds columns {0-3, 8-11, 16-19, 24-27}
  // of the 32, `second` {4-7, 12-15, 20-23, 28-31}, a 128-bit lane apiece. Sums made with them
  // are in that order too; in_column_order puts them back.
  static constexpr bool loads_pairs = true;
  COTENSOR_AVX512_TARGET static void load_b_pair(const element* b,
                                                 std::int64_t k,
                                                 std::int64_t n,
                                                 std::int64_t p,
                                                 std::int64_t col,
                                                 __m512bh& first,
                                                 __m512bh& second) {
    const element* lo = b + 2 * p * n + col;
    const __m512i l = _mm512_loadu_si512(lo);
    const __m512i h = 2 * p + 1 < k ? _mm512_loadu_si512(lo + n) : _mm512_setzero_si512();
    first = reinterpret_cast<__m512bh>(_mm512_unpacklo_epi16(l, h));
    second = reinterpret_cast<__m512bh>(_mm512_unpackhi_epi16(l, h));
  }
  // Sums over load_b_pair's two vectors, back in column order: 0-15 in `first`, 16-31 in
  // `second`.
  COTENSOR_AVX512_TARGET static void in_column_order(__m512& first, __m512& second) {
    const __m512i low = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    const __m512i high =
        _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
    const __m512 a = _mm512_permutex2var_ps(first, low, second);
    second = _mm512_permutex2var_ps(first, high, second);
    first = a;
  }

  COTENSOR_AVX512_TARGET static __m512bh broadcast(word w) {
    return reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(w)));
  }
  COTENSOR_AVX512_TARGET static __m512bh load_b(const word* b) {
    return reinterpret_cast<__m512bh>(_mm512_loadu_si512(b));
  }
  COTENSOR_AVX512_TARGET static __m512 step(__m512 acc, __m512bh a, __m512bh b) {
    return _mm512_dpbf16_ps(acc, a, b);
  }
};

// bfloat16 on float32 multiply-adds: a step is a pair of k, as bf16_word_steps lays them out
// (B's panels are the same), each pair split into its two floats (a shift and a mask: a bfloat16 is
// the high half of its float32) and added by two vfmadd231ps, the first k first. Each element is
// so the float32 kernel's sum of the operands converted to float32, in k order: the converting
// path's bits on cotensor's float32 kernel. For CPUs whose vdpbf16ps runs at half the rate of
// their FMAs (Intel without AMX).
struct bf16_fma_steps : bf16_word_steps {
  struct pair {
    __m512 first;   // k = 2p
    __m512 second;  // k = 2p + 1
  };
  COTENSOR_AVX512_TARGET static pair split(__m512i words) {
    return {_mm512_castsi512_ps(_mm512_slli_epi32(words, 16)),
            _mm512_castsi512_ps(
                _mm512_and_si512(words, _mm512_set1_epi32(static_cast<int>(0xFFFF0000U))))};
  }
  COTENSOR_AVX512_TARGET static pair broadcast(word w) {
    return split(_mm512_set1_epi32(static_cast<int>(w)));
  }
  COTENSOR_AVX512_TARGET static pair load_b(const word* b) { return split(_mm512_loadu_si512(b)); }
  // 16 bfloat16 from `row` as floats.
  COTENSOR_AVX512_TARGET static __m512 widened(const element* row) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row))), 16));
  }
  // Step p's two rows of B at columns [col, col + 16), read in place.
  COTENSOR_AVX512_TARGET static pair
  load_b_row(const element* b, std::int64_t k, std::int64_t n, std::int64_t p, std::int64_t col) {
    const element* lo = b + 2 * p * n + col;
    return {widened(lo), 2 * p + 1 < k ? widened(lo + n) : _mm512_setzero_ps()};
  }
  COTENSOR_AVX512_TARGET static __m512 step(__m512 acc, pair a, pair b) {
    return _mm512_fmadd_ps(a.second, b.second, _mm512_fmadd_ps(a.first, b.first, acc));
  }
};

// float16 for few rows only (the row path): a step is one k, B's halves converted exactly to
// float32 as they are loaded (vcvtph2ps), so each element is the float32 kernel's sum of the
// converted operands, bit for bit: the converting path's result, without converting B whole.
struct f16_steps : float_word_steps {
  using element = std::uint16_t;
  static constexpr std::int64_t b_prefetch_steps = 0;
  static word a_word(const element* row, std::int64_t p, std::int64_t /*k*/) {
    return float_from_half_bits(row[p]);
  }

  COTENSOR_AVX512_TARGET static void pack_b_row(const element* b,
                                                std::int64_t /*k*/,
                                                std::int64_t n,
                                                std::int64_t p,
                                                std::int64_t col0,
                                                std::int64_t cols,
                                                word* out) {
    const element* row = b + p * n + col0;
    for (std::int64_t j = 0; j < nr; ++j) {
      out[j] = j < cols ? float_from_half_bits(row[j]) : 0.0F;
    }
  }
  COTENSOR_AVX512_TARGET static __m512 load_b_row(
      const element* b, std::int64_t /*k*/, std::int64_t n, std::int64_t p, std::int64_t col) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + p * n + col)));
  }
  // Rounded as float16_t(float) rounds (half_bits_from_float: NaN to the quiet NaN).
  static void store_row(const float* in, element* out, std::int64_t n) {
    for (std::int64_t j = 0; j < n; ++j) {
      out[j] = half_bits_from_float(in[j]);
    }
  }
};

/// c = a · b for rows of A by groups of 6, B read in place (cpu/gemm_avx512.hpp says when):
/// each element summed step by step in k order from 0, as the tiled path sums it.
template <class Steps>
void row_gemm(const typename Steps::element* a,
              const typename Steps::element* b,
              typename Steps::element* c,
              std::int64_t m,
              std::int64_t k,
              std::int64_t n);
#endif

}  // namespace cotensor::detail::cpu::avx512
