#pragma once

// Helpers of the async op tests (tests/async_op_*test.cpp).

#include <cotensor/cotensor.hpp>

#include <string>

namespace cotensor::test {

/// True when waiting for `t` throws an `Error` whose message contains `what`.
template <class Error>
bool fails_with(const tensor& t, const char* what) {
  try {
    t.wait();
  } catch (const Error& e) {
    return std::string(e.what()).find(what) != std::string::npos;
  } catch (...) {
    return false;
  }
  return false;
}

}  // namespace cotensor::test
