#pragma once

// The products every GEMM of src/cpu/ answers before its kernel: no rows or no columns (nothing
// to do), or k = 0 (C all zeros). Internal to src/cpu/.

#include <algorithm>
#include <cstdint>

namespace cotensor::detail::cpu {

/// c[m, n] = 0 when k is 0 (T{}: +0.0 for every float type); whether there is nothing left to do.
template <class T>
bool trivial_gemm(T* c, std::int64_t m, std::int64_t k, std::int64_t n) {
  if (m == 0 || n == 0) {
    return true;
  }
  if (k == 0) {
    std::fill(c, c + m * n, T{});
    return true;
  }
  return false;
}

}  // namespace cotensor::detail::cpu
