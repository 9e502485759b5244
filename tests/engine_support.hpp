#pragma once

// Helpers of the engine's tests (tests/engine_*_test.cpp): observing that an op has not ended,
// and tensor values that doctest can print.

#include <cotensor/cotensor.hpp>

#include <boost/asio/use_future.hpp>

#include <chrono>
#include <cstddef>
#include <future>
#include <ostream>
#include <vector>

namespace cotensor::test {

/// True when a wait for `t`, started now, has not completed after `how_long`: the ops that
/// compute `t` have not ended. Only used where a correct engine cannot complete the wait.
inline bool still_pending(const tensor& t,
                          std::chrono::milliseconds how_long = std::chrono::milliseconds(50)) {
  auto done = cotensor::when_all(t)(boost::asio::use_future);
  return done.wait_for(how_long) == std::future_status::timeout;
}

/// Tensor values that doctest can print when a check fails.
struct floats {
  std::vector<float> v;
  friend bool operator==(const floats&, const floats&) = default;
  friend std::ostream& operator<<(std::ostream& os, const floats& f) {
    os << '{';
    for (std::size_t i = 0; i < f.v.size(); ++i) {
      os << (i == 0 ? "" : ", ") << f.v[i];
    }
    return os << '}';
  }
};

inline floats filled(std::size_t n, float value) { return {std::vector<float>(n, value)}; }
inline floats values(const tensor& t) { return {t.to_vector()}; }

}  // namespace cotensor::test
