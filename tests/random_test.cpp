#include "cotensor/random.hpp"

#include <cotensor/cotensor.hpp>

#include <doctest/doctest.h>

#include <cmath>
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
