// Run by mpirun on 2 and 3 ranks (tests/distributed/CMakeLists.txt): every rank runs every case,
// in the same order, and checks its own results against a sequential computation.

#include "cotensor/distributed.hpp"
#include <cotensor/cotensor.hpp>

#include "distributed_support.hpp"
#include "support/gate.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <future>
#include <stdexcept>
#include <vector>

// Fusion of small all-reduces in flight, and two-rank fusion's exchange of groups.

namespace {

using namespace cotensor;
namespace d = cotensor::dist;
using cotensor::test::check_mode;

}  // namespace

TEST_SUITE("distributed") {
  TEST_CASE("small all-reduces in flight are fused, with the results of separate ones" *
            doctest::timeout(60)) {
    const auto world = d::communicator::world();
    const auto c = world.split(0, world.rank());
    c.set_fusion(64 * 1024, std::chrono::milliseconds(50));
    const int n = c.size();
    // Sixteen all-reduces issued before any of their inputs is ready; one input fails.
    const bool synchronous = runtime::current().options().synchronous;
    test::gate gate;
    auto opened = gate.future();
    if (synchronous) {
      gate.open();  // each op runs at its call: a closed gate would never open
    }
    const tensor base = map(full({1000}, static_cast<float>(c.rank() + 1)), [opened](float v) {
      opened.wait();
      return v;
    });
    std::vector<tensor> ts;
    for (int i = 0; i < 16; ++i) {
      // (The synchronous engine would throw at the failing op's call: no failing input there.)
      const bool fails = i == 5 && !synchronous;
      ts.push_back(fails ? map(base, [](float) -> float { throw std::domain_error("input 5"); })
                         : base + static_cast<float>(i));
      d::all_reduce(ts.back(), d::reduce_op::sum, c);
    }
    // Closes the group: another kind, then another dtype and op, then one over the limit.
    tensor b = full({3}, c.rank() == 0 ? 7.0F : 0.0F);
    d::broadcast(b, 0, c);
    std::vector<tensor> doubles;
    for (int i = 0; i < 4; ++i) {
      doubles.push_back(full({100}, static_cast<double>(c.rank() + i), dtype::float64));
      d::all_reduce(doubles.back(), d::reduce_op::avg, c);
    }
    tensor big = full({20000}, 1.0F);
    d::all_reduce(big, d::reduce_op::sum, c);
    if (!synchronous) {
      gate.open();
    }
    for (int i = 0; i < 16; ++i) {
      const auto& t = ts[static_cast<std::size_t>(i)];
      if (i == 5 && !synchronous) {
        CHECK_THROWS_WITH_AS(t.wait(), "input 5", std::domain_error);
        continue;
      }
      const auto got = t.to_vector();
      const float want = static_cast<float>(n * (n + 1) / 2 + n * i);
      CHECK(got.front() == want);
      CHECK(got.back() == want);
    }
    CHECK(b.to_vector() == std::vector<float>{7, 7, 7});
    for (int i = 0; i < 4; ++i) {
      const double want = (n - 1) / 2.0 + i;
      CHECK(doubles[static_cast<std::size_t>(i)].to_vector<double>().front() == want);
    }
    CHECK(big.to_vector().front() == static_cast<float>(n));
    // The sixteen were ready within the cycle of each other on every rank: fused (not on the
    // synchronous engine, where each op ends at its call, nor under COTENSOR_DIST_CHECK).
    if (!synchronous && !check_mode()) {
      CHECK(c.fused_count() >= 16);
    } else {
      CHECK(c.fused_count() == 0);
    }
    CHECK_THROWS_AS(c.set_fusion(std::size_t{2} << 30), std::invalid_argument);
  }

  // On two ranks a fused group travels with a head that says what it is (fusion.cpp).
  TEST_CASE("two-rank fusion gives the bits of separate all-reduces and refuses ones that differ" *
            doctest::timeout(60)) {
    const auto world = d::communicator::world();
    const auto fused = world.split(world.rank() < 2 ? 0 : 1, world.rank());
    const auto plain = world.split(world.rank() < 2 ? 0 : 1, world.rank());
    const auto odd = world.split(world.rank() < 2 ? 0 : 1, world.rank());
    if (world.rank() >= 2) {
      return;  // a group of one: nothing to exchange
    }
    // A cycle, and inputs held back until all are issued: each eight fuse on any engine speed.
    fused.set_fusion(64 * 1024, std::chrono::milliseconds(50));
    odd.set_fusion(64 * 1024);
    const bool synchronous = runtime::current().options().synchronous;
    // Values whose sums round: the same bits fused and not (rank 0's first, as MPI adds two).
    // `n` of each op in a row, so that each `n` can fuse.
    const auto issue = [r = world.rank()](const d::communicator& c, std::shared_future<void> gate,
                                          int n, std::int64_t elements) {
      std::vector<tensor> out;
      for (const auto op : {d::reduce_op::sum, d::reduce_op::avg, d::reduce_op::max}) {
        for (int i = 0; i < n; ++i) {
          out.push_back(map(full({elements}, 1.0F), [r, i, gate](float x) {
            gate.wait();
            return x / static_cast<float>(3 + 7 * r + i);
          }));
          d::all_reduce(out.back(), op, c);
        }
      }
      return out;
    };
    const auto same_bits = [&](int n, std::int64_t elements) {
      test::gate gate;
      const auto opened = gate.future();
      if (synchronous) {
        gate.open();  // each op runs at its call: a closed gate would never open
      }
      const auto a = issue(fused, opened, n, elements);
      if (!synchronous) {
        gate.open();
      }
      const auto b = issue(plain, opened, n, elements);
      for (std::size_t i = 0; i < a.size(); ++i) {
        CHECK(a[i].to_vector() == b[i].to_vector());
      }
    };
    same_bits(8, 257);  // groups of 8 KiB: exchanged
    if (!synchronous && !check_mode()) {
      CHECK(fused.fused_count() >= 16);
    }
    // Ops over 256 KiB take the agreement and one MPI_Iallreduce on two ranks too.
    fused.set_fusion(std::size_t{1} << 20, std::chrono::milliseconds(50));
    const auto exchanged = fused.fused_count();
    same_bits(2, 70000);
    if (!synchronous && !check_mode()) {
      CHECK(fused.fused_count() >= exchanged + 4);
    }
    // Ranks that issue all-reduces of different sizes: an error on both, not garbage. (Under
    // COTENSOR_DIST_CHECK fusion is off and the check finds it.)
    tensor t = full({static_cast<std::int64_t>(4 + world.rank())}, 1.0F);
    auto run = [&] {
      d::all_reduce(t, d::reduce_op::sum, odd);
      t.wait();
    };
    CHECK_THROWS_WITH_AS(run(), doctest::Contains("different"), std::runtime_error);
    CHECK(odd.broken());
  }
}  // TEST_SUITE
