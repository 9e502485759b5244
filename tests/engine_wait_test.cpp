// The umbrella header first: it must compile on its own.
#include <cotensor/cotensor.hpp>
// Test support and dependencies.
#include "engine_support.hpp"
#include "support/gate.hpp"
#include "support/run.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <thread>
#include <vector>

// The dependency engine's waits from threads and coroutines: while other threads issue ops, and
// many coroutines awaiting held or independent tensors.

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using cotensor::tensor;
using cotensor::test::filled;
using cotensor::test::gate;
using cotensor::test::gated;
using cotensor::test::values;

struct resume_counts {
  int resumed = 0;
  int on_io_thread = 0;
  int errors = 0;
  std::thread::id io_thread;
};

asio::awaitable<void> await_ready(tensor t, resume_counts* counts) {
  try {
    co_await t.ready();
  } catch (...) {
    ++counts->errors;
  }
  ++counts->resumed;
  if (std::this_thread::get_id() == counts->io_thread) {
    ++counts->on_io_thread;
  }
}

}  // namespace

TEST_SUITE("engine") {
  // --- waits from threads and coroutines ---------------------------------------------------------

  TEST_CASE("a blocking wait returns while another thread keeps issuing ops" *
            doctest::timeout(60)) {
    cotensor::runtime rt({.worker_threads = 2});
    tensor busy = cotensor::zeros({16});
    std::atomic<bool> stop{false};
    std::atomic<int> issued{0};
    std::atomic<bool> issuer_done{false};
    std::exception_ptr issuer_error;
    std::thread issuer([&] {
      try {
        // Stops at 10^6 so that the count stays an exact float.
        while (!stop.load() && issued.load() < 1000000) {
          busy += 1.0F;
          issued.fetch_add(1);
        }
      } catch (...) {
        issuer_error = std::current_exception();
      }
      issuer_done.store(true);
    });
    // Start waiting once the other thread is busy issuing.
    while (issued.load() < 100 && !issuer_done.load()) {
      std::this_thread::yield();
    }

    int wrong = 0;
    for (int i = 0; i < 200; ++i) {
      tensor x = cotensor::full({4}, static_cast<float>(i)) * 2.0F;
      x.wait();
      if (values(x) != filled(4, 2.0F * static_cast<float>(i))) {
        ++wrong;
      }
    }
    stop.store(true);
    issuer.join();
    CHECK(wrong == 0);
    CHECK_FALSE(issuer_error);
    CHECK(issued.load() >= 100);
    CHECK(values(busy) == filled(16, static_cast<float>(issued.load())));
  }

  TEST_CASE("in-place writes to one buffer from two threads are all applied" *
            doctest::timeout(60)) {
    cotensor::runtime_options options{.worker_threads = 2};
    SUBCASE("with tiny ready ops run at their call") { options.inline_small_ops = true; }
    SUBCASE("with every op on the backend") { options.inline_small_ops = false; }
    cotensor::runtime rt(options);
    tensor x = cotensor::zeros({3, 2});
    tensor view = cotensor::reshape(x, {6});
    constexpr int per_thread = 2000;
    std::thread other([view]() mutable {
      for (int i = 0; i < per_thread; ++i) {
        view += 1.0F;
      }
    });
    for (int i = 0; i < per_thread; ++i) {
      x += cotensor::ones({2});
    }
    other.join();
    CHECK(values(x) == filled(6, 2.0F * per_thread));
  }

  TEST_CASE("1,000 coroutines awaiting one held tensor all resume on the io_context thread" *
            doctest::timeout(60)) {
    cotensor::runtime rt({.worker_threads = 2});
    gate g;
    tensor t = gated(cotensor::full({}, 7.0F), g.future());
    asio::io_context io;
    resume_counts counts;
    counts.io_thread = std::this_thread::get_id();
    constexpr int coroutines = 1000;
    for (int i = 0; i < coroutines; ++i) {
      asio::co_spawn(io, await_ready(t, &counts), asio::detached);
    }
    io.poll();  // every coroutine starts and suspends in co_await t.ready()
    CHECK(counts.resumed == 0);
    g.open();
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (counts.resumed < coroutines && std::chrono::steady_clock::now() < deadline) {
      io.run_one_for(100ms);
    }
    CHECK(counts.resumed == coroutines);
    CHECK(counts.on_io_thread == coroutines);
    CHECK(counts.errors == 0);
    CHECK(t.item() == 7.0F);
  }

  TEST_CASE("1,000 coroutines each awaiting its own op resume on the io_context thread" *
            doctest::timeout(60)) {
    cotensor::runtime rt({.worker_threads = 2});
    asio::io_context io;
    resume_counts counts;
    counts.io_thread = std::this_thread::get_id();
    const tensor base = cotensor::full({8}, 1.0F);
    std::vector<tensor> results;
    constexpr int coroutines = 1000;
    results.reserve(coroutines);
    for (int i = 0; i < coroutines; ++i) {
      results.push_back(base * static_cast<float>(i));
      asio::co_spawn(io, await_ready(results.back(), &counts), asio::detached);
    }
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (counts.resumed < coroutines && std::chrono::steady_clock::now() < deadline) {
      io.run_one_for(100ms);
    }
    CHECK(counts.resumed == coroutines);
    CHECK(counts.on_io_thread == coroutines);
    CHECK(counts.errors == 0);
    int wrong = 0;
    for (int i = 0; i < coroutines; ++i) {
      if (values(results[static_cast<std::size_t>(i)]) != filled(8, static_cast<float>(i))) {
        ++wrong;
      }
    }
    CHECK(wrong == 0);
  }
}  // TEST_SUITE("engine")
