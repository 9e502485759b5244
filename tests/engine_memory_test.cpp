// The umbrella header first: it must compile on its own.
#include <cotensor/cotensor.hpp>
// Test support and dependencies.
#include "engine_support.hpp"
#include "support/gate.hpp"
#include "support/run.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <future>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <vector>

// The dependency engine's memory: the bound on the bytes in flight, chains of dependent ops,
// buffers kept alive by the ops that use them, and large results that get their memory when
// their op starts.

namespace {

using namespace std::chrono_literals;
using cotensor::tensor;
using cotensor::test::filled;
using cotensor::test::gate;
using cotensor::test::gated;
using cotensor::test::still_pending;
using cotensor::test::values;

static_assert(std::is_nothrow_move_constructible_v<tensor>);
static_assert(std::is_copy_constructible_v<tensor>, "a tensor is a shared handle");

}  // namespace

TEST_SUITE("engine") {
  TEST_CASE("issuing blocks while the ops in flight would write more than max_in_flight_bytes" *
            doctest::timeout(30)) {
    cotensor::runtime rt({.max_in_flight_bytes = std::size_t{1} << 20});  // 1 MiB
    gate g;
    const tensor x = gated(cotensor::full({1}, 1.0F), g.future());  // 4 bytes, held
    const tensor big = cotensor::zeros({100'000});                  // 400 KB
    big.wait();
    std::vector<tensor> outs(5);
    std::atomic<int> issued{0};
    std::thread frontend([&] {
      for (auto& out : outs) {
        out = big + x;  // writes 400 KB, waits for x
        ++issued;
      }
    });
    // Two such ops fit beside the held one (800 KB + 4 B), the third would not: wait for the
    // frontend to get there, then give it time to run past the bound if it could.
    while (issued.load() < 2) {
      std::this_thread::sleep_for(1ms);
    }
    std::this_thread::sleep_for(50ms);
    CHECK(issued.load() == 2);
    CHECK(rt.stats().in_flight == 3);
    g.open();
    frontend.join();
    for (const auto& out : outs) {
      CHECK(out.sum().item() == doctest::Approx(100'000.0));
    }
    CHECK(rt.stats().admission_waits >= 1);
  }

  TEST_CASE("an op writing more than max_in_flight_bytes runs alone instead of blocking" *
            doctest::timeout(30)) {
    // Every op on the backend: a 40 KB op ready at its call would run there, never in flight.
    cotensor::runtime rt({.max_in_flight_bytes = 1024, .inline_small_ops = false});
    tensor y = cotensor::ones({10'000});  // 40 KB: admitted once nothing else is in flight
    for (int i = 0; i < 20; ++i) {
      y = y + 1.0F;
    }
    CHECK(y.sum().item() == doctest::Approx(210'000.0));
    CHECK(rt.stats().peak_in_flight == 1);
  }

  TEST_CASE("COTENSOR_MAX_IN_FLIGHT_BYTES sets the byte bound" * doctest::timeout(10)) {
    CHECK(cotensor::runtime_options{}.max_in_flight_bytes == std::size_t{256} << 20);
    ::setenv("COTENSOR_MAX_IN_FLIGHT_BYTES", "12345", 1);
    const auto options = cotensor::runtime_options::from_environment();
    ::setenv("COTENSOR_MAX_IN_FLIGHT_BYTES", "many", 1);
    CHECK_THROWS_AS(cotensor::runtime_options::from_environment(), std::invalid_argument);
    ::unsetenv("COTENSOR_MAX_IN_FLIGHT_BYTES");
    CHECK(options.max_in_flight_bytes == 12345);
  }

  // --- chains and lifetimes ----------------------------------------------------------------------

  TEST_CASE("a chain of 1,000 dependent ops gives the sequential result" * doctest::timeout(30)) {
    cotensor::runtime_options options{.worker_threads = 2};
    SUBCASE("with tiny ready ops run at their call") { options.inline_small_ops = true; }
    SUBCASE("with every op on the backend") { options.inline_small_ops = false; }
    cotensor::runtime rt(options);
    tensor x = cotensor::zeros({4});
    for (int i = 0; i < 1000; ++i) {
      x = x + 1.0F;  // each step a new buffer; the previous handle is dropped at once
    }
    tensor a = cotensor::full({2}, 2.0F);
    tensor d = (a * 3.0F) * (a + 1.0F);  // a diamond: two reads of a joined by one op
    CHECK(values(x) == filled(4, 1000.0F));
    CHECK(values(d) == filled(2, 18.0F));
  }

  TEST_CASE("a buffer stays alive while an op uses it after every handle is gone" *
            doctest::timeout(30)) {
    cotensor::runtime rt({.worker_threads = 2});
    gate g;
    tensor held = gated(cotensor::full({}, 3.0F), g.future());
    tensor x = cotensor::full({2}, 1.0F);
    tensor y = x + held;
    x += held;  // a queued write of a buffer whose handles are dropped next
    x = tensor{};
    held = tensor{};
    g.open();
    CHECK(values(y) == filled(2, 4.0F));
    CHECK_NOTHROW(cotensor::wait_all());
  }

  TEST_CASE("a large result gets its memory when its op starts, not when it is issued" *
            doctest::timeout(30)) {
    cotensor::runtime rt({.worker_threads = 2});
    gate g;
    constexpr std::int64_t n = 1 << 20;  // 4 MiB: above the 64 KiB of an allocation at issue
    constexpr std::int64_t bytes = n * 4;
    const tensor x = cotensor::full({n}, 1.0F);
    const tensor held = gated(x, g.future());  // x's value, once the gate opens
    x.wait();
    // `held`'s own 4 MiB may or may not be counted yet: its op may not have started.
    const auto before = rt.stats().live_buffer_bytes;
    std::vector<tensor> queued;
    for (int i = 0; i < 8; ++i) {
      queued.push_back(held + static_cast<float>(i));  // 8 x 4 MiB results, queued
    }
    CHECK(still_pending(queued.back()));
    // The gated op has its result's memory (it started); the eight queued ones have none.
    CHECK(rt.stats().live_buffer_bytes - before <= bytes);
    g.open();
    for (int i = 0; i < 8; ++i) {
      const std::vector<float> v = queued[static_cast<std::size_t>(i)].to_vector();
      CHECK(v.front() == 1.0F + static_cast<float>(i));
      CHECK(v.back() == 1.0F + static_cast<float>(i));
    }
    CHECK(rt.stats().live_buffer_bytes - before >= 8 * bytes);
    queued.clear();
    // The last references to the results may be dropped by the worker that ran their reads a
    // moment after the reads returned: the memory goes back within a bounded time.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (rt.stats().live_buffer_bytes - before > bytes &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    CHECK(rt.stats().live_buffer_bytes - before <= bytes);
  }

  TEST_CASE("large results freed and made again on three threads keep their own values" *
            doctest::timeout(60)) {
    // Blocks of more than 64 KiB are handed from the thread that frees them to the next op
    // that needs one of that size, on any thread (src/engine/engine.cpp, recent_blocks).
    cotensor::runtime rt({.worker_threads = 2});
    constexpr std::int64_t n = 20'000;  // 80 KB
    std::atomic<int> wrong{0};
    auto work = [&](int thread) {
      for (int i = 0; i < 300; ++i) {
        const auto value = static_cast<float>(thread * 1000 + i);
        tensor a = cotensor::full({n}, value);
        tensor b = a + 1.0F;
        a = tensor{};  // its block may go to another thread's op before `b` is read
        tensor c = b * 2.0F;
        const std::vector<float> v = c.to_vector();
        if (v.front() != (value + 1.0F) * 2.0F || v.back() != (value + 1.0F) * 2.0F ||
            v[static_cast<std::size_t>(n / 2)] != (value + 1.0F) * 2.0F) {
          wrong.fetch_add(1);
        }
      }
    };
    std::thread t1(work, 1);
    std::thread t2(work, 2);
    work(0);
    t1.join();
    t2.join();
    CHECK(wrong.load() == 0);
  }

  TEST_CASE("a large result whose memory cannot be had fails its op, not the call" *
            doctest::timeout(30)) {
    cotensor::runtime rt({.worker_threads = 2});
    const auto before = rt.stats().live_buffer_bytes;
    tensor huge;
    CHECK_NOTHROW(huge = cotensor::full({std::int64_t{1} << 42}, 1.0F));  // 16 TiB
    CHECK_THROWS_AS(huge.wait(), std::bad_alloc);
    CHECK_THROWS_AS((huge + 1.0F).wait(), std::bad_alloc);  // the error spreads
    // to_vector reports it too, before making room for the 16 TiB it would hold.
    CHECK_THROWS_AS((void)(huge + 1.0F).to_vector(), std::bad_alloc);
    CHECK(cotensor::full({2}, 2.0F).to_vector() == std::vector<float>{2.0F, 2.0F});
    huge = tensor{};
    cotensor::wait_all();
    CHECK(rt.stats().live_buffer_bytes == before);
  }

  TEST_CASE("wait_all waits for a held op issued before it" * doctest::timeout(30)) {
    cotensor::runtime rt({.worker_threads = 2});
    gate g;
    tensor held = gated(cotensor::full({}, 1.0F), g.future());
    tensor after = held * 4.0F;
    auto all = std::async(std::launch::async, [] { cotensor::wait_all(); });
    CHECK(all.wait_for(50ms) == std::future_status::timeout);
    g.open();
    REQUIRE(all.wait_for(20s) == std::future_status::ready);
    all.get();
    const cotensor::runtime_stats stats = rt.stats();
    CHECK(stats.in_flight == 0);
    CHECK(stats.completed == stats.issued);
    CHECK(after.item() == 4.0F);
  }
}  // TEST_SUITE("engine")
