// The umbrella header first: it must compile on its own.
#include <cotensor/cotensor.hpp>
// Test support and dependencies.
#include "engine_support.hpp"
#include "support/gate.hpp"
#include "support/run.hpp"

#include <boost/asio/use_future.hpp>
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>

// The dependency engine's ordering: per-buffer read/write ordering (RAW, WAR, WAW), tiny ops run
// at their call, and reads and independent ops running together. Ordering is checked by holding
// an op on the backend with a gate (`cotensor::test::gated`) and observing that what depends on
// it has not happened; nothing here asserts on speed: a wait that "has not completed after
// 50 ms" is one that a correct engine never completes before the gate opens.

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using cotensor::tensor;
using cotensor::test::filled;
using cotensor::test::gate;
using cotensor::test::gated;
using cotensor::test::still_pending;
using cotensor::test::values;

/// A map function for the concurrency tests: announces its arrival on `arrived`, then waits (at
/// most 5 s) for a second arrival. Returns `v` when both met, `-v` when it gave up waiting: two
/// such ops both return `v` only if they ran at the same time.
struct rendezvous {
  std::shared_ptr<std::atomic<int>> arrived;

  float operator()(float v) const {
    arrived->fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (arrived->load() < 2 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    return arrived->load() >= 2 ? v : -v;
  }
};

}  // namespace

