#include <cotensor/cotensor.hpp>

#include "compare.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

// Every dtype on a GPU against the same ops on the CPU. Casts, integer and bool results,
// comparisons, where, gathers and the extremes of a reduction are exact: the same values.
// float16/bfloat16 elementwise math computes in float and rounds once on both devices (the same
// element functions, src/kernels/element.hpp), so + - * / of halves are the same bits too; sums,
// row ops and GEMMs accumulate in another order and are compared within a relative bound.

using namespace cotensor;
using namespace cotensor::test::cuda;

namespace {

constexpr dtype all[] = {dtype::boolean,  dtype::int32,   dtype::int64,  dtype::float16,
                         dtype::bfloat16, dtype::float32, dtype::float64};
constexpr dtype floats[] = {dtype::float16, dtype::bfloat16, dtype::float32, dtype::float64};

// Values in [-40, 40) with NaN, ±inf, ±0 and out-of-int32-range values among them, as `t`
// (the same tensor on both devices).
twin values_of(dtype t, std::int64_t n, std::uint32_t seed) {
  auto v = uniform(n, seed, -40.0F, 40.0F);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            -0.0F,
                            0.0F,
                            3e9F,
                            -3e9F,
                            0.5F};
  for (std::size_t i = 0; i < std::size(specials) && i < v.size(); ++i) {
    v[i * 7 % v.size()] = specials[i];
  }
  const tensor f = from_vector(v, {n});
  const tensor c = f.astype(t);
  return {c, c.to(gpu)};
}

// The GPU result `g` against the CPU result `c`: same dtype, shape and, to within `rel` of the
// magnitude (0: exactly), the same values; NaN where the CPU has NaN.
void check_same(const tensor& g, const tensor& c, double rel = 0.0) {
  REQUIRE(g.device() == gpu);
  REQUIRE(c.device() == device::cpu());
  CHECK(g.dtype() == c.dtype());
  CHECK(g.shape() == c.shape());
  if (!is_floating(c.dtype())) {
    CHECK(g.to_vector<std::int64_t>() == c.to_vector<std::int64_t>());
    return;
  }
  const auto got = g.to_vector<double>();
  const auto want = c.to_vector<double>();
  REQUIRE(got.size() == want.size());
  std::int64_t bad = 0;
  std::string first;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool ok = std::isnan(want[i]) ? std::isnan(got[i])
                    : rel == 0.0
                        ? got[i] == want[i]
                        : std::fabs(got[i] - want[i]) <= rel * std::max(1.0, std::fabs(want[i]));
    if (!ok) {
      if (bad++ == 0) {
        first = "element " + std::to_string(i) + ": got " + std::to_string(got[i]) + ", want " +
                std::to_string(want[i]);
      }
    }
  }
  CHECK_MESSAGE(bad == 0, bad, " elements differ; ", first);
}

// float16 has 11 significant bits, bfloat16 8: a few units of the last place of each.
double rel_for(dtype t) {
  switch (t) {
  case dtype::float16:
    return 4e-3;
  case dtype::bfloat16:
    return 3e-2;
  case dtype::float32:
    return 1e-5;
  default:
    return 1e-12;
  }
}

}  // namespace

