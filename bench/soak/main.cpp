// Soak run: many frontends issue random programs (tests/support/differential.hpp, with waits,
// reads, cancelled waits and async ops ended later on other threads) at once for a fixed time, each
// checked against the sequential reference, while coroutines race waits on large ops against short
// timers (random cancellations). Prints ops/s and RSS every 10 s, and at the end one
// machine-readable line per figure; exits 1 on any wrong or lost result. Run by hand (not in CI):
//   build/bench/cotensor_bench_soak --seconds 600 [--threads 4] [--coroutines 16]

#include <cotensor/cotensor.hpp>

#include "support/differential.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace asio = boost::asio;
using namespace cotensor::test::differential;
using clock_type = std::chrono::steady_clock;

long status_kib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string prefix = std::string(field) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) {
      return std::stol(line.substr(prefix.size()));
    }
  }
  return -1;
}

struct counters {
  std::atomic<std::uint64_t> programs{0};
  std::atomic<std::uint64_t> wrong{0};
  std::atomic<std::uint64_t> waits{0};
  std::atomic<std::uint64_t> cancelled{0};
  std::atomic<bool> stop{false};
};

// One coroutine: a chain of large ops whose wait races a short timer; whoever wins, the value
// is then checked in full.
asio::awaitable<void> racer(unsigned id, counters& c) {
  using namespace asio::experimental::awaitable_operators;
  std::mt19937 rng(id);
  auto executor = co_await asio::this_coro::executor;
  while (!c.stop.load()) {
    const float v = static_cast<float>(rng() % 100);
    auto x = cotensor::full({256, 256}, v);
    auto y = cotensor::matmul(x, cotensor::full({256, 256}, 1.0F / 256.0F)) + 1.0F;
    asio::steady_timer timer(executor, std::chrono::microseconds(rng() % 2000));
    auto winner =
        co_await (y.async_wait(asio::use_awaitable) || timer.async_wait(asio::use_awaitable));
    c.cancelled += winner.index() == 1 ? 1 : 0;
    co_await y.ready();
    const auto values = y.to_vector();
    for (float got : values) {
      if (got != v + 1.0F) {
        ++c.wrong;
        break;
      }
    }
    ++c.waits;
  }
}

}  // namespace

int main(int argc, char** argv) {
  int seconds = 600;
  unsigned threads = 4;
  unsigned coroutines = 16;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--seconds") == 0) {
      seconds = std::atoi(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--threads") == 0) {
      threads = static_cast<unsigned>(std::atoi(argv[i + 1]));
    } else if (std::strcmp(argv[i], "--coroutines") == 0) {
      coroutines = static_cast<unsigned>(std::atoi(argv[i + 1]));
    }
  }
  cotensor::runtime rt{cotensor::runtime_options{}};
  counters c;
  std::vector<std::thread> frontends;
  for (unsigned t = 0; t < threads; ++t) {
    frontends.emplace_back([&c, t] {
      for (std::uint32_t seed = 1'000'000U * (t + 1); !c.stop.load(); ++seed) {
        const program p =
            generate(seed, {.length = 40, .waits = true, .cancellations = true, .async_ops = true});
        const std::string failure = reference(p, run_on_cotensor(p)).check();
        if (!failure.empty()) {
          std::fprintf(stderr, "WRONG RESULT\n%s\n", failure.c_str());
          ++c.wrong;
        }
        ++c.programs;
      }
    });
  }
  asio::io_context io;
  for (unsigned i = 0; i < coroutines; ++i) {
    asio::co_spawn(io, racer(i, c), asio::detached);
  }
  std::thread io_thread([&io] { io.run(); });

  const auto start = clock_type::now();
  std::uint64_t last_ops = 0;
  long peak_rss = 0;
  for (int elapsed = 10; elapsed <= seconds; elapsed += 10) {
    std::this_thread::sleep_until(start + std::chrono::seconds(elapsed));
    const auto ops = rt.stats().completed;
    const long rss = status_kib("VmRSS");
    peak_rss = std::max(peak_rss, rss);
    std::printf("t=%4d s  ops/s=%9.0f  rss=%6.1f MiB  programs=%llu  waits=%llu  cancelled=%llu  "
                "wrong=%llu\n",
                elapsed, static_cast<double>(ops - last_ops) / 10.0,
                static_cast<double>(rss) / 1024, static_cast<unsigned long long>(c.programs.load()),
                static_cast<unsigned long long>(c.waits.load()),
                static_cast<unsigned long long>(c.cancelled.load()),
                static_cast<unsigned long long>(c.wrong.load()));
    std::fflush(stdout);
    last_ops = ops;
  }
  c.stop = true;
  for (auto& f : frontends) {
    f.join();
  }
  io_thread.join();
  cotensor::wait_all();
  const auto s = rt.stats();
  std::printf("cotensor.soak_seconds: %d\n", seconds);
  std::printf("cotensor.soak_ops: %llu\n", static_cast<unsigned long long>(s.completed));
  std::printf("cotensor.soak_programs: %llu\n", static_cast<unsigned long long>(c.programs.load()));
  std::printf("cotensor.soak_cancelled_waits: %llu\n",
              static_cast<unsigned long long>(c.cancelled.load()));
  std::printf("cotensor.soak_peak_rss_mib: %.1f\n",
              static_cast<double>(status_kib("VmHWM")) / 1024);
  std::printf("cotensor.soak_wrong_results: %llu\n",
              static_cast<unsigned long long>(c.wrong.load()));
  std::printf("cotensor.soak_lost: %lld\n",
              static_cast<long long>(s.issued - s.completed) + static_cast<long long>(s.in_flight));
  return c.wrong.load() == 0 && s.issued == s.completed ? 0 : 1;
}
