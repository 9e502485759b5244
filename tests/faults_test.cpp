// The engine's internal fault injection first: it must compile on its own.
#include "engine/faults.hpp"

#include <cotensor/cotensor.hpp>

#include "support/run.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <doctest/doctest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <new>
#include <set>
#include <string>
#include <system_error>
#include <vector>

// Injected faults (src/engine/faults.hpp): a failing op must reach exactly the waiters that
// depend on it, in every form of wait, while unrelated work completes with its right values;
// a failing allocation (of a small buffer, made at the call) must throw at the call and leave
// nothing behind (engine_test checks a large one: it fails its op); a delayed completion
// must hold back only what depends on it. After each case every buffer and op node is freed.

namespace {

namespace asio = boost::asio;
namespace faults = cotensor::detail::faults;
using namespace std::chrono_literals;
using cotensor::tensor;
using cotensor::test::run_to_completion;

/// Disarms every fault when the case ends, even when a check fails half-way.
struct disarm_at_exit {
  disarm_at_exit() = default;
  disarm_at_exit(const disarm_at_exit&) = delete;
  disarm_at_exit& operator=(const disarm_at_exit&) = delete;
  ~disarm_at_exit() { faults::reset(); }
};

/// Buffers and op nodes alive now; every case compares them with the counts before it.
struct live_counts {
  std::int64_t buffers;
  std::int64_t ops;
  static live_counts now() {
    cotensor::wait_all();
    const auto s = cotensor::runtime::current().stats();
    return {s.live_buffers, s.live_ops};
  }
};

/// A small program of ten ops, one engine op each, over eight-element tensors: reads,
/// an in-place write, a `map`, a reduction and a broadcast.
struct program {
  static constexpr int ops = 10;
  std::vector<tensor> results;  // what the program makes, in order
  // deps[i]: the ops (by issue index) whose failure must reach results[i].
  std::vector<std::set<int>> deps;

  void run() {
    auto a = cotensor::full({8}, 1.0F);                           // #0
    auto b = cotensor::full({8}, 2.0F);                           // #1
    auto c = a + b;                                               // #2
    auto d = c * 2.0F;                                            // #3
    auto e = b - 1.0F;                                            // #4
    a += e;                                                       // #5
    auto f = cotensor::map(d, [](float v) { return v + 1.0F; });  // #6
    auto g = cotensor::sum(f);                                    // #7
    auto h = e + g;                                               // #8
    auto i = cotensor::relu(a);                                   // #9
    results = {a, b, c, d, e, f, g, h, i};
    deps = {{0, 1, 4, 5},
            {1},
            {0, 1, 2},
            {0, 1, 2, 3},
            {1, 4},
            {0, 1, 2, 3, 6},
            {0, 1, 2, 3, 6, 7},
            {0, 1, 2, 3, 4, 6, 7, 8},
            {0, 1, 4, 5, 9}};
  }
};

std::vector<float> values(const tensor& t) { return t.to_vector(); }

bool rethrows_injected(const tensor& t) {
  try {
    t.wait();
  } catch (const faults::injected_fault&) {
    return true;
  }
  return false;
}

}  // namespace

