// The umbrella header first: it must compile on its own.
#include <cotensor/cotensor.hpp>
// Test support and dependencies.
#include "support/run.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <future>
#include <memory>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

// The dependency engine: per-buffer read/write ordering (RAW, WAR, WAW), reads and independent
// ops running together, errors reaching every dependent waiter, and waits from threads and
// coroutines. Ordering is checked by holding an op on the backend with a gate
// (`cotensor::test::gated`) and observing that what depends on it has not happened; nothing
// here asserts on speed: a wait that "has not completed after 50 ms" is one that a correct
// engine never completes before the gate opens.

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using cotensor::tensor;
using cotensor::test::gated;
using cotensor::test::run_to_completion;

static_assert(std::is_nothrow_move_constructible_v<tensor>);
static_assert(std::is_copy_constructible_v<tensor>, "a tensor is a shared handle");

/// Holds ops made with `gated` on the backend until `open()`. Opens itself when destroyed, so a
/// failed check never leaves a worker blocked: declare it after the runtime, which waits for
/// every op when it is destroyed.
class gate {
public:
  gate() = default;
  gate(const gate&) = delete;
  gate& operator=(const gate&) = delete;
  ~gate() { open(); }

  std::shared_future<void> future() const { return future_; }
  void open() {
    if (!opened_) {
      opened_ = true;
      promise_.set_value();
    }
  }

private:
  std::promise<void> promise_;
  std::shared_future<void> future_ = promise_.get_future().share();
  bool opened_ = false;
};

/// True when a wait for `t`, started now, has not completed after `how_long`: the ops that
/// compute `t` have not ended. Only used where a correct engine cannot complete the wait.
bool still_pending(const tensor& t, std::chrono::milliseconds how_long = 50ms) {
  auto done = cotensor::when_all(t)(asio::use_future);
  return done.wait_for(how_long) == std::future_status::timeout;
}

/// Tensor values that doctest can print when a check fails.
struct floats {
  std::vector<float> v;
  friend bool operator==(const floats&, const floats&) = default;
  friend std::ostream& operator<<(std::ostream& os, const floats& f) {
    os << '{';
    for (std::size_t i = 0; i < f.v.size(); ++i) {
      os << (i == 0 ? "" : ", ") << f.v[i];
    }
    return os << '}';
  }
};

floats filled(std::size_t n, float value) { return {std::vector<float>(n, value)}; }
floats values(const tensor& t) { return {t.to_vector()}; }

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

struct test_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

constexpr const char* failure_message = "map failed on purpose";

float explode(float /*v*/) { throw test_error(failure_message); }

/// The message of the exception `co_await t.ready()` throws, or "no exception".
asio::awaitable<std::string> ready_error(tensor t) {
  try {
    co_await t.ready();
  } catch (const test_error& e) {
    co_return std::string("test_error: ") + e.what();
  } catch (const std::exception& e) {
    co_return std::string("other: ") + e.what();
  }
  co_return "no exception";
}

/// Checks that every way of waiting on `t` rethrows the original `test_error`.
void check_every_wait_rethrows(const tensor& t) {
  CHECK_THROWS_WITH_AS(t.wait(), failure_message, test_error);
  CHECK_THROWS_WITH_AS(t.to_vector(), failure_message, test_error);
  if (t.numel() == 1) {
    CHECK_THROWS_WITH_AS(t.item(), failure_message, test_error);
  }
  std::ostringstream os;
  CHECK_THROWS_WITH_AS(os << t, failure_message, test_error);
  CHECK(run_to_completion([t] { return ready_error(t); }) ==
        std::string("test_error: ") + failure_message);
  auto future = t.async_wait(asio::use_future);
  CHECK_THROWS_WITH_AS(future.get(), failure_message, test_error);
  auto joined = cotensor::when_all(t)(asio::use_future);
  CHECK_THROWS_WITH_AS(joined.get(), failure_message, test_error);
}

struct resume_counts {
  int resumed = 0;
  int on_io_thread = 0;
  int errors = 0;
  std::thread::id io_thread;
};

