// detail::packed_matrix (src/frontend/packed_matmul.hpp), the language models' weights: B laid
// out once for cotensor's own AVX-512 and AMX GEMMs. A product must give the bits of
// cotensor::matmul with B itself, for every number of rows (few rows take narrower column tiles
// over the panels, 2 to 32 rows in groups of 4 over blocks of B; more than 64 the tiled path),
// batched, across the kernels' edges, and whatever the workers; and where the kernel chosen is not
// cotensor's own, B is kept as it is.

#include "frontend/packed_matmul.hpp"

#include "cotensor/cotensor.hpp"

#include "support/cpu_features.hpp"
#include "support/scoped_environment.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace {

using cotensor::dtype;
using cotensor::tensor;
using cotensor::detail::packed_matrix;
using cotensor::test::cpu_has_amx_bf16;
using cotensor::test::cpu_has_avx512;
using cotensor::test::cpu_has_avx512_bf16;
using cotensor::test::scoped_environment;

// Values of many magnitudes, so that a different order of additions changes the bits.
tensor operand(std::int64_t rows, std::int64_t cols, std::uint32_t seed, dtype t) {
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  std::uint32_t x = seed * 2654435761U + 1U;
  for (float& e : v) {
    x = x * 1664525U + 1013904223U;
    e = static_cast<float>(static_cast<int>((x >> 16) % 9U) - 4) *
        std::ldexp(1.0F + static_cast<float>(x & 0xFFU) / 256.0F, static_cast<int>(x >> 29) - 4);
  }
  return cotensor::from_vector(v, {rows, cols}).astype(t);
}

// The elements of a and b whose bits differ (both float32 or both bfloat16).
std::int64_t differing(const tensor& a, const tensor& b) {
  const auto x = a.astype(dtype::float32).to_vector<float>();
  const auto y = b.astype(dtype::float32).to_vector<float>();
  REQUIRE(x.size() == y.size());
  std::int64_t n = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    n += std::signbit(x[i]) != std::signbit(y[i]) || x[i] != y[i] ? 1 : 0;
  }
  return n;
}

struct kind {
  dtype t;
  const char* variable;
  const char* own;
  const char* other;
  bool runs;
};

std::vector<kind> kinds() {
  return {{dtype::float32, "COTENSOR_GEMM_F32", "avx512", "openblas", cpu_has_avx512()},
          {dtype::bfloat16, "COTENSOR_GEMM_BF16", "avx512_bf16", "convert", cpu_has_avx512_bf16()},
          {dtype::bfloat16, "COTENSOR_GEMM_BF16", "avx512", "convert", cpu_has_avx512()},
          {dtype::bfloat16, "COTENSOR_GEMM_BF16", "amx_bf16", "convert", cpu_has_amx_bf16()}};
}

}  // namespace

