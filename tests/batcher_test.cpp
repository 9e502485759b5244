#include "cotensor/batcher.hpp"

#include "cotensor/ops.hpp"

#include "support/gate.hpp"
#include "support/run.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <future>
#include <optional>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <vector>

namespace {

using namespace cotensor;
using namespace std::chrono_literals;
using result = std::tuple<std::exception_ptr, std::vector<float>>;

// An io_context that, before it is destroyed, runs until no work is left: a backend thread may
// still hold a work-tracking copy of its executor just after posting a completion that the test
// already saw (destroying the context then would be a use after free).
struct drained_io_context : asio::io_context {
  drained_io_context() = default;
  drained_io_context(const drained_io_context&) = delete;
  drained_io_context& operator=(const drained_io_context&) = delete;
  ~drained_io_context() {
    restart();
    run_for(std::chrono::seconds(20));
  }
};

// Runs `io` until `done()` or the deadline; returns whether `done()` became true.
template <class Done>
bool run_until(asio::io_context& io, Done done, std::chrono::seconds limit = 20s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    io.run_one_for(10ms);
  }
  return done();
}

// Submits `row` with a callback that stores the result in `*out`.
void submit(batcher& b, std::vector<float> row, std::optional<result>* out) {
  b.async_submit(std::move(row), [out](std::exception_ptr e, std::vector<float> v) {
    out->emplace(std::move(e), std::move(v));
  });
}

std::error_code code_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::system_error& err) {
    return err.code();
  } catch (...) {
    return {};
  }
}

bool is_aborted(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const boost::system::system_error& err) {
    return err.code() == asio::error::operation_aborted;
  } catch (...) {
    return false;
  }
}

}  // namespace

