#include "cotensor/wait.hpp"

#include <cotensor/cotensor.hpp>

#include "support/gate.hpp"
#include "support/run.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>

using namespace cotensor;
using cotensor::test::gated;
using cotensor::test::run_to_completion;
using namespace std::chrono_literals;
namespace asio = boost::asio;

namespace {

bool is_ready(std::future<void>& f) { return f.wait_for(0s) == std::future_status::ready; }

bool is_aborted(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const boost::system::system_error& error) {
    return error.code() == asio::error::operation_aborted;
  } catch (...) {
    return false;
  }
}

}  // namespace

TEST_SUITE("wait") {
  TEST_CASE("wait blocks until the value is computed" * doctest::timeout(20)) {
    test::gate gate;
    auto x = gated(full({1}, 3.0F), gate.future());
    auto y = x + 1.0F;
    std::thread opener([&] {
      std::this_thread::sleep_for(50ms);
      gate.open();
    });
    y.wait();
    CHECK(y.to_vector() == std::vector<float>{4});
    opener.join();
  }

  TEST_CASE("wait_all waits for every op issued before it, not for later ones" *
            doctest::timeout(20)) {
    test::gate first_gate;
    test::gate later_gate;
    auto a = gated(ones({1}), first_gate.future()) * 2.0F;
    auto all = async_wait_all(asio::use_future);  // covers `a` only
    auto later = gated(ones({1}), later_gate.future());
    std::this_thread::sleep_for(20ms);
    CHECK_FALSE(all.wait_for(0s) == std::future_status::ready);
    first_gate.open();
    CHECK(all.wait_for(10s) == std::future_status::ready);
    all.get();
    CHECK(a.item() == 2.0F);
    auto held = when_all(later)(asio::use_future);
    CHECK_FALSE(is_ready(held));  // `later` is still held at its gate
    later_gate.open();
    CHECK(held.wait_for(10s) == std::future_status::ready);
  }

  TEST_CASE("co_await ready resumes on the coroutine's executor, not a backend thread" *
            doctest::timeout(20)) {
    auto result = run_to_completion([]() -> asio::awaitable<bool> {
      const auto io_thread = std::this_thread::get_id();
      auto x = matmul(randn({256, 256}), randn({256, 256}));
      co_await x.ready();
      const bool same = std::this_thread::get_id() == io_thread;
      co_await when_all();
      co_await when_all(x, x + 1.0F);
      co_return same&& std::this_thread::get_id() == io_thread;
    });
    CHECK(result);
  }

  TEST_CASE("a callback runs on its associated executor, never inside the initiating call" *
            doctest::timeout(20)) {
    asio::io_context io;
    auto x = ones({4});
    x.wait();  // already computed: completion must still not run inline
    bool called = false;
    std::thread::id where;
    x.async_wait(asio::bind_executor(io, [&](std::exception_ptr e) {
      CHECK_FALSE(e);
      called = true;
      where = std::this_thread::get_id();
    }));
    CHECK_FALSE(called);
    io.run();
    CHECK(called);
    CHECK(where == std::this_thread::get_id());
  }

  TEST_CASE("a callback with no executor of its own runs on the runtime's fallback executor" *
            doctest::timeout(20)) {
    std::promise<std::thread::id> where;
    auto x = ones({2}) + 1.0F;
    x.async_wait([&](std::exception_ptr e) {
      CHECK_FALSE(e);
      where.set_value(std::this_thread::get_id());
    });
    auto id = where.get_future().get();
    CHECK(id != std::this_thread::get_id());
  }

  TEST_CASE("async_wait works with use_future, deferred and as_tuple" * doctest::timeout(20)) {
    auto x = full({2}, 2.0F) * 3.0F;
    x.async_wait(asio::use_future).get();
    x.ready()(asio::use_future).get();
    auto ok = run_to_completion([x]() -> asio::awaitable<bool> {
      auto [e] = co_await x.async_wait(asio::as_tuple(asio::use_awaitable));
      co_await x.async_wait(asio::deferred);
      co_return !e;
    });
    CHECK(ok);
    CHECK(x.to_vector() == std::vector<float>{6, 6});
  }

  TEST_CASE("a wait raced against a timer with || is cancelled promptly, and the op runs on" *
            doctest::timeout(30)) {
    using namespace asio::experimental::awaitable_operators;
    test::gate gate;
    auto shared_gate = gate.future();
    auto slow = gated(full({3}, 5.0F), shared_gate) + 1.0F;
    auto index = run_to_completion([slow]() -> asio::awaitable<std::size_t> {
      asio::steady_timer timer(co_await asio::this_coro::executor, 20ms);
      auto winner =
          co_await (slow.async_wait(asio::use_awaitable) || timer.async_wait(asio::use_awaitable));
      co_return winner.index();
    });
    CHECK(index == 1);  // the timer won; the wait was abandoned
    gate.open();
    CHECK(slow.to_vector() == std::vector<float>{6, 6, 6});  // the op ran on, its buffer alive
  }

  TEST_CASE("&& waits for both tensors" * doctest::timeout(20)) {
    using namespace asio::experimental::awaitable_operators;
    auto a = ones({2}) * 2.0F;
    auto b = ones({2}) * 3.0F;
    auto done = run_to_completion([a, b]() -> asio::awaitable<bool> {
      co_await (a.async_wait(asio::use_awaitable) && b.async_wait(asio::use_awaitable));
      co_return true;
    });
    CHECK(done);
    CHECK(a.to_vector() == std::vector<float>{2, 2});
    CHECK(b.to_vector() == std::vector<float>{3, 3});
  }

  TEST_CASE("every cancellation type completes a pending wait with operation_aborted" *
            doctest::timeout(30)) {
    for (auto type : {asio::cancellation_type::terminal, asio::cancellation_type::partial,
                      asio::cancellation_type::total}) {
      CAPTURE(static_cast<int>(type));
      test::gate gate;
      auto held = gated(ones({1}), gate.future());
      asio::io_context io;
      asio::cancellation_signal signal;
      std::exception_ptr result;
      bool called = false;
      held.async_wait(asio::bind_cancellation_slot(
          signal.slot(), asio::bind_executor(io, [&](std::exception_ptr e) {
            called = true;
            result = e;
          })));
      asio::post(io, [&] { signal.emit(type); });
      io.run();  // returns: the cancelled wait holds no work on io
      CHECK(called);
      CHECK(is_aborted(result));
      gate.open();
      CHECK(held.item() == 1.0F);
    }
  }

  TEST_CASE("a wait that completes before cancellation ignores a later emit" *
            doctest::timeout(20)) {
    asio::io_context io;
    asio::cancellation_signal signal;
    int calls = 0;
    auto x = ones({1});
    x.async_wait(asio::bind_cancellation_slot(signal.slot(),
                                              asio::bind_executor(io, [&](std::exception_ptr e) {
                                                CHECK_FALSE(e);
                                                ++calls;
                                              })));
    io.run();
    signal.emit(asio::cancellation_type::terminal);
    io.restart();
    io.run();
    CHECK(calls == 1);
  }

  TEST_CASE("destroying an io_context destroys its pending waits' handlers unrun: the op runs on" *
            doctest::timeout(20)) {
    test::gate gate;
    auto held = gated(full({2}, 4.0F), gate.future());
    auto alive = std::make_shared<int>(0);
    bool called = false;
    {
      asio::io_context io;
      held.async_wait(
          asio::bind_executor(io, [&called, alive](std::exception_ptr) { called = true; }));
      CHECK(alive.use_count() == 2);
    }
    CHECK(alive.use_count() == 1);  // the context's shutdown destroyed the handler
    gate.open();                    // the op ends after the context is gone: nothing is posted
    CHECK(held.to_vector() == std::vector<float>{4, 4});
    wait_all();
    CHECK_FALSE(called);
  }

  TEST_CASE("destroying an io_context destroys a coroutine suspended on ready()" *
            doctest::timeout(20)) {
    struct sentinel {
      bool* destroyed;
      ~sentinel() { *destroyed = true; }
    };
    test::gate gate;
    auto held = gated(full({1}, 2.0F), gate.future());
    bool destroyed = false;
    bool resumed = false;
    {
      asio::io_context io;
      asio::co_spawn(
          io,
          [&]() -> asio::awaitable<void> {
            sentinel s{&destroyed};
            co_await held.ready();
            resumed = true;
          },
          asio::detached);
      io.poll();  // runs the coroutine until it suspends on the wait
      CHECK_FALSE(destroyed);
    }
    CHECK(destroyed);
    gate.open();
    CHECK(held.item() == 2.0F);
    CHECK_FALSE(resumed);
  }

  TEST_CASE("an op completing while its waiter's io_context is destroyed neither runs nor leaks "
            "the handler" *
            doctest::timeout(60)) {
    for (int i = 0; i < 200; ++i) {
      test::gate gate;
      auto held = gated(ones({1}), gate.future());
      auto alive = std::make_shared<int>(0);
      bool called = false;
      {
        asio::io_context io;
        held.async_wait(
            asio::bind_executor(io, [&called, alive](std::exception_ptr) { called = true; }));
        gate.open();
        if (i % 2 == 0) {
          std::this_thread::yield();
        }
      }  // races the op's completion: it either posted (the context destroys the posted
         // handler) or finds the wait abandoned
      held.wait();
      while (alive.use_count() > 1) {  // the backend thread may still be letting go of it
        std::this_thread::yield();
      }
      CHECK_FALSE(called);
    }
  }

  TEST_CASE("when_all of tensors rethrows the first error in argument order" *
            doctest::timeout(20)) {
    auto good = ones({1});
    auto bad1 = map(ones({1}), [](float) -> float { throw std::runtime_error("first"); });
    auto bad2 = map(ones({1}), [](float) -> float { throw std::logic_error("second"); });
    auto message = run_to_completion([=]() -> asio::awaitable<std::string> {
      try {
        co_await when_all(good, bad1, bad2);
      } catch (const std::runtime_error& e) {
        co_return e.what();
      }
      co_return "no error";
    });
    CHECK(message == "first");
    CHECK_THROWS_AS(when_all(good, bad2)(asio::use_future).get(), std::logic_error);
    when_all(good)(asio::use_future).get();
  }

  TEST_CASE("a blocking wait on a backend thread is refused rather than deadlocking" *
            doctest::timeout(20)) {
    auto other = ones({1});
    auto y = map(ones({1}), [other](float v) {
      other.wait();
      return v;
    });
    try {
      y.wait();
      FAIL("no error");
    } catch (const std::system_error& e) {
      CHECK(e.code() == errc::wait_on_backend_thread);
    }
  }

  TEST_CASE("wait_all from many threads while others issue returns for each" *
            doctest::timeout(60)) {
    std::vector<std::thread> threads;
    std::atomic<int> finished{0};
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < 200; ++i) {
          auto x = ones({8}) + static_cast<float>(i);
          if (i % 50 == 0) {
            wait_all();
            CHECK(x.to_vector()[0] == 1.0F + static_cast<float>(i));
          }
        }
        wait_all();
        ++finished;
      });
    }
    for (auto& th : threads) {
      th.join();
    }
    CHECK(finished == 4);
  }
}
