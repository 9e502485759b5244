#include "cotensor/async_op.hpp"
#include <cotensor/cotensor.hpp>

#include "async_op_support.hpp"
#include "engine/faults.hpp"
#include "engine/storage.hpp"
#include "frontend/frontend.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

// Ops that complete later (`async_op`), issued as cotensor's own async ops are.

using namespace cotensor;
using cotensor::test::fails_with;
using namespace std::chrono_literals;

// cotensor's own async ops (the collectives): a start that only hands the op on runs at the
// call when the op is ready then, and a thread of cotensor's own may end the op where it is.
TEST_SUITE("async_op quick start") {
  // A start that records the thread it ran on and hands `done` to `keep`.
  struct recording_start {
    std::promise<std::thread::id>* ran_on;
    std::optional<async_op_done>* keep;
    void operator()(async_op_context&, async_op_done done) {
      keep->emplace(std::move(done));
      ran_on->set_value(std::this_thread::get_id());
    }
  };

  void issue_quick(const tensor& t, recording_start start) {
    const std::vector<tensor> writes{t};
    cotensor::detail::issue_quick_async_op(
        {}, writes,
        std::make_unique<cotensor::detail::async_start_for<recording_start>>("quick", start));
  }

  TEST_CASE("a quick async op ready at its call starts on the issuing thread, at any size" *
            doctest::timeout(20)) {
    auto y = zeros({1 << 20});  // 4 MiB: far past what runs inline for a kernel
    y.wait();
    std::promise<std::thread::id> ran_on;
    std::optional<async_op_done> keep;
    issue_quick(y, {&ran_on, &keep});
    auto started = ran_on.get_future();
    REQUIRE(started.wait_for(0s) == std::future_status::ready);  // before the call returned
    CHECK(started.get() == std::this_thread::get_id());
    (*keep)();
    y.wait();
  }

  TEST_CASE("a quick async op not ready at its call starts later, on a backend thread" *
            doctest::timeout(20)) {
    auto y = zeros({1 << 16});  // 256 KiB: its writer runs on a backend thread
    wait_all();
    cotensor::detail::faults::delay_op(1, 100ms);  // the next op pushed: y's writer
    y += 1.0F;
    std::promise<std::thread::id> ran_on;
    std::optional<async_op_done> keep;
    issue_quick(y, {&ran_on, &keep});
    auto started = ran_on.get_future();
    CHECK(started.get() != std::this_thread::get_id());
    (*keep)();
    CHECK(y.to_vector() == std::vector<float>(1 << 16, 1.0F));
    cotensor::detail::faults::reset();
  }

  TEST_CASE("complete_here ends the op on the calling thread" * doctest::timeout(20)) {
    // The op's end is held back 300 ms on whichever thread runs it (fault injection): here
    // that is the completing thread, which returns only after it (contrast with
    // "invoking the completion only hands the op back").
    auto y = zeros({1});
    wait_all();
    std::promise<std::thread::id> ran_on;
    std::optional<async_op_done> keep;
    cotensor::detail::faults::delay_op(1, 300ms);  // the quick op
    issue_quick(y, {&ran_on, &keep});
    ran_on.get_future().get();
    auto ended = std::async(std::launch::async, [&keep] {
      const auto start = std::chrono::steady_clock::now();
      cotensor::detail::complete_here(*keep, nullptr);
      return std::chrono::steady_clock::now() - start;
    });
    CHECK(ended.get() >= 300ms);
    CHECK_FALSE(static_cast<bool>(*keep));  // left empty: nothing abandons the op
    y.wait();
    cotensor::detail::faults::reset();
  }

  TEST_CASE("a quick async op takes any dtype and reaches its buffers through their storage" *
            doctest::timeout(20)) {
    // The collectives' path: an int64 tensor written and a float32 one read, both through their
    // storage; the context is empty (a quick start binds no spans: its capture stays small).
    tensor ints = zeros({5}, dtype::int64);
    tensor floats = full({3}, 2.0F);
    std::size_t seen_writes = 99;
    std::size_t seen_reads = 99;
    float first_read = 0.0F;
    struct start {
      tensor target;
      tensor source;
      std::size_t* writes;
      std::size_t* reads;
      float* first_read;
      void operator()(async_op_context& ctx, async_op_done done) {
        *writes = ctx.writes();
        *reads = ctx.reads();
        *first_read = source.storage()->data<float>()[0];
        auto* p = target.storage()->data<std::int64_t>();
        for (std::int64_t i = 0; i < target.numel(); ++i) {
          p[i] = std::int64_t{1} << (40 + i);
        }
        done();
      }
    };
    const std::vector<tensor> reads{floats};
    const std::vector<tensor> writes{ints};
    cotensor::detail::issue_quick_async_op(
        reads, writes,
        std::make_unique<cotensor::detail::async_start_for<start>>(
            "quick", start{ints, floats, &seen_writes, &seen_reads, &first_read}));
    const auto got = ints.to_vector<std::int64_t>();
    CHECK(seen_writes == 0);
    CHECK(seen_reads == 0);
    CHECK(first_read == 2.0F);
    for (std::size_t i = 0; i < got.size(); ++i) {
      CHECK(got[i] == std::int64_t{1} << (40 + i));
    }
  }

  TEST_CASE("complete_here with an error fails the op and its waits" * doctest::timeout(20)) {
    auto y = zeros({4});
    std::promise<std::thread::id> ran_on;
    std::optional<async_op_done> keep;
    issue_quick(y, {&ran_on, &keep});
    ran_on.get_future().get();
    std::thread([&keep] {
      cotensor::detail::complete_here(
          *keep, std::make_exception_ptr(std::runtime_error("quick op failed")));
    }).join();
    CHECK(fails_with<std::runtime_error>(y, "quick op failed"));
  }
}