asio::awaitable<void> await_ready(tensor t, resume_counts* counts) {
  try {
    co_await t.ready();
  } catch (...) {
    ++counts->errors;
  }
  ++counts->resumed;
  if (std::this_thread::get_id() == counts->io_thread) {
    ++counts->on_io_thread;
  }
}

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

  TEST_CASE("a tiny op whose buffers are free runs at its call without entering flight; one that "
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

  // --- errors ------------------------------------------------------------------------------------

  TEST_CASE("an exception in a map reaches every op computed from it, and every way of waiting" *
            doctest::timeout(60)) {
    cotensor::runtime rt({.worker_threads = 2});
    tensor x = cotensor::full({2, 2}, 1.0F);
    std::vector<tensor> chain;

    SUBCASE("when the failure has happened before the dependents are issued") {
      tensor failed = cotensor::map(x, explode);
      CHECK_THROWS_AS(failed.wait(), test_error);
      chain.push_back(failed);
    }
    SUBCASE("when the dependents are queued behind the failing op") {
      gate g;
      tensor base = gated(x, g.future());
      chain.push_back(cotensor::map(base, explode));
      chain.push_back(chain.back() + 1.0F);
      CHECK(still_pending(chain.back()));
      g.open();
    }
    // ops 2..5 depend on the failed op and on healthy x.
    chain.push_back(chain.back() + 1.0F);
    chain.push_back(chain.back() * x);
    chain.push_back(cotensor::matmul(x, chain.back()));
    chain.push_back(cotensor::sum(chain.back()));
    chain.push_back(cotensor::relu(chain.back()) - x);  // broadcast of a rank-0 failed value

    for (std::size_t i = 0; i < chain.size(); ++i) {
      CAPTURE(i);
      check_every_wait_rethrows(chain[i]);
    }
    // wait_all reports no kernel errors; the healthy input is untouched.
    CHECK_NOTHROW(cotensor::wait_all());
    CHECK(values(x) == filled(4, 1.0F));
  }

  TEST_CASE("the runtime keeps computing after an op fails" * doctest::timeout(30)) {
    cotensor::runtime rt({.worker_threads = 2});
    tensor x = cotensor::full({3}, 2.0F);
    tensor failed = cotensor::map(x, explode) + 1.0F;
    tensor unrelated = cotensor::full({3}, 4.0F) * 3.0F;
    tensor from_input = x * x;
    CHECK_THROWS_WITH_AS(failed.wait(), failure_message, test_error);
    CHECK(values(unrelated) == filled(3, 12.0F));
    CHECK(values(from_input) == filled(3, 4.0F));
    tensor later = cotensor::tanh(cotensor::zeros({2})) + x.sum();
    CHECK(values(later) == filled(2, 6.0F));
    CHECK(run_to_completion([later] { return ready_error(later); }) == "no exception");
  }

  TEST_CASE("an in-place write keeps the error of a failed tensor and passes it to its target" *
            doctest::timeout(30)) {
    cotensor::runtime rt({.worker_threads = 2});
    tensor failed = cotensor::map(cotensor::ones({2}), explode);
    failed += 1.0F;
    CHECK_THROWS_WITH_AS(failed.wait(), failure_message, test_error);
    failed *= cotensor::ones({2});
    CHECK_THROWS_WITH_AS(failed.to_vector(), failure_message, test_error);

    tensor target = cotensor::ones({2});
    target += failed;  // the target reads the failed tensor: it fails too
    CHECK_THROWS_WITH_AS(target.wait(), failure_message, test_error);
    target -= 1.0F;
    CHECK_THROWS_WITH_AS(target.wait(), failure_message, test_error);
    CHECK_THROWS_WITH_AS(cotensor::reshape(target, {2, 1}).wait(), failure_message, test_error);

    // A new op writing a fresh buffer from healthy inputs is not affected.
    tensor fresh = cotensor::ones({2}) + 1.0F;
    CHECK(values(fresh) == filled(2, 2.0F));
  }

  TEST_CASE("when_all on several tensors rethrows the first error in argument order" *
            doctest::timeout(30)) {
    cotensor::runtime rt({.worker_threads = 2});
    tensor good = cotensor::ones({2});
    tensor bad = cotensor::map(good, explode);
    auto mixed = cotensor::when_all(good, bad, good)(asio::use_future);
    CHECK_THROWS_WITH_AS(mixed.get(), failure_message, test_error);
    auto healthy = cotensor::when_all(good, good * 2.0F)(asio::use_future);
    CHECK_NOTHROW(healthy.get());
  }

  // --- waits from threads and coroutines ---------------------------------------------------------

  TEST_CASE("a blocking wait returns while another thread keeps issuing ops" *
            doctest::timeout(60)) {
    cotensor::runtime rt({.worker_threads = 2});
    tensor busy = cotensor::zeros({16});
    std::atomic<bool> stop{false};
    std::atomic<int> issued{0};
    std::atomic<bool> issuer_done{false};
    std::exception_ptr issuer_error;
    std::thread issuer([&] {
      try {
        // Stops at 10^6 so that the count stays an exact float.
        while (!stop.load() && issued.load() < 1000000) {
          busy += 1.0F;
          issued.fetch_add(1);
        }
      } catch (...) {
        issuer_error = std::current_exception();
      }
      issuer_done.store(true);
    });
    // Start waiting once the other thread is busy issuing.
    while (issued.load() < 100 && !issuer_done.load()) {
      std::this_thread::yield();
    }

    int wrong = 0;
    for (int i = 0; i < 200; ++i) {
      tensor x = cotensor::full({4}, static_cast<float>(i)) * 2.0F;
      x.wait();
      if (values(x) != filled(4, 2.0F * static_cast<float>(i))) {
        ++wrong;
      }
    }
    stop.store(true);
    issuer.join();
    CHECK(wrong == 0);
    CHECK_FALSE(issuer_error);
    CHECK(issued.load() >= 100);
    CHECK(values(busy) == filled(16, static_cast<float>(issued.load())));
  }

  TEST_CASE("in-place writes to one buffer from two threads are all applied" *
            doctest::timeout(60)) {
    cotensor::runtime_options options{.worker_threads = 2};
    SUBCASE("with tiny ready ops run at their call") { options.inline_small_ops = true; }
    SUBCASE("with every op on the backend") { options.inline_small_ops = false; }
    cotensor::runtime rt(options);
    tensor x = cotensor::zeros({3, 2});
    tensor view = cotensor::reshape(x, {6});
    constexpr int per_thread = 2000;
    std::thread other([view]() mutable {
      for (int i = 0; i < per_thread; ++i) {
        view += 1.0F;
      }
    });
    for (int i = 0; i < per_thread; ++i) {
      x += cotensor::ones({2});
    }
    other.join();
    CHECK(values(x) == filled(6, 2.0F * per_thread));
  }

  TEST_CASE("1,000 coroutines awaiting one held tensor all resume on the io_context thread" *
            doctest::timeout(60)) {
    cotensor::runtime rt({.worker_threads = 2});
    gate g;
    tensor t = gated(cotensor::full({}, 7.0F), g.future());
    asio::io_context io;
    resume_counts counts;
    counts.io_thread = std::this_thread::get_id();
    constexpr int coroutines = 1000;
    for (int i = 0; i < coroutines; ++i) {
      asio::co_spawn(io, await_ready(t, &counts), asio::detached);
    }
    io.poll();  // every coroutine starts and suspends in co_await t.ready()
    CHECK(counts.resumed == 0);
    g.open();
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (counts.resumed < coroutines && std::chrono::steady_clock::now() < deadline) {
      io.run_one_for(100ms);
    }
    CHECK(counts.resumed == coroutines);
    CHECK(counts.on_io_thread == coroutines);
    CHECK(counts.errors == 0);
    CHECK(t.item() == 7.0F);
  }

  TEST_CASE("1,000 coroutines each awaiting its own op resume on the io_context thread" *
            doctest::timeout(60)) {
    cotensor::runtime rt({.worker_threads = 2});
    asio::io_context io;
    resume_counts counts;
    counts.io_thread = std::this_thread::get_id();
    const tensor base = cotensor::full({8}, 1.0F);
    std::vector<tensor> results;
    constexpr int coroutines = 1000;
    results.reserve(coroutines);
    for (int i = 0; i < coroutines; ++i) {
      results.push_back(base * static_cast<float>(i));
      asio::co_spawn(io, await_ready(results.back(), &counts), asio::detached);
    }
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (counts.resumed < coroutines && std::chrono::steady_clock::now() < deadline) {
      io.run_one_for(100ms);
    }
    CHECK(counts.resumed == coroutines);
    CHECK(counts.on_io_thread == coroutines);
    CHECK(counts.errors == 0);
    int wrong = 0;
    for (int i = 0; i < coroutines; ++i) {
      if (values(results[static_cast<std::size_t>(i)]) != filled(8, static_cast<float>(i))) {
        ++wrong;
      }
    }
    CHECK(wrong == 0);
  }

}  // TEST_SUITE("engine")
