// Barriers and blockers (d2l.ai, "Asynchronous Computation"): the ways the frontend waits for
// the backend, each timed on `b = matmul(a, a)` (1000 x 1000) issued together with an unrelated
// 2000 x 2000 matmul, the "background". Prints `<label>: <seconds> sec`:
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
// running is drained before the next. Usage: 03_barriers_and_blockers [--device cpu] [--repeat N]

#include "cotensor/cotensor.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace asio = boost::asio;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

double median(std::vector<double> runs) {
  std::ranges::sort(runs);
  return runs[runs.size() / 2];
}

// Warm-up, then `repeat` runs of `f`: the median time of `f`, and of the wait_all() after it
// that drains whatever `f` left running.
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
  return {median(std::move(runs)), median(std::move(drains))};
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
  co_return median(runs);
}

void report(const char* label, double seconds) { std::printf("%s: %.4f sec\n", label, seconds); }

// Accepts `--device cpu` and `--repeat N`; for anything else prints why and returns 0.
int parse(int argc, char** argv) {
  int repeat = 3;
  for (int i = 1; i < argc; i += 2) {
    const std::string_view arg = argv[i];
    const std::string_view value = i + 1 < argc ? argv[i + 1] : "";
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), repeat);
    if ((arg == "--device" && value == "cpu") ||
        (arg == "--repeat" && ec == std::errc{} && end == value.data() + value.size() &&
         repeat > 0)) {
      continue;
    }
    if (arg == "--device" && i + 1 < argc) {
      std::fprintf(stderr, "%s: device '%s' is not available: this build has only 'cpu'\n", argv[0],
                   std::string(value).c_str());
    } else {
      std::fprintf(stderr, "usage: %s [--device cpu] [--repeat N]\n", argv[0]);
    }
    return 0;
  }
  return repeat;
}

}  // namespace

int main(int argc, char** argv) {
  const int repeat = parse(argc, argv);
  if (repeat == 0) {
    return 2;
  }
  const auto a = cotensor::randn({1000, 1000});
  const auto big = cotensor::randn({2000, 2000});
  cotensor::wait_all();
  auto background = [&] { return cotensor::matmul(big, big); };  // 16 GFLOP, unrelated to b

  report("waitall", median_seconds(repeat, [&] {
                      const auto b = cotensor::matmul(a, a);
                      const auto c = background();
                      cotensor::wait_all();
                    }).first);
  const auto [to_read, ran_on] = median_seconds(repeat, [&] {
    const auto b = cotensor::matmul(a, a);
    const auto c = background();
    b.wait();
  });
  report("wait_to_read", to_read);
  std::printf("  (the background matmul ran on for %.4f sec after b.wait() returned)\n", ran_on);

  report("numpy conversion", median_seconds(repeat, [&] {
                               static_cast<void>(cotensor::matmul(a, a).to_vector());
                             }).first);
  report("scalar conversion", median_seconds(repeat, [&] {
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
        report("co_await ready", co_await co_median_seconds(repeat, [&]() -> asio::awaitable<void> {
                 const auto b = cotensor::matmul(a, a);
                 const auto c = background();
                 co_await b.ready();  // like wait_to_read: the background is still running
               }));
        report("co_await when_all",
               co_await co_median_seconds(repeat, [&]() -> asio::awaitable<void> {
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
