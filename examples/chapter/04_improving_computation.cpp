// Improving computation (d2l.ai, "Asynchronous Computation"): 10,000 x `y = x + 1` on a (1, 2)
// tensor on the --device (default: GPU 0 if there is one, as d2l's try_gpu(), else the CPU),
// waiting after each op (`synchronous`) or once at the end (`asynchronous`). Then the
// chapter's model of both: the frontend takes t1 to enqueue an op, the backend t2 to run it and
// t3 to hand the result back, so
//   synchronous  ~ 10000 (t1 + t2 + t3)
//   asynchronous ~ t1 + 10000 t2 + t3   if 10000 t2 > 9999 t1 (the backend is the bottleneck),
//                ~ 10000 t1 + t2 + t3   otherwise (the frontend is),
// and asynchronous wins because it pays t3 (a wake-up of the waiting thread) once, not 10,000
// times. Prints `device: <device>`, `<label>: <seconds> sec` for both, then t1, t2 and t3
// (seconds per op):
//   t1  measured: 10,000 ops issued behind a closed gate (an op that waits for the frontend to
//       finish issuing), so the backend is idle while the frontend is timed
//   t2  measured: the backend running those 10,000 ops once the gate opens, until the last ends
//       (on a GPU including the copy of the gate's value there: the gate is a CPU function)
//   t3  derived:  synchronous / 10,000 - t1 - t2
// and which regime holds with the model's prediction beside the measurement.
// cotensor runs an op this tiny at its call when its input is ready (runtime_options::
// inline_small_ops): a worker round trip would cost more than the op. That makes both loops cost
// the same; so the chapter's experiment runs with it off, every op taking the engine's path, and
// the last line shows the two loops with it on.
// Each figure is the median of --repeat runs (default 5) after a warm-up.
// With --trace PATH it records one more asynchronous loop (engine path) into PATH, for
// bench/trace/timeline.py or Perfetto.
// Usage: 04_improving_computation [--device cpu|cuda[:N]] [--repeat N] [--trace PATH]

#include "cotensor/cotensor.hpp"

#include "chapter.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>
#include <vector>

using clock_type = std::chrono::steady_clock;

