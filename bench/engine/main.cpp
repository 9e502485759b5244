// The engine's figures for the d2l.ai chapter "Asynchronous Computation", one machine-readable
// line each, `cotensor.<name>: <value>` (see bench/README.md for what each one means):
//
//   enqueue_us                 t1: microseconds the frontend spends issuing one small op
//   increment_10000            seconds for 10,000 x `y = x + 1`, waited once at the end
//   increment_10000_sync       seconds for 10,000 x `y = x + 1`, `y.wait()` after each
//   increment_async_us_per_op  increment_10000 / 10,000, in microseconds
//   increment_sync_us_per_op   increment_10000_sync / 10,000, in microseconds
//   matmul_loop_f32            seconds for 10 x (randn 1000 x 1000 + matmul), then wait_all
//   sgemm_1000_gflops          GFLOP/s of one 1000 x 1000 matmul, waited
//
// Each figure is the median of --repeat runs (default 5) after one warm-up run; --quick makes
// it one run, for CI smoke tests. Usage: cotensor_bench_engine [--repeat N] [--quick]

#include "cotensor/cotensor.hpp"

#include "../chapter_workloads.hpp"
#include "../common.hpp"

#include <cstdint>
#include <cstdio>

namespace {

using cotensor_bench::clock_type;
using cotensor_bench::median_seconds;
using cotensor_bench::print;
using cotensor_bench::seconds_since;

using cotensor_bench::increment_async;
using cotensor_bench::increment_sync;
using cotensor_bench::increments;
using cotensor_bench::matmul_loop;
using cotensor_bench::sgemm_gflops;

// t1: issue `increments` small ops without waiting; the wait is outside the timer.
double enqueue_us(int repeat) {
  // With the default in-flight bound (1024) the loop blocks in admission whenever the backend
  // falls behind, and we would time execution, not enqueueing. An unbounded runtime lets all
  // 10,000 ops queue up (a few MB of op nodes); it is current only here.
  auto options = cotensor::runtime_options::from_environment();
  options.max_in_flight = 0;
  cotensor::runtime unbounded(options);
  const auto x = cotensor::ones({1, 2});
  x.wait();
  const double s = median_seconds(repeat, [&] {
    cotensor::tensor y;
    const auto start = clock_type::now();
    for (int i = 0; i < increments; ++i) {
      y = x + 1.0F;
    }
    const double t = seconds_since(start);
    cotensor::wait_all();
    return t;
  });
  return s / increments * 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  const int repeat = cotensor_bench::parse_options("cotensor_bench_engine", argc, argv).repeat;
  std::printf("# cotensor %d.%d.%d, %u worker threads, median of %d after 1 warm-up\n",
              COTENSOR_VERSION_MAJOR, COTENSOR_VERSION_MINOR, COTENSOR_VERSION_PATCH,
              cotensor::runtime::current().worker_threads(), repeat);

  print("enqueue_us", enqueue_us(repeat));

  const auto x = cotensor::ones({1, 2});
  x.wait();
  const double async_s = increment_async(repeat, x);
  const double sync_s = increment_sync(repeat, x);
  print("increment_10000", async_s);
  print("increment_10000_sync", sync_s);
  print("increment_async_us_per_op", async_s / increments * 1e6);
  print("increment_sync_us_per_op", sync_s / increments * 1e6);

  print("matmul_loop_f32", matmul_loop(repeat));
  print("sgemm_1000_gflops", sgemm_gflops(repeat, cotensor_bench::n));
  return 0;
}
