// The GEMM kernels the dispatcher can pick, each forced by its environment variable
// (COTENSOR_GEMM_F32, COTENSOR_GEMM_BF16), against a reference GEMM in double: shapes across
// every edge of the kernels' blocking, exact results where float32 accumulation is exact, and
// the same bits whatever the number of workers.

#include "cotensor/cotensor.hpp"

#include "support/cpu_features.hpp"
#include "support/scoped_environment.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using cotensor::bfloat16_t;
using cotensor::dtype;
using cotensor::tensor;
using cotensor::test::cpu_has_amx_bf16;
using cotensor::test::cpu_has_avx512;
using cotensor::test::cpu_has_avx512_bf16;
using cotensor::test::cpu_has_avx512_fp16;
using cotensor::test::cpu_is_intel;
using cotensor::test::scoped_environment;

// The float32 kernels this CPU can run, as COTENSOR_GEMM_F32 names them.
std::vector<std::string> f32_kernels() {
  std::vector<std::string> kernels{"openblas"};
  if (cpu_has_avx512()) {
    kernels.push_back("avx512");
  } else {
    MESSAGE("this CPU has no AVX-512: cotensor's float32 GEMM kernel is not tested here");
  }
  return kernels;
}

// The bfloat16 kernels this CPU can run, as COTENSOR_GEMM_BF16 names them (the converting path
// runs the float32 kernel the CPU picks).
std::vector<std::string> bf16_kernels() {
  std::vector<std::string> kernels{"convert"};
  if (cpu_has_avx512()) {
    kernels.push_back("avx512");
  } else {
    MESSAGE("this CPU has no AVX-512: the bfloat16 GEMM on its float32 multiply-adds is not "
            "tested here");
  }
  if (cpu_has_avx512_bf16()) {
    kernels.push_back("avx512_bf16");
  } else {
    MESSAGE("this CPU has no AVX-512 BF16: its bfloat16 GEMM kernel is not tested here");
  }
  if (cpu_has_amx_bf16()) {
    kernels.push_back("amx_bf16");
  } else {
    MESSAGE("this CPU (or its kernel) gives no AMX-BF16: the AMX GEMM kernel is not tested here");
  }
  return kernels;
}

// Deterministic values: small integers (exact sums) or fractions of many magnitudes.
std::vector<bfloat16_t> values(std::int64_t count, std::uint32_t seed, bool integers) {
  std::vector<bfloat16_t> v(static_cast<std::size_t>(count));
  std::uint32_t x = seed * 2654435761U + 1U;
  for (auto& e : v) {
    x = x * 1664525U + 1013904223U;
    const auto r = static_cast<int>((x >> 16) % 9U) - 4;  // -4..4
    const float f = integers ? static_cast<float>(r)
                             : static_cast<float>(r) * std::ldexp(1.0F + (x & 0xFFU) / 256.0F,
                                                                  static_cast<int>(x >> 29) - 4);
    e = bfloat16_t(f);
  }
  return v;
}

struct gemm_case {
  std::int64_t m;
  std::int64_t k;
  std::int64_t n;
};

// Shapes across the kernels' edges: products small enough to run unpacked (m · n · k <= 8192);
// one row, a panel of 6 rows and more, k odd, columns across a 64-column panel (and 16-column
// vectors) and 256- and 512-column tiles, k past a block of 384 steps (float32 515, bfloat16 1540:
// two k a step); the tiled path's last tiles of 4 rows and 15 columns, whose stores into C are
// masked (100 x 527); a short last block joined to the one before (float32 k 500 and 512,
// bfloat16 1000 and 1024: up to 512 steps) or not (float32 1026: 384 + 384 + 258; bfloat16
// 1026: 384 + 129). The AMX kernel's: blocks of 16 and 32 rows, chunks of 32 k (A in place but a
// last chunk), tiles of 64 x 256 and blocks of 8 chunks (k 300), tiles of 256 rows past k = 2048
// (100 x 2100), its few-row path up to 64 rows (17, 33, 64) and past it (65, 130).
const std::vector<gemm_case> gemm_shapes{
    {1, 1, 1},       {3, 7, 5},      {1, 300, 70},    {13, 31, 33},   {12, 64, 17},
    {25, 64, 100},   {96, 128, 512}, {97, 129, 513},  {40, 1030, 70}, {5, 2049, 3},
    {130, 515, 600}, {100, 70, 527}, {16, 32, 32},    {17, 33, 31},   {64, 300, 65},
    {65, 257, 257},  {33, 96, 600},  {70, 1540, 300}, {70, 500, 130}, {65, 512, 64},
    {66, 1024, 65},  {70, 1026, 70},
};