TEST_SUITE("cuda.dtypes") {
  TEST_CASE("astype between every pair of dtypes gives the CPU's values" * doctest::timeout(60)) {
    for (const dtype from : all) {
      const twin x = values_of(from, 1000, 7);
      for (const dtype to : all) {
        CAPTURE(name(from));
        CAPTURE(name(to));
        check_same(x.gpu.astype(to), x.cpu.astype(to));
      }
    }
  }

  TEST_CASE("arithmetic, comparisons and logical ops of every dtype match the CPU" *
            doctest::timeout(60)) {
    for (const dtype t : all) {
      CAPTURE(name(t));
      const twin a = values_of(t, 600, 1);
      const twin b = values_of(t, 600, 2);
      if (t != dtype::boolean) {
        check_same(a.gpu + b.gpu, a.cpu + b.cpu);
        check_same(a.gpu - b.gpu, a.cpu - b.cpu);
        check_same(a.gpu * b.gpu, a.cpu * b.cpu);
        check_same(a.gpu / b.gpu, a.cpu / b.cpu);
        check_same(maximum(a.gpu, b.gpu), maximum(a.cpu, b.cpu));
        check_same(minimum(a.gpu, b.gpu), minimum(a.cpu, b.cpu));
        check_same(abs(a.gpu), abs(a.cpu));
        check_same(-a.gpu, -a.cpu);
        check_same(a.gpu * 3, a.cpu * 3);
        check_same(2.5 - a.gpu, 2.5 - a.cpu);
        check_same(clamp(a.gpu, -5.0, 7.0), clamp(a.cpu, -5.0, 7.0));
      }
      check_same(a.gpu == b.gpu, a.cpu == b.cpu);
      check_same(a.gpu < b.gpu, a.cpu < b.cpu);
      check_same(a.gpu >= b.gpu, a.cpu >= b.cpu);
      check_same(logical_and(a.gpu, b.gpu), logical_and(a.cpu, b.cpu));
      check_same(logical_or(a.gpu, b.gpu), logical_or(a.cpu, b.cpu));
      check_same(logical_not(a.gpu), logical_not(a.cpu));
    }
  }

  TEST_CASE("broadcasting and where with promotion match the CPU" * doctest::timeout(60)) {
    const twin i32 = values_of(dtype::int32, 12, 3);
    const twin f16 = values_of(dtype::float16, 4, 4);
    const tensor ai = reshape(i32.cpu, {3, 4});
    const tensor gi = reshape(i32.gpu, {3, 4});
    check_same(gi + f16.gpu, ai + f16.cpu);  // int32 ⊗ float16 → float16, [3, 4] by [4]
    const tensor cond_c = ai > 0;
    const tensor cond_g = gi > 0;
    const twin f64 = values_of(dtype::float64, 3, 5);
    const tensor col_c = reshape(f64.cpu, {3, 1});
    const tensor col_g = reshape(f64.gpu, {3, 1});
    check_same(where(cond_g, gi, col_g), where(cond_c, ai, col_c));  // → float64, [3, 4]
  }

  TEST_CASE("reductions of every dtype match the CPU" * doctest::timeout(60)) {
    for (const dtype t : all) {
      CAPTURE(name(t));
      const twin x0 = values_of(t, 5 * 300, 9);
      // Without the NaN and infinities for sums, whose order changes the result.
      const tensor c = reshape(x0.cpu, {5, 300});
      const tensor g = reshape(x0.gpu, {5, 300});
      for (const int axis : {0, 1}) {
        CAPTURE(axis);
        check_same(max(g, axis), max(c, axis));
        check_same(min(g, axis), min(c, axis));
        check_same(argmax(g, axis), argmax(c, axis));
        check_same(argmin(g, axis, true), argmin(c, axis, true));
      }
      check_same(argmax(g), argmax(c));
      check_same(max(g), max(c));
      if (is_floating(t)) {
        const twin y = [&] {
          const tensor f = from_vector(uniform(1500, 11, -1.0F, 1.0F), {5, 300}).astype(t);
          return twin{f, f.to(gpu)};
        }();
        check_same(sum(y.gpu, 1), sum(y.cpu, 1), rel_for(t) * 30);
        check_same(mean(y.gpu, 0), mean(y.cpu, 0), rel_for(t) * 30);
        check_same(sum(y.gpu), sum(y.cpu), rel_for(t) * 300);
      } else {
        check_same(sum(g, 1), sum(c, 1));  // int64, exact (wrapping)
        check_same(sum(g), sum(c));
      }
    }
  }

  TEST_CASE("softmax, log_softmax, gelu and layer_norm of every float dtype match the CPU" *
            doctest::timeout(60)) {
    for (const dtype t : floats) {
      CAPTURE(name(t));
      const tensor xc = from_vector(uniform(4 * 500, 21, -6.0F, 6.0F), {4, 500}).astype(t);
      const tensor xg = xc.to(gpu);
      const double rel = rel_for(t);
      check_same(softmax(xg), softmax(xc), rel);
      check_same(log_softmax(xg), log_softmax(xc), rel);
      check_same(gelu(xg), gelu(xc), rel);
      check_same(gelu(xg, true), gelu(xc, true), rel);
      const tensor wc = from_vector(uniform(500, 22, 0.5F, 1.5F), {500}).astype(t);
      const tensor bc = from_vector(uniform(500, 23, -1.0F, 1.0F), {500}).astype(t);
      check_same(layer_norm(xg, wc.to(gpu), bc.to(gpu)), layer_norm(xc, wc, bc), rel * 4);
    }
  }

  TEST_CASE("concat, slice and index_select move every dtype's bytes: a bad index throws" *
            doctest::timeout(60)) {
    for (const dtype t : all) {
      CAPTURE(name(t));
      const twin x0 = values_of(t, 6 * 5, 31);
      const tensor c = reshape(x0.cpu, {6, 5});
      const tensor g = reshape(x0.gpu, {6, 5});
      check_same(concat({g, g}, 1), concat({c, c}, 1));
      check_same(slice(g, 0, 1, 4), slice(c, 0, 1, 4));
      check_same(transpose(g), transpose(c));
      const tensor index = from_vector(std::vector<std::int64_t>{5, 0, 0, 3}, {4});
      check_same(index_select(g, 0, index.to(gpu)), index_select(c, 0, index));
      check_same(index_select(g, 1, index.to(gpu)), index_select(c, 1, index));
    }
    const tensor table = zeros({10, 4}, dtype::float16, gpu);
    const tensor bad = from_vector(std::vector<std::int64_t>{1, 10}, {2}, gpu);
    const tensor rows = index_select(table, 0, bad);  // returns: the index is read on the GPU
    CHECK_THROWS_AS(rows.wait(), std::out_of_range);
  }

  TEST_CASE("matmul of float16, bfloat16 and float64 on cuBLAS matches the CPU: integers are "
            "refused" *
            doctest::timeout(60)) {
    for (const dtype t : floats) {
      CAPTURE(name(t));
      const tensor ac = from_vector(uniform(2 * 33 * 70, 41, -1.0F, 1.0F), {2, 33, 70}).astype(t);
      const tensor bc = from_vector(uniform(70 * 19, 42, -1.0F, 1.0F), {70, 19}).astype(t);
      // Products accumulate in float32 (float64 for float64): within the sum of 70 roundings.
      check_same(matmul(ac.to(gpu), bc.to(gpu)), matmul(ac, bc), rel_for(t) * 20);
    }
    const tensor ig = ones({4, 4}, dtype::int32, gpu);
    CHECK_THROWS_WITH_AS(matmul(ig, ig), doctest::Contains("int32"), std::invalid_argument);
  }

  TEST_CASE("randn of float16 and bfloat16 gives the CPU's bits: float64 its own draw" *
            doctest::timeout(60)) {
    for (const dtype t : floats) {
      CAPTURE(name(t));
      manual_seed(99);
      const tensor c = randn({1001}, t);
      manual_seed(99);
      const tensor g = randn({1001}, t, gpu);
      // float64's Box-Muller uses each library's log, sin and cos (docs/dtypes.md).
      check_same(g, c, t == dtype::float64 ? 1e-14 : 0.0);
    }
  }
}
