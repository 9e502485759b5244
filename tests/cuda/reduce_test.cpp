#include "cotensor/ops.hpp"
#include <cotensor/cotensor.hpp>

#include "compare.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

// sum and mean, of all elements and along one axis, on a GPU against the CPU. The CPU sums in
// double and rounds once; a GPU's tree of partial sums may round differently, so a result may
// differ from the CPU's by 1e-6 times the sum of the magnitudes of its terms (the rounding of
// any summation order at these sizes, in float, is below that) plus one unit in the last place
// of the result. Sums of small integers are exact in any order and must be the CPU's bits.

using namespace cotensor;
using namespace cotensor::test::cuda;

namespace {

constexpr double sum_rel = 1e-6;

// One unit in the last place at |v|.
double ulp_at(float v) {
  const float m = std::fabs(v);
  return static_cast<double>(std::nextafter(m, std::numeric_limits<float>::infinity()) - m);
}

// Checks the reduction `got` (GPU) against `want` (CPU) with `bound[i]` the sum of the
// magnitudes of element i's terms, scaled as the reduction is (1/extent for a mean).
void check_reduction(const tensor& got, const tensor& want, const std::vector<float>& bound) {
  CHECK(got.shape() == want.shape());
  const auto g = read_back(got);
  const auto w = want.to_vector();
  REQUIRE(g.size() == w.size());
  REQUIRE(bound.size() == w.size());
  std::int64_t bad = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double tol = sum_rel * static_cast<double>(bound[i]) + ulp_at(w[i]);
    const double err = std::fabs(static_cast<double>(g[i]) - static_cast<double>(w[i]));
    if (!(err <= tol)) {
      if (bad == 0) {
        CAPTURE(i);
        CAPTURE(g[i]);
        CAPTURE(w[i]);
        CAPTURE(tol);
        CHECK(err <= tol);
      }
      ++bad;
    }
  }
  CHECK(bad == 0);
}

// Small integers from -8 to 8: sums of them are exact in float up to 2^24 / 8 terms.
std::vector<float> small_integers(std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<float>(static_cast<int>((i * 7919) % 17) - 8);
  }
  return v;
}

}  // namespace

TEST_SUITE("cuda.reduce") {
  TEST_CASE("sum and mean of all elements match the CPU's" * doctest::timeout(30)) {
    const std::int64_t sizes[] = {1, 7, 1000, 4097, (std::int64_t{1} << 20) + 3};
    std::uint32_t seed = 1;
    for (const auto n : sizes) {
      CAPTURE(n);
      const auto values = uniform(n, seed++, -1.0F, 1.0F);
      const auto x = make_twin(values, {n});
      const float abs_sum = sum(from_vector(magnitudes(values), {n})).item();
      const tensor s = sum(x.gpu);
      CHECK(s.shape() == shape{});
      CHECK(s.device() == gpu);
      check_reduction(s, sum(x.cpu), {abs_sum});
      check_reduction(x.gpu.sum(), x.cpu.sum(), {abs_sum});
      check_reduction(mean(x.gpu), mean(x.cpu), {abs_sum / static_cast<float>(n)});
      // item() straight from the GPU tensor.
      CHECK(std::fabs(s.item() - sum(x.cpu).item()) <= sum_rel * abs_sum + ulp_at(s.item()));
    }
  }

  TEST_CASE("sums of small integers are exact, the CPU's bits" * doctest::timeout(30)) {
    for (const std::int64_t n : {std::int64_t{5}, std::int64_t{1} << 20, std::int64_t{999999}}) {
      CAPTURE(n);
      const auto x = make_twin(small_integers(n), {n});
      check_ulps(sum(x.gpu), sum(x.cpu));
      // A mean is one division (or multiplication by 1/n) of an exact sum: within 1 ulp.
      check_ulps(mean(x.gpu), mean(x.cpu), 1);
      const auto m = make_twin(small_integers(n / 5 * 5), {n / 5, 5});
      check_ulps(sum(m.gpu, 0), sum(m.cpu, 0));
      check_ulps(sum(m.gpu, 1), sum(m.cpu, 1));
    }
  }

  TEST_CASE("sum and mean along one axis match the CPU's, for every axis" * doctest::timeout(30)) {
    const shape shapes[] = {{1, 1}, {37, 513}, {4, 5, 6}, {1000, 1000}, {3, 1, 2000}, {2, 3, 4, 5}};
    std::uint32_t seed = 100;
    for (const auto& s : shapes) {
      const auto values = uniform(s.numel(), seed++, -1.0F, 1.0F);
      const auto x = make_twin(values, s);
      const tensor abs_x = from_vector(magnitudes(values), s);
      const auto rank = static_cast<int>(s.rank());
      for (int axis = -rank; axis < rank; ++axis) {
        CAPTURE(s);
        CAPTURE(axis);
        const auto extent =
            static_cast<float>(s[static_cast<std::size_t>(axis < 0 ? axis + rank : axis)]);
        const auto bound = sum(abs_x, axis).to_vector();
        const tensor got = sum(x.gpu, axis);
        CHECK(got.rank() == s.rank() - 1);
        check_reduction(got, sum(x.cpu, axis), bound);
        auto mean_bound = bound;
        for (auto& b : mean_bound) {
          b /= extent;
        }
        check_reduction(mean(x.gpu, axis), mean(x.cpu, axis), mean_bound);
      }
    }
  }

  TEST_CASE("reductions of zero elements: a sum of nothing is 0, an empty axis gives zeros" *
            doctest::timeout(20)) {
    CHECK(read_back(sum(zeros({0}, gpu))) == std::vector<float>{0.0F});
    const tensor none = sum(ones({3, 0}, gpu), 1);  // three sums of nothing
    CHECK(none.shape() == shape{3});
    CHECK(read_back(none) == std::vector<float>(3, 0.0F));
    const tensor empty = sum(ones({0, 3}, gpu), 1);  // no sums at all
    CHECK(empty.shape() == shape{0});
    CHECK(read_back(empty).empty());
    CHECK_THROWS_AS((void)mean(zeros({0}, gpu)), std::invalid_argument);
    CHECK_THROWS_AS((void)sum(zeros({2, 3}, gpu), 2), std::invalid_argument);
  }

  TEST_CASE("a reduction reads its input after the ops that compute it" * doctest::timeout(20)) {
    // Issued without waiting: the sum must see all 100 additions.
    auto x = zeros({1 << 18}, gpu);
    for (int i = 0; i < 100; ++i) {
      x += 1.0F;
    }
    const tensor s = sum(x);
    const tensor rows = sum(reshape(x, {512, 512}), 0);
    x += 1.0F;  // a later write must not reach the sums
    CHECK(s.item() == 100.0F * (1 << 18));
    CHECK(read_back(rows) == std::vector<float>(512, 100.0F * 512));
  }
}
