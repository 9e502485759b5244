// Asynchrony via the backend (d2l.ai, "Asynchronous Computation"): 10 x (a = randn(1000, 1000);
// b = matmul(a, a)), timed three ways. Prints one line per way, `<label>: <seconds> sec`:
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
// Usage: 01_backend_asynchrony [--device cpu] [--repeat N] [--trace PATH]

#include "cotensor/cotensor.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr int steps = 10;
constexpr std::int64_t n = 1000;

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

// Runs `f` once to warm up (thread start, page faults), then `repeat` times, and returns the
// median of the times `f` reports. Nothing is left running between runs.
template <class F>
double median_seconds(int repeat, F f) {
  f();
  cotensor::wait_all();
  std::vector<double> runs;
  for (int i = 0; i < repeat; ++i) {
    runs.push_back(f());
    cotensor::wait_all();
  }
  std::ranges::sort(runs);
  const auto mid = runs.size() / 2;
  return runs.size() % 2 == 1 ? runs[mid] : (runs[mid - 1] + runs[mid]) / 2;
}

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr,
               "01_backend_asynchrony: %s\n"
               "usage: 01_backend_asynchrony [--device cpu] [--repeat N] [--trace PATH]\n",
               message.c_str());
  std::exit(2);
}

struct options {
  cotensor::device device = cotensor::device::cpu();
  int repeat = 1;
  std::string trace;
};

options parse(int argc, char** argv) {
  options opts;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf("usage: 01_backend_asynchrony [--device cpu] [--repeat N] [--trace PATH]\n");
      std::exit(0);
    }
    if (arg != "--device" && arg != "--repeat" && arg != "--trace") {
      usage_error("unknown argument '" + std::string(arg) + "'");
    }
    if (i + 1 == argc) {
      usage_error(std::string(arg) + " needs a value");
    }
    const std::string_view value = argv[++i];
    if (arg == "--device") {
      if (value != "cpu") {
        usage_error("device '" + std::string(value) +
                    "' is not available: this build has only 'cpu'");
      }
      opts.device = cotensor::device::cpu();
    } else if (arg == "--trace") {
      opts.trace = value;
    } else {
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), opts.repeat);
      if (ec != std::errc{} || end != value.data() + value.size() || opts.repeat < 1) {
        usage_error("--repeat needs a positive integer, got '" + std::string(value) + "'");
      }
    }
  }
  return opts;
}

}  // namespace

int main(int argc, char** argv) {
  const options opts = parse(argc, argv);
  const cotensor::shape square{n, n};

  // Synchronous style: the frontend waits for each step before issuing the next.
  const double baseline = median_seconds(opts.repeat, [&] {
    const auto start = clock_type::now();
    for (int i = 0; i < steps; ++i) {
      auto a = cotensor::randn(square, opts.device);
      a.wait();
      auto b = cotensor::matmul(a, a);
      b.wait();
    }
    return seconds_since(start);
  });

  // Only the enqueueing is timed; median_seconds waits for the work outside the timer.
  const double enqueue_only = median_seconds(opts.repeat, [&] {
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
  const double synchronized = median_seconds(opts.repeat, synchronized_run);

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
