// Run by mpirun on 2 and 3 ranks (tests/distributed/CMakeLists.txt): every rank runs every case,
// in the same order, and checks its own results against a sequential computation.

#include "cotensor/distributed.hpp"
#include <cotensor/cotensor.hpp>

#include "support/run.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

// Collectives among other ops: ordered with the compute around them, started in issue order,
// many in flight, driven by waits that spin, and awaited by coroutines.

namespace {

using namespace cotensor;
namespace d = cotensor::dist;

// A tensor of `n` floats set to `x` after `delay`, by an op that completes on its own thread.
tensor produced_after(std::chrono::milliseconds delay, std::size_t n, float x) {
  tensor t = zeros({static_cast<std::int64_t>(n)});
  async_op("delayed", {}, {t}, [delay, x](async_op_context& ctx, async_op_done done) {
    std::thread([w = ctx.write(0), delay, x, done = std::move(done)]() mutable {
      std::this_thread::sleep_for(delay);
      std::fill(w.begin(), w.end(), x);
      done();
    }).detach();
  });
  return t;
}

}  // namespace

TEST_SUITE("distributed") {
  TEST_CASE("a collective is ordered with the compute before and after it" * doctest::timeout(60)) {
    const auto c = d::communicator::world();
    tensor t = ones({1000}) * static_cast<float>(c.rank());
    t += 1.0F;  // rank + 1
    d::all_reduce(t);
    t *= 2.0F;  // twice the sum of 1..size
    tensor u = t + 1.0F;
    const float want = static_cast<float>(c.size() * (c.size() + 1)) + 1.0F;
    for (float x : u.to_vector()) {
      CHECK(x == want);
    }
  }

  TEST_CASE("collectives start in issue order whatever order their inputs are ready in" *
            doctest::timeout(60)) {
    const auto c = d::communicator::world();
    using std::chrono::milliseconds;
    // Rank 0's first input is late, every other rank's second: starting in readiness order
    // would pair rank 0's `b` with the others' `a`.
    const bool first_late = c.rank() == 0;
    tensor a = produced_after(milliseconds(first_late ? 300 : 0), 64, 1.0F);
    tensor b = produced_after(milliseconds(first_late ? 0 : 300), 128, 2.0F);
    d::all_reduce(a);
    d::all_reduce(b);
    tensor g = d::all_gather(b);
    wait_all();
    for (float x : a.to_vector()) {
      CHECK(x == static_cast<float>(c.size()));
    }
    for (float x : b.to_vector()) {
      CHECK(x == static_cast<float>(2 * c.size()));
    }
    CHECK(g.shape() == shape{c.size(), 128});
  }

  TEST_CASE("fifty collectives in flight complete" * doctest::timeout(60)) {
    const auto c = d::communicator::world();
    std::vector<tensor> ts;
    for (int i = 0; i < 50; ++i) {
      ts.push_back(full({257}, static_cast<float>(i + c.rank())));
      d::all_reduce(ts.back(), i % 2 == 0 ? d::reduce_op::sum : d::reduce_op::max);
    }
    wait_all();
    const int n = c.size();
    for (int i = 0; i < 50; ++i) {
      const float want =
          i % 2 == 0 ? static_cast<float>(n * i + n * (n - 1) / 2) : static_cast<float>(i + n - 1);
      const auto got = ts[static_cast<std::size_t>(i)].to_vector();
      CHECK(got.front() == want);
      CHECK(got.back() == want);
    }
  }

  // Run with and without COTENSOR_WAIT_SPIN_US (distributed.np2.spin, np3.spin_fusion).
  TEST_CASE("a wait that spins drives the collectives while the communication thread sleeps" *
            doctest::timeout(60)) {
    const auto world = d::communicator::world();
    const auto c = world.split(0, world.rank());  // its own count of helped steps
    const int n = c.size();
    // Lone all-reduces, each waited for: the waiter finds the op started, or starts it.
    tensor t = full({256}, static_cast<float>(c.rank()));
    for (int i = 0; i < 100; ++i) {
      d::all_reduce(t, d::reduce_op::max, c);
      t.wait();
    }
    CHECK(t.to_vector() == std::vector<float>(256, static_cast<float>(n - 1)));
    // Sixteen in flight, then wait_all: what the thread started, the waiter may finish.
    std::vector<tensor> ts;
    for (int i = 0; i < 16; ++i) {
      ts.push_back(full({1000}, static_cast<float>(i)));
      d::all_reduce(ts.back(), d::reduce_op::sum, c);
    }
    wait_all();
    for (int i = 0; i < 16; ++i) {
      CHECK(ts[static_cast<std::size_t>(i)].to_vector().back() == static_cast<float>(n * i));
    }
    if (runtime::current().options().wait_spin.count() > 0) {
      CHECK(c.helped_count() > 0);
    } else {
      CHECK(c.helped_count() == 0);  // no waiter ever spins
    }
  }

  TEST_CASE("a coroutine awaits a collective" * doctest::timeout(60)) {
    const auto c = d::communicator::world();
    const float total = test::run_to_completion([&]() -> asio::awaitable<float> {
      tensor t = full({16}, 1.0F);
      d::all_reduce(t);
      co_await t.ready();
      co_return t.to_vector().front();
    });
    CHECK(total == static_cast<float>(c.size()));
  }
}  // TEST_SUITE
