// A server's event loop issuing tensor work: one io_context (one thread) runs a 1 ms ticker
// and 64 coroutines, each issuing 5 rounds of 22 ops (256 x 256 matmuls and adds, ~5.5 MiB
// written a round) and awaiting each round. With the default in-flight bounds the work
// overruns them; the loop must never block for room. Figures, one line each:
//
//   loop_issue22_p50_us / _p99_us / _max_us   microseconds to issue one round's 22 ops
//   loop_tick_late_p99_ms / _max_ms           how late the 1 ms ticker fired
//   loop_seconds                              wall time of the whole run
//
// Default runtime options (COTENSOR_* environment variables apply). Usage:
// cotensor_bench_loop [--quick]

#include "cotensor/cotensor.hpp"

#include "../common.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <vector>

namespace {

namespace asio = boost::asio;
using cotensor_bench::clock_type;

double percentile(std::vector<double> v, double p) {
  std::ranges::sort(v);
  const auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[i];
}

}  // namespace

int main(int argc, char** argv) {
  const auto opts = cotensor_bench::parse_options("cotensor_bench_loop", argc, argv);
  const int coroutines = opts.quick ? 8 : 64;
  const int rounds = opts.quick ? 1 : 5;
  constexpr std::int64_t n = 256;

  asio::io_context io;
  std::vector<double> issue_us;
  std::vector<double> late_ms;
  std::atomic<int> running{coroutines};
  const auto start = clock_type::now();
  for (int c = 0; c < coroutines; ++c) {
    asio::co_spawn(
        io,
        [&, c]() -> asio::awaitable<void> {
          const auto w = cotensor::full({n, n}, 1.0F / static_cast<float>(n));
          for (int round = 0; round < rounds; ++round) {
            const auto t0 = clock_type::now();
            auto x = cotensor::full({n, n}, static_cast<float>(c));
            for (int i = 0; i < 10; ++i) {
              x = cotensor::matmul(x, w) + 1.0F;
            }
            x = x * 1.0F;  // 22 ops in all with `full`
            issue_us.push_back(
                std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
            co_await x.ready();
          }
          --running;
        },
        asio::detached);
  }
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        asio::steady_timer timer(co_await asio::this_coro::executor);
        auto due = clock_type::now();
        while (running.load() > 0) {
          due += std::chrono::milliseconds(1);
          timer.expires_at(due);
          co_await timer.async_wait(asio::use_awaitable);
          late_ms.push_back(
              std::chrono::duration<double, std::milli>(clock_type::now() - due).count());
        }
      },
      asio::detached);
  io.run();
  const double seconds = cotensor_bench::seconds_since(start);
  cotensor_bench::print("loop_issue22_p50_us", percentile(issue_us, 0.50));
  cotensor_bench::print("loop_issue22_p99_us", percentile(issue_us, 0.99));
  cotensor_bench::print("loop_issue22_max_us", percentile(issue_us, 1.0));
  cotensor_bench::print("loop_tick_late_p99_ms", percentile(late_ms, 0.99));
  cotensor_bench::print("loop_tick_late_max_ms", percentile(late_ms, 1.0));
  cotensor_bench::print("loop_seconds", seconds);
  return 0;
}
