#include "cotensor/ops.hpp"
#include <cotensor/cotensor.hpp>

#include "compare.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

// matmul (cuBLAS SGEMM) against the CPU's (OpenBLAS), and the layout ops around it: transpose
// and reshape.
//
// Tolerance of matmul: element (i, j) may differ from the CPU's by 1e-4 times the sum of the
// magnitudes of its terms, sum_k |a_ik| |b_kj|, plus 1e-6: far above the FP32 rounding of any
// order of summation at these sizes, far below any mistake in the data (a wrong element, row or
// transpose is off by the order of the bound itself). TF32, which rounds the inputs to 10-bit
// mantissas, is caught exactly by the identity test.

using namespace cotensor;
using namespace cotensor::test::cuda;

namespace {

// Checks matmul of an [m, k] by a [k, n] matrix of uniform values on the GPU against the CPU.
void check_matmul(std::int64_t m, std::int64_t k, std::int64_t n, std::uint32_t seed) {
  CAPTURE(m);
  CAPTURE(k);
  CAPTURE(n);
  const auto va = uniform(m * k, seed, -1.0F, 1.0F);
  const auto vb = uniform(k * n, seed + 1, -1.0F, 1.0F);
  const auto a = make_twin(va, {m, k});
  const auto b = make_twin(vb, {k, n});
  const tensor c = matmul(a.gpu, b.gpu);
  CHECK(c.shape() == shape{m, n});
  const auto want = matmul(a.cpu, b.cpu).to_vector();
  const auto bound =
      matmul(from_vector(magnitudes(va), {m, k}), from_vector(magnitudes(vb), {k, n})).to_vector();
  const auto d = compare_bounded(read_back(c), want, bound, 1e-4, 1e-6);
  CHECK_MESSAGE(d.count == 0, d.count, " elements differ; ", d.first);
}

// An [n, n] identity matrix.
std::vector<float> identity(std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n * n), 0.0F);
  for (std::int64_t i = 0; i < n; ++i) {
    v[static_cast<std::size_t>(i * n + i)] = 1.0F;
  }
  return v;
}

}  // namespace

