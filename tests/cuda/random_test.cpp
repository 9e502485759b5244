#include "cotensor/random.hpp"

#include <cotensor/cotensor.hpp>

#include "compare.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

// randn on a GPU gives the CPU's numbers bit for bit: element i of call c after manual_seed(s)
// is a function of (s, c, i) alone, computed with correctly rounded operations only, on
// whichever device (random.hpp).

using namespace cotensor;
using namespace cotensor::test::cuda;

TEST_SUITE("cuda.random") {
  TEST_CASE("randn on the GPU gives the CPU's bits for the same seed and call" *
            doctest::timeout(30)) {
    // Around the 4 numbers of a Philox block, and around any power-of-two tile of a kernel.
    const std::int64_t sizes[] = {1, 3, 4, 5, 63, 64, 65, 1000003};
    for (const auto n : sizes) {
      CAPTURE(n);
      manual_seed(1234);
      const auto cpu0 = randn({n}).to_vector();
      const auto cpu1 = randn({n}).to_vector();
      manual_seed(1234);
      const tensor gpu0 = randn({n}, gpu);
      const tensor gpu1 = randn({n}, gpu);
      CHECK(gpu0.device() == gpu);
      CHECK(gpu0.shape() == shape{n});
      CHECK(same_bits(read_back(gpu0), cpu0));  // call 0
      CHECK(same_bits(read_back(gpu1), cpu1));  // call 1
    }
  }

  TEST_CASE("calls are numbered across devices: a GPU call and a CPU call share the count" *
            doctest::timeout(30)) {
    manual_seed(0xDEADBEEFCAFEULL);
    const auto c0 = randn({1000}).to_vector();
    const auto c1 = randn({3, 1001}).to_vector();
    const auto c2 = randn({17}).to_vector();
    manual_seed(0xDEADBEEFCAFEULL);
    const tensor g0 = randn({1000}, gpu);
    const auto h1 = randn({3, 1001}).to_vector();  // call 1, on the CPU
    const tensor g2 = randn({17}, gpu);
    CHECK(same_bits(read_back(g0), c0));
    CHECK(same_bits(h1, c1));
    CHECK(same_bits(read_back(g2), c2));
    CHECK(g2.shape() == shape{17});
  }

  TEST_CASE("on the GPU, a seed repeats its numbers and successive calls differ" *
            doctest::timeout(30)) {
    manual_seed(7);
    const auto a = read_back(randn({4096}, gpu));
    const auto b = read_back(randn({4096}, gpu));
    manual_seed(7);
    CHECK(same_bits(read_back(randn({4096}, gpu)), a));
    CHECK(!same_bits(a, b));
    manual_seed(8);
    CHECK(!same_bits(read_back(randn({4096}, gpu)), a));
    // Element i does not depend on the tensor's size or shape.
    manual_seed(7);
    const auto big = read_back(randn({2, 4096, 3}, gpu));
    CHECK(same_bits(std::vector<float>(big.begin(), big.begin() + 4096), a));
  }

  TEST_CASE("randn of zero elements on the GPU is empty and still counts as a call" *
            doctest::timeout(20)) {
    manual_seed(5);
    (void)randn({3});
    const auto want = randn({64}).to_vector();  // call 1
    manual_seed(5);
    const tensor none = randn({0}, gpu);  // call 0
    CHECK(read_back(none).empty());
    CHECK(same_bits(read_back(randn({64}, gpu)), want));
  }
}
