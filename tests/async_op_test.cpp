#include "cotensor/async_op.hpp"

#include <cotensor/cotensor.hpp>

#include "async_op_support.hpp"
#include "engine/faults.hpp"
#include "engine/storage.hpp"
#include "frontend/frontend.hpp"
#include "support/gate.hpp"
#include "support/run.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

// Ops that complete later (`async_op`): the op ends when its completion is invoked, from any
// thread, and everything that follows an op's end (dependents, waits, wait_all, scopes,
// admission, errors) follows it then.

using namespace cotensor;
using cotensor::test::fails_with;
using cotensor::test::run_to_completion;
using namespace std::chrono_literals;
namespace asio = boost::asio;

namespace {

std::error_code error_of(const tensor& t) {
  try {
    t.wait();
  } catch (const std::system_error& e) {
    return e.code();
  } catch (...) {
  }
  return {};
}

}  // namespace

TEST_SUITE("async_op") {
  TEST_CASE("an op completed from another thread releases its result to dependents and waits" *
            doctest::timeout(20)) {
    auto x = full({4}, 2.0F);
    auto y = zeros({4});
    std::atomic<bool> ended{false};
    async_op("fill_later", {x}, {y}, [&ended](async_op_context& ctx, async_op_done done) {
      REQUIRE(ctx.reads() == 1);
      REQUIRE(ctx.writes() == 1);
      CHECK(ctx.read(0).size() == 4);
      const float in = ctx.read(0)[0];
      std::thread([out = ctx.write(0), in, done = std::move(done), &ended]() mutable {
        std::this_thread::sleep_for(30ms);
        std::fill(out.begin(), out.end(), in * 10.0F);
        ended = true;
        done();
      }).detach();
    });
    auto z = y + 1.0F;  // issued before the op ends: ordered after it by the engine
    CHECK(z.to_vector() == std::vector<float>{21, 21, 21, 21});
    CHECK(ended.load());
    CHECK(y.to_vector() == std::vector<float>{20, 20, 20, 20});
  }

  TEST_CASE("the completion runs no dependent on the thread that invokes it" *
            doctest::timeout(20)) {
    auto y = zeros({8});
    std::promise<std::thread::id> completer;
    async_op("later", {}, {y}, [&completer](async_op_context& ctx, async_op_done done) {
      std::thread([out = ctx.write(0), done = std::move(done), &completer]() mutable {
        std::fill(out.begin(), out.end(), 1.0F);
        completer.set_value(std::this_thread::get_id());
        done();
        std::this_thread::sleep_for(20ms);  // anything run inline would run before this returns
      }).detach();
    });
    std::atomic<std::thread::id> ran_on{};
    auto z = map(y, [&ran_on](float v) {
      ran_on = std::this_thread::get_id();
      return v + 1.0F;
    });
    CHECK(z.to_vector() == std::vector<float>(8, 2.0F));
    CHECK(ran_on.load() != completer.get_future().get());
  }

  TEST_CASE("invoking the completion only hands the op back: its end runs on a backend thread" *
            doctest::timeout(20)) {
    // The op's end is held back 300 ms on whichever thread runs it (fault injection): invoking
    // the completion must return at once, with the op still in flight.
    auto y = zeros({1});
    wait_all();
    cotensor::detail::faults::delay_op(1, 300ms);  // the next op pushed: the async op
    std::promise<std::future<void>> ready_when_done;
    async_op("handed_back", {}, {y}, [&ready_when_done, y](async_op_context&, async_op_done done) {
      std::thread([&ready_when_done, y, done = std::move(done)]() mutable {
        auto ready = y.async_wait(asio::use_future);
        done();
        ready_when_done.set_value(std::move(ready));
      }).detach();
    });
    auto ready = ready_when_done.get_future().get();
    CHECK(ready.wait_for(0s) == std::future_status::timeout);  // still ending, elsewhere
    ready.get();
    cotensor::detail::faults::reset();
  }

  TEST_CASE("an op completed by an Asio timer on the awaiting coroutine's io_context" *
            doctest::timeout(20)) {
    auto values = run_to_completion([]() -> asio::awaitable<std::vector<float>> {
      auto ex = co_await asio::this_coro::executor;
      auto y = zeros({3});
      async_op("timer", {}, {y}, [ex](async_op_context& ctx, async_op_done done) {
        auto timer = std::make_shared<asio::steady_timer>(ex, 20ms);
        timer->async_wait([timer, out = ctx.write(0),
                           done = std::move(done)](boost::system::error_code ec) mutable {
          std::fill(out.begin(), out.end(), 7.0F);
          done(ec);
        });
      });
      auto z = y * 2.0F;
      co_await z.ready();  // the loop stays free for the timer that ends the op
      co_return z.to_vector();
    });
    CHECK(values == std::vector<float>{14, 14, 14});
  }

  TEST_CASE("an exception ends the op failed: dependents skipped, rethrown at every wait" *
            doctest::timeout(20)) {
    auto y = zeros({2});
    async_op("fails", {}, {y}, [](async_op_context&, async_op_done done) {
      std::thread([done = std::move(done)]() mutable {
        done(std::make_exception_ptr(std::runtime_error("socket went away")));
      }).detach();
    });
    std::atomic<int> calls{0};
    auto z = map(y, [&calls](float v) {
      ++calls;
      return v;
    });
    auto s = sum(z);
    CHECK(fails_with<std::runtime_error>(y, "socket went away"));
    CHECK(fails_with<std::runtime_error>(z, "socket went away"));
    CHECK(fails_with<std::runtime_error>(s, "socket went away"));
    CHECK(calls.load() == 0);
    bool rethrown = false;
    try {
      run_to_completion([s]() -> asio::awaitable<void> { co_await s.ready(); });
    } catch (const std::runtime_error& e) {
      rethrown = std::string(e.what()) == "socket went away";
    }
    CHECK(rethrown);
  }

  TEST_CASE("an error_code ends the op failed with a system_error carrying it" *
            doctest::timeout(20)) {
    auto y = zeros({2});
    async_op("reset", {}, {y}, [](async_op_context&, async_op_done done) {
      done(boost::system::error_code(asio::error::connection_reset));
    });
    auto z = y + 1.0F;
    bool matched = false;
    try {
      z.wait();
    } catch (const boost::system::system_error& e) {
      matched = e.code() == asio::error::connection_reset;
    }
    CHECK(matched);

    SUBCASE("a zero error_code is success") {
      auto w = zeros({2});
      async_op("ok", {}, {w}, [](async_op_context& ctx, async_op_done done) {
        ctx.write(0)[1] = 5.0F;
        done(boost::system::error_code());
      });
      CHECK(w.to_vector() == std::vector<float>{0, 5});
    }
  }

  TEST_CASE("a completion destroyed uninvoked fails the op with op_abandoned, never a hang" *
            doctest::timeout(20)) {
    SUBCASE("dropped inside start") {
      auto y = zeros({2});
      async_op("dropped", {}, {y}, [](async_op_context&, async_op_done) {});
      CHECK(error_of(y + 1.0F) == errc::op_abandoned);
    }
    SUBCASE("dropped later, on another thread") {
      auto y = zeros({2});
      async_op("lost", {}, {y}, [](async_op_context&, async_op_done done) {
        std::thread([done = std::move(done)] { std::this_thread::sleep_for(20ms); }).detach();
      });
      CHECK(error_of(y) == errc::op_abandoned);
      CHECK(fails_with<std::system_error>(y, "lost"));  // the message names the op
    }
  }

  TEST_CASE("a null name names the op async_op" * doctest::timeout(20)) {
    auto y = zeros({1});
    async_op(nullptr, {}, {y}, [](async_op_context&, async_op_done) {});  // dropped
    CHECK(fails_with<std::system_error>(y, "async_op"));
  }

  TEST_CASE("start throwing fails the op like a kernel" * doctest::timeout(20)) {
    auto y = zeros({2});
    async_op("throws", {}, {y},
             [](async_op_context&, async_op_done) { throw std::logic_error("bad start"); });
    CHECK(fails_with<std::logic_error>(y * 3.0F, "bad start"));

    SUBCASE("after handing its completion on, which then still ends the op") {
      auto w = zeros({2});
      std::promise<void> handed;
      async_op("throws_late", {}, {w}, [&handed](async_op_context&, async_op_done done) {
        std::thread([done = std::move(done)]() mutable {
          std::this_thread::sleep_for(20ms);
          done();  // too late: the op failed with start's exception
        }).detach();
        handed.set_value();
        throw std::logic_error("after handing off");
      });
      handed.get_future().wait();
      CHECK(fails_with<std::logic_error>(w, "after handing off"));
      wait_all();
    }
  }

  TEST_CASE("an input's error skips start and passes on" * doctest::timeout(20)) {
    auto bad = map(full({2}, 1.0F), [](float) -> float { throw std::domain_error("bad input"); });
    auto y = zeros({2});
    std::atomic<int> starts{0};
    async_op("skipped", {bad}, {y}, [&starts](async_op_context&, async_op_done done) {
      ++starts;
      done();
    });
    CHECK(fails_with<std::domain_error>(y, "bad input"));
    CHECK(starts.load() == 0);
  }

  TEST_CASE("a waiter cancelled while the op is pending resumes at once: the op ends later" *
            doctest::timeout(20)) {
    using namespace asio::experimental::awaitable_operators;
    test::gate release;
    auto gate = release.future();
    auto y = zeros({2});
    async_op("pending", {}, {y}, [gate](async_op_context& ctx, async_op_done done) {
      std::thread([gate, out = ctx.write(0), done = std::move(done)]() mutable {
        gate.wait();
        out[0] = 4.0F;
        done();
      }).detach();
    });
    auto index = run_to_completion([y]() -> asio::awaitable<std::size_t> {
      asio::steady_timer timer(co_await asio::this_coro::executor, 20ms);
      auto winner =
          co_await (y.async_wait(asio::use_awaitable) || timer.async_wait(asio::use_awaitable));
      co_return winner.index();
    });
    CHECK(index == 1);
    release.open();
    CHECK(y.to_vector() == std::vector<float>{4, 0});
  }

  TEST_CASE("wait_all and a scope's wait cover pending async ops" * doctest::timeout(20)) {
    std::atomic<int> ended{0};
    auto later = [&ended](async_op_context& ctx, async_op_done done) {
      std::thread([out = ctx.write(0), done = std::move(done), &ended]() mutable {
        std::this_thread::sleep_for(30ms);
        out[0] = 1.0F;
        ++ended;
        done();
      }).detach();
    };
    auto a = zeros({1});
    async_op("a", {}, {a}, later);
    wait_all();
    CHECK(ended.load() == 1);

    cotensor::scope s;
    auto b = zeros({1});
    s.run([&] { async_op("b", {}, {b}, later); });
    s.wait();
    CHECK(ended.load() == 2);
    CHECK(b.item() == 1.0F);
  }

  TEST_CASE("a scope's wait rethrows an async op's error" * doctest::timeout(20)) {
    cotensor::scope s;
    auto y = zeros({1});
    s.run([&] {
      async_op("scoped", {}, {y}, [](async_op_context&, async_op_done done) {
        done(std::make_exception_ptr(std::runtime_error("scoped failure")));
      });
    });
    CHECK_THROWS_WITH_AS(s.wait(), "scoped failure", std::runtime_error);
  }

  TEST_CASE("1,000 async ops interleaved with compute ops on shared buffers match a sequential "
            "run" *
            doctest::timeout(60)) {
    asio::thread_pool completers(2);
    std::mt19937 rng(12345);
    constexpr int buffers = 4;
    constexpr std::int64_t n = 16;
    std::vector<tensor> t;
    std::vector<std::vector<float>> expected;
    for (int i = 0; i < buffers; ++i) {
      t.push_back(full({n}, static_cast<float>(i)));
      expected.emplace_back(n, static_cast<float>(i));
    }
    for (int step = 0; step < 1000; ++step) {
      const int src = static_cast<int>(rng() % buffers);
      int dst = static_cast<int>(rng() % buffers);
      if (dst == src) {
        dst = (dst + 1) % buffers;
      }
      const auto delay = std::chrono::microseconds(rng() % 200);
      if (step % 2 == 0) {
        // dst = src * 0.5 + step, computed on another thread after a random delay.
        async_op("mix", {t[src]}, {t[dst]},
                 [&completers, delay, step](async_op_context& ctx, async_op_done done) {
                   asio::post(completers, [in = ctx.read(0), out = ctx.write(0), delay, step,
                                           done = std::move(done)]() mutable {
                     std::this_thread::sleep_for(delay);
                     for (std::size_t i = 0; i < in.size(); ++i) {
                       out[i] = in[i] * 0.5F + static_cast<float>(step % 7);
                     }
                     done();
                   });
                 });
        for (std::int64_t i = 0; i < n; ++i) {
          expected[dst][i] = expected[src][i] * 0.5F + static_cast<float>(step % 7);
        }
      } else {
        t[dst] += t[src];  // a compute op: reads src, read-writes dst
        for (std::int64_t i = 0; i < n; ++i) {
          expected[dst][i] += expected[src][i];
        }
      }
    }
    for (int i = 0; i < buffers; ++i) {
      CHECK(t[i].to_vector() == expected[i]);
    }
    completers.join();
  }

  TEST_CASE("bad arguments throw at the call with nothing enqueued" * doctest::timeout(20)) {
    auto noop = [](async_op_context&, async_op_done done) { done(); };
    auto x = zeros({2});
    wait_all();
    const auto before = runtime::current().stats().issued;
    CHECK_THROWS_AS(async_op("empty", {tensor()}, {x}, noop), std::invalid_argument);
    CHECK_THROWS_AS(async_op("empty", {x}, {tensor()}, noop), std::invalid_argument);
    CHECK_THROWS_AS(async_op("both", {x}, {x}, noop), std::invalid_argument);
    CHECK_THROWS_AS(async_op("view", {reshape(x, {1, 2})}, {x}, noop), std::invalid_argument);
    async_op("good", {}, {x}, noop);
    wait_all();
    CHECK(runtime::current().stats().issued == before + 1);  // only the good one
  }

  TEST_CASE("ctx.read and ctx.write reject an index out of range, failing the op" *
            doctest::timeout(20)) {
    auto y = zeros({2});
    async_op("range", {}, {y}, [](async_op_context& ctx, async_op_done done) {
      (void)ctx.write(1);
      done();
    });
    CHECK_THROWS_AS(y.wait(), std::out_of_range);
  }

  TEST_CASE("an async op reads and writes every dtype, as its element type or as bytes" *
            doctest::timeout(20)) {
    auto ids = zeros({4}, dtype::int64);
    auto halves = zeros({3}, dtype::bfloat16);
    auto flags = zeros({2}, dtype::boolean);
    const auto doubles = full({2}, 1.5F).astype(dtype::float64);
    const auto counts = full({3}, 7.0F).astype(dtype::int32);
    std::promise<std::vector<std::size_t>> sizes;
    std::promise<std::vector<dtype>> dtypes;
    async_op("typed", {doubles, counts}, {ids, halves, flags},
             [&sizes, &dtypes](async_op_context& ctx, async_op_done done) {
               dtypes.set_value({ctx.read_dtype(0), ctx.read_dtype(1), ctx.write_dtype(0),
                                 ctx.write_dtype(1), ctx.write_dtype(2)});
               const std::span<const double> d = ctx.read<double>(0);
               const std::span<const std::int32_t> c = ctx.read<std::int32_t>(1);
               const std::span<std::int64_t> out = ctx.write<std::int64_t>(0);
               for (std::size_t i = 0; i < out.size(); ++i) {
                 out[i] = (std::int64_t{1} << 40) + c[i % c.size()] + static_cast<std::int64_t>(i);
               }
               for (bfloat16_t& h : ctx.write<bfloat16_t>(1)) {
                 h = bfloat16_t(static_cast<float>(d[0]) * 2.0F);
               }
               ctx.write<bool>(2)[1] = true;
               sizes.set_value({ctx.read_bytes(0).size(), ctx.read_bytes(1).size(),
                                ctx.write_bytes(0).size(), ctx.write_bytes(1).size(),
                                ctx.write_bytes(2).size()});
               done();
             });
    CHECK(ids.to_vector<std::int64_t>() ==
          std::vector<std::int64_t>{(std::int64_t{1} << 40) + 7, (std::int64_t{1} << 40) + 8,
                                    (std::int64_t{1} << 40) + 9, (std::int64_t{1} << 40) + 10});
    CHECK(halves.to_vector<float>() == std::vector<float>{3, 3, 3});
    CHECK(flags.to_vector<bool>() == std::vector<bool>{false, true});
    CHECK(sizes.get_future().get() == std::vector<std::size_t>{16, 12, 32, 6, 2});
    CHECK(dtypes.get_future().get() == std::vector<dtype>{dtype::float64, dtype::int32,
                                                          dtype::int64, dtype::bfloat16,
                                                          dtype::boolean});
  }

  TEST_CASE("bytes in, through write_bytes, are the elements the tensor then holds" *
            doctest::timeout(20)) {
    // What a socket's read into a tensor does: bytes from elsewhere, in the tensor's layout.
    const std::vector<std::int32_t> sent{-3, 1 << 30, 42};
    auto got = zeros({3}, dtype::int32);
    async_op("recv", {}, {got}, [&sent](async_op_context& ctx, async_op_done done) {
      const std::span<std::byte> bytes = ctx.write_bytes(0);
      REQUIRE(bytes.size() == sizeof(std::int32_t) * sent.size());
      std::memcpy(bytes.data(), sent.data(), bytes.size());
      done();
    });
    CHECK(got.to_vector<std::int32_t>() == sent);
  }

  TEST_CASE("a span of another element type than the tensor's fails the op, naming both" *
            doctest::timeout(20)) {
    auto ids = zeros({2}, dtype::int64);
    async_op("as floats", {}, {ids}, [](async_op_context& ctx, async_op_done done) {
      (void)ctx.write(0);  // float, of an int64 tensor
      done();
    });
    CHECK(fails_with<std::invalid_argument>(ids, "float32 elements of a tensor of int64"));
    const auto x = full({2}, 1.0F);
    auto y = zeros({2});
    async_op("as doubles", {x}, {y}, [](async_op_context& ctx, async_op_done done) {
      (void)ctx.read<double>(0);
      done();
    });
    CHECK(fails_with<std::invalid_argument>(y, "read(0) as float64"));
    auto z = zeros({2});
    async_op("bytes past the list", {}, {z}, [](async_op_context& ctx, async_op_done done) {
      (void)ctx.read_bytes(0);
      done();
    });
    CHECK_THROWS_AS(z.wait(), std::out_of_range);
  }

  TEST_CASE("an async op that only reads sees the value written before it" * doctest::timeout(20)) {
    auto x = full({3}, 1.0F);
    x += 2.0F;
    std::promise<std::vector<float>> seen;
    async_op("send", {x}, {}, [&seen](async_op_context& ctx, async_op_done done) {
      seen.set_value({ctx.read(0).begin(), ctx.read(0).end()});
      done();
    });
    x += 10.0F;  // must wait for the reader
    CHECK(seen.get_future().get() == std::vector<float>{3, 3, 3});
    CHECK(x.to_vector() == std::vector<float>{13, 13, 13});
  }

  TEST_CASE("under the synchronous engine the call returns once the op has ended" *
            doctest::timeout(20)) {
    runtime_options options;
    options.synchronous = true;
    runtime rt(options);
    auto y = zeros({2});
    std::atomic<bool> ended{false};
    async_op("sync", {}, {y}, [&ended](async_op_context& ctx, async_op_done done) {
      std::thread([out = ctx.write(0), done = std::move(done), &ended]() mutable {
        std::this_thread::sleep_for(20ms);
        out[0] = 3.0F;
        ended = true;
        done();
      }).detach();
    });
    CHECK(ended.load());
    CHECK(y.to_vector() == std::vector<float>{3, 0});
    CHECK_THROWS_AS(async_op("sync_fail", {}, {y},
                             [](async_op_context&, async_op_done done) {
                               done(std::make_exception_ptr(std::runtime_error("now")));
                             }),
                    std::runtime_error);
  }

  TEST_CASE("an async op waiting for its completion holds no room in flight" *
            doctest::timeout(30)) {
    runtime rt({.worker_threads = 2, .max_in_flight = 2, .inline_small_ops = false});
    std::mutex mutex;
    std::vector<async_op_done> parked;  // three idle "sockets"
    std::vector<tensor> received;
    for (int i = 0; i < 3; ++i) {
      received.push_back(zeros({1}));
      async_op("idle", {}, {received.back()}, [&](async_op_context&, async_op_done done) {
        std::lock_guard lock(mutex);
        parked.push_back(std::move(done));
      });
    }
    // Other work goes on while they wait: a thread issuing 20 ops is never stuck for room.
    auto other = std::async(std::launch::async, [] {
      auto x = full({1000}, 1.0F);
      for (int i = 0; i < 20; ++i) {
        x = x + 1.0F;
      }
      return x.to_vector()[999];
    });
    REQUIRE(other.wait_for(20s) == std::future_status::ready);
    CHECK(other.get() == 21.0F);
    std::vector<async_op_done> ending;
    while (ending.size() < 3) {
      std::lock_guard lock(mutex);
      for (auto& d : parked) {
        ending.push_back(std::move(d));
      }
      parked.clear();
    }
    for (auto& d : ending) {
      d();
    }
    wait_all();
    CHECK(rt.stats().in_flight == 0);
  }

  TEST_CASE("start is destroyed when it returns: a completion it kept cannot keep its op alive" *
            doctest::timeout(20)) {
    struct pending_read {
      std::optional<async_op_done> done;  // the read that never comes holds the completion
    };
    auto y = zeros({2});
    {
      auto state = std::make_shared<pending_read>();
      async_op("cycle", {}, {y}, [state](async_op_context&, async_op_done done) {
        state->done.emplace(std::move(done));
      });
    }
    CHECK(error_of(y) == errc::op_abandoned);
    wait_all();
    CHECK(runtime::current().stats().live_ops == 0);
  }

  TEST_CASE("an error in a tensor an async op updates skips it and passes on" *
            doctest::timeout(20)) {
    auto y = map(full({2}, 1.0F), [](float) -> float { throw std::domain_error("bad old value"); });
    std::atomic<int> starts{0};
    async_op("update", {}, {y}, [&starts](async_op_context& ctx, async_op_done done) {
      ++starts;
      ctx.write(0)[0] += 1.0F;
      done();
    });
    CHECK(fails_with<std::domain_error>(y, "bad old value"));
    CHECK(starts.load() == 0);
  }
}