namespace {

constexpr int ops = 10'000;

double seconds(clock_type::time_point from, clock_type::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// The chapter's two loops: a wait after each op, or one wait at the end.
std::pair<double, double> sync_and_async(int repeat, const cotensor::tensor& x) {
  const double sync = chapter::median_seconds(repeat, [&] {
    const auto start = clock_type::now();
    for (int i = 0; i < ops; ++i) {
      const auto y = x + 1.0F;
      y.wait();  // a host round trip per op
    }
    return seconds(start, clock_type::now());
  });
  const double async = chapter::median_seconds(repeat, [&] {
    const auto start = clock_type::now();
    cotensor::tensor y;
    for (int i = 0; i < ops; ++i) {
      y = x + 1.0F;
    }
    cotensor::wait_all();  // one round trip at the end
    return seconds(start, clock_type::now());
  });
  return {sync, async};
}

}  // namespace

int main(int argc, char** argv) {
  const chapter::options opts = chapter::parse(
      argc, argv, "04_improving_computation [--device cpu|cuda[:N]] [--repeat N] [--trace PATH]",
      /*default_repeat=*/5, /*accepts_trace=*/true);
  chapter::print_device(opts.device);
  auto engine_path = cotensor::runtime_options::from_environment();
  engine_path.inline_small_ops = false;
  const cotensor::runtime chapter_runtime(engine_path);
  const auto x = cotensor::ones({1, 2}, opts.device);
  x.wait();
  const auto [sync, async] = sync_and_async(opts.repeat, x);
  std::printf("synchronous: %.4f sec\nasynchronous: %.4f sec\n", sync, async);

  // t1 and t2 from one experiment: the 10,000 ops are issued behind a gate, an op that holds a
  // backend thread until the frontend has issued them all and notes when it lets go. Issuing
  // (t1) is timed with the backend idle; running them (t2) from the gate's opening to the end.
  // Everything must be queued at once: no in-flight bound, for this runtime only. `map` runs its
  // function on host threads, so on a GPU the gate reads a CPU copy of x and is copied back.
  auto options = engine_path;
  options.max_in_flight = 0;
  options.inline_small_ops = false;
  options.synchronous = false;  // even under COTENSOR_ENGINE=naive: the gate needs asynchrony
  const cotensor::runtime unbounded(options);
  const auto host_x = opts.device.is_cpu() ? x : x.to(cotensor::device::cpu());
  std::vector<double> t1_runs;
  std::vector<double> t2_runs;
  for (int i = 0; i <= opts.repeat; ++i) {
    std::atomic<bool> all_issued{false};
    std::atomic<clock_type::rep> opened{0};
    const auto host_gate = cotensor::map(host_x, [&](float v) {
      while (!all_issued.load()) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      opened.store(clock_type::now().time_since_epoch().count());
      return v;
    });
    const auto gate = opts.device.is_cpu() ? host_gate : host_gate.to(opts.device);
    const auto start = clock_type::now();
    cotensor::tensor y;
    for (int j = 0; j < ops; ++j) {
      y = gate + 1.0F;
    }
    const auto issued = clock_type::now();
    all_issued.store(true);
    cotensor::wait_all();
    const auto end = clock_type::now();
    if (i > 0) {  // the first run warms up
      t1_runs.push_back(seconds(start, issued) / ops);
      t2_runs.push_back(seconds(clock_type::time_point(clock_type::duration(opened.load())), end) /
                        ops);
    }
  }
  const double t1 = chapter::median(std::move(t1_runs));
  const double t2 = chapter::median(std::move(t2_runs));
  const double t3 = std::max(0.0, sync / ops - t1 - t2);
  std::printf("t1 (enqueue, per op): %.3g sec\nt2 (execute, per op): %.3g sec\n"
              "t3 (return, per op): %.3g sec\n",
              t1, t2, t3);

  const bool backend_bound = ops * t2 > (ops - 1) * t1;
  std::printf("10000 t2 = %.4f sec %s 9999 t1 = %.4f sec: the %s is the bottleneck\n", ops * t2,
              backend_bound ? ">" : "<=", (ops - 1) * t1, backend_bound ? "backend" : "frontend");
  std::printf("model: asynchronous ~ %s = %.4f sec, measured %.4f sec\n",
              backend_bound ? "t1 + 10000 t2 + t3" : "10000 t1 + t2 + t3",
              backend_bound ? t1 + ops * t2 + t3 : ops * t1 + t2 + t3, async);
  std::printf("(the model has frontend and backend overlap perfectly; here ");
  if (opts.device.is_cpu()) {
    std::printf("%u backend threads and\n the frontend share %u hardware threads)\n",
                cotensor::runtime::current().worker_threads(), std::thread::hardware_concurrency());
  } else {
    std::printf("the backend is GPU %d)\n", opts.device.index);
  }
  std::printf("synchronous / asynchronous = %.1f (asynchronous pays t3 once, not 10,000 times)\n",
              sync / async);

  if (!opts.trace.empty()) {
    const cotensor::runtime traced(engine_path);
    cotensor::start_trace();
    cotensor::tensor y;
    for (int i = 0; i < ops; ++i) {
      y = x + 1.0F;
    }
    cotensor::wait_all();
    const cotensor::trace t = cotensor::stop_trace();
    t.save(opts.trace);
    std::printf("trace: %s (%zu ops)\n", opts.trace.c_str(), t.ops.size());
  }

  auto inline_on = engine_path;
  inline_on.inline_small_ops = true;
  const cotensor::runtime tiny_inline(inline_on);
  const auto [sync_inline, async_inline] = sync_and_async(opts.repeat, x);
  std::printf("with inline_small_ops: synchronous %.4f sec, asynchronous %.4f sec\n", sync_inline,
              async_inline);
  return 0;
}
