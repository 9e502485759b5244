// Run by mpirun on 2 and 3 ranks (tests/distributed/CMakeLists.txt): every rank runs every case,
// in the same order, and checks its own results against a sequential computation.

#include "cotensor/distributed.hpp"
#include <cotensor/cotensor.hpp>

#include "distributed_support.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <system_error>

// Errors: an input's error passes on while the other ranks complete; collectives that differ
// (COTENSOR_DIST_CHECK) or do not complete in time break their communicator.

namespace {

using namespace cotensor;
namespace d = cotensor::dist;
using cotensor::test::check_mode;

}  // namespace

TEST_SUITE("distributed") {
  TEST_CASE("an error in an input of another dtype passes on, and the others still complete" *
            doctest::timeout(60)) {
    const auto c = d::communicator::world();
    // The phantom that stands in for rank 0's skipped op is sized in bytes of the dtype.
    tensor t = full({8}, 1.0, dtype::int64);
    if (c.rank() == 0) {
      t = t.astype(dtype::float32);
      try {
        async_op("fails", {}, {t}, [](async_op_context&, async_op_done) {
          throw std::runtime_error("producer failed");
        });
      } catch (const std::runtime_error&) {
        // The synchronous engine throws at the call.
      }
      t = t.astype(dtype::int64);  // carries the error on
    }
    tensor g = d::all_gather(t);
    if (c.rank() == 0) {
      CHECK_THROWS_WITH_AS(g.wait(), "producer failed", std::runtime_error);
    } else {
      const auto got = g.to_vector<std::int64_t>();
      CHECK(got.size() == 8U * static_cast<std::size_t>(c.size()));
      CHECK(got.front() == 0);  // rank 0's block: zeros
      CHECK(got.back() == 1);
    }
    tensor u = full({4}, 2.0, dtype::float64);
    d::all_reduce(u);
    CHECK(u.to_vector<double>().front() == 2.0 * c.size());
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
    // The same count in another dtype differs too.
    const auto other = world.split(0, world.rank());
    tensor u = full({4}, 1.0, world.rank() == 0 ? dtype::float32 : dtype::int32);
    auto run_typed = [&] {
      d::all_reduce(u, d::reduce_op::sum, other);
      u.wait();
    };
    CHECK_THROWS_WITH_AS(run_typed(), doctest::Contains("int32 elements"), std::runtime_error);
    CHECK(other.broken());
  }

  TEST_CASE("a collective that does not complete in time breaks its communicator" *
            doctest::timeout(60)) {
    const auto world = d::communicator::world();
    const char* fusion = std::getenv("COTENSOR_DIST_FUSION_BYTES");
    if (check_mode() || (fusion != nullptr && std::string(fusion) != "0")) {
      // The late rank's check, or its fusion agreement, would pair with the abandoned one's,
      // not with its collective.
      return;
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
