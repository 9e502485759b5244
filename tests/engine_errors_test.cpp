// The umbrella header first: it must compile on its own.
#include <cotensor/cotensor.hpp>
// Test support and dependencies.
#include "engine_support.hpp"
#include "support/gate.hpp"
#include "support/run.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <doctest/doctest.h>

#include <chrono>
#include <exception>
#include <future>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

// The dependency engine's errors: an op's exception reaches every dependent op and every way of
// waiting, and the runtime keeps computing.

namespace {

namespace asio = boost::asio;
using cotensor::tensor;
using cotensor::test::filled;
using cotensor::test::gate;
using cotensor::test::gated;
using cotensor::test::run_to_completion;
using cotensor::test::still_pending;
using cotensor::test::values;

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

}  // namespace

TEST_SUITE("engine") {
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
}  // TEST_SUITE("engine")
