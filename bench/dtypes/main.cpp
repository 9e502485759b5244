// Throughput per dtype: float16, bfloat16, float32 and float64 side by side.
//
//   dtypes_ew_ns.<dtype>.<n>         nanoseconds per element of `a * b + c` on three vectors of
//                                    n elements (two elementwise ops, waited after each
//                                    expression), n = 10^6 and 10^7;
//   dtypes_matmul_gflops.<dtype>.<n> GFLOP/s (2n^3 flops) of an n x n matmul, n = 1000: SGEMM
//                                    for float32, DGEMM for float64, float16/bfloat16 through
//                                    float32 tiles into SGEMM.
//
// Each figure is the median of --repeat runs after a warm-up (--quick: one run, n = 10^5 and a
// 200 x 200 matmul: the CI smoke test). bench/dtypes/torch_dtypes.py times PyTorch on the CPU
// with the same names, and bench/dtypes/compare.py runs both and prints the ratios.
// Usage: cotensor_bench_dtypes [--repeat N] [--quick]

#include "cotensor/cotensor.hpp"

#include "../common.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>

namespace {

using cotensor_bench::clock_type;
using cotensor_bench::median_seconds;
using cotensor_bench::seconds_since;

constexpr cotensor::dtype dtypes[] = {cotensor::dtype::float16, cotensor::dtype::bfloat16,
                                      cotensor::dtype::float32, cotensor::dtype::float64};

double elementwise_ns(int repeat, cotensor::dtype t, std::int64_t n) {
  cotensor::manual_seed(1);
  const auto a = cotensor::randn({n}, t);
  const auto b = cotensor::randn({n}, t);
  const auto c = cotensor::randn({n}, t);
  cotensor::wait_all();
  // Enough expressions for ~50 ms at 1 ns per element.
  const int count = static_cast<int>(std::max<std::int64_t>(1, 50'000'000 / n));
  const double s = median_seconds(repeat, [&] {
    const auto start = clock_type::now();
    for (int i = 0; i < count; ++i) {
      (a * b + c).wait();
    }
    return seconds_since(start);
  });
  return s / count / static_cast<double>(n) * 1e9;
}

double matmul_gflops(int repeat, cotensor::dtype t, std::int64_t n) {
  cotensor::manual_seed(2);
  const auto a = cotensor::randn({n, n}, t);
  const auto b = cotensor::randn({n, n}, t);
  cotensor::wait_all();
  const double s = median_seconds(repeat, [&] {
    const auto start = clock_type::now();
    cotensor::matmul(a, b).wait();
    return seconds_since(start);
  });
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / s / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  const auto opts = cotensor_bench::parse_options("cotensor_bench_dtypes", argc, argv);
  std::printf("# cotensor %d.%d.%d, %u worker threads, median of %d after 1 warm-up\n",
              COTENSOR_VERSION_MAJOR, COTENSOR_VERSION_MINOR, COTENSOR_VERSION_PATCH,
              cotensor::runtime::current().worker_threads(), opts.repeat);
  const std::int64_t sizes[] = {1'000'000, 10'000'000};
  const std::int64_t matmul_n = opts.quick ? 200 : 1000;
  for (cotensor::dtype t : dtypes) {
    const std::string dt(cotensor::name(t));
    if (opts.quick) {
      cotensor_bench::print(("dtypes_ew_ns." + dt + ".100000").c_str(),
                            elementwise_ns(opts.repeat, t, 100'000));
    } else {
      for (std::int64_t n : sizes) {
        cotensor_bench::print(("dtypes_ew_ns." + dt + "." + std::to_string(n)).c_str(),
                              elementwise_ns(opts.repeat, t, n));
      }
    }
    cotensor_bench::print(("dtypes_matmul_gflops." + dt + "." + std::to_string(matmul_n)).c_str(),
                          matmul_gflops(opts.repeat, t, matmul_n));
  }
  return 0;
}