TEST_SUITE("faults") {
  TEST_CASE("nothing is injected unless a test arms a fault") {
    CHECK_FALSE(faults::enabled());
    faults::fail_op(5);
    CHECK(faults::enabled());
    faults::reset();
    CHECK_FALSE(faults::enabled());
  }

  TEST_CASE("a failed op reaches exactly the results computed from it, whichever op fails" *
            doctest::timeout(120)) {
    cotensor::runtime_options options{.worker_threads = 2};
    SUBCASE("tiny ready ops run at their call") { options.inline_small_ops = true; }
    SUBCASE("every op on the backend") { options.inline_small_ops = false; }
    const disarm_at_exit disarm;
    const auto before = live_counts::now();
    {
      cotensor::runtime rt(options);
      program clean;
      const auto issued = rt.stats().issued;
      clean.run();
      REQUIRE(rt.stats().issued - issued == program::ops);  // one push per op, as numbered
      std::vector<std::vector<float>> expected;
      for (const auto& t : clean.results) {
        expected.push_back(values(t));
      }
      for (int failing = 0; failing < program::ops; ++failing) {
        CAPTURE(failing);
        program p;
        faults::fail_op(static_cast<std::uint64_t>(failing) + 1);
        p.run();
        CHECK_FALSE(faults::enabled());  // spent
        for (std::size_t r = 0; r < p.results.size(); ++r) {
          CAPTURE(r);
          if (p.deps[r].contains(failing)) {
            CHECK(rethrows_injected(p.results[r]));
          } else {
            CHECK(values(p.results[r]) == expected[r]);
          }
        }
        CHECK_NOTHROW(cotensor::wait_all());  // waitall reports no kernel error
      }
    }
    const auto after = live_counts::now();
    CHECK(after.buffers == before.buffers);
    CHECK(after.ops == 0);
  }

  TEST_CASE("an injected failure reaches coroutine waits, when_all and scopes, not others" *
            doctest::timeout(60)) {
    const disarm_at_exit disarm;
    const auto before = live_counts::now();
    {
      cotensor::runtime rt({.worker_threads = 2, .inline_small_ops = false});
      auto a = cotensor::full({16}, 1.0F);
      auto b = cotensor::full({16}, 2.0F);
      faults::fail_op(1);
      auto bad = a * 3.0F;
      auto good = b + a;
      CHECK_THROWS_AS(run_to_completion([&]() -> asio::awaitable<void> { co_await bad.ready(); }),
                      faults::injected_fault);
      auto [ec] = run_to_completion([&]() -> asio::awaitable<std::tuple<std::exception_ptr>> {
        co_return co_await bad.async_wait(asio::as_tuple(asio::use_awaitable));
      });
      CHECK(ec != nullptr);
      CHECK_THROWS_AS(run_to_completion([&]() -> asio::awaitable<void> {
                        co_await cotensor::when_all(good, bad);
                      }),
                      faults::injected_fault);
      CHECK_NOTHROW(run_to_completion([&]() -> asio::awaitable<void> {
        co_await cotensor::when_all(good, a);
        co_await cotensor::when_all();
      }));
      CHECK(values(good) == std::vector<float>(16, 3.0F));

      cotensor::scope failing;
      cotensor::scope healthy;
      faults::fail_op(1);
      auto x = failing.run([&] { return a + 5.0F; });
      auto y = healthy.run([&] { return b + 5.0F; });
      CHECK_THROWS_AS(failing.wait(), faults::injected_fault);
      CHECK_THROWS_AS(
          run_to_completion([&]() -> asio::awaitable<void> { co_await failing.when_all(); }),
          faults::injected_fault);
      CHECK_NOTHROW(healthy.wait());
      CHECK(values(y) == std::vector<float>(16, 7.0F));
      CHECK(rethrows_injected(x));
      CHECK_NOTHROW(cotensor::wait_all());
    }
    const auto after = live_counts::now();
    CHECK(after.buffers == before.buffers);
    CHECK(after.ops == 0);
  }

  TEST_CASE("in synchronous mode an injected failure throws from the op call" *
            doctest::timeout(30)) {
    const disarm_at_exit disarm;
    cotensor::runtime rt({.synchronous = true});
    auto a = cotensor::full({4}, 1.0F);
    faults::fail_op(1);
    CHECK_THROWS_AS((void)(a + 1.0F), faults::injected_fault);
    CHECK(values(a + 1.0F) == std::vector<float>(4, 2.0F));
  }

  TEST_CASE("a failed allocation throws bad_alloc at the call and leaves nothing behind" *
            doctest::timeout(60)) {
    const disarm_at_exit disarm;
    const auto before = live_counts::now();
    {
      cotensor::runtime rt({.worker_threads = 2});
      auto a = cotensor::randn({8, 8});
      auto b = cotensor::full({8, 8}, 0.5F);
      a.wait();
      // Each op allocates its output buffer (two blocks: the storage and its data) and its op
      // node; fail each allocation of a short expression in turn.
      const auto expression = [&] { return cotensor::sum(cotensor::matmul(a, b) + 1.0F); };
      const float expected = expression().item();
      int failed = 0;
      for (std::uint64_t nth = 1; nth <= 12; ++nth) {
        CAPTURE(nth);
        const auto issued = rt.stats().issued;
        faults::fail_allocation(nth);
        try {
          const float got = expression().item();
          CHECK(got == expected);  // the allocation fell outside the expression
        } catch (const std::bad_alloc&) {
          ++failed;
          CHECK(rt.stats().issued - issued < 3);  // the failing op was not issued
        }
        faults::reset();
        CHECK(expression().item() == expected);  // and the runtime keeps working
      }
      CHECK(failed >= 9);  // three ops, three allocations each
    }
    const auto after = live_counts::now();
    CHECK(after.buffers == before.buffers);
    CHECK(after.ops == 0);
  }

  TEST_CASE("a delayed completion holds back only what depends on it" * doctest::timeout(60)) {
    const disarm_at_exit disarm;
    const auto before = live_counts::now();
    {
      cotensor::runtime rt({.worker_threads = 2, .inline_small_ops = false});
      auto a = cotensor::full({16}, 1.0F);
      auto b = cotensor::full({16}, 2.0F);
      cotensor::wait_all();
      faults::delay_op(1, 1s);
      auto slow = a + 1.0F;
      auto after_slow = slow * 2.0F;
      auto fast = b + 1.0F;
      // The unrelated op completes; a wait on the delayed one raced against a short timer is
      // cancelled (the timer wins by far), and the op runs on.
      CHECK(values(fast) == std::vector<float>(16, 3.0F));
      const bool timer_won = run_to_completion([&]() -> asio::awaitable<bool> {
        using namespace asio::experimental::awaitable_operators;
        asio::steady_timer timer(co_await asio::this_coro::executor, 20ms);
        auto result = co_await (after_slow.async_wait(asio::use_awaitable) ||
                                timer.async_wait(asio::use_awaitable));
        co_return result.index() == 1;
      });
      CHECK(timer_won);
      CHECK_NOTHROW(run_to_completion(
          [&]() -> asio::awaitable<void> { co_await cotensor::when_all(after_slow, fast); }));
      CHECK(values(slow) == std::vector<float>(16, 2.0F));
      CHECK(values(after_slow) == std::vector<float>(16, 4.0F));
      CHECK_NOTHROW(cotensor::wait_all());
    }
    const auto after = live_counts::now();
    CHECK(after.buffers == before.buffers);
    CHECK(after.ops == 0);
  }
}
