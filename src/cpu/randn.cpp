// randn on the CPU: Philox blocks sixteen at a time, so that the compiler turns each step into
// one AVX-512 instruction over sixteen lanes (or two AVX2 ones), on every backend worker.
// The arithmetic is the header's, lane by lane: the numbers do not depend on the vector width.

#include "cpu/kernels.hpp"
#include "kernels/philox_normal.hpp"

#include <algorithm>
#include <cmath>

#if defined(__x86_64__)
// GCC 12 reports its own _mm512_undefined_epi32() inside the AVX-512 intrinsics as used
// (or maybe used) uninitialised (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace cotensor::detail::cpu {
namespace {

constexpr std::int64_t lanes = 16;

// Box-Muller on sixteen Philox blocks, and the blocks' four floats stored in order:
// 4 · lanes floats at `out`.
inline void normal_lanes(float* out, const std::uint32_t (&r)[4][lanes]) {
  float z[4][lanes];
  for (std::int64_t l = 0; l < lanes; ++l) {
    const philox::pair p = philox::box_muller(r[0][l], r[1][l]);
    const philox::pair q = philox::box_muller(r[2][l], r[3][l]);
    z[0][l] = p.x;
    z[1][l] = p.y;
    z[2][l] = q.x;
    z[3][l] = q.y;
  }
  for (std::int64_t l = 0; l < lanes; ++l) {
    for (std::int64_t j = 0; j < 4; ++j) {
      out[4 * l + j] = z[j][l];
    }
  }
}

// Blocks [first, first + lanes) in plain C++, vectorised as well as the compiler can for
// each clone's instruction set.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
void normal_blocks_generic(float* out,
                           std::uint64_t first,
                           std::uint32_t k0,
                           std::uint32_t k1,
                           std::uint64_t stream) {
  std::uint32_t r[4][lanes];
  for (std::int64_t l = 0; l < lanes; ++l) {
    const std::uint64_t b = first + static_cast<std::uint64_t>(l);
    const philox::block x = philox::generate(
        {static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(b >> 32),
         static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32)},
        k0, k1);
    r[0][l] = x.x0;
    r[1][l] = x.x1;
    r[2][l] = x.x2;
    r[3][l] = x.x3;
  }
  normal_lanes(out, r);
}

#if defined(__x86_64__) && defined(__GNUC__)
// (hi, lo) of a · m in each 32-bit lane.
__attribute__((target("avx512f"), always_inline)) inline void
mulhilo(__m512i a, __m512i m, __m512i& hi, __m512i& lo) {
  constexpr __mmask16 odd = 0xAAAA;
  const __m512i even = _mm512_mul_epu32(a, m);
  const __m512i odds = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
  hi = _mm512_mask_blend_epi32(odd, _mm512_srli_epi64(even, 32), odds);
  lo = _mm512_mask_blend_epi32(odd, even, _mm512_slli_epi64(odds, 32));
}

// The same with AVX-512 intrinsics for Philox: compilers widen its 32 × 32 → 64-bit products
// to full 64-bit multiplications (three vpmuludq each) without them.
__attribute__((target("avx512f"))) void normal_blocks_avx512(
    float* out, std::uint64_t first, std::uint32_t k0, std::uint32_t k1, std::uint64_t stream) {
  // Counters: the low word is first + l (the high word is the same for all sixteen lanes when
  // first is a multiple of 16, which the caller guarantees).
  __m512i c0 =
      _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(first)),
                       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  __m512i c1 = _mm512_set1_epi32(static_cast<int>(first >> 32));
  __m512i c2 = _mm512_set1_epi32(static_cast<int>(stream));
  __m512i c3 = _mm512_set1_epi32(static_cast<int>(stream >> 32));
  const __m512i m0 = _mm512_set1_epi32(static_cast<int>(0xD2511F53));
  const __m512i m1 = _mm512_set1_epi32(static_cast<int>(0xCD9E8D57));
  for (int round = 0; round < 10; ++round) {
    __m512i hi0, lo0, hi1, lo1;
    mulhilo(c0, m0, hi0, lo0);
    mulhilo(c2, m1, hi1, lo1);
    const __m512i key0 = _mm512_set1_epi32(static_cast<int>(k0));
    const __m512i key1 = _mm512_set1_epi32(static_cast<int>(k1));
    c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), key0);
    c1 = lo1;
    c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), key1);
    c3 = lo0;
    k0 += 0x9E3779B9;
    k1 += 0xBB67AE85;
  }
  std::uint32_t r[4][lanes];
  _mm512_storeu_si512(r[0], c0);
  _mm512_storeu_si512(r[1], c1);
  _mm512_storeu_si512(r[2], c2);
  _mm512_storeu_si512(r[3], c3);
  normal_lanes(out, r);
}
#endif

