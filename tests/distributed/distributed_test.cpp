// Run by mpirun on 2 and 3 ranks (tests/distributed/CMakeLists.txt): every rank runs every case,
// in the same order, and checks its own results against a sequential computation.
#include "cotensor/distributed.hpp"

#include <cotensor/cotensor.hpp>

#include "support/run.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace {

using namespace cotensor;
namespace d = cotensor::dist;

// Rank r's value at i, so that every rank can compute every other rank's input.
float value(int r, std::size_t i) {
  return static_cast<float>((r + 1) * 10 + static_cast<int>(i % 7));
}

tensor input(int r, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = value(r, i);
  }
  return from_vector(std::move(v), {static_cast<std::int64_t>(n)});
}

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

  TEST_CASE("every collective matches a sequential computation" * doctest::timeout(60)) {
    const auto c = d::communicator::world();
    const int n = c.size();
    const int me = c.rank();
    CHECK(n >= 2);
    constexpr std::size_t len = 6 * 5;  // divides by 2 and 3
    SUBCASE("all_reduce") {
      for (auto op : {d::reduce_op::sum, d::reduce_op::avg, d::reduce_op::max, d::reduce_op::min}) {
        tensor t = input(me, len);
        d::all_reduce(t, op);
        const auto got = t.to_vector();
        for (std::size_t i = 0; i < len; ++i) {
          float want = value(0, i);
          for (int r = 1; r < n; ++r) {
            const float v = value(r, i);
            want = op == d::reduce_op::max   ? std::max(want, v)
                   : op == d::reduce_op::min ? std::min(want, v)
                                             : want + v;
          }
          if (op == d::reduce_op::avg) {
            want /= static_cast<float>(n);
          }
          CHECK(got[i] == doctest::Approx(want));
        }
      }
    }
    SUBCASE("broadcast") {
      tensor t = input(me, len);
      d::broadcast(t, n - 1);
      const auto got = t.to_vector();
      for (std::size_t i = 0; i < len; ++i) {
        CHECK(got[i] == value(n - 1, i));
      }
    }
    SUBCASE("all_gather") {
      tensor t = reshape(input(me, len), {5, 6});
      tensor g = d::all_gather(t);
      CHECK(g.shape() == shape{n, 5, 6});
      const auto got = g.to_vector();
      for (int r = 0; r < n; ++r) {
        for (std::size_t i = 0; i < len; ++i) {
          CHECK(got[static_cast<std::size_t>(r) * len + i] == value(r, i));
        }
      }
    }
    SUBCASE("reduce_scatter") {
      tensor t = reshape(input(me, len), {6, 5});
      tensor s = d::reduce_scatter(t, d::reduce_op::avg);
      CHECK(s.shape() == shape{6 / n, 5});
      const auto got = s.to_vector();
      const std::size_t block = len / static_cast<std::size_t>(n);
      for (std::size_t i = 0; i < block; ++i) {
        float want = 0;
        for (int r = 0; r < n; ++r) {
          want += value(r, static_cast<std::size_t>(me) * block + i);
        }
        CHECK(got[i] == doctest::Approx(want / static_cast<float>(n)));
      }
    }
    SUBCASE("send and recv around a ring") {
      tensor out = input(me, len);
      tensor in = zeros({static_cast<std::int64_t>(len)});
      d::send(out, (me + 1) % n, 7);
      d::recv(in, (me + n - 1) % n, 7);
      const auto got = in.to_vector();
      for (std::size_t i = 0; i < len; ++i) {
        CHECK(got[i] == value((me + n - 1) % n, i));
      }
    }
  }

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

  TEST_CASE("an error in an input passes on, and the other ranks still complete" *
            doctest::timeout(60)) {
    const auto c = d::communicator::world();
    tensor t = full({8}, 1.0F);
    if (c.rank() == 0) {
      try {
        async_op("fails", {}, {t}, [](async_op_context&, async_op_done) {
          throw std::runtime_error("producer failed");
        });
      } catch (const std::runtime_error&) {
        // The synchronous engine (COTENSOR_ENGINE=naive) throws at the call; t holds the error.
      }
    }
    d::all_reduce(t);
    if (c.rank() == 0) {
      CHECK_THROWS_WITH_AS(t.wait(), "producer failed", std::runtime_error);
    } else {
      // Rank 0 took part with zeros.
      CHECK(t.to_vector().front() == static_cast<float>(c.size() - 1));
    }
    // The group is still in step.
    tensor u = full({4}, 1.0F);
    d::all_reduce(u);
    CHECK(u.to_vector().front() == static_cast<float>(c.size()));
  }

  TEST_CASE("bad arguments throw at the call" * doctest::timeout(60)) {
    const auto c = d::communicator::world();
    tensor empty;
    tensor t = ones({3});
    CHECK_THROWS_AS(d::all_reduce(empty), std::invalid_argument);
    CHECK_THROWS_AS(d::broadcast(t, c.size()), std::invalid_argument);
    CHECK_THROWS_AS(d::broadcast(t, -1), std::invalid_argument);
    CHECK_THROWS_AS(d::send(t, c.size(), 0), std::invalid_argument);
    CHECK_THROWS_AS(d::recv(t, -1, 0), std::invalid_argument);
    CHECK_THROWS_AS(d::send(t, 0, -2), std::invalid_argument);
    CHECK_THROWS_AS(d::reduce_scatter(ones({c.size() * 2 + 1, 2})), std::invalid_argument);
    CHECK_THROWS_AS(c.split(-1, 0), std::invalid_argument);
    // None of them was issued: the group is still in step.
    d::all_reduce(t);
    CHECK(t.to_vector().front() == static_cast<float>(c.size()));
  }

  TEST_CASE("a split groups ranks by color" * doctest::timeout(60)) {
    const auto c = d::communicator::world();
    const auto half = c.split(c.rank() % 2, c.rank());
    CHECK(half.size() == (c.size() + 1 - c.rank() % 2) / 2);
    CHECK(half.rank() == c.rank() / 2);
    tensor t = full({5}, static_cast<float>(c.rank()));
    d::all_reduce(t, d::reduce_op::sum, half);
    float want = 0;
    for (int r = c.rank() % 2; r < c.size(); r += 2) {
      want += static_cast<float>(r);
    }
    CHECK(t.to_vector().front() == want);
  }

  bool check_mode() {
    const char* s = std::getenv("COTENSOR_DIST_CHECK");
    return s != nullptr && std::string(s) == "1";
  }

  TEST_CASE("COTENSOR_DIST_CHECK fails collectives that differ instead of hanging" *
            doctest::timeout(60)) {
    const auto world = d::communicator::world();
    const auto group = world.split(0, world.rank());
    if (!check_mode()) {
      return;
    }
    tensor t = full({static_cast<std::int64_t>(4 + world.rank())}, 1.0F);
    // The synchronous engine (COTENSOR_ENGINE=naive) throws at the call, the threaded one at
    // the wait.
    auto run = [&] {
      d::all_reduce(t, d::reduce_op::sum, group);
      t.wait();
    };
    CHECK_THROWS_WITH_AS(run(), doctest::Contains("issued in different orders"),
                         std::runtime_error);
    CHECK(group.broken());
  }

  TEST_CASE("a collective that does not complete in time breaks its communicator" *
            doctest::timeout(60)) {
    const auto world = d::communicator::world();
    if (check_mode()) {
      return;  // the late rank's check would pair with the abandoned one's, not its collective
    }
    const auto pair = world.split(world.rank() < 2 ? 0 : 1, world.rank());
    if (world.rank() < 2) {
      pair.set_timeout(std::chrono::milliseconds(500));
      tensor t = full({3}, 1.0F);
      if (world.rank() == 0) {
        // Rank 1 joins only after rank 0 has given up.
        try {
          d::all_reduce(t, d::reduce_op::sum, pair);  // the naive engine throws here
          t.wait();
          FAIL("no timeout");
        } catch (const std::system_error& e) {
          CHECK(e.code() == std::errc::timed_out);
        }
        CHECK(pair.broken());
        tensor u = full({3}, 1.0F);
        auto later = [&] {
          d::all_reduce(u, d::reduce_op::sum, pair);
          u.wait();
        };
        CHECK_THROWS_AS(later(), std::system_error);
      }
      tensor sync = ones({1});
      d::all_reduce(sync);  // rank 1 waits here until rank 0 has seen its timeout
      sync.wait();
      if (world.rank() == 1) {
        pair.set_timeout(std::chrono::seconds(30));
        d::all_reduce(t, d::reduce_op::sum, pair);  // completes rank 0's abandoned request too
        t.wait();
      }
    } else {
      tensor sync = ones({1});
      d::all_reduce(sync);
      sync.wait();
    }
  }

}  // TEST_SUITE