TEST_SUITE("cuda.matmul") {
  TEST_CASE("matmul matches the CPU's within FP32 rounding" * doctest::timeout(60)) {
    check_matmul(1, 1, 1, 1);
    check_matmul(3, 5, 2, 3);
    check_matmul(1, 4096, 1, 5);   // one long dot product
    check_matmul(257, 1, 129, 7);  // an outer product
    check_matmul(33, 65, 17, 9);   // no multiple of any tile size
    check_matmul(128, 256, 64, 11);
    check_matmul(1000, 1000, 1000, 13);
  }

  TEST_CASE("matmul of a matrix with zero rows or columns gives the right empty or zero result" *
            doctest::timeout(20)) {
    // [0, 3] x [3, 4]: nothing to compute. [2, 0] x [0, 3]: a sum of no terms, zeros.
    const tensor empty = matmul(zeros({0, 3}, gpu), ones({3, 4}, gpu));
    CHECK(empty.shape() == shape{0, 4});
    CHECK(read_back(empty).empty());
    const tensor zero = matmul(ones({2, 0}, gpu), ones({0, 3}, gpu));
    CHECK(zero.shape() == shape{2, 3});
    CHECK(read_back(zero) == std::vector<float>(6, 0.0F));
  }

  TEST_CASE("TF32 is off by default: a product with the identity keeps every mantissa bit" *
            doctest::timeout(20)) {
    static_assert(!runtime_options{}.allow_tf32);
    if (std::getenv("COTENSOR_ALLOW_TF32") == nullptr) {
      CHECK_FALSE(runtime_options::from_environment().allow_tf32);
      CHECK_FALSE(runtime::current().options().allow_tf32);
    }
    // 1 + j 2^-20 needs 20 mantissa bits: TF32's 10 would round it to 1. With FP32 inputs the
    // product with the identity is exact, whatever the order of summation.
    constexpr std::int64_t n = 256;
    std::vector<float> va(static_cast<std::size_t>(n * n));
    for (std::size_t j = 0; j < va.size(); ++j) {
      va[j] = 1.0F + static_cast<float>(j % 1000 + 1) * 0x1p-20F;
    }
    const tensor a = from_vector(va, {n, n}, gpu);
    const tensor i = from_vector(identity(n), {n, n}, gpu);
    CHECK(same_bits(read_back(matmul(a, i)), va));
    CHECK(same_bits(read_back(matmul(i, a)), va));
  }

  TEST_CASE("with allow_tf32 a runtime's matmul stays within TF32's error" * doctest::timeout(30)) {
    runtime rt({.allow_tf32 = true});
    CHECK(rt.options().allow_tf32);
    constexpr std::int64_t m = 512;
    const auto va = uniform(m * m, 21, -1.0F, 1.0F);
    const auto vb = uniform(m * m, 22, -1.0F, 1.0F);
    const auto want = matmul(from_vector(va, {m, m}), from_vector(vb, {m, m})).to_vector();
    const auto bound =
        matmul(from_vector(magnitudes(va), {m, m}), from_vector(magnitudes(vb), {m, m}))
            .to_vector();
    const auto got = read_back(matmul(from_vector(va, {m, m}, gpu), from_vector(vb, {m, m}, gpu)));
    // Inputs rounded (or truncated) to 11 significant bits: each term off by at most about
    // 2^-9 of itself; 2^-8 leaves room for the FP32 sums on both sides.
    const auto d = compare_bounded(got, want, bound, 0x1p-8, 1e-6);
    CHECK_MESSAGE(d.count == 0, d.count, " elements differ; ", d.first);
  }

  TEST_CASE("matmul reads operands still being computed on the GPU" * doctest::timeout(20)) {
    // Both operands come from GPU ops issued just before, without waiting.
    const auto a = uniform_twin({64, 96}, 31, -1.0F, 1.0F);
    const auto b = uniform_twin({96, 48}, 32, -1.0F, 1.0F);
    const tensor on_gpu = matmul(a.gpu * 2.0F + 1.0F, transpose(transpose(b.gpu)) - 0.5F);
    const tensor on_cpu = matmul(a.cpu * 2.0F + 1.0F, b.cpu - 0.5F);
    const auto bound = matmul(from_vector(magnitudes((a.cpu * 2.0F + 1.0F).to_vector()), {64, 96}),
                              from_vector(magnitudes((b.cpu - 0.5F).to_vector()), {96, 48}))
                           .to_vector();
    const auto d = compare_bounded(read_back(on_gpu), on_cpu.to_vector(), bound, 1e-4, 1e-6);
    CHECK_MESSAGE(d.count == 0, d.count, " elements differ; ", d.first);
  }

  TEST_CASE("matmul of bad shapes throws invalid_argument at the call" * doctest::timeout(10)) {
    CHECK_THROWS_AS((void)matmul(zeros({2, 3}, gpu), zeros({2, 3}, gpu)), std::invalid_argument);
    CHECK_THROWS_AS((void)matmul(zeros({6}, gpu), zeros({6, 1}, gpu)), std::invalid_argument);
  }

  TEST_CASE("transpose gives the CPU's bits" * doctest::timeout(20)) {
    const shape shapes[] = {{1, 1}, {1, 7}, {7, 1}, {3, 5}, {33, 65}, {1000, 513}, {0, 4}};
    std::uint32_t seed = 40;
    for (const auto& s : shapes) {
      CAPTURE(s);
      const auto x = uniform_twin(s, seed++, -1e3F, 1e3F);
      const tensor t = transpose(x.gpu);
      CHECK(t.shape() == shape{s[1], s[0]});
      check_ulps(t, transpose(x.cpu));
      check_ulps(transpose(t), x.cpu);  // back where it started
    }
    CHECK_THROWS_AS((void)transpose(zeros({2, 3, 4}, gpu)), std::invalid_argument);
  }

  TEST_CASE("reshape shares the GPU buffer under another shape" * doctest::timeout(20)) {
    const auto x = uniform_twin({2, 3, 4}, 50, -5.0F, 5.0F);
    const tensor flat = reshape(x.gpu, {24});
    const tensor mat = reshape(x.gpu, {6, 4});
    CHECK(flat.shape() == shape{24});
    CHECK(flat.device() == gpu);
    CHECK(same_bits(read_back(flat), x.cpu.to_vector()));
    // Ops see the new shape: matmul of the [6, 4] view, a sum over its rows.
    const auto w = uniform_twin({4, 3}, 51, -1.0F, 1.0F);
    const auto want = matmul(reshape(x.cpu, {6, 4}), w.cpu).to_vector();
    const auto got = read_back(matmul(mat, w.gpu));
    const auto bound = matmul(from_vector(magnitudes(x.cpu.to_vector()), {6, 4}),
                              from_vector(magnitudes(w.cpu.to_vector()), {4, 3}))
                           .to_vector();
    const auto d = compare_bounded(got, want, bound, 1e-4, 1e-6);
    CHECK_MESSAGE(d.count == 0, d.count, " elements differ; ", d.first);
    CHECK_THROWS_AS((void)reshape(x.gpu, {5, 5}), std::invalid_argument);
  }
}