std::vector<float> to_float(const std::vector<bfloat16_t>& v) { return {v.begin(), v.end()}; }

// a · b in double, and Σ|a||b| per element.
template <class T>
void reference(const std::vector<T>& a,
               const std::vector<T>& b,
               const gemm_case& c,
               std::vector<double>& out,
               std::vector<double>& magnitude) {
  out.assign(static_cast<std::size_t>(c.m * c.n), 0.0);
  magnitude.assign(out.size(), 0.0);
  for (std::int64_t i = 0; i < c.m; ++i) {
    for (std::int64_t p = 0; p < c.k; ++p) {
      const double x = static_cast<float>(a[static_cast<std::size_t>(i * c.k + p)]);
      for (std::int64_t j = 0; j < c.n; ++j) {
        const double y = static_cast<float>(b[static_cast<std::size_t>(p * c.n + j)]);
        out[static_cast<std::size_t>(i * c.n + j)] += x * y;
        magnitude[static_cast<std::size_t>(i * c.n + j)] += std::abs(x * y);
      }
    }
  }
}

std::vector<bfloat16_t> matmul_bf16(const std::vector<bfloat16_t>& a,
                                    const std::vector<bfloat16_t>& b,
                                    const gemm_case& c) {
  const tensor ta = cotensor::from_vector(a, {c.m, c.k});
  const tensor tb = cotensor::from_vector(b, {c.k, c.n});
  const tensor out = cotensor::matmul(ta, tb);
  REQUIRE(out.dtype() == dtype::bfloat16);
  return out.to_vector<bfloat16_t>();
}

// For each bfloat16 kernel this CPU runs and each shape: the product of operands made from
// `seed`, and `count_wrong(shape, got, want, magnitude)`, which must be 0 (want and magnitude
// as `reference` gives them).
template <class CountWrong>
void check_bf16_kernels(std::uint32_t seed, bool integers, CountWrong count_wrong) {
  for (const std::string& kernel : bf16_kernels()) {
    CAPTURE(kernel);
    const scoped_environment forced("COTENSOR_GEMM_BF16", kernel.c_str());
    for (const gemm_case& c : gemm_shapes) {
      CAPTURE(c.m);
      CAPTURE(c.k);
      CAPTURE(c.n);
      const auto a = values(c.m * c.k, seed, integers);
      const auto b = values(c.k * c.n, seed + 1, integers);
      std::vector<double> want;
      std::vector<double> magnitude;
      reference(a, b, c, want, magnitude);
      CHECK(count_wrong(c, matmul_bf16(a, b, c), want, magnitude) == 0);
    }
  }
}

}  // namespace

