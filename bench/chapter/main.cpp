// The d2l.ai chapter "Asynchronous Computation", figure by figure, with the names the peers'
// script bench/peers/peers.py uses (NumPy, PyTorch, JAX, MLX; and shared/peers/chapter.py), so
// that bench/peers/compare.py can put them side by side. One machine-readable line each,
// `cotensor.<name>: <value>`:
//
//   matmul_loop_f32       s        10 x (randn 1000 x 1000 + matmul(a, a)), then wait_all
//   matmul_loop_enqueue   s        the same loop's time to return (issue only; waited untimed)
//   dependency_graph_1000 s        1,000 x (x, y = ones((1, 2)); z = x * y + 2; wait for z)
//   increment_10000       s        10,000 x `y = x + 1` on a (1, 2) tensor, one wait_all at the end
//   increment_10000_sync  s        the same, `y.wait()` after each op
//   numpy_conversion      s        matmul(a, a).view_host() for a 1000 x 1000 `a` (asnumpy as
//                                  PyTorch's .numpy() does it: the result's memory, shared)
//   numpy_copy            s        matmul(a, a).to_vector() for the same `a` (a copy of it)
//   scalar_conversion     s        matmul(a, a).sum().item() for the same `a`
//   sgemm_<n>_gflops      GFLOP/s  2 n^3 / the time of one n x n matmul, issued and waited
//                                  (n = 1000, 2000, 4000; higher is better)
//   bf16_gemm_<n>_gflops  GFLOP/s  the same for bfloat16 (float32 accumulation)
//
// Each figure is the median of --repeat runs (default 5) after one warm-up run; --quick makes
// it one run and skips n = 4000, for the CI smoke test. The runtime comes from the environment
// (COTENSOR_NUM_THREADS, COTENSOR_MAX_IN_FLIGHT, COTENSOR_ENGINE=naive).
// Usage: cotensor_bench_chapter [--repeat N] [--quick]

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

using cotensor_bench::dependency_graph;
using cotensor_bench::gemm_gflops;
using cotensor_bench::increment_async;
using cotensor_bench::increment_sync;
using cotensor_bench::matmul_loop;
using cotensor_bench::matmul_loop_enqueue;
using cotensor_bench::n;
using cotensor_bench::sgemm_gflops;

// The time of matmul(a, a) and then `read` of its result (the chapter's implicit blockers), the
// result freed inside the timer, as in NumPy.
template <class Read>
double after_matmul(int repeat, const cotensor::tensor& a, Read read) {
  return median_seconds(repeat, [&] {
    const auto start = clock_type::now();
    static_cast<void>(read(cotensor::matmul(a, a)));
    return seconds_since(start);
  });
}

}  // namespace

int main(int argc, char** argv) {
  const auto opts = cotensor_bench::parse_options("cotensor_bench_chapter", argc, argv);
  std::printf("# cotensor %d.%d.%d, %u worker threads, median of %d after 1 warm-up\n",
              COTENSOR_VERSION_MAJOR, COTENSOR_VERSION_MINOR, COTENSOR_VERSION_PATCH,
              cotensor::runtime::current().worker_threads(), opts.repeat);

  print("matmul_loop_f32", matmul_loop(opts.repeat));
  print("matmul_loop_enqueue", matmul_loop_enqueue(opts.repeat));
  print("dependency_graph_1000", dependency_graph(opts.repeat));

  const auto x = cotensor::ones({1, 2});
  x.wait();
  print("increment_10000", increment_async(opts.repeat, x));
  print("increment_10000_sync", increment_sync(opts.repeat, x));

  const auto a = cotensor::randn({n, n});
  a.wait();
  print("numpy_conversion",
        after_matmul(opts.repeat, a, [](const cotensor::tensor& c) { return c.view_host(); }));
  print("numpy_copy",
        after_matmul(opts.repeat, a, [](const cotensor::tensor& c) { return c.to_vector(); }));
  print("scalar_conversion",
        after_matmul(opts.repeat, a, [](const cotensor::tensor& c) { return c.sum().item(); }));

  print("sgemm_1000_gflops", sgemm_gflops(opts.repeat, 1000));
  print("sgemm_2000_gflops", sgemm_gflops(opts.repeat, 2000));
  if (!opts.quick) {
    print("sgemm_4000_gflops", sgemm_gflops(opts.repeat, 4000));
  }
  const auto bf16 = cotensor::dtype::bfloat16;
  print("bf16_gemm_1000_gflops", gemm_gflops(opts.repeat, 1000, bf16));
  print("bf16_gemm_2000_gflops", gemm_gflops(opts.repeat, 2000, bf16));
  if (!opts.quick) {
    print("bf16_gemm_4000_gflops", gemm_gflops(opts.repeat, 4000, bf16));
  }
  return 0;
}
