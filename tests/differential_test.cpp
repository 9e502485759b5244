// The umbrella header first: it must compile on its own.
#include <cotensor/cotensor.hpp>
// Test support and dependencies.
#include "support/differential.hpp"
#include "support/run.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <exception>
#include <string>
#include <thread>
#include <vector>

// Differential tests of the engine: random programs (tests/support/differential.hpp) run by
// cotensor and by a plain sequential interpreter that uses no cotensor call. Any mistake in the
// engine's ordering of reads and writes shows up as a different value; see that header for how
// values are compared.

namespace {

using namespace cotensor::test::differential;
/// Generates the program of `seed`, runs it on the current runtime and checks it against the
/// reference. Returns "" or the first difference.
std::string check_program(std::uint32_t seed, generator::options opts) {
  const program p = generate(seed, opts);
  const observations seen = run_on_cotensor(p);
  return reference(p, seen).check();
}

/// Checks programs `first` to `first + n - 1`; stops at the first failure. Returns how many
/// programs it ran.
std::uint64_t check_programs(std::uint32_t first, int n, generator::options opts) {
  std::uint64_t ran = 0;
  for (int i = 0; i < n; ++i) {
    const std::uint32_t seed = first + static_cast<std::uint32_t>(i);
    const std::string failure = check_program(seed, opts);
    ++ran;
    INFO("seed ", seed);
    CHECK_MESSAGE(failure.empty(), failure);
    if (!failure.empty()) {
      break;
    }
  }
  return ran;
}

/// Bit-identical comparison of two runs of one program.
std::string compare_runs(const program& p, const observations& x, const observations& y) {
  if (x.at_op.size() != y.at_op.size() || x.at_end.size() != y.at_end.size()) {
    return "seed " + std::to_string(p.seed) + ": the runs observed different things";
  }
  const auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::ranges::equal(a, b, [](float u, float v) {
             return std::bit_cast<std::uint32_t>(u) == std::bit_cast<std::uint32_t>(v);
           });
  };
  for (const auto& [i, values] : x.at_op) {
    auto it = y.at_op.find(i);
    if (it == y.at_op.end() || !same(values, it->second)) {
      return "seed " + std::to_string(p.seed) + ", op #" + std::to_string(i) + " (" +
             describe(p.ops[i]) + "): threaded and synchronous runs differ\n" + listing(p);
    }
  }
  for (std::size_t i = 0; i < x.at_end.size(); ++i) {
    if (!same(x.at_end[i], y.at_end[i])) {
      return "seed " + std::to_string(p.seed) + ": final value of t" +
             std::to_string(p.live_at_end[i]) + ": threaded and synchronous runs differ\n" +
             listing(p);
    }
  }
  return {};
}

}  // namespace

