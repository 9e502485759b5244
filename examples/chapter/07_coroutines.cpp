// Tensor work in Asio coroutines: the event loop is never blocked. One io_context, run by the
// main thread, serves two coroutines: a ticker whose steady_timer fires every 10 ms, and a
// worker that does the chapter's loop, 10 x (a = randn(1000, 1000); b = matmul(a, a)), twice:
//
//   coroutine waits   each step ends with `co_await b.ready()`, the loop with
//                     `co_await cotensor::when_all()`: the coroutine suspends, the thread is free
//   blocking waits    each step ends with `b.wait()` on the event loop's thread (don't do this),
//                     yielding to the loop between steps
//
// For each it prints `<label>: <seconds> sec` for the loop, then how many ticks happened while it
// ran (against one per 10 ms) and the largest gap between ticks: 10 ms and a little scheduling
// delay with coroutine waits; with blocking ones, as long as the thread stays blocked.
// Usage: 07_coroutines [--device cpu]

#include "cotensor/cotensor.hpp"

#include "chapter.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <vector>

namespace asio = boost::asio;
using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

constexpr auto tick = 10ms;

double seconds(clock_type::duration d) { return std::chrono::duration<double>(d).count(); }

// Fires every `tick` (measured from the previous tick) until `stop`, noting when it ran.
asio::awaitable<void> ticker(std::vector<clock_type::time_point>& ticks, const bool& stop) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  while (!stop) {
    timer.expires_after(tick);
    co_await timer.async_wait(asio::use_awaitable);
    ticks.push_back(clock_type::now());
  }
}

// Prints the loop's time, the ticks in [start, end] and the largest gap between them.
void report(const char* label,
            const std::vector<clock_type::time_point>& ticks,
            clock_type::time_point start,
            clock_type::time_point end) {
  clock_type::duration largest{};
  auto previous = start;
  int count = 0;
  for (const auto t : ticks) {
    if (t > start && t <= end) {
      largest = std::max(largest, t - previous);
      previous = t;
      ++count;
    }
  }
  largest = std::max(largest, end - previous);
  std::printf("%s: %.4f sec\n", label, seconds(end - start));
  std::printf("  %d ticks of the %lld ms timer while it ran (one per 10 ms: %d)\n", count,
              static_cast<long long>(tick.count()), static_cast<int>((end - start) / tick));
  std::printf("  largest tick gap: %.4f sec\n", seconds(largest));
}

asio::awaitable<void> worker(const std::vector<clock_type::time_point>& ticks, bool& stop) {
  auto start = clock_type::now();
  for (int i = 0; i < 10; ++i) {
    const auto a = cotensor::randn({1000, 1000});
    const auto b = cotensor::matmul(a, a);
    co_await b.ready();  // suspends this coroutine; the ticker keeps ticking
  }
  co_await cotensor::when_all();
  report("coroutine waits", ticks, start, clock_type::now());

  start = clock_type::now();
  for (int i = 0; i < 10; ++i) {
    const auto a = cotensor::randn({1000, 1000});
    const auto b = cotensor::matmul(a, a);
    b.wait();  // blocks the event loop's only thread: no tick can run meanwhile
    co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
  }
  cotensor::wait_all();
  report("blocking waits (don't)", ticks, start, clock_type::now());
  stop = true;
}

}  // namespace

int main(int argc, char** argv) {
  chapter::parse(argc, argv, "07_coroutines [--device cpu]", /*default_repeat=*/0,
                 /*accepts_trace=*/false, /*accepts_gpu=*/false);
  // Warm up: start the backend's threads and fault in the allocator's memory.
  cotensor::matmul(cotensor::randn({1000, 1000}), cotensor::randn({1000, 1000})).wait();

  asio::io_context io;
  std::vector<clock_type::time_point> ticks;
  bool stop = false;
  auto rethrow = [](const std::exception_ptr& e) {
    if (e) {
      std::rethrow_exception(e);
    }
  };
  asio::co_spawn(io, ticker(ticks, stop), rethrow);
  asio::co_spawn(io, worker(ticks, stop), rethrow);
  io.run();
  return 0;
}
