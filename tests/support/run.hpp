#pragma once

// Test support: running coroutines to completion and comparing tensors.

#include <cotensor/cotensor.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include <chrono>
#include <future>
#include <stdexcept>
#include <utility>

namespace cotensor::test {

namespace asio = boost::asio;

/// Runs the awaitable made by `make()` on a fresh single-threaded io_context until it finishes;
/// returns its value, rethrows its exception. Fails (throws) if it does not finish in `limit`.
template <class MakeAwaitable>
auto run_to_completion(MakeAwaitable make, std::chrono::seconds limit = std::chrono::seconds(30)) {
  asio::io_context io;
  auto future = asio::co_spawn(io, make(), asio::use_future);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (future.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    if (std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error("run_to_completion: the coroutine did not finish in time");
    }
    io.run_one_for(std::chrono::milliseconds(50));
  }
  // Like any Asio user, let outstanding work (a completion still being posted by a backend
  // thread) drain before the io_context is destroyed.
  io.run();
  return future.get();
}

/// A 1-element tensor holding the value of `x`, computed by `map` once `gate` opens: lets a test
/// hold an op on the backend until it decides. `gate` is a `cotensor::test::gate`'s future
/// (support/gate.hpp), ready once the test opens it.
inline tensor gated(const tensor& x, std::shared_future<void> gate) {
  return map(x, [gate](float v) {
    gate.wait();
    return v;
  });
}

}  // namespace cotensor::test