TEST_SUITE("engine") {
  // --- read after write --------------------------------------------------------------------------

  TEST_CASE("a read issued after an in-place write sees the written value even while the write is "
            "held" *
            doctest::timeout(30)) {
    cotensor::runtime rt({.worker_threads = 2});
    gate g;
    tensor x = cotensor::full({3}, 1.0F);
    SUBCASE("when the write starts on an idle buffer") { x.wait(); }
    SUBCASE("when the write queues behind the buffer's first write") {}
    tensor held = gated(cotensor::full({}, 5.0F), g.future());
    x += held;                  // a write of x that waits for the held op
    tensor doubled = x * 2.0F;  // reads of x: wait for the write
    tensor total = cotensor::sum(x);
    tensor row = cotensor::reshape(x, {1, 3}) - 1.0F;  // another handle on the same buffer

    CHECK(still_pending(held));
    CHECK(still_pending(x));
    CHECK(still_pending(doubled));
    CHECK(still_pending(total));
    CHECK(still_pending(row));

    g.open();
    CHECK(values(doubled) == filled(3, 12.0F));
    CHECK(total.item() == 18.0F);
    CHECK(values(row) == filled(3, 5.0F));
    CHECK(values(x) == filled(3, 6.0F));
  }

  TEST_CASE("an in-place write through a reshaped handle is seen by reads through the original" *
            doctest::timeout(30)) {
    cotensor::runtime rt({.worker_threads = 2});
    gate g;
    tensor x = cotensor::zeros({2, 3});
    tensor flat = cotensor::reshape(x, {6});
    flat += gated(cotensor::full({}, 2.0F), g.future());
    tensor tripled = x * 3.0F;
    CHECK(still_pending(tripled));
    g.open();
    CHECK(values(tripled) == filled(6, 6.0F));
    CHECK(x.shape() == cotensor::shape{2, 3});
  }

  // --- write after read --------------------------------------------------------------------------

  TEST_CASE("an in-place write issued after a held read does not change what that read sees" *
            doctest::timeout(30)) {
    cotensor::runtime rt({.worker_threads = 2});
    gate g;
    tensor x = cotensor::full({4}, 1.0F);
    SUBCASE("when the read starts on an idle buffer") { x.wait(); }
    SUBCASE("when the read queues behind the buffer's first write") {}
    tensor slow_read = gated(x, g.future());  // reads x, held on the backend
    x += 100.0F;                              // must wait for the read
    x *= 2.0F;
    // No write is running now, but two are queued: a read must not overtake them.
    tensor later_read = x - 2.0F;

    CHECK(still_pending(slow_read));
    CHECK(still_pending(x));
    CHECK(still_pending(later_read));

    g.open();
    CHECK(values(slow_read) == filled(4, 1.0F));
    CHECK(values(later_read) == filled(4, 200.0F));
    CHECK(values(x) == filled(4, 202.0F));
  }

  // --- running at the call ----------------------------------------------------------------------

  TEST_CASE("a tiny op whose buffers are free runs at its call without entering flight: one that "
            "must wait for a buffer is queued like any op" *
            doctest::timeout(30)) {
    cotensor::runtime rt({.worker_threads = 2});
    tensor x = cotensor::full({2}, 1.0F);  // tiny, ready: run at its call too
    tensor y = x + 1.0F;
    y += x;
    cotensor::runtime_stats s = rt.stats();
    CHECK(s.issued == 3);
    CHECK(s.completed == 3);
    CHECK(s.peak_in_flight == 0);  // no op node, no admission, no tracker
    CHECK(values(y) == filled(2, 3.0F));

    // Behind a held op, the same ops take the queued path and keep their order.
    gate g;
    tensor held = gated(x, g.future());  // reads x until the gate opens
    tensor z = held + 1.0F;              // waits for `held`
    x *= 10.0F;                          // waits for that read of x to end
    tensor after = x + 1.0F;             // waits for the write
    CHECK(still_pending(z));
    CHECK(still_pending(after));
    s = rt.stats();
    CHECK(s.in_flight >= 3);
    g.open();
    CHECK(values(z) == filled(2, 2.0F));
    CHECK(values(held) == filled(2, 1.0F));  // read x before the write
    CHECK(values(after) == filled(2, 11.0F));
    cotensor::wait_all();  // an op counts as ended after it releases its buffers
    s = rt.stats();
    CHECK(s.issued == s.completed);
    CHECK(s.in_flight == 0);
  }

  // --- write after write -------------------------------------------------------------------------

  TEST_CASE("in-place writes to one buffer apply in the order they were issued" *
            doctest::timeout(30)) {
    cotensor::runtime_options options{.worker_threads = 2};
    SUBCASE("with tiny ready ops run at their call") { options.inline_small_ops = true; }
    SUBCASE("with every op on the backend") { options.inline_small_ops = false; }
    cotensor::runtime rt(options);
    tensor x = cotensor::zeros({2, 4});
    tensor copy = x;                             // the same buffer through a copied handle
    tensor flat = cotensor::reshape(x, {8});     // and through a reshaped one
    const tensor one_row = cotensor::ones({4});  // broadcast over the rows of x
    float expected = 0.0F;
    for (int i = 0; i < 20; ++i) {
      // x = 2x + 1 in three writes, each through a different handle: only the issue order gives
      // 2^20 - 1 (every intermediate value is an exact float).
      x *= 2.0F;
      copy += one_row;
      flat -= 1.0F;
      flat += 1.0F;
      expected = expected * 2.0F + 1.0F;
    }
    CHECK(expected == 1048575.0F);
    CHECK(values(x) == filled(8, expected));
  }

  TEST_CASE("a write queued behind a held write waits for it" * doctest::timeout(30)) {
    cotensor::runtime rt({.worker_threads = 2});
    gate g;
    tensor x = cotensor::full({2}, 1.0F);
    SUBCASE("when the held write starts on an idle buffer") { x.wait(); }
    SUBCASE("when the held write queues behind the buffer's first write") {}
    x += gated(cotensor::full({}, 5.0F), g.future());  // (1 + 5)
    x *= 2.0F;                                         //   * 2
    x -= 1.0F;                                         //   - 1 = 11; any other order differs
    CHECK(still_pending(x));
    g.open();
    CHECK(values(x) == filled(2, 11.0F));
  }

  // --- running together --------------------------------------------------------------------------

  TEST_CASE("ops that only read one buffer run at the same time" * doctest::timeout(60)) {
    cotensor::runtime rt({.worker_threads = 2});
    const rendezvous meet{std::make_shared<std::atomic<int>>(0)};

    SUBCASE("when the buffer is already computed") {
      tensor x = cotensor::full({1}, 1.0F);
      x.wait();
      tensor a = cotensor::map(x, meet);
      tensor b = cotensor::map(x, meet);
      CHECK(a.item() == 1.0F);
      CHECK(b.item() == 1.0F);
    }
    SUBCASE("when both reads are released together by the end of a held write") {
      gate g;
      tensor x = gated(cotensor::full({}, 1.0F), g.future());
      tensor a = cotensor::map(x, meet);
      tensor b = cotensor::map(x, meet);
      CHECK(still_pending(a));
      g.open();
      CHECK(a.item() == 1.0F);
      CHECK(b.item() == 1.0F);
    }
    CHECK(meet.arrived->load() == 2);
  }

  TEST_CASE("ops on independent buffers run in parallel" * doctest::timeout(60)) {
    cotensor::runtime rt({.worker_threads = 2});
    const rendezvous meet{std::make_shared<std::atomic<int>>(0)};
    tensor x = cotensor::full({1}, 1.0F);
    tensor y = cotensor::full({1}, 2.0F);
    tensor a = cotensor::map(x, meet);
    tensor b = cotensor::map(y, meet);
    CHECK(a.item() == 1.0F);
    CHECK(b.item() == 2.0F);
  }

  TEST_CASE("a held op does not hold up work on other buffers" * doctest::timeout(30)) {
    cotensor::runtime rt({.worker_threads = 2});
    gate g;
    tensor held = gated(cotensor::full({}, 1.0F), g.future());
    tensor waiting = held + 1.0F;
    tensor y = cotensor::ones({3});
    for (int i = 0; i < 100; ++i) {
      y += 1.0F;
    }
    tensor z = cotensor::matmul(cotensor::ones({2, 3}), cotensor::reshape(y, {3, 1}));
    CHECK(values(y) == filled(3, 101.0F));
    CHECK(values(z) == filled(2, 303.0F));
    CHECK(still_pending(held));
    CHECK(still_pending(waiting));
    g.open();
    CHECK(waiting.item() == 2.0F);
  }

  TEST_CASE("a wait completes when earlier writes end without waiting for later ones" *
            doctest::timeout(30)) {
    cotensor::runtime rt({.worker_threads = 2});
    gate first;
    gate second;
    tensor x = gated(cotensor::full({}, 3.0F), first.future());  // write 1 of x, held
    auto after_first = x.async_wait(asio::use_future);
    x += gated(cotensor::full({}, 4.0F), second.future());  // write 2 of x, held longer
    auto after_second = cotensor::when_all(x)(asio::use_future);

    CHECK(after_first.wait_for(50ms) == std::future_status::timeout);
    first.open();
    REQUIRE(after_first.wait_for(20s) == std::future_status::ready);
    CHECK_NOTHROW(after_first.get());
    CHECK(after_second.wait_for(50ms) == std::future_status::timeout);
    second.open();
    REQUIRE(after_second.wait_for(20s) == std::future_status::ready);
    CHECK(x.item() == 7.0F);
  }
}  // TEST_SUITE("engine")
