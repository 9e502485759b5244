#pragma once

// Helpers of the distributed tests (tests/distributed/distributed_*_test.cpp): every rank's
// inputs, which every rank can compute, and whether the order check (COTENSOR_DIST_CHECK) is on.

#include <cotensor/cotensor.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace cotensor::test {

// Rank r's value at i, so that every rank can compute every other rank's input.
inline float value(int r, std::size_t i) {
  return static_cast<float>((r + 1) * 10 + static_cast<int>(i % 7));
}

inline tensor input(int r, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = value(r, i);
  }
  return from_vector(std::move(v), {static_cast<std::int64_t>(n)});
}

inline bool check_mode() {
  const char* s = std::getenv("COTENSOR_DIST_CHECK");
  return s != nullptr && std::string(s) == "1";
}

}  // namespace cotensor::test
