// Per-op cost against tensor size: `y = x + 1` on a float32 vector of n elements, for n from 1
// to 10^7, two ways:
//
//   add_async_us.<n>  microseconds per op when `ops(n)` ops are issued and waited once at the
//                     end (the chapter's "asynchronous"): the frontend's cost for small n, the
//                     backend's throughput for large n;
//   add_sync_us.<n>   microseconds per op with `y.wait()` after each (the chapter's
//                     "synchronous"): a round trip through the engine every op.
//   <f>_us.<n>        microseconds per `y = f(x)`, waited after each, for f in exp, log, tanh
//                     and sigmoid, at n = 10^4 and 10^6, on values in (0.1, 10): the vector
//                     math library's speed against the peers'.
//
// Each figure is the median of --repeat runs after a warm-up (--quick: one run, and sizes up
// to 10^5 only: the CI smoke test). bench/peers/op_cost.py times NumPy and PyTorch on the same
// sizes and plots the three. Usage: cotensor_bench_op_cost [--repeat N] [--quick]

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

// Enough ops for ~20 ms of work at about 1 ns per element, and at least 100.
int ops(std::int64_t n) {
  const std::int64_t target = 20'000'000 / std::max<std::int64_t>(n, 1);
  return static_cast<int>(std::clamp<std::int64_t>(target, 100, 10'000));
}

double per_op_us(int repeat, std::int64_t n, bool sync) {
  const auto x = cotensor::ones({n});
  x.wait();
  const int count = ops(n);
  const double s = median_seconds(repeat, [&] {
    cotensor::tensor y;
    const auto start = clock_type::now();
    for (int i = 0; i < count; ++i) {
      y = x + 1.0F;
      if (sync) {
        y.wait();
      }
    }
    cotensor::wait_all();
    return seconds_since(start);
  });
  return s / count * 1e6;
}

double unary_us(int repeat, std::int64_t n, cotensor::tensor (*f)(const cotensor::tensor&)) {
  const auto x = cotensor::exp(cotensor::randn({n}) * 0.5F);
  x.wait();
  const int count = ops(n);
  const double s = median_seconds(repeat, [&] {
    const auto start = clock_type::now();
    for (int i = 0; i < count; ++i) {
      f(x).wait();
    }
    return seconds_since(start);
  });
  return s / count * 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  const auto opts = cotensor_bench::parse_options("cotensor_bench_op_cost", argc, argv);
  std::printf("# cotensor %d.%d.%d, %u worker threads, median of %d after 1 warm-up\n",
              COTENSOR_VERSION_MAJOR, COTENSOR_VERSION_MINOR, COTENSOR_VERSION_PATCH,
              cotensor::runtime::current().worker_threads(), opts.repeat);
  const std::int64_t largest = opts.quick ? 100'000 : 10'000'000;
  for (std::int64_t n = 1; n <= largest; n *= 10) {
    const std::string suffix = "." + std::to_string(n);
    cotensor_bench::print(("add_async_us" + suffix).c_str(), per_op_us(opts.repeat, n, false));
    cotensor_bench::print(("add_sync_us" + suffix).c_str(), per_op_us(opts.repeat, n, true));
  }
  const struct {
    const char* name;
    cotensor::tensor (*f)(const cotensor::tensor&);
  } functions[] = {{"exp", cotensor::exp},
                   {"log", cotensor::log},
                   {"tanh", cotensor::tanh},
                   {"sigmoid", cotensor::sigmoid}};
  const std::int64_t largest_unary = opts.quick ? 100'000 : 1'000'000;
  for (const std::int64_t n : {std::int64_t{10'000}, largest_unary}) {
    for (const auto& fn : functions) {
      cotensor_bench::print((std::string(fn.name) + "_us." + std::to_string(n)).c_str(),
                            unary_us(opts.repeat, n, fn.f));
    }
  }
  return 0;
}
