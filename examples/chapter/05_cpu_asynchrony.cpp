// The exercise of the chapter's PyTorch tab (d2l.ai, "Asynchronous Computation"): on the CPU,
// is there still asynchrony? In cotensor, yes, by design: the frontend thread only enqueues and
// oneTBB worker threads compute. This program issues one 2000 x 2000 matmul (16 GFLOP) and,
// until its value is ready, keeps the frontend busy with other work in 1 ms steps (a sleep
// standing in for I/O, say reading the next file), counting the steps it gets done. It does so
// on two runtimes, and prints `<label>: <seconds> sec` for each:
//
//   <engine> issue      how long `b = matmul(a, a)` took to return
//   <engine> ready      from the issue until b's value was ready (b.async_wait's callback ran)
//   then how many 1 ms steps of other work the frontend did in between.
//
// `threaded` is the default engine: issue takes microseconds and the frontend works on while the
// backend computes. `naive` is `runtime({.synchronous = true})`, what COTENSOR_ENGINE=naive
// selects (MXNet's NaiveEngine): every op runs inside its call, so issue takes the whole matmul
// and no other work overlaps it. Medians of --repeat runs (default 3) after a warm-up.
//
// It prints `device: cpu` first, whatever --device says: the exercise asks about the CPU, and a
// GPU's asynchrony is what 01-04 show. With --device cuda[:N] (the default on a machine with a
// GPU) a second line says so.
// Usage: 05_cpu_asynchrony [--device cpu|cuda[:N]] [--repeat N]

#include "cotensor/cotensor.hpp"

#include "chapter.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <iostream>
#include <thread>
#include <vector>

using clock_type = std::chrono::steady_clock;

namespace {

double seconds(clock_type::time_point from, clock_type::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// Issues the matmul, then does 1 ms steps of other work until its value is ready; prints the
// medians for the engine `name`, on a runtime with `options` that is current only here.
void measure(const char* name, const cotensor::runtime_options& options, int repeat) {
  const cotensor::runtime rt(options);
  const auto a = cotensor::randn({2000, 2000});
  a.wait();
  std::vector<double> issue;
  std::vector<double> ready;
  std::vector<int> steps;
  for (int i = 0; i <= repeat; ++i) {
    std::atomic<bool> done{false};
    std::atomic<clock_type::rep> done_at{0};
    const auto start = clock_type::now();
    const auto b = cotensor::matmul(a, a);
    const auto issued = clock_type::now();
    // A callback with no executor of its own runs on the runtime's small thread pool.
    b.async_wait([&](const std::exception_ptr&) {
      done_at.store(clock_type::now().time_since_epoch().count());
      done.store(true);
    });
    int n = 0;
    while (!done.load()) {  // the frontend's other work, while the backend computes
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ++n;
    }
    if (i > 0) {  // the first run warms up
      issue.push_back(seconds(start, issued));
      ready.push_back(seconds(start, clock_type::time_point(clock_type::duration(done_at.load()))));
      steps.push_back(n);
    }
  }
  std::printf("%s issue: %.6f sec\n%s ready: %.4f sec\n", name, chapter::median(issue), name,
              chapter::median(ready));
  std::printf("  meanwhile the frontend did %d steps of 1 ms of other work\n",
              chapter::median(steps));
}

}  // namespace

int main(int argc, char** argv) {
  const chapter::options opts =
      chapter::parse(argc, argv, "05_cpu_asynchrony [--device cpu|cuda[:N]] [--repeat N]",
                     /*default_repeat=*/3, /*accepts_trace=*/false);
  chapter::print_device(cotensor::device::cpu());
  if (!opts.device.is_cpu()) {
    std::cout << "(not " << opts.device
              << ": the exercise asks whether the CPU alone is asynchronous; 01-04 show a GPU's)\n";
  }
  auto threaded = cotensor::runtime_options::from_environment();
  threaded.synchronous = false;  // whatever COTENSOR_ENGINE says
  measure("threaded", threaded, opts.repeat);

  auto naive = threaded;
  naive.synchronous = true;  // as COTENSOR_ENGINE=naive
  measure("naive", naive, opts.repeat);

  std::printf("on the CPU the threaded engine is asynchronous: issuing returns at once and the\n"
              "frontend overlaps its own work with the backend's; the naive engine is not\n");
  return 0;
}
