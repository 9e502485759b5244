// Asynchrony via the backend (d2l.ai, "Asynchronous Computation"): 10 x (a = randn(1000, 1000);
// b = matmul(a, a)) on the --device (default: GPU 0 if there is one, as d2l's try_gpu(), else
// the CPU), timed three ways. Prints `device: <device>`, then one line per way,
// `<label>: <seconds> sec`:
//
//   baseline      What NumPy does: every step runs to completion before the next one starts.
//                 Here it is cotensor used synchronously: each op is issued and then waited on
//                 with `wait()`, so the frontend blocks and the backend idles between steps.
//   enqueue only  The same ops issued without any wait. Each call only validates its arguments,
//                 allocates the result and queues the op, so this times the frontend alone: a
//                 tiny fraction of the work, which is still running when the timer stops.
//   synchronized  The ops issued, then `wait_all()`: the real cost of the work. Independent
//                 steps (the next randn, this matmul) may overlap on the backend.
//
// Each figure is the median of --repeat runs (default 1), after one untimed warm-up run.
// With COTENSOR_ENGINE=naive every op runs at its call, and "enqueue only" costs as much as the
// work itself: the asynchrony the chapter describes is the engine's, not the hardware's.
//
// With --trace PATH it then records one more synchronized run into PATH (Chrome trace JSON for
// Perfetto; bench/trace/timeline.py draws it): the frontend's enqueues end long before the work.
//
// Usage: 01_backend_asynchrony [--device cpu|cuda[:N]] [--repeat N] [--trace PATH]

#include "cotensor/cotensor.hpp"

#include "chapter.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>

namespace {

constexpr int steps = 10;
constexpr std::int64_t n = 1000;

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const chapter::options opts = chapter::parse(
      argc, argv, "01_backend_asynchrony [--device cpu|cuda[:N]] [--repeat N] [--trace PATH]",
      /*default_repeat=*/1, /*accepts_trace=*/true);
  chapter::print_device(opts.device);
  const cotensor::shape square{n, n};

  // Synchronous style: the frontend waits for each step before issuing the next.
  const double baseline = chapter::median_seconds(opts.repeat, [&] {
    const auto start = clock_type::now();
    for (int i = 0; i < steps; ++i) {
      auto a = cotensor::randn(square, opts.device);
      a.wait();
      auto b = cotensor::matmul(a, a);
      b.wait();
    }
    return seconds_since(start);
  });

  // Only the enqueueing is timed; chapter::median_seconds waits for the work outside the timer.
  const double enqueue_only = chapter::median_seconds(opts.repeat, [&] {
    const auto start = clock_type::now();
    for (int i = 0; i < steps; ++i) {
      auto a = cotensor::randn(square, opts.device);
      auto b = cotensor::matmul(a, a);
    }
    return seconds_since(start);
  });

  auto synchronized_run = [&] {
    const auto start = clock_type::now();
    for (int i = 0; i < steps; ++i) {
      auto a = cotensor::randn(square, opts.device);
      auto b = cotensor::matmul(a, a);
    }
    cotensor::wait_all();
    return seconds_since(start);
  };
  const double synchronized = chapter::median_seconds(opts.repeat, synchronized_run);

  std::printf("baseline: %.4f sec\n", baseline);
  std::printf("enqueue only: %.4f sec\n", enqueue_only);
  std::printf("synchronized: %.4f sec\n", synchronized);

  if (!opts.trace.empty()) {
    cotensor::start_trace();
    synchronized_run();
    const cotensor::trace t = cotensor::stop_trace();
    t.save(opts.trace);
    std::printf("trace: %s (%zu ops)\n", opts.trace.c_str(), t.ops.size());
  }
  return 0;
}
