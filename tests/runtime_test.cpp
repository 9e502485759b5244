#include "cotensor/runtime.hpp"

#include <cotensor/cotensor.hpp>

#include "engine/faults.hpp"
#include "support/gate.hpp"
#include "support/run.hpp"
#include "support/scoped_environment.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <future>
#include <stdexcept>
#include <string>
#include <sys/resource.h>
#include <thread>
#include <vector>

using namespace cotensor;
using cotensor::test::gated;
using namespace std::chrono_literals;
namespace asio = boost::asio;

namespace {

// A field of /proc/self/status in KiB (VmRSS, VmHWM), or -1.
long status_kib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      return std::stol(line.substr(field.size() + 1));
    }
  }
  return -1;
}

// Resets the peak RSS (VmHWM) to the current RSS; false where the kernel does not allow it.
bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

// User plus system CPU time of this process so far.
double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// ASan keeps freed blocks in a quarantine (256 MiB by default) to catch uses after free, so its
// RSS grows with everything freed, bounded queue or not.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool quarantines_frees = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool quarantines_frees = true;
#else
constexpr bool quarantines_frees = false;
#endif
#else
constexpr bool quarantines_frees = false;
#endif

using cotensor::test::scoped_environment;

}  // namespace

TEST_SUITE("runtime") {
  TEST_CASE("a full queue blocks the issuing thread until an op ends" * doctest::timeout(30)) {
    runtime rt({.max_in_flight = 8});
    test::gate gate;
    auto x = gated(ones({1}), gate.future());
    std::atomic<int> issued{1};
    std::thread frontend([&] {
      for (int i = 0; i < 100; ++i) {
        x += 1.0F;  // every op waits for the gated one
        ++issued;
      }
    });
    // Wait (without a time bound that could flake) for the frontend to fill the queue, then
    // give it time to run past the bound if it could.
    while (issued.load() < 8) {
      std::this_thread::sleep_for(1ms);
    }
    std::this_thread::sleep_for(50ms);
    CHECK(issued.load() == 8);  // 8 in flight, the 9th blocked in its call
    CHECK(rt.stats().in_flight == 8);
    gate.open();
    frontend.join();
    CHECK(x.item() == 101.0F);
    CHECK(rt.stats().peak_in_flight == 8);
    CHECK(rt.stats().admission_waits >= 1);
  }

  TEST_CASE("a million small ops pushed without waiting stay within a bounded memory" *
            doctest::timeout(120)) {
    // Bound: max_in_flight ops of ~0.5 KiB each. Unbounded, the million queued ops behind the
    // gate below would pin hundreds of MiB; with the default bound of 1024 they pin < 1 MiB,
    // and we allow 48 MiB for allocator slack.
    runtime rt{runtime_options{}};
    REQUIRE(rt.options().max_in_flight == 1024);
    test::gate gate;
    auto x = gated(zeros({4}), gate.future());
    const bool can_reset = reset_peak_rss();
    const long before = can_reset ? status_kib("VmRSS") : status_kib("VmHWM");
    std::thread opener([&] {
      std::this_thread::sleep_for(100ms);
      gate.open();
    });
    for (int i = 0; i < 1'000'000; ++i) {
      x += 1.0F;
    }
    wait_all();
    opener.join();
    const long peak = status_kib("VmHWM");
    MESSAGE("peak RSS grew by " << (peak - before) << " KiB over 1e6 ops");
    if (!quarantines_frees) {  // under ASan only the in-flight bound below is checked
      CHECK(peak - before < 48 * 1024);
    }
    CHECK(rt.stats().peak_in_flight <= 1024);
    CHECK(x.to_vector() == std::vector<float>(4, 1'000'000.0F));
  }

  TEST_CASE("without a bound, a frontend that runs ahead queues everything" *
            doctest::timeout(60)) {
    runtime rt({.max_in_flight = 0});
    test::gate gate;
    auto x = gated(zeros({1}), gate.future());
    for (int i = 0; i < 20'000; ++i) {
      x += 1.0F;
    }
    CHECK(rt.stats().in_flight == 20'001);
    gate.open();
    CHECK(x.item() == 20'000.0F);
  }

  TEST_CASE("a coroutine can await admission instead of blocking its thread" *
            doctest::timeout(30)) {
    runtime rt({.max_in_flight = 2});
    test::gate gate;
    auto x = gated(ones({1}), gate.future());
    x += 1.0F;  // two in flight: full
    auto room = async_admit(asio::use_future);
    CHECK(room.wait_for(30ms) == std::future_status::timeout);
    gate.open();
    CHECK(room.wait_for(10s) == std::future_status::ready);
    room.get();
    auto again = cotensor::test::run_to_completion([]() -> asio::awaitable<bool> {
      co_await admission();
      co_return true;
    });
    CHECK(again);
    CHECK(x.item() == 2.0F);
  }

  TEST_CASE("an Asio event loop's thread is never blocked by a full queue: its next wait pays" *
            doctest::timeout(30)) {
    // One op in flight fills the queue. Issued on the loop's thread, the next op is admitted
    // at once (the thread is not blocked: a ticker on the same loop keeps ticking), and the
    // coroutine's next wait completes only once there is room again.
    runtime rt({.worker_threads = 2, .max_in_flight = 1, .inline_small_ops = false});
    test::gate gate;
    auto held = gated(ones({1}), gate.future());
    std::atomic<bool> opened{false};
    std::atomic<int> ticks{0};
    const auto waits_before = rt.stats().admission_waits;  // `gated` itself may have waited
    bool resumed_after_room = false;
    std::vector<float> value;
    asio::io_context io;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          auto y = full({4}, 2.0F) * 3.0F;  // over the bound: admitted, the thread owes a wait
          co_await y.ready();               // ...paid here: ready, but no room until `held` ends
          resumed_after_room = opened.load();
          value = y.to_vector();
        },
        asio::detached);
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          asio::steady_timer timer(co_await asio::this_coro::executor);
          while (!opened.load()) {
            timer.expires_after(1ms);
            co_await timer.async_wait(asio::use_awaitable);
            ++ticks;
          }
        },
        asio::detached);
    std::thread opener([&] {
      while (ticks.load() < 20) {  // the loop runs while the queue is full
        std::this_thread::sleep_for(1ms);
      }
      opened = true;
      gate.open();
    });
    io.run();
    opener.join();
    CHECK(resumed_after_room);
    CHECK(value == std::vector<float>(4, 6.0F));
    CHECK(rt.stats().admission_deferred >= 1);
    CHECK(rt.stats().admission_waits - waits_before == rt.stats().admission_deferred);
    CHECK(held.item() == 1.0F);
  }

  TEST_CASE("64 coroutines on one io_context issue past the bounds without blocking it" *
            doctest::timeout(60)) {
    // As a server would: each coroutine issues rounds of 22 ops (128x128 matmuls and adds) and
    // awaits them, all on one thread, against small bounds that every round overruns.
    runtime rt({.worker_threads = 2, .max_in_flight = 16, .max_in_flight_bytes = 1 << 20});
    asio::io_context io;
    std::atomic<int> finished{0};
    std::atomic<int> wrong{0};
    for (int c = 0; c < 64; ++c) {
      asio::co_spawn(
          io,
          [&, c]() -> asio::awaitable<void> {
            auto w = full({128, 128}, 1.0F / 128.0F);
            for (int round = 0; round < 5; ++round) {
              auto x = full({128, 128}, static_cast<float>(c + round));
              for (int i = 0; i < 11; ++i) {
                x = matmul(x, w) + 1.0F;  // each row of x stays constant: v -> v + 1
              }
              co_await x.ready();
              if (x.to_vector() !=
                  std::vector<float>(128 * 128, static_cast<float>(c + round + 11))) {
                ++wrong;
              }
            }
            ++finished;
          },
          asio::detached);
    }
    io.run();
    CHECK(finished.load() == 64);
    CHECK(wrong.load() == 0);
    CHECK(rt.stats().admission_deferred >= 1);
    CHECK(rt.stats().admission_waits == rt.stats().admission_deferred);  // the loop never blocked
  }

  TEST_CASE("synchronous mode runs each op at its call and throws at the offending line" *
            doctest::timeout(20)) {
    runtime rt({.synchronous = true});
    auto y = ones({3}) + 1.0F;
    CHECK(rt.stats().in_flight == 0);
    CHECK(rt.stats().completed == 2);
    CHECK_THROWS_WITH_AS(map(y, [](float) -> float { throw std::out_of_range("row 7"); }), "row 7",
                         std::out_of_range);
    CHECK(y.to_vector() == std::vector<float>{2, 2, 2});  // the runtime keeps working
  }

  TEST_CASE("the environment configures the default options" * doctest::timeout(10)) {
    {
      scoped_environment engine("COTENSOR_ENGINE", "naive");
      scoped_environment threads("COTENSOR_NUM_THREADS", "3");
      scoped_environment limit("COTENSOR_MAX_IN_FLIGHT", "77");
      scoped_environment spin("COTENSOR_WAIT_SPIN_US", "40");
      auto options = runtime_options::from_environment();
      CHECK(options.synchronous);
      CHECK(options.worker_threads == 3);
      CHECK(options.max_in_flight == 77);
      CHECK(options.wait_spin == std::chrono::microseconds(40));
    }
    CHECK(runtime_options::from_environment().wait_spin == std::chrono::microseconds(0));
    {
      scoped_environment spin("COTENSOR_WAIT_SPIN_US", "-5");
      CHECK_THROWS_WITH_AS(runtime_options::from_environment(),
                           "cotensor: environment variable COTENSOR_WAIT_SPIN_US='-5' is not an "
                           "integer from 0 to 4294967295",
                           std::invalid_argument);
    }
    {
      scoped_environment limit("COTENSOR_MAX_IN_FLIGHT", "lots");
      CHECK_THROWS_WITH_AS(runtime_options::from_environment(),
                           "cotensor: environment variable COTENSOR_MAX_IN_FLIGHT='lots' is not a "
                           "non-negative integer",
                           std::invalid_argument);
    }
    {
      scoped_environment threads("COTENSOR_NUM_THREADS",
                                 "99999999999");  // does not fit an unsigned
      CHECK_THROWS_AS(runtime_options::from_environment(), std::invalid_argument);
    }
    {
      scoped_environment threads("COTENSOR_NUM_THREADS", "");  // empty reads as unset
      CHECK(runtime_options::from_environment().worker_threads == runtime_options{}.worker_threads);
    }
    {
      scoped_environment engine("COTENSOR_ENGINE", "turbo");
      CHECK_THROWS_WITH_AS(runtime_options::from_environment(),
                           "cotensor: environment variable COTENSOR_ENGINE='turbo' is not "
                           "'threaded' or 'naive'",
                           std::invalid_argument);
    }
    CHECK_FALSE(runtime_options::from_environment().synchronous);
  }

  TEST_CASE("waits that spin first still see results, errors and long ops" * doctest::timeout(30)) {
    runtime rt({.wait_spin = std::chrono::microseconds(200)});
    CHECK(rt.options().wait_spin == std::chrono::microseconds(200));
    // Done within the spin, and long after it (the wait then sleeps and is woken).
    auto quick = ones({4}) + 1.0F;
    CHECK(quick.to_vector() == std::vector<float>{2, 2, 2, 2});
    auto slow = map(ones({1}), [](float v) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return v + 2;
    });
    slow.wait();
    CHECK(slow.item() == 3.0F);
    auto failing = map(ones({1}), [](float) -> float { throw std::out_of_range("late"); });
    CHECK_THROWS_WITH_AS(failing.wait(), "late", std::out_of_range);
    wait_all();
  }

  TEST_CASE("a runtime is current while it lives and waits for its ops when destroyed" *
            doctest::timeout(30)) {
    runtime& before = runtime::current();
    std::atomic<bool> ran{false};
    test::gate gate;
    std::thread opener;
    {
      runtime rt({.worker_threads = 3});
      CHECK(&runtime::current() == &rt);
      CHECK(rt.worker_threads() == 3);
      auto shared = gate.future();
      (void)map(ones({1}), [&ran, shared](float v) {
        shared.wait();
        ran = true;
        return v;
      });
      CHECK(rt.stats().issued == 2);
      opener = std::thread([&] {
        std::this_thread::sleep_for(50ms);
        gate.open();
      });
    }  // waits for the gated op
    CHECK(ran);
    opener.join();
    CHECK(&runtime::current() == &before);
  }

  TEST_CASE("an idle runtime leaves the CPU alone" * doctest::timeout(30)) {
    runtime rt{runtime_options{}};
    matmul(randn({256, 256}), randn({256, 256})).wait();  // the workers have run
    std::this_thread::sleep_for(1s);  // oneTBB workers spin briefly before they sleep
    const double before = cpu_seconds();
    std::this_thread::sleep_for(2s);
    const double used = cpu_seconds() - before;
    MESSAGE("CPU time used by the idle process over 2 s: " << used << " s");
    CHECK(used < 0.2);  // a spinning worker would use ~2 s
  }

  TEST_CASE("stats count issued and completed ops" * doctest::timeout(20)) {
    runtime rt{runtime_options{}};
    for (int i = 0; i < 10; ++i) {
      (void)(ones({2}) + 1.0F);
    }
    wait_all();
    auto s = rt.stats();
    CHECK(s.issued == 20);
    CHECK(s.completed == 20);
    CHECK(s.in_flight == 0);
  }

  TEST_CASE("destroying a runtime with ops in flight waits for them and frees every buffer" *
            doctest::timeout(60)) {
    namespace faults = cotensor::detail::faults;
    wait_all();
    const auto before = runtime::current().stats();
    tensor kept;
    {
      runtime rt({.worker_threads = 2, .inline_small_ops = false});
      faults::delay_op(1, 200ms);  // the first op ends late: everything below queues behind it
      auto x = full({64}, 1.0F);
      for (int i = 0; i < 200; ++i) {
        x = x + 1.0F;
        (void)(x * 2.0F);  // results dropped at once, buffers kept by their ops
      }
      kept = x;
      CHECK(rt.stats().in_flight > 0);
    }  // waits for the 401 ops
    faults::reset();
    CHECK(kept.to_vector() == std::vector<float>(64, 201.0F));
    kept = tensor{};
    const auto after = runtime::current().stats();
    CHECK(after.live_buffers == before.live_buffers);
    CHECK(after.live_ops == 0);
  }

  TEST_CASE("destroying a runtime waits for another runtime's worker still handing it an op" *
            doctest::timeout(60)) {
    // An op of a scoped runtime reads a tensor that an op of the default runtime writes: the
    // default runtime's worker that ends the writer hands the reader to the scoped runtime's
    // backend. The reader runs and its wait ends while that worker is still inside the hand-off
    // (delay_dispatch holds it there, as a preemption inside oneTBB's enqueue would): the scoped
    // runtime's destructor must not shut its backend down, nor free it, before the worker has
    // left.
    namespace faults = cotensor::detail::faults;
    wait_all();
    const std::uint64_t ended = faults::delayed_dispatches_ended();
    test::gate gate;
    const auto held = gate.future();
    const auto written = map(ones({16}), [held](float v) {  // on the default runtime's worker
      held.wait();
      return 2.0F * v;
    });
    std::jthread release;  // outlives rt: it lets the worker go while rt's destructor waits
    {
      runtime rt({.worker_threads = 1, .inline_small_ops = false});
      // The reader's hand-off is held until `release` ends it, or 30 s at most: the reader and
      // the wait below end well within that, also on two cores busy with other tests.
      faults::delay_dispatch(1, 30s);
      const auto read = written * written;  // on rt; ready when the writer ends
      gate.open();
      CHECK(read.to_vector() == std::vector<float>(16, 4.0F));
      CHECK(faults::delayed_dispatches_ended() == ended);  // the worker is still handing it over
      release = std::jthread([] {
        std::this_thread::sleep_for(200ms);
        faults::release_delayed_dispatches();
      });
    }  // waits for the worker to leave rt's dispatch, 200 ms from here
    CHECK(faults::delayed_dispatches_ended() == ended + 1);
    faults::reset();
    wait_all();
  }

  TEST_CASE("a wait raced by the runtime's destruction completes, then nothing is left" *
            doctest::timeout(60)) {
    // Coroutines await ops that are still in flight when their runtime is destroyed: the
    // destructor lets the ops end, so every wait completes (no error: the values exist) and
    // no buffer, op node or handler is left behind.
    namespace faults = cotensor::detail::faults;
    wait_all();
    const auto before = runtime::current().stats();
    asio::io_context io;
    int resumed = 0;
    {
      runtime rt({.worker_threads = 2, .inline_small_ops = false});
      faults::delay_op(1, 100ms);
      auto x = full({16}, 3.0F);
      for (int i = 0; i < 10; ++i) {
        auto y = x * static_cast<float>(i);
        asio::co_spawn(
            io,
            [y, i, &resumed]() -> asio::awaitable<void> {
              co_await y.ready();
              CHECK(y.to_vector() == std::vector<float>(16, 3.0F * static_cast<float>(i)));
              ++resumed;
            },
            asio::detached);
      }
      io.poll();  // every coroutine is now suspended in its wait
    }
    faults::reset();
    io.run();
    CHECK(resumed == 10);
    const auto after = runtime::current().stats();
    CHECK(after.live_buffers == before.live_buffers);
    CHECK(after.live_ops == 0);
  }
  TEST_CASE("live counts stay exact when buffers are made and freed on different, short-lived "
            "threads" *
            doctest::timeout(60)) {
    // Each thread counts in a slot of its own, handed to the next thread when it ends: the
    // sums must not lose what ended threads counted, nor count a reused slot twice.
    wait_all();
    const auto before = runtime::current().stats();
    std::vector<tensor> made;
    for (int round = 0; round < 4; ++round) {
      std::vector<std::thread> threads;
      std::vector<tensor> out(16);
      for (std::size_t t = 0; t < out.size(); ++t) {
        threads.emplace_back([&out, t, &made, round] {
          out[t] = full({8}, static_cast<float>(t)) + 1.0F;
          out[t].wait();
          if (round > 0) {
            made[t] = tensor{};  // frees, on this thread, a buffer made on an ended one
          }
        });
      }
      for (auto& th : threads) {
        th.join();
      }
      wait_all();  // the ops' nodes (and the buffers they hold) are gone once it returns
      CHECK(runtime::current().stats().live_buffers == before.live_buffers + 16);
      made = std::move(out);
    }
    made.clear();  // freed on this thread: made on ended ones
    wait_all();
    const auto after = runtime::current().stats();
    CHECK(after.live_buffers == before.live_buffers);
    CHECK(after.live_ops == 0);
  }
}
