#include "cotensor/wait.hpp"

#include <cotensor/cotensor.hpp>

#include "compare.hpp"
#include "support/run.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <doctest/doctest.h>

#include <exception>
#include <thread>
#include <vector>

// Every way of waiting, on GPU tensors: the blocking waits (`wait`, `wait_all`, a scope's
// `wait`) and the asynchronous ones (`co_await t.ready()`, `when_all`, `async_wait` with other
// tokens, a scope's `when_all`). GPU work finishes on the GPU: the wait must not return before
// it has, and a coroutine must resume on its own executor.

using namespace cotensor;
using namespace cotensor::test::cuda;
using cotensor::test::run_to_completion;

namespace {

// A GPU result that takes a while: a chain of 16 products of 1024x1024 matrices, issued at
// once. Every element stays 2^-10 exactly (1024 terms of 2^-20); the result is 1 + 2^-10.
tensor slow_result() {
  auto x = full({1024, 1024}, 0x1p-10F, gpu);
  const auto w = full({1024, 1024}, 0x1p-10F, gpu);
  for (int i = 0; i < 16; ++i) {
    x = matmul(x, w);
  }
  return x + 1.0F;
}

constexpr float slow_value = 1.0F + 0x1p-10F;

// The coroutines below each await in one form and return the thread they resumed on.

asio::awaitable<std::thread::id> await_ready(tensor t) {
  co_await t.ready();
  co_return std::this_thread::get_id();
}

asio::awaitable<std::thread::id> await_when_all(tensor a, tensor b) {
  co_await when_all(a, b);
  co_return std::this_thread::get_id();
}

asio::awaitable<std::thread::id> await_everything() {
  co_await when_all();
  co_return std::this_thread::get_id();
}

asio::awaitable<std::thread::id> await_use_awaitable(tensor t) {
  co_await t.async_wait(asio::use_awaitable);
  co_return std::this_thread::get_id();
}

// Returns the completion's exception_ptr instead of rethrowing it.
asio::awaitable<std::exception_ptr> await_as_tuple(tensor t) {
  auto [error] = co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
  co_return error;
}

}  // namespace

TEST_SUITE("cuda.wait") {
  TEST_CASE("wait on a GPU tensor returns once its value is there" * doctest::timeout(30)) {
    const tensor y = slow_result();
    y.wait();
    y.wait();  // again: at once
    CHECK(y.to_vector() == std::vector<float>(1024 * 1024, slow_value));
  }

  TEST_CASE("wait_all waits for GPU work issued before it, and leaves nothing in flight" *
            doctest::timeout(30)) {
    std::vector<tensor> ys;
    for (int i = 0; i < 4; ++i) {
      ys.push_back(slow_result() + static_cast<float>(i));
    }
    wait_all();
    const auto stats = runtime::current().stats();
    CHECK(stats.in_flight == 0);
    CHECK(stats.live_ops == 0);
    for (std::size_t i = 0; i < ys.size(); ++i) {
      CHECK(ys[i].to_vector() ==
            std::vector<float>(1024 * 1024, slow_value + static_cast<float>(i)));
    }
  }

  TEST_CASE("co_await ready, when_all and async_wait on GPU tensors resume on the coroutine's "
            "thread" *
            doctest::timeout(30)) {
    // run_to_completion runs the io_context on this thread: each coroutine must resume here,
    // not on a backend thread or CUDA's callback thread.
    const auto here = std::this_thread::get_id();
    const tensor a = slow_result();
    CHECK(run_to_completion([a] { return await_ready(a); }) == here);
    CHECK(read_back(a) == std::vector<float>(1024 * 1024, slow_value));
    const tensor b = slow_result() * 2.0F;
    const tensor c = sum(b, 0);  // 1024 terms of 2 + 2^-9: exact
    CHECK(run_to_completion([b, c] { return await_when_all(b, c); }) == here);
    CHECK(read_back(b) == std::vector<float>(1024 * 1024, 2.0F * slow_value));
    CHECK(read_back(c) == std::vector<float>(1024, 2050.0F));
    const tensor d = slow_result() - 1.0F;
    CHECK(run_to_completion([] { return await_everything(); }) == here);
    CHECK(read_back(d) == std::vector<float>(1024 * 1024, slow_value - 1.0F));
    const tensor e = slow_result() + 1.0F;
    CHECK(run_to_completion([e] { return await_use_awaitable(e); }) == here);
    CHECK(read_back(e) == std::vector<float>(1024 * 1024, slow_value + 1.0F));
    const tensor f = transpose(slow_result());
    CHECK(run_to_completion([f] { return await_as_tuple(f); }) == nullptr);
    CHECK(read_back(f) == std::vector<float>(1024 * 1024, slow_value));
  }

  TEST_CASE("async_wait on a GPU tensor completes a future" * doctest::timeout(30)) {
    const tensor y = slow_result();
    auto done = y.async_wait(asio::use_future);
    done.get();
    CHECK(y.to_vector() == std::vector<float>(1024 * 1024, slow_value));
    auto all = async_wait_all(asio::use_future);
    all.get();
    CHECK(runtime::current().stats().in_flight == 0);
  }

  TEST_CASE("a scope waits for its GPU ops, blocking or awaited" * doctest::timeout(30)) {
    scope s;
    const tensor y = s.run([] { return relu(slow_result() - 0.5F); });
    s.wait();
    CHECK(y.to_vector() == std::vector<float>(1024 * 1024, slow_value - 0.5F));
    const tensor z = run_to_completion([]() -> asio::awaitable<tensor> {
      scope inner;
      tensor column_sums = inner.run([] { return sum(slow_result(), 0); });
      co_await inner.when_all();
      co_return column_sums;
    });
    CHECK(read_back(z) == std::vector<float>(1024, 1025.0F));
  }

  TEST_CASE("a failed op's error reaches every wait on GPU tensors computed from it" *
            doctest::timeout(30)) {
    // The kernel of a CPU map throws; the copy to the GPU and every GPU op after it are skipped
    // and hold that error.
    const auto bad = map(ones({4}), [](float) -> float { throw std::runtime_error("boom"); });
    const tensor on_gpu = bad.to(gpu);
    const tensor later = exp(on_gpu * 2.0F) + 1.0F;
    CHECK_THROWS_WITH_AS(later.wait(), "boom", std::runtime_error);
    CHECK_THROWS_WITH_AS((void)later.to_vector(), "boom", std::runtime_error);
    CHECK_THROWS_WITH_AS((void)sum(later).item(), "boom", std::runtime_error);
    CHECK_THROWS_WITH_AS((void)later.to(device::cpu()).to_vector(), "boom", std::runtime_error);
    const bool rethrown = run_to_completion([later]() -> asio::awaitable<bool> {
      try {
        co_await later.ready();
      } catch (const std::runtime_error&) {
        co_return true;
      }
      co_return false;
    });
    CHECK(rethrown);
    scope s;
    const tensor in_scope = s.run([&] { return later * 3.0F; });
    CHECK_THROWS_WITH_AS(s.wait(), "boom", std::runtime_error);
    CHECK_THROWS_WITH_AS(in_scope.wait(), "boom", std::runtime_error);
    CHECK_NOTHROW(wait_all());  // errors belong to tensors, not to wait_all
    // Other GPU work is not affected.
    CHECK(read_back(full({4}, 2.0F, gpu) + 1.0F) == std::vector<float>(4, 3.0F));
  }
}
