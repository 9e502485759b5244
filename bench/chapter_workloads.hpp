#pragma once

// The workloads of the chapter's figures that more than one benchmark reports.

#include "cotensor/cotensor.hpp"

#include "common.hpp"

#include <cstdint>

namespace cotensor_bench {

constexpr int increments = 10'000;
constexpr std::int64_t n = 1000;

// "Asynchrony via Backend": 10 x (randn + matmul), issued.
inline void issue_matmul_loop() {
  for (int i = 0; i < 10; ++i) {
    const auto a = cotensor::randn({n, n});
    const auto b = cotensor::matmul(a, a);
  }
}

// The loop, synchronized at the end.
inline double matmul_loop(int repeat) {
  return median_seconds(repeat, [] {
    const auto start = clock_type::now();
    issue_matmul_loop();
    cotensor::wait_all();
    return seconds_since(start);
  });
}

// "Asynchrony via Backend" without the wait: the time the loop takes to return, issuing the 20
// ops; they are waited for outside the timer.
inline double matmul_loop_enqueue(int repeat) {
  return median_seconds(repeat, [] {
    const auto start = clock_type::now();
    issue_matmul_loop();
    const double issued = seconds_since(start);
    cotensor::wait_all();
    return issued;
  });
}

// The chapter's dependency graph, `z = x * y + 2` on (1, 2) tensors of ones, built and read
// 1,000 times: each round trip from frontend to backend and back for a graph of four ops.
inline double dependency_graph(int repeat) {
  return median_seconds(repeat, [] {
    const auto start = clock_type::now();
    for (int i = 0; i < 1000; ++i) {
      const auto x = cotensor::ones({1, 2});
      const auto y = cotensor::ones({1, 2});
      const auto z = x * y + 2.0F;
      z.wait();
    }
    return seconds_since(start);
  });
}

// "Improving Computation": asynchronous, one wait at the end.
inline double increment_async(int repeat, const cotensor::tensor& x) {
  return median_seconds(repeat, [&] {
    cotensor::tensor y;
    const auto start = clock_type::now();
    for (int i = 0; i < increments; ++i) {
      y = x + 1.0F;
    }
    cotensor::wait_all();
    return seconds_since(start);
  });
}

// "Improving Computation": synchronous, a host round trip per op.
inline double increment_sync(int repeat, const cotensor::tensor& x) {
  return median_seconds(repeat, [&] {
    const auto start = clock_type::now();
    for (int i = 0; i < increments; ++i) {
      const auto y = x + 1.0F;
      y.wait();
    }
    return seconds_since(start);
  });
}

// "Barriers and Blockers": the implicit blockers after a matmul.

/// GFLOP/s of one size x size matmul of `t`, issued and waited; the median of `repeat`.
inline double gemm_gflops(int repeat, std::int64_t size, cotensor::dtype t) {
  const auto m = cotensor::randn({size, size}).astype(t);
  m.wait();
  const double s = median_seconds(repeat, [&] {
    const auto start = clock_type::now();
    cotensor::matmul(m, m).wait();
    return seconds_since(start);
  });
  const auto flops =
      2.0 * static_cast<double>(size) * static_cast<double>(size) * static_cast<double>(size);
  return flops / s / 1e9;
}

inline double sgemm_gflops(int repeat, std::int64_t size) {
  return gemm_gflops(repeat, size, cotensor::dtype::float32);
}

}  // namespace cotensor_bench
