#include "cotensor/random.hpp"

#include <cotensor/cotensor.hpp>

#include "kernels/philox_normal.hpp"  // the scalar definition of randn's numbers

#include <Random123/philox.h>
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

using namespace cotensor;

TEST_SUITE("random") {
  TEST_CASE("a seed gives the same numbers, and successive calls differ" * doctest::timeout(20)) {
    manual_seed(42);
    auto a1 = randn({1000}).to_vector();
    auto a2 = randn({1000}).to_vector();
    manual_seed(42);
    auto b1 = randn({1000}).to_vector();
    auto b2 = randn({1000}).to_vector();
    CHECK(a1 == b1);
    CHECK(a2 == b2);
    CHECK(a1 != a2);
    manual_seed(43);
    CHECK(randn({1000}).to_vector() != a1);
  }

  TEST_CASE("randn is Philox-4x32-10 and Box-Muller, to float precision" * doctest::timeout(20)) {
    // Element 4b + 2j + t of call c under seed s: the words (w0, w1) = Philox-4x32-10 block
    // (b, 0, c, 0) under key s, words 2j and 2j + 1 (Random123's reference generator), then
    // radius sqrt(-2 ln((w0 + 1/2) 2^-32)), angle 2 pi w1 2^-32, t = 0: cos, t = 1: sin.
    // Computed here in double precision.
    const std::uint64_t seed = 0x0123456789ABCDEFULL;
    manual_seed(seed);
    (void)randn({1});
    (void)randn({1});
    const auto v = randn({100003}).to_vector();  // call 2
    const r123::Philox4x32::key_type key = {
        {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)}};
    double worst = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const auto b = static_cast<std::uint32_t>(i / 4);
      const auto words = r123::Philox4x32{}({{b, 0, 2, 0}}, key);
      const std::size_t j = (i % 4) / 2;
      const double u = static_cast<double>(static_cast<float>(words[2 * j])) * 0x1p-32 + 0x1p-33;
      const double angle = 2 * std::numbers::pi * static_cast<double>(words[2 * j + 1]) * 0x1p-32;
      const double r = std::sqrt(-2 * std::log(u));
      const double expected = i % 2 == 0 ? r * std::cos(angle) : r * std::sin(angle);
      worst = std::max(worst, std::abs(v[i] - expected) / (1 + std::abs(expected)));
    }
    CHECK(worst < 4e-7);
  }

  TEST_CASE("the vectorised kernel gives the scalar definition's bits" * doctest::timeout(20)) {
    manual_seed(99);
    const auto v = randn({4 * 1000 + 3}).to_vector();
    std::size_t mismatches = 0;
    for (std::uint32_t b = 0; b * 4 < v.size(); ++b) {
      const auto words = detail::philox::generate({b, 0, 0, 0}, 99, 0);
      const auto p = detail::philox::box_muller(words.x0, words.x1);
      const auto q = detail::philox::box_muller(words.x2, words.x3);
      const float expected[4] = {p.x, p.y, q.x, q.y};
      for (std::uint32_t k = 0; k < 4 && b * 4 + k < v.size(); ++k) {
        mismatches += v[b * 4 + k] == expected[k] ? 0 : 1;
      }
    }
    CHECK(mismatches == 0);
  }

  TEST_CASE("element i depends on seed, call and i only, not on the tensor's size" *
            doctest::timeout(20)) {
    manual_seed(7);
    auto small = randn({10}).to_vector();
    manual_seed(7);
    auto large = randn({3, 1001}).to_vector();
    CHECK(std::vector<float>(large.begin(), large.begin() + 10) == small);
  }

  TEST_CASE("the numbers do not depend on the number of worker threads" * doctest::timeout(60)) {
    std::vector<float> one;
    std::vector<float> four;
    {
      runtime rt({.worker_threads = 1});
      manual_seed(5);
      one = randn({1 << 20}).to_vector();
    }
    {
      runtime rt({.worker_threads = 4});
      manual_seed(5);
      four = randn({1 << 20}).to_vector();
    }
    CHECK(one == four);
  }

  TEST_CASE("samples are standard normal" * doctest::timeout(20)) {
    manual_seed(1);
    auto x = randn({1 << 20});
    const double mean = cotensor::mean(x).item();
    const double var = cotensor::mean(x * x).item() - mean * mean;
    CHECK(std::abs(mean) < 0.01);
    CHECK(std::abs(var - 1.0) < 0.01);
    auto v = x.to_vector();
    std::size_t beyond = 0;
    for (float f : v) {
      CHECK_FALSE(std::isnan(f));
      beyond += std::abs(f) > 1.96F ? 1 : 0;
    }
    CHECK(static_cast<double>(beyond) / static_cast<double>(v.size()) ==
          doctest::Approx(0.05).epsilon(0.05));
  }
}
