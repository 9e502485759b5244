// Barriers and blockers (d2l.ai, "Asynchronous Computation"): the ways the frontend waits for
// the backend, each timed on `b = matmul(a, a)` (1000 x 1000) issued together with an unrelated
// 2000 x 2000 matmul, the "background", all on the --device (default: GPU 0 if there is one, as
// d2l's try_gpu(), else the CPU). Prints `device: <device>`, then `<label>: <seconds> sec`:
//
//   waitall            wait_all(): blocks until everything issued has ended, background too
//   wait_to_read       b.wait(): blocks until b only; the background keeps running (the next
//                      line says for how long it ran on after b.wait() had returned)
//   numpy conversion   b.to_vector(): an implicit blocker (asnumpy); waits for b, copies it out
//   scalar conversion  b.sum().item(): an implicit blocker; waits for the sum
//   print              std::cout << b.sum(): an implicit blocker too (prints the value, one run)
//   co_await ready     co_await b.ready() in an asio::awaitable on an io_context: suspends the
//                      coroutine, not the thread (the coroutine form of wait_to_read)
//   co_await when_all  co_await cotensor::when_all(): the coroutine form of waitall
//
// Each figure is the median of --repeat runs (default 3) after a warm-up; whatever a run leaves
// running is drained before the next.
// Usage: 03_barriers_and_blockers [--device cpu|cuda[:N]] [--repeat N]

#include "cotensor/cotensor.hpp"

#include "chapter.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <utility>
#include <vector>

namespace asio = boost::asio;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

// Warm-up, then `repeat` runs of `f`: the median time of `f`, and of the wait_all() after it
// that drains whatever `f` left running. Unlike chapter::median_seconds, it times `f` itself.
template <class F>
std::pair<double, double> median_seconds(int repeat, F f) {
  std::vector<double> runs;
  std::vector<double> drains;
  for (int i = 0; i <= repeat; ++i) {
    const auto start = clock_type::now();
    f();
    const auto end = clock_type::now();
    cotensor::wait_all();
    if (i > 0) {
      runs.push_back(std::chrono::duration<double>(end - start).count());
      drains.push_back(seconds_since(end));
    }
  }
  return {chapter::median(std::move(runs)), chapter::median(std::move(drains))};
}

// The same inside a coroutine, for a coroutine `f`; it drains with co_await when_all().
template <class F>
asio::awaitable<double> co_median_seconds(int repeat, F f) {
  std::vector<double> runs;
  for (int i = 0; i <= repeat; ++i) {
    const auto start = clock_type::now();
    co_await f();
    if (i > 0) {
      runs.push_back(seconds_since(start));
    }
    co_await cotensor::when_all();
  }
  co_return chapter::median(std::move(runs));
}

void report(const char* label, double seconds) { std::printf("%s: %.4f sec\n", label, seconds); }

}  // namespace

int main(int argc, char** argv) {
  const chapter::options opts =
      chapter::parse(argc, argv, "03_barriers_and_blockers [--device cpu|cuda[:N]] [--repeat N]",
                     /*default_repeat=*/3, /*accepts_trace=*/false);
  chapter::print_device(opts.device);
  const auto a = cotensor::randn({1000, 1000}, opts.device);
  const auto big = cotensor::randn({2000, 2000}, opts.device);
  cotensor::wait_all();
  auto background = [&] { return cotensor::matmul(big, big); };  // 16 GFLOP, unrelated to b

  report("waitall", median_seconds(opts.repeat, [&] {
                      const auto b = cotensor::matmul(a, a);
                      const auto c = background();
                      cotensor::wait_all();
                    }).first);
  const auto [to_read, ran_on] = median_seconds(opts.repeat, [&] {
    const auto b = cotensor::matmul(a, a);
    const auto c = background();
    b.wait();
  });
  report("wait_to_read", to_read);
  std::printf("  (the background matmul ran on for %.4f sec after b.wait() returned)\n", ran_on);

  report("numpy conversion", median_seconds(opts.repeat, [&] {
                               static_cast<void>(cotensor::matmul(a, a).to_vector());
                             }).first);
  report("scalar conversion", median_seconds(opts.repeat, [&] {
                                static_cast<void>(cotensor::matmul(a, a).sum().item());
                              }).first);
  const auto start = clock_type::now();
  std::cout << "  " << cotensor::matmul(a, a).sum() << '\n';  // blocks until the sum is computed
  report("print", seconds_since(start));

  // The coroutine forms: each co_await suspends the coroutine; the io_context's thread is free.
  asio::io_context io;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        report("co_await ready",
               co_await co_median_seconds(opts.repeat, [&]() -> asio::awaitable<void> {
                 const auto b = cotensor::matmul(a, a);
                 const auto c = background();
                 co_await b.ready();  // like wait_to_read: the background is still running
               }));
        report("co_await when_all",
               co_await co_median_seconds(opts.repeat, [&]() -> asio::awaitable<void> {
                 const auto b = cotensor::matmul(a, a);
                 const auto c = background();
                 co_await cotensor::when_all();  // like waitall
               }));
      },
      [](const std::exception_ptr& e) {
        if (e) {
          std::rethrow_exception(e);
        }
      });
  io.run();
  return 0;
}