TEST_SUITE("gemm") {
  TEST_CASE("a packed B gives matmul's bits for every number of rows, batched, on any workers") {
    for (const kind& k : kinds()) {
      CAPTURE(cotensor::name(k.t));
      if (!k.runs) {
        MESSAGE("this CPU lacks the instructions of cotensor's own ", cotensor::name(k.t),
                " GEMM: packing is not tested here");
        continue;
      }
      const scoped_environment forced(k.variable, k.own);
      // k odd (bfloat16's pairs), one block or three (float32 1000: 384 + 384 + 232; bfloat16
      // 1000: one of 500 steps, a short last block joined); n across the panels of 64 columns
      // and short of a vector.
      for (const auto& [depth, cols] :
           {std::pair{300, 527}, std::pair{129, 70}, std::pair{1000, 70}}) {
        const tensor b = operand(depth, cols, 11, k.t);
        const packed_matrix packed(b);
        CHECK(packed.packed());
        CHECK(packed.rows() == depth);
        CHECK(packed.cols() == cols);
        for (const std::int64_t rows : {1, 2, 5, 6, 7, 13, 16, 17, 30, 32, 33, 64, 65, 100}) {
          CAPTURE(depth);
          CAPTURE(rows);
          const tensor a = operand(rows, depth, 12 + static_cast<std::uint32_t>(rows), k.t);
          CHECK(differing(cotensor::detail::matmul(a, packed), cotensor::matmul(a, b)) == 0);
        }
        const tensor batched = cotensor::reshape(operand(3 * 4, depth, 13, k.t), {3, 4, depth});
        const tensor got = cotensor::detail::matmul(batched, packed);
        CHECK(got.shape() == cotensor::shape{3, 4, cols});
        CHECK(differing(got, cotensor::matmul(batched, b)) == 0);
      }
      const tensor a = operand(9, 300, 14, k.t);
      const tensor b = operand(300, 700, 15, k.t);
      const tensor want = cotensor::matmul(a, b);
      for (const unsigned workers : {1U, 3U}) {
        const cotensor::runtime rt({.worker_threads = workers});
        const packed_matrix packed(b);
        CHECK(differing(cotensor::detail::matmul(a, packed), want) == 0);
      }
    }
  }

  TEST_CASE("a packed B with a bias gives the bits of the product plus the bias, in one op") {
    for (const kind& k : kinds()) {
      CAPTURE(cotensor::name(k.t));
      for (const char* kernel : {k.own, k.other}) {
        if (std::string(kernel) == k.own && !k.runs) {
          continue;
        }
        CAPTURE(kernel);
        const scoped_environment forced(k.variable, kernel);
        const tensor b = operand(96, 200, 31, k.t);
        const tensor bias = cotensor::reshape(operand(1, 200, 32, k.t), {200});
        const packed_matrix packed(b);
        CHECK(packed.packed() == (std::string(kernel) == k.own));
        // Every path of the kernel (one row, groups of 4, narrow tiles, the tiled path), and
        // Gaussian operands over blocks of k: sums that round, so that a bias added to the
        // unrounded sum would show.
        cotensor::manual_seed(51);
        const tensor bg = (cotensor::randn({300, 200}) * 0.1).astype(k.t);
        const tensor biasg = cotensor::randn({200}, k.t);
        const packed_matrix packed_g(bg);
        for (const std::int64_t rows : {1, 5, 16, 33, 100}) {
          CAPTURE(rows);
          const tensor a = operand(rows, 96, 33 + static_cast<std::uint32_t>(rows), k.t);
          const auto issued = cotensor::runtime::current().stats().issued;
          const tensor fused = cotensor::detail::matmul(a, packed, bias);
          if (packed.packed()) {
            CHECK(cotensor::runtime::current().stats().issued == issued + 1);  // one op
          }
          CHECK(differing(fused, cotensor::matmul(a, b) + bias) == 0);
          const tensor ag = cotensor::randn({rows, 300}, k.t);
          CHECK(differing(cotensor::detail::matmul(ag, packed_g, biasg),
                          cotensor::matmul(ag, bg) + biasg) == 0);
        }
        // Batched rows, and a bias of another dtype (the two ops, promoted as operator+).
        const tensor a3 = cotensor::reshape(operand(6, 96, 41, k.t), {2, 3, 96});
        CHECK(differing(cotensor::detail::matmul(a3, packed, bias),
                        cotensor::matmul(a3, b) + bias) == 0);
        const tensor wide = bias.astype(dtype::float64);
        const tensor promoted = cotensor::detail::matmul(a3, packed, wide);
        CHECK(promoted.dtype() == dtype::float64);
        CHECK(differing(promoted, cotensor::matmul(a3, b) + wide) == 0);
        // No bias: the product alone; a bias of the wrong length: operator+'s error.
        CHECK(differing(cotensor::detail::matmul(a3, packed, tensor()), cotensor::matmul(a3, b)) ==
              0);
        CHECK_THROWS_AS(
            cotensor::detail::matmul(a3, packed, cotensor::reshape(operand(1, 7, 5, k.t), {7})),
            std::invalid_argument);
      }
    }
  }

  TEST_CASE("bfloat16 panels packed while one of cotensor's kernels is chosen serve the others") {
    // cotensor's bfloat16 kernels read the same panels (pairs of rows of B, zero padded to AMX's
    // 16 pairs): packed under any, multiplied under another, the bits of the other's matmul
    // with B itself.
    std::vector<const char*> own;
    if (cpu_has_avx512()) {
      own.push_back("avx512");
    }
    if (cpu_has_avx512_bf16()) {
      own.push_back("avx512_bf16");
    }
    if (cpu_has_amx_bf16()) {
      own.push_back("amx_bf16");
    }
    if (own.size() < 2) {
      MESSAGE("this CPU runs fewer than two of cotensor's bfloat16 kernels: nothing to test");
      return;
    }
    const tensor b = operand(301, 200, 61, dtype::bfloat16);
    for (const char* packing : own) {
      for (const char* multiplying : own) {
        if (packing == multiplying) {
          continue;
        }
        CAPTURE(packing);
        CAPTURE(multiplying);
        std::optional<packed_matrix> packed;
        {
          const scoped_environment forced("COTENSOR_GEMM_BF16", packing);
          packed.emplace(b);
          REQUIRE(packed->packed());
        }
        const scoped_environment forced("COTENSOR_GEMM_BF16", multiplying);
        for (const std::int64_t rows : {1, 17, 64, 65, 130}) {
          CAPTURE(rows);
          const tensor a =
              operand(rows, 301, 62 + static_cast<std::uint32_t>(rows), dtype::bfloat16);
          CHECK(differing(cotensor::detail::matmul(a, *packed), cotensor::matmul(a, b)) == 0);
        }
      }
    }
    // With the converting path forced, panels packed before serve through the float32
    // multiply-adds, whose bits that path gives on cotensor's float32 kernel.
    if (cpu_has_avx512()) {
      std::optional<packed_matrix> packed;
      {
        const scoped_environment forced("COTENSOR_GEMM_BF16", own.back());
        packed.emplace(b);
      }
      const scoped_environment converting("COTENSOR_GEMM_BF16", "convert");
      const scoped_environment on_own("COTENSOR_GEMM_F32", "avx512");
      for (const std::int64_t rows : {1, 17, 130}) {
        CAPTURE(rows);
        const tensor a = operand(rows, 301, 70 + static_cast<std::uint32_t>(rows), dtype::bfloat16);
        CHECK(differing(cotensor::detail::matmul(a, *packed), cotensor::matmul(a, b)) == 0);
      }
    }
  }

  TEST_CASE(
      "B is kept as it is where the kernel is not cotensor's own, and bad shapes are refused") {
    for (const kind& k : kinds()) {
      CAPTURE(cotensor::name(k.t));
      const scoped_environment forced(k.variable, k.other);
      const tensor b = operand(40, 30, 21, k.t);
      const packed_matrix kept(b);
      CHECK_FALSE(kept.packed());
      const tensor a = operand(3, 40, 22, k.t);
      CHECK(differing(cotensor::detail::matmul(a, kept), cotensor::matmul(a, b)) == 0);
    }
    CHECK_FALSE(packed_matrix(tensor()).defined());
    CHECK_THROWS_AS(packed_matrix(cotensor::ones({2, 3, 4})), std::invalid_argument);
    if (cpu_has_avx512()) {
      const scoped_environment forced("COTENSOR_GEMM_F32", "avx512");
      const packed_matrix packed(cotensor::ones({4, 5}));
      REQUIRE(packed.packed());
      CHECK_THROWS_AS(cotensor::detail::matmul(cotensor::ones({2, 3}), packed),
                      std::invalid_argument);
      CHECK_THROWS_AS(cotensor::detail::matmul(cotensor::ones({4}), packed), std::invalid_argument);
      CHECK_THROWS_AS(
          cotensor::detail::matmul(cotensor::ones({2, 4}).astype(dtype::bfloat16), packed),
          std::invalid_argument);
    }
  }
}