TEST_SUITE("differential") {

  TEST_CASE("the generator makes the same program from the same seed") {
    const program a = generate(42, {});
    const program b = generate(42, {});
    REQUIRE(a.ops.size() == b.ops.size());
    for (std::size_t i = 0; i < a.ops.size(); ++i) {
      CHECK(describe(a.ops[i]) == describe(b.ops[i]));
      CHECK(a.ops[i].values == b.ops[i].values);
    }
    CHECK(listing(generate(43, {})) != listing(a));
  }

  TEST_CASE("the reference interpreter catches a wrong value" * doctest::timeout(60)) {
    // A self-test: tamper with what cotensor observed; the reference must notice.
    cotensor::runtime rt({.synchronous = true});
    int caught = 0;
    int tried = 0;
    for (std::uint32_t seed = 1; seed <= 20; ++seed) {
      const program p = generate(seed, {});
      observations seen = run_on_cotensor(p);
      REQUIRE(reference(p, seen).check().empty());
      for (auto& values : seen.at_end) {
        if (!values.empty()) {
          values.back() = std::nextafter(values.back(), 1e30F);  // one ulp
          ++tried;
          caught += reference(p, seen).check().empty() ? 0 : 1;
          break;
        }
      }
    }
    CHECK(tried > 0);
    CHECK(caught == tried);
  }

  TEST_CASE("the reference interpreter catches an engine that loses a write" *
            doctest::timeout(60)) {
    // A self-test: run each program with its first in-place write left out (as an engine that
    // lost or reordered it might) and check it against the program as written. A lost write
    // goes unnoticed only when nothing reads the buffer afterwards, which is rare.
    cotensor::runtime rt({.synchronous = true});
    int caught = 0;
    int tried = 0;
    for (std::uint32_t seed = 1; seed <= 100; ++seed) {
      const program p = generate(seed, {.length = 30, .waits = true});
      program lossy = p;
      auto write = std::ranges::find_if(lossy.ops, [](const op& o) {
        return o.what == kind::in_place || o.what == kind::in_place_scalar;
      });
      if (write == lossy.ops.end()) {
        continue;
      }
      *write = op{.what = kind::wait_all};
      ++tried;
      caught += reference(p, run_on_cotensor(lossy)).check().empty() ? 0 : 1;
    }
    CHECK(tried >= 50);
    CHECK(caught * 10 >= tried * 9);
  }

  TEST_CASE("random programs issued without waits match the sequential reference" *
            doctest::timeout(120)) {
    cotensor::runtime_options options{.worker_threads = 2};
    SUBCASE("with tiny ready ops run at their call") { options.inline_small_ops = true; }
    SUBCASE("with every op on the backend") { options.inline_small_ops = false; }
    cotensor::runtime rt(options);
    const std::uint64_t ran = check_programs(1, 3000, {.length = 30, .waits = false});
    CHECK(rt.stats().issued >= ran * 20);  // the programs did run
  }

  TEST_CASE("random programs with waits and reads in between match the sequential reference" *
            doctest::timeout(120)) {
    cotensor::runtime_options options{.worker_threads = 2};
    SUBCASE("with tiny ready ops run at their call") { options.inline_small_ops = true; }
    SUBCASE("with every op on the backend") { options.inline_small_ops = false; }
    cotensor::runtime rt(options);
    const std::uint64_t ran = check_programs(100001, 3000, {.length = 30, .waits = true});
    CHECK(rt.stats().issued >= ran * 20);
  }

  TEST_CASE("random programs with waits cancelled as they start match the sequential reference" *
            doctest::timeout(120)) {
    // Each cancelled wait must complete exactly once (done or aborted) and change nothing.
    cotensor::runtime rt({.worker_threads = 2, .inline_small_ops = false});
    check_programs(500001, 1000, {.length = 30, .waits = true, .cancellations = true});
  }

  TEST_CASE("random programs with async ops ended later on other threads match the sequential "
            "reference" *
            doctest::timeout(120)) {
    cotensor::runtime_options options{.worker_threads = 2};
    SUBCASE("with tiny ready ops run at their call") { options.inline_small_ops = true; }
    SUBCASE("with every op on the backend") { options.inline_small_ops = false; }
    SUBCASE("with a small in-flight bound") { options.max_in_flight = 4; }
    cotensor::runtime rt(options);
    check_programs(700001, 600, {.length = 30, .waits = true, .async_ops = true});
  }

  TEST_CASE("long random programs match the sequential reference with a small in-flight bound" *
            doctest::timeout(120)) {
    // max_in_flight = 4: the issuing thread blocks for room all the time.
    cotensor::runtime rt({.worker_threads = 2, .max_in_flight = 4});
    check_programs(200001, 500, {.length = 120, .waits = true, .max_live = 10});
    CHECK(rt.stats().admission_waits > 0);
  }

  TEST_CASE("random programs issued from two threads at once both match the reference" *
            doctest::timeout(120)) {
    cotensor::runtime rt({.worker_threads = 2});
    constexpr int per_thread = 1000;
    std::vector<std::string> failures(2);
    std::vector<std::exception_ptr> errors(2);
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] {
        try {
          const std::uint32_t first = 300001 + static_cast<std::uint32_t>(t) * 100000;
          for (int i = 0; i < per_thread && failures[t].empty(); ++i) {
            failures[t] = check_program(first + static_cast<std::uint32_t>(i),
                                        {.length = 30, .waits = (i % 2) == 0});
          }
        } catch (...) {
          errors[t] = std::current_exception();
        }
      });
    }
    for (auto& thread : threads) {
      thread.join();
    }
    for (std::size_t t = 0; t < 2; ++t) {
      CAPTURE(t);
      CHECK_MESSAGE(failures[t].empty(), failures[t]);
      CHECK_FALSE(errors[t]);
    }
  }

  TEST_CASE("the threaded engine gives the same bits as the synchronous engine" *
            doctest::timeout(120)) {
    constexpr std::uint32_t first = 400001;
    constexpr int programs = 1000;
    std::vector<program> ps;
    std::vector<observations> synchronous;
    {
      cotensor::runtime rt({.synchronous = true});
      for (int i = 0; i < programs; ++i) {
        ps.push_back(
            generate(first + static_cast<std::uint32_t>(i), {.length = 40, .waits = true}));
        synchronous.push_back(run_on_cotensor(ps.back()));
      }
    }
    // Every op on the backend: the threaded path as far from the synchronous one as it goes.
    cotensor::runtime rt({.worker_threads = 2, .inline_small_ops = false});
    for (int i = 0; i < programs; ++i) {
      const program& p = ps[static_cast<std::size_t>(i)];
      const observations& sync_seen = synchronous[static_cast<std::size_t>(i)];
      const observations threaded = run_on_cotensor(p);
      INFO("seed ", p.seed);
      const std::string reference_failure = reference(p, sync_seen).check();
      CHECK_MESSAGE(reference_failure.empty(), "synchronous run: ", reference_failure);
      const std::string failure = compare_runs(p, threaded, sync_seen);
      CHECK_MESSAGE(failure.empty(), failure);
      if (!failure.empty() || !reference_failure.empty()) {
        break;
      }
    }
  }

}  // TEST_SUITE("differential")