TEST_SUITE("gemm") {
  TEST_CASE("bfloat16 GEMM, every kernel, is exact where float32 accumulation is") {
    // Integers of at most 4 in magnitude: every partial sum is an integer below 2^24, exact in
    // float32 in any order, so the result is the exact sum rounded once to bfloat16.
    check_bf16_kernels(
        1, true, [](const gemm_case&, const auto& got, const auto& want, const auto&) {
          std::int64_t wrong = 0;
          for (std::size_t i = 0; i < got.size(); ++i) {
            wrong += got[i].bits != bfloat16_t(static_cast<float>(want[i])).bits ? 1 : 0;
          }
          return wrong;
        });
  }

  TEST_CASE("bfloat16 GEMM, every kernel, is within float32 accumulation of the exact product") {
    check_bf16_kernels(
        3, false, [](const gemm_case& c, const auto& got, const auto& want, const auto& magnitude) {
          // One rounding to bfloat16 (2^-8 relative, both sides of a tie) after a float32 sum of k
          // products, each addition off by at most 2^-24 of the running magnitude.
          std::int64_t wrong = 0;
          for (std::size_t i = 0; i < got.size(); ++i) {
            const double bound = std::abs(want[i]) * 0x1p-8 +
                                 static_cast<double>(c.k) * 0x1p-23 * magnitude[i] * (1 + 0x1p-8);
            wrong += std::abs(static_cast<float>(got[i]) - want[i]) > bound ? 1 : 0;
          }
          return wrong;
        });
  }

  TEST_CASE("bfloat16 GEMM, every kernel, gives the same bits on 1, 2 and 3 workers") {
    // Many rows, and for cotensor's own kernels also the AMX kernel's tiles of 256 rows (k past
    // 2048) and few rows (the workers share B's panels). (The converting path on OpenBLAS
    // promises nothing of the kind: OpenBLAS's edge kernels along n give other bits where the
    // workers' column tiles end, as under qemu's Haswell for 40 rows.)
    const std::vector<gemm_case> all{{150, 1100, 700}};
    const std::vector<gemm_case> own{{150, 1100, 700}, {300, 2100, 300}, {40, 300, 700}};
    for (const std::string& kernel : bf16_kernels()) {
      CAPTURE(kernel);
      const scoped_environment forced("COTENSOR_GEMM_BF16", kernel.c_str());
      for (const gemm_case& c : kernel == "convert" ? all : own) {
        CAPTURE(c.m);
        const auto a = values(c.m * c.k, 5, false);
        const auto b = values(c.k * c.n, 6, false);
        std::vector<std::vector<bfloat16_t>> results;
        for (const unsigned workers : {1U, 2U, 3U}) {
          const cotensor::runtime rt({.worker_threads = workers});
          results.push_back(matmul_bf16(a, b, c));
        }
        for (std::size_t r = 1; r < results.size(); ++r) {
          std::int64_t differ = 0;
          for (std::size_t i = 0; i < results[0].size(); ++i) {
            differ += results[r][i].bits != results[0][i].bits ? 1 : 0;
          }
          CHECK(differ == 0);
        }
      }
    }
  }

  TEST_CASE("bfloat16 batched matmul and a broadcast operand use the same kernels") {
    for (const std::string& kernel : bf16_kernels()) {
      CAPTURE(kernel);
      const scoped_environment forced("COTENSOR_GEMM_BF16", kernel.c_str());
      const gemm_case c{13, 34, 35};
      const auto a = values(3 * c.m * c.k, 7, true);
      const auto b = values(c.k * c.n, 8, true);
      const tensor out = cotensor::matmul(cotensor::from_vector(a, {3, c.m, c.k}),
                                          cotensor::from_vector(b, {c.k, c.n}));
      const auto got = out.to_vector<bfloat16_t>();
      REQUIRE(got.size() == static_cast<std::size_t>(3 * c.m * c.n));
      for (std::int64_t batch = 0; batch < 3; ++batch) {
        const std::vector<bfloat16_t> a_batch(a.begin() + batch * c.m * c.k,
                                              a.begin() + (batch + 1) * c.m * c.k);
        std::vector<double> want;
        std::vector<double> magnitude;
        reference(a_batch, b, c, want, magnitude);
        std::int64_t wrong = 0;
        for (std::size_t i = 0; i < want.size(); ++i) {
          const auto g = got[static_cast<std::size_t>(batch * c.m * c.n) + i];
          wrong += g.bits != bfloat16_t(static_cast<float>(want[i])).bits ? 1 : 0;
        }
        CHECK(wrong == 0);
      }
    }
  }

  TEST_CASE("float32 GEMM, every kernel, is within float32 accumulation of the exact product") {
    for (const std::string& kernel : f32_kernels()) {
      CAPTURE(kernel);
      const scoped_environment forced("COTENSOR_GEMM_F32", kernel.c_str());
      for (const gemm_case& c : gemm_shapes) {
        CAPTURE(c.m);
        CAPTURE(c.k);
        CAPTURE(c.n);
        const auto a = to_float(values(c.m * c.k, 9, false));
        const auto b = to_float(values(c.k * c.n, 10, false));
        std::vector<double> want;
        std::vector<double> magnitude;
        reference(a, b, c, want, magnitude);
        const auto got = cotensor::matmul(cotensor::from_vector(a, {c.m, c.k}),
                                          cotensor::from_vector(b, {c.k, c.n}))
                             .to_vector<float>();
        // A float32 sum of k exact products (bfloat16 values), each addition off by at most
        // 2^-24 of the running magnitude.
        std::int64_t wrong = 0;
        for (std::size_t i = 0; i < got.size(); ++i) {
          const double bound = static_cast<double>(c.k) * 0x1p-23 * magnitude[i];
          wrong += std::abs(got[i] - want[i]) > bound ? 1 : 0;
        }
        CHECK(wrong == 0);
      }
    }
  }

  TEST_CASE("float32 GEMM on cotensor's kernel gives the same bits on 1, 2 and 3 workers") {
    if (!cpu_has_avx512()) {
      MESSAGE("this CPU has no AVX-512: nothing to test");
      return;
    }
    const scoped_environment forced("COTENSOR_GEMM_F32", "avx512");
    const gemm_case c{150, 1100, 700};
    const auto a = to_float(values(c.m * c.k, 11, false));
    const auto b = to_float(values(c.k * c.n, 12, false));
    std::vector<std::vector<float>> results;
    for (const unsigned workers : {1U, 2U, 3U}) {
      const cotensor::runtime rt({.worker_threads = workers});
      results.push_back(cotensor::matmul(cotensor::from_vector(a, {c.m, c.k}),
                                         cotensor::from_vector(b, {c.k, c.n}))
                            .to_vector<float>());
    }
    CHECK(results[1] == results[0]);
    CHECK(results[2] == results[0]);
  }

  TEST_CASE("cotensor's kernels give a row the same bits whatever the rows around it") {
    // Batch invariance: a decode step of 1 sequence (rows read B in place), of 17 (groups of
    // 6), of 150 (tiles over packed B), and a product small enough for the calling thread, all
    // give row 0 of the same operands the same bits (the language models' batching relies on
    // it). float32, bfloat16 and float16, an odd k and a last panel of B narrower than 64 columns.
    const std::int64_t k = 301;
    const std::int64_t n = 333;
    const auto a = values(150 * k, 21, false);
    const auto b = values(k * n, 22, false);
    const auto row0 = [&](dtype t, std::int64_t m, std::int64_t cols) {
      const tensor ta =
          cotensor::from_vector(std::vector<bfloat16_t>(a.begin(), a.begin() + m * k), {m, k});
      std::vector<bfloat16_t> bc;
      for (std::int64_t r = 0; r < k; ++r) {
        bc.insert(bc.end(), b.begin() + r * n, b.begin() + r * n + cols);
      }
      const auto c = cotensor::matmul(ta.astype(t), cotensor::from_vector(bc, {k, cols}).astype(t))
                         .astype(dtype::float32)
                         .to_vector<float>();
      return std::vector<float>(c.begin(), c.begin() + cols);
    };
    if (cpu_has_avx512()) {
      const scoped_environment forced("COTENSOR_GEMM_F32", "avx512");
      const auto one = row0(dtype::float32, 1, n);
      CHECK(row0(dtype::float32, 17, n) == one);
      CHECK(row0(dtype::float32, 150, n) == one);
      const auto narrow = row0(dtype::float32, 1, 9);  // 301 · 9 · m: small up to m = 3
      CHECK(row0(dtype::float32, 2, 9) == narrow);
      CHECK(row0(dtype::float32, 150, 9) == narrow);
      // float16: few rows convert B as they read it; many convert both operands first.
      const auto half = row0(dtype::float16, 1, n);
      CHECK(row0(dtype::float16, 18, n) == half);
      CHECK(row0(dtype::float16, 150, n) == half);
    }
    for (const std::string& kernel : bf16_kernels()) {
      if (kernel == "convert") {
        continue;
      }
      CAPTURE(kernel);
      const scoped_environment forced("COTENSOR_GEMM_BF16", kernel.c_str());
      const auto one = row0(dtype::bfloat16, 1, n);
      CHECK(row0(dtype::bfloat16, 17, n) == one);
      CHECK(row0(dtype::bfloat16, 33, n) == one);  // AMX: two blocks of A
      CHECK(row0(dtype::bfloat16, 150, n) == one);
      const auto narrow = row0(dtype::bfloat16, 1, 9);
      CHECK(row0(dtype::bfloat16, 2, 9) == narrow);
      CHECK(row0(dtype::bfloat16, 150, 9) == narrow);
    }
  }

  TEST_CASE("auto runs the kernel measured faster on this CPU") {
    // Seen through the bits: each kernel sums in its own order, so `auto`'s result is the
    // forced kernel's. float32: cotensor's kernel, but OpenBLAS past 64 rows on Intel CPUs
    // with AVX-512 FP16 (and without AVX-512); bfloat16: AMX, else vdpbf16ps on AMD, else on
    // AVX-512 the float32 multiply-adds up to 64 rows, else the converting path.
    const auto product = [](dtype t, std::int64_t m, const char* variable, const char* kernel) {
      const scoped_environment forced(variable, kernel);
      // k past OpenBLAS's block along k, whose sums it adds to C's: another order than ours.
      const std::int64_t k = 2000;
      const auto a = values(m * k, 71, false);
      const auto b = values(k * 90, 72, false);
      return cotensor::matmul(cotensor::from_vector(a, {m, k}).astype(t),
                              cotensor::from_vector(b, {k, 90}).astype(t))
          .astype(dtype::float32)
          .to_vector<float>();
    };
    for (const std::int64_t m : {10, 150}) {
      CAPTURE(m);
      const char* f32 = !cpu_has_avx512() || (cpu_is_intel() && cpu_has_avx512_fp16() && m > 64)
                            ? "openblas"
                            : "avx512";
      CAPTURE(f32);
      CHECK(product(dtype::float32, m, "COTENSOR_GEMM_F32", "auto") ==
            product(dtype::float32, m, "COTENSOR_GEMM_F32", f32));
      const char* bf16 = cpu_has_amx_bf16()                         ? "amx_bf16"
                         : cpu_has_avx512_bf16() && !cpu_is_intel() ? "avx512_bf16"
                         : cpu_has_avx512() && m <= 64              ? "avx512"
                                                                    : "convert";
      CAPTURE(bf16);
      CHECK(product(dtype::bfloat16, m, "COTENSOR_GEMM_BF16", "auto") ==
            product(dtype::bfloat16, m, "COTENSOR_GEMM_BF16", bf16));
    }
    if (cpu_has_avx512()) {
      // The two float32 kernels do differ on these operands, or the check above proves nothing.
      CHECK(product(dtype::float32, 150, "COTENSOR_GEMM_F32", "avx512") !=
            product(dtype::float32, 150, "COTENSOR_GEMM_F32", "openblas"));
    }
    if (cpu_has_amx_bf16()) {
      CHECK(product(dtype::bfloat16, 150, "COTENSOR_GEMM_BF16", "amx_bf16") !=
            product(dtype::bfloat16, 150, "COTENSOR_GEMM_BF16", "avx512_bf16"));
    }
    if (cpu_has_avx512_bf16()) {
      for (const std::int64_t m : {10, 150}) {
        CAPTURE(m);
        CHECK(product(dtype::bfloat16, m, "COTENSOR_GEMM_BF16", "avx512_bf16") !=
              product(dtype::bfloat16, m, "COTENSOR_GEMM_BF16", "convert"));
        CHECK(product(dtype::bfloat16, m, "COTENSOR_GEMM_BF16", "avx512_bf16") !=
              product(dtype::bfloat16, m, "COTENSOR_GEMM_BF16", "avx512"));
      }
    }
    if (cpu_has_avx512() && cpu_is_intel() && cpu_has_avx512_fp16()) {
      // Past 64 rows the converting path runs OpenBLAS there: other bits than the FMAs'.
      CHECK(product(dtype::bfloat16, 150, "COTENSOR_GEMM_BF16", "avx512") !=
            product(dtype::bfloat16, 150, "COTENSOR_GEMM_BF16", "convert"));
    } else if (cpu_has_avx512()) {
      // Elsewhere it runs cotensor's float32 kernel, whose bits the FMAs' path gives.
      CHECK(product(dtype::bfloat16, 150, "COTENSOR_GEMM_BF16", "avx512") ==
            product(dtype::bfloat16, 150, "COTENSOR_GEMM_BF16", "convert"));
    }
  }

  TEST_CASE("bfloat16 on float32 multiply-adds gives the converting path's bits on cotensor's "
            "float32 kernel") {
    if (!cpu_has_avx512()) {
      MESSAGE("this CPU has no AVX-512: nothing to test");
      return;
    }
    // Each pair split into its floats and added in k order: the float32 kernel's sums of the
    // converted operands, rounded once. Every path: the calling thread's small products, the
    // row path, the tiled path over blocks of k, an odd k, a last panel of B short of a vector.
    const std::vector<gemm_case> shapes{{3, 5, 7},      {1, 300, 333},  {7, 301, 70},
                                        {17, 640, 129}, {65, 129, 200}, {150, 1100, 700}};
    for (const gemm_case& c : shapes) {
      CAPTURE(c.m);
      CAPTURE(c.k);
      CAPTURE(c.n);
      const auto a = values(c.m * c.k, 81, false);
      const auto b = values(c.k * c.n, 82, false);
      std::vector<bfloat16_t> split;
      {
        const scoped_environment forced("COTENSOR_GEMM_BF16", "avx512");
        split = matmul_bf16(a, b, c);
      }
      const scoped_environment converting("COTENSOR_GEMM_BF16", "convert");
      const scoped_environment on_own("COTENSOR_GEMM_F32", "avx512");
      const auto converted = matmul_bf16(a, b, c);
      std::int64_t differ = 0;
      for (std::size_t i = 0; i < split.size(); ++i) {
        differ += split[i].bits != converted[i].bits ? 1 : 0;
      }
      CHECK(differ == 0);
    }
  }

  TEST_CASE("COTENSOR_GEMM_F32 is read strictly, and a kernel the CPU lacks is refused") {
    const auto a = cotensor::ones({4, 4});
    {
      const scoped_environment forced("COTENSOR_GEMM_F32", "blas");
      CHECK_THROWS_WITH(cotensor::matmul(a, a).wait(),
                        doctest::Contains("COTENSOR_GEMM_F32='blas'"));
    }
    const scoped_environment forced("COTENSOR_GEMM_F32", "avx512");
    if (cpu_has_avx512()) {
      CHECK(cotensor::matmul(a, a).to_vector<float>() == std::vector<float>(16, 4.0F));
    } else {
      CHECK_THROWS_WITH(cotensor::matmul(a, a).wait(), doctest::Contains("no AVX-512"));
    }
  }

  TEST_CASE("COTENSOR_GEMM_BF16 is read strictly, and a kernel the CPU lacks is refused") {
    const auto a = cotensor::ones({4, 4}, dtype::bfloat16);
    {
      const scoped_environment forced("COTENSOR_GEMM_BF16", "openblas");
      CHECK_THROWS_WITH(cotensor::matmul(a, a).wait(),
                        doctest::Contains("COTENSOR_GEMM_BF16='openblas'"));
    }
    {
      const scoped_environment forced("COTENSOR_GEMM_BF16", "avx512");
      if (cpu_has_avx512()) {
        CHECK(cotensor::matmul(a, a).to_vector<float>() == std::vector<float>(16, 4.0F));
      } else {
        CHECK_THROWS_WITH(cotensor::matmul(a, a).wait(), doctest::Contains("no AVX-512"));
      }
    }
    {
      const scoped_environment forced("COTENSOR_GEMM_BF16", "avx512_bf16");
      if (cpu_has_avx512_bf16()) {
        CHECK(cotensor::matmul(a, a).to_vector<float>() == std::vector<float>(16, 4.0F));
      } else {
        CHECK_THROWS_WITH(cotensor::matmul(a, a).wait(), doctest::Contains("no AVX-512 BF16"));
      }
    }
    const scoped_environment forced("COTENSOR_GEMM_BF16", "amx_bf16");
    if (cpu_has_amx_bf16()) {
      CHECK(cotensor::matmul(a, a).to_vector<float>() == std::vector<float>(16, 4.0F));
    } else {
      CHECK_THROWS_WITH(cotensor::matmul(a, a).wait(), doctest::Contains("no AMX-BF16"));
    }
  }
}
