#pragma once

// randn's numbers, one Philox block at a time: the counter-based generator Philox-4x32-10
// (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011; the same stream as
// Random123's r123::Philox4x32) and a Box-Muller transform written with nothing but IEEE single
// additions, multiplications, one division and one square root, each rounded once (compile
// with -ffp-contract=off -fno-math-errno). No libm call, so the numbers are the same bits on every
// x86 vector width, on other CPUs, and in a CUDA kernel built from this header with --fmad=false.

#include <bit>
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define COTENSOR_HOST_DEVICE __host__ __device__
#else
#define COTENSOR_HOST_DEVICE
#endif

namespace cotensor::detail::philox {

struct block {
  std::uint32_t x0, x1, x2, x3;
};

// Philox-4x32-10 of `counter` under the key (k0, k1).
COTENSOR_HOST_DEVICE inline block generate(block c, std::uint32_t k0, std::uint32_t k1) noexcept {
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#pragma GCC unroll 10
#endif
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = std::uint64_t{0xD2511F53} * c.x0;
    const std::uint64_t p1 = std::uint64_t{0xCD9E8D57} * c.x2;
    c = block{static_cast<std::uint32_t>(p1 >> 32) ^ c.x1 ^ k0, static_cast<std::uint32_t>(p1),
              static_cast<std::uint32_t>(p0 >> 32) ^ c.x3 ^ k1, static_cast<std::uint32_t>(p0)};
    k0 += 0x9E3779B9;
    k1 += 0xBB67AE85;
  }
  return c;
}

// ln(x) for a normal, positive float x: x = 2^e · m with m in [√½, √2), then
// ln m = 2 atanh(t) = 2 (t + t³/3 + t⁵/5 + …) with t = (m − 1)/(m + 1), |t| ≤ 0.1716; the terms
// after t¹¹/11 are below 2⁻³⁰ of the sum. ln 2 is split in two so that e·ln 2 keeps 24 bits.
COTENSOR_HOST_DEVICE inline float log_positive(float x) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  std::int32_t e = static_cast<std::int32_t>(bits >> 23) - 127;
  float m = std::bit_cast<float>((bits & 0x007FFFFFU) | 0x3F800000U);  // [1, 2)
  const bool high = m > 1.41421356F;
  m = high ? m * 0.5F : m;  // exact
  e += high ? 1 : 0;
  const float t = (m - 1.0F) / (m + 1.0F);  // m − 1 is exact (Sterbenz)
  const float t2 = t * t;
  float p = 1.0F / 11.0F;
  p = p * t2 + 1.0F / 9.0F;
  p = p * t2 + 1.0F / 7.0F;
  p = p * t2 + 1.0F / 5.0F;
  p = p * t2 + 1.0F / 3.0F;
  const float ln_m = 2.0F * t + 2.0F * t * (t2 * p);
  const auto fe = static_cast<float>(e);
  constexpr float ln2_hi = 0.693145752F;  // 11 significant bits: fe · ln2_hi is exact
  constexpr float ln2_lo = 1.42860677e-06F;
  return fe * ln2_hi + (fe * ln2_lo + ln_m);
}

struct pair {
  float x, y;
};

// Two standard normal samples from two uniform 32-bit words: radius √(−2 ln u) with
// u = (u0 + ½)·2⁻³² in (0, 1], angle θ = 2π·u1·2⁻³². θ is reduced exactly in integers: q is
// the nearest quarter turn, and the rest, |x| ≤ π/4, goes through Taylor polynomials (the
// first omitted terms are below 2⁻²⁸).
COTENSOR_HOST_DEVICE inline pair box_muller(std::uint32_t u0, std::uint32_t u1) noexcept {
  const float u = static_cast<float>(u0) * 0x1p-32F + 0x1p-33F;
  const float r = std::sqrt(-2.0F * log_positive(u));

  const std::uint32_t q = ((u1 + (1U << 29)) >> 30) & 3U;
  const auto d = static_cast<std::int32_t>(u1 - (q << 30));  // in [−2²⁹, 2²⁹)
  const float x = static_cast<float>(d >> 6) * (1.57079633F * 0x1p-24F);
  const float x2 = x * x;
  float s = -1.0F / 39916800.0F;
  s = s * x2 + 1.0F / 362880.0F;
  s = s * x2 - 1.0F / 5040.0F;
  s = s * x2 + 1.0F / 120.0F;
  s = s * x2 - 1.0F / 6.0F;
  s = x + x * (x2 * s);
  float c = 1.0F / 479001600.0F;
  c = c * x2 - 1.0F / 3628800.0F;
  c = c * x2 + 1.0F / 40320.0F;
  c = c * x2 - 1.0F / 720.0F;
  c = c * x2 + 1.0F / 24.0F;
  c = c * x2 - 0.5F;
  c = 1.0F + x2 * c;
  // Turn (cos x, sin x) by q quarter turns.
  const bool swap = (q & 1U) != 0;
  const float cos_theta = swap ? s : c;
  const float sin_theta = swap ? c : s;
  const std::uint32_t cos_sign = ((q + 1U) & 2U) << 30;
  const std::uint32_t sin_sign = (q & 2U) << 30;
  return {r * std::bit_cast<float>(std::bit_cast<std::uint32_t>(cos_theta) ^ cos_sign),
          r * std::bit_cast<float>(std::bit_cast<std::uint32_t>(sin_theta) ^ sin_sign)};
}

}  // namespace cotensor::detail::philox