void normal_blocks(
    float* out, std::uint64_t first, std::uint32_t k0, std::uint32_t k1, std::uint64_t stream) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) {
    normal_blocks_avx512(out, first, k0, k1, stream);
    return;
  }
#endif
  normal_blocks_generic(out, first, k0, k1, stream);
}

}  // namespace

void randn_float(float* out, std::int64_t n, std::uint64_t seed, std::uint64_t stream) {
  const auto k0 = static_cast<std::uint32_t>(seed);
  const auto k1 = static_cast<std::uint32_t>(seed >> 32);
  const std::int64_t groups = (n + 4 * lanes - 1) / (4 * lanes);
  auto chunk = [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t g = lo; g < hi; ++g) {
      const std::int64_t base = g * 4 * lanes;
      const auto first = static_cast<std::uint64_t>(g * lanes);
      if (base + 4 * lanes <= n) {
        normal_blocks(out + base, first, k0, k1, stream);
      } else {  // the tail: through a buffer
        float tail[4 * lanes];
        normal_blocks(tail, first, k0, k1, stream);
        std::copy(tail, tail + (n - base), out + base);
      }
    }
  };
  parallel_chunks(groups, 512, chunk);
}

namespace {

// float16/bfloat16: the float32 samples, rounded; computed in blocks of whole Philox groups so
// that every element is the float32 sample of its index.
template <class T>
void randn_rounded(T* out, std::int64_t n, std::uint64_t seed, std::uint64_t stream) {
  constexpr std::int64_t block = 4 * lanes * 64;
  parallel_chunks((n + block - 1) / block, 1, [&](std::int64_t lo, std::int64_t hi) {
    float buffer[block];
    for (std::int64_t b = lo; b < hi; ++b) {
      const std::int64_t first = b * block;
      const std::int64_t m = std::min(block, n - first);
      const auto k0 = static_cast<std::uint32_t>(seed);
      const auto k1 = static_cast<std::uint32_t>(seed >> 32);
      for (std::int64_t g = 0; g * 4 * lanes < m; ++g) {
        normal_blocks(buffer + g * 4 * lanes, static_cast<std::uint64_t>((first / 4) + g * lanes),
                      k0, k1, stream);
      }
      for (std::int64_t i = 0; i < m; ++i) {
        out[first + i] = T(buffer[i]);
      }
    }
  });
}

// float64: Box-Muller in double on 53-bit uniforms, (w0, w1) and (w2, w3) of each Philox block
// giving one pair: u = (w0·2^21 + w1/2^11 + ½)·2^-53.
void randn_double(double* out, std::int64_t n, std::uint64_t seed, std::uint64_t stream) {
  const auto k0 = static_cast<std::uint32_t>(seed);
  const auto k1 = static_cast<std::uint32_t>(seed >> 32);
  parallel_chunks((n + 1) / 2, 4096, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t p = lo; p < hi; ++p) {
      const auto b = static_cast<std::uint64_t>(p);
      const philox::block x = philox::generate(
          {static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(b >> 32),
           static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32)},
          k0, k1);
      const auto u53 = [](std::uint32_t hi32, std::uint32_t lo32) {
        const std::uint64_t bits = (static_cast<std::uint64_t>(hi32) << 21) | (lo32 >> 11);
        return (static_cast<double>(bits) + 0.5) * 0x1p-53;
      };
      const double r = std::sqrt(-2.0 * std::log(u53(x.x0, x.x1)));
      const double theta = 6.283185307179586477 * u53(x.x2, x.x3);
      out[2 * p] = r * std::cos(theta);
      if (2 * p + 1 < n) {
        out[2 * p + 1] = r * std::sin(theta);
      }
    }
  });
}

}  // namespace

void randn(const randn_args& args) {
  switch (args.t) {
  case dtype::float16:
    return randn_rounded(static_cast<float16_t*>(args.out), args.n, args.seed, args.stream);
  case dtype::bfloat16:
    return randn_rounded(static_cast<bfloat16_t*>(args.out), args.n, args.seed, args.stream);
  case dtype::float64:
    return randn_double(static_cast<double*>(args.out), args.n, args.seed, args.stream);
  default:
    return randn_float(static_cast<float*>(args.out), args.n, args.seed, args.stream);
  }
}

}  // namespace cotensor::detail::cpu