TEST_SUITE("batcher") {

  TEST_CASE("rows submitted within one window share one batch and each gets its own row" *
            doctest::timeout(30)) {
    drained_io_context io;
    batcher b(io.get_executor(), 2, 2, [](const tensor& x) { return x * 2.0f + 1.0f; },
              {.max_batch_rows = 8, .window = 200ms});
    std::vector<std::optional<result>> out(5);
    for (int i = 0; i < 5; ++i) {
      submit(b, {float(i), float(10 * i)}, &out[i]);
    }
    REQUIRE(run_until(io, [&] {
      return std::all_of(out.begin(), out.end(), [](auto& r) { return r.has_value(); });
    }));
    for (int i = 0; i < 5; ++i) {
      REQUIRE(out[i].has_value());
      CHECK_FALSE(std::get<0>(*out[i]));
      CHECK(std::get<1>(*out[i]) == std::vector<float>{2.0f * i + 1, 20.0f * i + 1});
    }
    const auto s = b.stats();
    CHECK(s.batches == 1);
    CHECK(s.rows == 5);
    CHECK(s.submitted == 5);
    CHECK(s.batch_rows_log2[3] == 1);  // 5 rows: in (4, 8]
  }

  TEST_CASE("a full batch runs without waiting for the window" * doctest::timeout(30)) {
    drained_io_context io;
    batcher b(io.get_executor(), 1, 1, [](const tensor& x) { return x + 1.0f; },
              {.max_batch_rows = 4, .window = std::chrono::hours(1)});
    std::vector<std::optional<result>> out(4);
    for (int i = 0; i < 4; ++i) {
      submit(b, {float(i)}, &out[i]);
    }
    REQUIRE(run_until(io, [&] { return out[3].has_value(); }));
    CHECK(std::get<1>(*out[3]) == std::vector<float>{4.0f});
    CHECK(b.stats().batches == 1);
  }

  TEST_CASE("a batch function of the wrong shape fails that batch's waiters" *
            doctest::timeout(30)) {
    auto [error, rows] = test::run_to_completion([]() -> asio::awaitable<result> {
      batcher b(co_await asio::this_coro::executor, 3, 1, [](const tensor& x) { return sum(x, 1); },
                {.max_batch_rows = 4, .window = 1ms});
      std::vector<float> in(6, 1.0f);  // (no braced lists in g++ 12 coroutines)
      co_return co_await b.async_submit(std::move(in), asio::as_tuple(asio::use_awaitable));
    });
    CHECK(error);
    CHECK(rows.empty());
    CHECK_THROWS_AS(std::rethrow_exception(error), std::invalid_argument);
  }

  TEST_CASE("use_awaitable returns the output rows of a multi-row submission" *
            doctest::timeout(30)) {
    auto rows = test::run_to_completion([]() -> asio::awaitable<std::vector<float>> {
      batcher b(co_await asio::this_coro::executor, 3, 1,
                [](const tensor& x) {
                  return reshape(sum(x, 1), {x.shape()[0], 1});
                },
                {.max_batch_rows = 4, .window = 1ms});
      std::vector<float> in(6);
      for (std::size_t i = 0; i < in.size(); ++i) {
        in[i] = float(i + 1);
      }
      co_return co_await b.async_submit(std::move(in), asio::use_awaitable);
    });
    CHECK(rows == std::vector<float>{6, 15});
  }

  TEST_CASE("a failing batch op reaches every waiter of that batch and only them" *
            doctest::timeout(30)) {
    drained_io_context io;
    batcher b(io.get_executor(), 1, 1,
              [](const tensor& x) {
                return map(x, [](float v) {
                  if (v < 0) {
                    throw std::runtime_error("negative input");
                  }
                  return v;
                });
              },
              {.max_batch_rows = 2, .window = std::chrono::hours(1)});
    std::vector<std::optional<result>> out(4);
    submit(b, {-1.0f}, &out[0]);
    submit(b, {1.0f}, &out[1]);
    submit(b, {2.0f}, &out[2]);
    submit(b, {3.0f}, &out[3]);
    REQUIRE(run_until(io, [&] {
      return std::all_of(out.begin(), out.end(), [](auto& r) { return r.has_value(); });
    }));
    CHECK_THROWS_WITH_AS(std::rethrow_exception(std::get<0>(*out[0])), "negative input",
                         std::runtime_error);
    CHECK(std::get<0>(*out[1]));
    CHECK_FALSE(std::get<0>(*out[2]));
    CHECK(std::get<1>(*out[3]) == std::vector<float>{3.0f});
    CHECK(b.stats().failed == 2);
  }

  TEST_CASE("cancelling one waiter leaves the others of its batch their rows" *
            doctest::timeout(30)) {
    drained_io_context io;
    test::gate gate;
    batcher b(io.get_executor(), 1, 1,
              [opened = gate.future()](const tensor& x) { return test::gated(x, opened) * 10.0f; },
              {.max_batch_rows = 3, .window = std::chrono::hours(1)});
    asio::cancellation_signal cancel;
    std::vector<std::optional<result>> out(3);
    submit(b, {1.0f}, &out[0]);
    b.async_submit({2.0f}, asio::bind_cancellation_slot(
                               cancel.slot(), [&](std::exception_ptr e, std::vector<float> v) {
                                 out[1].emplace(std::move(e), std::move(v));
                               }));
    submit(b, {3.0f}, &out[2]);  // the batch is full: it runs, held by the gate
    cancel.emit(asio::cancellation_type::terminal);
    REQUIRE(run_until(io, [&] { return out[1].has_value(); }));
    CHECK(is_aborted(std::get<0>(*out[1])));
    CHECK_FALSE(out[0].has_value());  // still held by the gate
    gate.open();
    REQUIRE(run_until(io, [&] { return out[0].has_value() && out[2].has_value(); }));
    CHECK(std::get<1>(*out[0]) == std::vector<float>{10.0f});
    CHECK(std::get<1>(*out[2]) == std::vector<float>{30.0f});
  }

  TEST_CASE("a cancelled waiter's queued row leaves the queue and never runs" *
            doctest::timeout(30)) {
    drained_io_context io;
    batcher b(io.get_executor(), 1, 1, [](const tensor& x) { return x; },
              {.max_batch_rows = 4, .window = std::chrono::hours(1)});
    asio::cancellation_signal cancel;
    std::optional<result> out;
    b.async_submit({2.0f}, asio::bind_cancellation_slot(
                               cancel.slot(), [&](std::exception_ptr e, std::vector<float> v) {
                                 out.emplace(std::move(e), std::move(v));
                               }));
    CHECK(b.stats().queue_rows == 1);
    cancel.emit(asio::cancellation_type::partial);
    REQUIRE(run_until(io, [&] { return out.has_value(); }));
    CHECK(is_aborted(std::get<0>(*out)));
    CHECK(b.stats().queue_rows == 0);
    CHECK(b.stats().cancelled == 1);
    b.shutdown();
    CHECK(b.stats().batches == 0);
  }

  TEST_CASE("a full queue refuses new rows with queue_full and later serves again" *
            doctest::timeout(30)) {
    drained_io_context io;
    test::gate gate;
    batcher b(io.get_executor(), 1, 1,
              [opened = gate.future()](const tensor& x) { return test::gated(x, opened); },
              {.max_batch_rows = 2,
               .window = std::chrono::hours(1),
               .max_queue_rows = 2,
               .max_running_batches = 1});
    std::vector<std::optional<result>> out(6);
    submit(b, {1.0f}, &out[0]);
    submit(b, {2.0f}, &out[1]);  // runs, held by the gate
    submit(b, {3.0f}, &out[2]);
    submit(b, {4.0f}, &out[3]);  // queued: one batch runs already
    submit(b, {5.0f}, &out[4]);  // refused
    REQUIRE(run_until(io, [&] { return out[4].has_value(); }));
    CHECK(code_of(std::get<0>(*out[4])) == batcher_errc::queue_full);
    CHECK(b.stats().rejected == 1);
    CHECK(b.stats().queue_rows == 2);
    gate.open();
    REQUIRE(run_until(io, [&] { return out[3].has_value(); }));
    CHECK(std::get<1>(*out[3]) == std::vector<float>{4.0f});
    submit(b, {6.0f}, &out[5]);
    b.shutdown();  // runs the partial batch at once
    REQUIRE(run_until(io, [&] { return out[5].has_value(); }));
    CHECK(std::get<1>(*out[5]) == std::vector<float>{6.0f});
  }

  TEST_CASE("with start_when_idle a lone row runs at once and later rows gather behind it" *
            doctest::timeout(30)) {
    drained_io_context io;
    test::gate gate;
    batcher b(io.get_executor(), 1, 1,
              [opened = gate.future()](const tensor& x) { return test::gated(x, opened); },
              {.max_batch_rows = 8,
               .window = std::chrono::hours(1),
               .max_running_batches = 1,
               .start_when_idle = true});
    std::vector<std::optional<result>> out(4);
    submit(b, {1.0f}, &out[0]);  // idle: runs at once, held by the gate
    CHECK(b.stats().batches == 1);
    for (int i = 1; i < 4; ++i) {
      submit(b, {float(i + 1)}, &out[std::size_t(i)]);  // a batch runs: these gather
    }
    CHECK(b.stats().queue_rows == 3);
    gate.open();
    REQUIRE(run_until(io, [&] {
      return std::all_of(out.begin(), out.end(), [](auto& r) { return r.has_value(); });
    }));
    CHECK(std::get<1>(*out[3]) == std::vector<float>{4.0f});
    CHECK(b.stats().batches == 2);  // the three gathered rows ran as one batch
  }

  TEST_CASE("with start_when_idle the first row back after a batch waits for the others" *
            doctest::timeout(30)) {
    drained_io_context io;
    test::gate gate;
    batcher b(io.get_executor(), 1, 1,
              [opened = gate.future()](const tensor& x) { return test::gated(x, opened); },
              {.max_batch_rows = 8,
               .window = std::chrono::hours(1),
               .max_running_batches = 1,
               .start_when_idle = true});
    std::vector<std::optional<result>> out(5);
    submit(b, {1.0f}, &out[0]);  // idle: runs at once
    submit(b, {2.0f}, &out[1]);  // these two gather behind it
    submit(b, {3.0f}, &out[2]);
    gate.open();
    REQUIRE(run_until(io, [&] { return out[2].has_value(); }));
    REQUIRE(b.stats().batches == 2);  // the last batch had two rows
    submit(b, {4.0f}, &out[3]);       // right after it: waits (the window is an hour)
    CHECK(b.stats().batches == 2);
    CHECK(b.stats().queue_rows == 1);
    submit(b, {5.0f}, &out[4]);  // as many rows as the last batch had: they run
    CHECK(b.stats().batches == 3);
    REQUIRE(run_until(io, [&] { return out[4].has_value(); }));
    CHECK(std::get<1>(*out[3]) == std::vector<float>{4.0f});
    CHECK(std::get<1>(*out[4]) == std::vector<float>{5.0f});
  }

  TEST_CASE("after shutdown a submission completes with closed" * doctest::timeout(30)) {
    drained_io_context io;
    batcher b(io.get_executor(), 1, 1, [](const tensor& x) { return x; });
    b.shutdown();
    std::optional<result> out;
    submit(b, {1.0f}, &out);
    CHECK_FALSE(out.has_value());  // never inside the call
    REQUIRE(run_until(io, [&] { return out.has_value(); }));
    CHECK(code_of(std::get<0>(*out)) == batcher_errc::closed);
  }

  TEST_CASE("a bad number of floats throws at the call and queues nothing") {
    drained_io_context io;
    batcher b(io.get_executor(), 3, 1, [](const tensor& x) { return x; }, {.max_batch_rows = 2});
    auto ignore = [](std::exception_ptr, std::vector<float>) {};
    CHECK_THROWS_AS(b.async_submit({1, 2}, ignore), std::invalid_argument);
    CHECK_THROWS_AS(b.async_submit({}, ignore), std::invalid_argument);
    CHECK_THROWS_AS(b.async_submit(std::vector<float>(9), ignore), std::invalid_argument);
    CHECK(b.stats().queue_rows == 0);
    CHECK_THROWS_AS(batcher(io.get_executor(), 0, 1, [](const tensor& x) { return x; }),
                    std::invalid_argument);
  }

  TEST_CASE("many coroutines on two threads each get their own row" * doctest::timeout(60)) {
    drained_io_context io;
    batcher b(io.get_executor(), 4, 4, [](const tensor& x) { return x * 3.0f; },
              {.max_batch_rows = 16, .window = 200us});
    constexpr int n = 300;
    std::atomic<int> good{0};
    for (int i = 0; i < n; ++i) {
      asio::co_spawn(
          io,
          [&, i]() -> asio::awaitable<void> {
            std::vector<float> row(4, float(i));
            auto out = co_await b.async_submit(row, asio::use_awaitable);
            if (out == std::vector<float>(4, 3.0f * i)) {
              ++good;
            }
          },
          asio::detached);
    }
    std::thread helper([&] { io.run_for(30s); });
    io.run_for(30s);
    helper.join();
    CHECK(good == n);
    CHECK(b.stats().rows == n);
    CHECK(b.stats().batches < n);  // some batching happened
  }

  TEST_CASE("rows of int64 token ids batch as tensors, mixed with float submissions" *
            doctest::timeout(30)) {
    drained_io_context io;
    // An embedding lookup: int64 ids in, float16 vectors out.
    const tensor table = (arange(10, dtype::float32) * 0.5).astype(dtype::float16);
    batcher b(io.get_executor(), 1, 1,
              [&](const tensor& ids) {
                const std::int64_t k = ids.shape()[0];
                return reshape(index_select(table, 0, reshape(ids, {k})), {k, 1});
              },
              {.max_batch_rows = 8, .window = 200ms, .in_dtype = dtype::int64});
    using tensor_result = std::tuple<std::exception_ptr, tensor>;
    std::optional<tensor_result> a;
    std::optional<tensor_result> c;
    std::optional<result> f;
    b.async_submit(from_vector(std::vector<std::int64_t>{3, 7}, {2, 1}),
                   [&](std::exception_ptr e, tensor t) { a.emplace(std::move(e), std::move(t)); });
    submit(b, {4.0F}, &f);  // floats: converted to int64 for the batch, float32 back
    b.async_submit(from_vector(std::vector<std::int64_t>{9}, {1, 1}),
                   [&](std::exception_ptr e, tensor t) { c.emplace(std::move(e), std::move(t)); });
    REQUIRE(run_until(io, [&] { return a && c && f; }));
    REQUIRE_FALSE(std::get<0>(*a));
    REQUIRE_FALSE(std::get<0>(*c));
    REQUIRE_FALSE(std::get<0>(*f));
    const tensor& ta = std::get<1>(*a);
    CHECK(ta.dtype() == dtype::float16);
    CHECK(ta.shape() == shape{2, 1});
    CHECK(ta.to_vector<double>() == std::vector<double>{1.5, 3.5});
    CHECK(std::get<1>(*c).to_vector<double>() == std::vector<double>{4.5});
    CHECK(std::get<1>(*f) == std::vector<float>{2.0F});
    CHECK(b.stats().batches == 1);
    CHECK(b.stats().rows == 4);
  }

  TEST_CASE("tensor rows of the wrong dtype, shape, count or device throw at the call") {
    drained_io_context io;
    batcher b(io.get_executor(), 2, 2, [](const tensor& x) { return x; },
              {.max_batch_rows = 2, .in_dtype = dtype::int32});
    const auto ignore = [](std::exception_ptr, tensor) {};
    CHECK_THROWS_WITH_AS(b.async_submit(zeros({1, 2}, dtype::int64), ignore),
                         doctest::Contains("int64"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(b.async_submit(zeros({1, 3}, dtype::int32), ignore),
                         doctest::Contains("[1, 3]"), std::invalid_argument);
    CHECK_THROWS_AS(b.async_submit(zeros({3, 2}, dtype::int32), ignore), std::invalid_argument);
    CHECK_THROWS_AS(b.async_submit(zeros({0, 2}, dtype::int32), ignore), std::invalid_argument);
    CHECK_THROWS_AS(b.async_submit(zeros({2}, dtype::int32), ignore), std::invalid_argument);
    CHECK(b.stats().submitted == 0);
  }
}
