#include "cotensor/scope.hpp"

#include <cotensor/cotensor.hpp>

#include "support/gate.hpp"
#include "support/run.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <doctest/doctest.h>

#include <future>
#include <stdexcept>

using namespace cotensor;
using cotensor::test::gated;
using cotensor::test::run_to_completion;
using namespace std::chrono_literals;
namespace asio = boost::asio;

TEST_SUITE("scope") {
  TEST_CASE("a scope's wait covers only the ops issued through it" * doctest::timeout(20)) {
    test::gate gate;
    auto outside = gated(ones({1}), gate.future());  // held until the end
    scope s;
    auto inside = s.run([] { return ones({4}) * 2.0F + 1.0F; });
    s.wait();  // would hang if it waited for `outside`
    auto all = async_wait_all(asio::use_future);
    CHECK(all.wait_for(20ms) == std::future_status::timeout);
    gate.open();
    all.get();
    CHECK(inside.to_vector() == std::vector<float>{3, 3, 3, 3});
    CHECK(outside.item() == 1.0F);
  }

  TEST_CASE("run returns what its function returns and nests" * doctest::timeout(20)) {
    scope outer;
    scope inner;
    test::gate gate;
    auto shared = gate.future();
    tensor held;
    auto value = outer.run([&] {
      inner.run([&] { held = gated(ones({1}), shared); });
      return ones({1}) + 41.0F;  // back in `outer` after the nested run
    });
    outer.wait();  // `held` belongs to `inner` only
    CHECK(value.item() == 42.0F);
    auto inner_done = inner.async_wait(asio::use_future);
    CHECK(inner_done.wait_for(20ms) == std::future_status::timeout);
    gate.open();
    inner_done.get();
  }

  TEST_CASE("a scope reports the first error any of its ops raised" * doctest::timeout(20)) {
    scope s;
    s.run([] {
      auto bad = map(ones({1}), [](float) -> float { throw std::domain_error("bad row"); });
      (void)(bad + 1.0F);  // inherits the error, also in the scope
      (void)ones({1});
    });
    CHECK_THROWS_WITH_AS(s.wait(), "bad row", std::domain_error);
    auto message = run_to_completion([&s]() -> asio::awaitable<std::string> {
      try {
        co_await s.when_all();
      } catch (const std::domain_error& e) {
        co_return e.what();
      }
      co_return "none";
    });
    CHECK(message == "bad row");
    scope clean;
    clean.run([] { (void)ones({1}); });
    clean.wait();  // no error in another scope
  }

  TEST_CASE("concurrent requests each wait for their own scope only" * doctest::timeout(30)) {
    asio::io_context io;
    test::gate gate;
    auto shared = gate.future();
    int done = 0;
    float total = 0;
    // Request 0 is held at a gate; the others must all finish while it is.
    for (int r = 0; r < 50; ++r) {
      asio::co_spawn(
          io,
          [&, r]() -> asio::awaitable<void> {
            scope s;
            auto y = s.run([&] {
              auto x = full({8}, static_cast<float>(r));
              return (r == 0 ? gated(x, shared) : x + 1.0F).sum();
            });
            co_await s.when_all();
            total += y.item();  // computed: the scope covered it, so this does not block
            ++done;
          },
          asio::detached);
    }
    for (int i = 0; i < 2000 && done < 49; ++i) {
      io.run_for(5ms);
    }
    CHECK(done == 49);
    gate.open();
    io.run();
    CHECK(done == 50);
    CHECK(total == doctest::Approx(8.0 * (49.0 * 50.0 / 2.0 + 49.0)));
  }

  TEST_CASE("a scope with no ops completes at once" * doctest::timeout(10)) {
    scope s;
    s.wait();
    s.async_wait(asio::use_future).get();
  }
}
