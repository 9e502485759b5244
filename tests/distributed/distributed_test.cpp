// Run by mpirun on 2 and 3 ranks (tests/distributed/CMakeLists.txt): every rank runs every case,
// in the same order, and checks its own results against a sequential computation.
#include "cotensor/distributed.hpp"

#include <cotensor/cotensor.hpp>

#include "support/run.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace {

using namespace cotensor;
namespace d = cotensor::dist;

// Rank r's value at i, so that every rank can compute every other rank's input.
float value(int r, std::size_t i) {
  return static_cast<float>((r + 1) * 10 + static_cast<int>(i % 7));
}

// The voluntary context switches of this process's threads named `name` (/proc/self/task).
long voluntary_switches(const std::string& name) {
  long total = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string line;
    if (!std::getline(comm, line) || line != name) {
      continue;
    }
    std::ifstream status(task.path() / "status");
    const std::string key = "voluntary_ctxt_switches:";
    while (std::getline(status, line)) {
      if (line.rfind(key, 0) == 0) {
        total += std::stol(line.substr(key.size()));
      }
    }
  }
  return total;
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

// The numeric dtypes the collectives reduce, and rank r's value at i for them: small integers,
// negative on rank 0 (so that an integer average truncates toward zero, not down), exact in
// every dtype, and whose sums across 3 ranks are too (float16 and bfloat16 included).
constexpr dtype numeric[] = {dtype::int32,    dtype::int64,   dtype::float16,
                             dtype::bfloat16, dtype::float32, dtype::float64};

double small_value(int r, std::size_t i) {
  return static_cast<double>((r + 1) * 10 - 20 + static_cast<int>(i % 7));
}

tensor typed_input(int r, std::size_t n, dtype t) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = small_value(r, i);
  }
  return from_vector(std::move(v), {static_cast<std::int64_t>(n)}).astype(t);
}

// What `op` over every rank's small_value(·, i) gives in dtype `t`: sums are exact; avg
// divides them as the collectives do (integers truncate toward zero; float32 multiplies by
// 1/size; float16 and bfloat16 divide in float32 and round once; float64 divides).
double want_reduced(d::reduce_op op, dtype t, int ranks, std::size_t i) {
  double sum = 0;
  double hi = small_value(0, i);
  double lo = hi;
  for (int r = 0; r < ranks; ++r) {
    const double v = small_value(r, i);
    sum += v;
    hi = std::max(hi, v);
    lo = std::min(lo, v);
  }
  switch (op) {
  case d::reduce_op::sum:
    return sum;
  case d::reduce_op::max:
    return hi;
  case d::reduce_op::min:
    return lo;
  case d::reduce_op::avg:
    break;
  }
  const auto n = static_cast<float>(ranks);
  switch (t) {
  case dtype::int32:
  case dtype::int64:
    return std::trunc(sum / ranks);
  case dtype::float16:
    return float16_t(static_cast<float>(sum) / n);
  case dtype::bfloat16:
    return bfloat16_t(static_cast<float>(sum) / n);
  case dtype::float32:
    return static_cast<float>(sum) * (1.0F / n);
  default:
    return sum / ranks;
  }
}

const char* op_name(d::reduce_op op) {
  switch (op) {
  case d::reduce_op::sum:
    return "sum";
  case d::reduce_op::avg:
    return "avg";
  case d::reduce_op::max:
    return "max";
  case d::reduce_op::min:
    return "min";
  }
  return "?";
}

constexpr d::reduce_op every_op[] = {d::reduce_op::sum, d::reduce_op::avg, d::reduce_op::max,
                                     d::reduce_op::min};

// Rank r's bool at i.
bool flag(int r, std::size_t i) { return (i + static_cast<std::size_t>(r)) % 3 == 0; }

tensor flags(int r, std::size_t n) {
  std::vector<bool> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = flag(r, i);
  }
  return from_vector(std::move(v), {static_cast<std::int64_t>(n)});
}

}  // namespace

TEST_SUITE("distributed") {

  // Run alone by the ctest distributed.bad_environment (with COTENSOR_DIST_TIMEOUT_S=5s), without
  // mpirun: world() must refuse each malformed variable before it initialises MPI.
  TEST_CASE("a malformed COTENSOR_DIST_* variable is refused by world() and named" *
            doctest::skip()) {
    REQUIRE(std::getenv("COTENSOR_DIST_TIMEOUT_S") != nullptr);
    CHECK_THROWS_WITH_AS(dist::communicator::world(),
                         "cotensor: environment variable COTENSOR_DIST_TIMEOUT_S='5s' is "
                         "not a positive number of seconds",
                         std::invalid_argument);
    // Nothing was initialised: the next call reads the environment again. (No other thread
    // of this process reads it.)
    REQUIRE(::setenv("COTENSOR_DIST_TIMEOUT_S", "5", 1) == 0);
    REQUIRE(::setenv("COTENSOR_DIST_FUSION_BYTES", "64k", 1) == 0);
    CHECK_THROWS_WITH_AS(dist::communicator::world(),
                         "cotensor: environment variable COTENSOR_DIST_FUSION_BYTES='64k' is not "
                         "a non-negative integer",
                         std::invalid_argument);
    REQUIRE(::setenv("COTENSOR_DIST_FUSION_BYTES", "65536", 1) == 0);
    REQUIRE(::setenv("COTENSOR_DIST_FUSION_CYCLE_US", "-1", 1) == 0);
    CHECK_THROWS_WITH_AS(dist::communicator::world(),
                         "cotensor: environment variable COTENSOR_DIST_FUSION_CYCLE_US='-1' is "
                         "not an integer from 0 to 10000000",
                         std::invalid_argument);
  }

  // Run alone by the ctest distributed.np2.idle: the world must be the only communicator.
  TEST_CASE("an idle communication thread wakes about once a second with the default timeout" *
            doctest::skip() * doctest::timeout(30)) {
    const auto world = d::communicator::world();
    world.set_timeout(std::chrono::seconds(300));
    tensor t = ones({4});
    d::all_reduce(t);
    CHECK(t.to_vector() == std::vector<float>(4, static_cast<float>(world.size())));
    // Past the thread's linger and busy polling: it sleeps, waking only to look for a stuck
    // peer's questions (every timeout / 16, at most 1 s; it was every 50 ms, 60 wakes in 3 s).
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const long before = voluntary_switches("cotensor-comm");
    std::this_thread::sleep_for(std::chrono::seconds(3));
    const long woken = voluntary_switches("cotensor-comm") - before;
    MESSAGE("the communication thread slept " << woken << " times in 3 s idle");
    CHECK(woken >= 1);  // the probe's poll goes on
    CHECK(woken <= 10);
  }

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

  TEST_CASE("every collective on every numeric dtype matches a sequential computation exactly" *
            doctest::timeout(60)) {
    const auto c = d::communicator::world();
    const int n = c.size();
    const int me = c.rank();
    constexpr std::size_t len = 6 * 5;  // divides by 2 and 3
    for (const dtype t : numeric) {
      CAPTURE(t);
      for (const d::reduce_op op : every_op) {
        CAPTURE(op_name(op));
        tensor x = typed_input(me, len, t);
        d::all_reduce(x, op);
        CHECK(x.dtype() == t);
        const auto got = x.to_vector<double>();
        for (std::size_t i = 0; i < len; ++i) {
          CHECK(got[i] == want_reduced(op, t, n, i));
        }
        tensor s = d::reduce_scatter(reshape(typed_input(me, len, t), {6, 5}), op);
        CHECK(s.dtype() == t);
        CHECK(s.shape() == shape{6 / n, 5});
        const auto block = s.to_vector<double>();
        for (std::size_t i = 0; i < block.size(); ++i) {
          CHECK(block[i] ==
                want_reduced(op, t, n, static_cast<std::size_t>(me) * block.size() + i));
        }
      }
      tensor b = typed_input(me, len, t);
      d::broadcast(b, n - 1);
      const auto sent = b.to_vector<double>();
      for (std::size_t i = 0; i < len; ++i) {
        CHECK(sent[i] == small_value(n - 1, i));
      }
      tensor g = d::all_gather(reshape(typed_input(me, len, t), {5, 6}));
      CHECK(g.dtype() == t);
      CHECK(g.shape() == shape{n, 5, 6});
      const auto all = g.to_vector<double>();
      for (int r = 0; r < n; ++r) {
        for (std::size_t i = 0; i < len; ++i) {
          CHECK(all[static_cast<std::size_t>(r) * len + i] == small_value(r, i));
        }
      }
      tensor out = typed_input(me, len, t);
      tensor in = zeros({static_cast<std::int64_t>(len)}, t);
      d::send(out, (me + 1) % n, 11);
      d::recv(in, (me + n - 1) % n, 11);
      const auto received = in.to_vector<double>();
      for (std::size_t i = 0; i < len; ++i) {
        CHECK(received[i] == small_value((me + n - 1) % n, i));
      }
    }
  }

  TEST_CASE("int64 and float64 collectives keep what float32 would lose" * doctest::timeout(60)) {
    const auto c = d::communicator::world();
    const int n = c.size();
    // 2^58 + rank: a float64 (53-bit) sum would round the ranks away.
    const std::int64_t big = std::int64_t{1} << 58;
    tensor i64 = from_vector(std::vector<std::int64_t>(5, big + c.rank()), {5});
    d::all_reduce(i64);
    CHECK(i64.to_vector<std::int64_t>() ==
          std::vector<std::int64_t>(5, big * n + std::int64_t{n} * (n - 1) / 2));
    // 1 + (rank + 1) 2^-40: a float32 (24-bit) sum would drop the fractions.
    const double tiny = std::ldexp(1.0, -40);
    tensor f64 = from_vector(std::vector<double>(5, 1.0 + (c.rank() + 1) * tiny), {5});
    d::all_reduce(f64);
    CHECK(f64.to_vector<double>() == std::vector<double>(5, n + tiny * (n * (n + 1) / 2)));
    tensor m = from_vector(std::vector<std::int64_t>(3, big + c.rank()), {3});
    d::all_reduce(m, d::reduce_op::max);
    CHECK(m.to_vector<std::int64_t>() == std::vector<std::int64_t>(3, big + n - 1));
  }

  TEST_CASE("float16 and bfloat16 sums round to the dtype at each combine" * doctest::timeout(60)) {
    const auto c = d::communicator::world();
    const int n = c.size();
    // 2048 (float16) and 256 (bfloat16) are where odd integers stop being exact. Rank 0 holds
    // the limit, the others 1. On 2 ranks, limit + 1 is a tie that rounds to the even limit.
    // On 3, the result depends on the order MPI combines in: (limit + 1) + 1 = limit, or
    // limit + (1 + 1) = limit + 2; either way an even value in [limit, limit + 2].
    for (const auto& [t, limit] :
         {std::pair{dtype::float16, 2048.0}, std::pair{dtype::bfloat16, 256.0}}) {
      CAPTURE(t);
      tensor x = full({4}, c.rank() == 0 ? limit : 1.0, t);
      d::all_reduce(x);
      const auto got = x.to_vector<double>();
      for (double v : got) {
        if (n == 2) {
          CHECK(v == limit);
        } else {
          CHECK((v == limit || v == limit + 2.0 * ((n - 1) / 2)));
        }
      }
    }
  }

  TEST_CASE("bool collectives: sum and max are a logical or, min a logical and; avg refused" *
            doctest::timeout(60)) {
    const auto c = d::communicator::world();
    const int n = c.size();
    const int me = c.rank();
    constexpr std::size_t len = 12;
    for (const d::reduce_op op : {d::reduce_op::sum, d::reduce_op::max, d::reduce_op::min}) {
      CAPTURE(op_name(op));
      tensor x = flags(me, len);
      d::all_reduce(x, op);
      CHECK(x.dtype() == dtype::boolean);
      const auto got = x.to_vector<bool>();
      tensor s = d::reduce_scatter(reshape(flags(me, len), {6, 2}), op);
      const auto block = s.to_vector<bool>();
      for (std::size_t i = 0; i < len; ++i) {
        bool any = false;
        bool all = true;
        for (int r = 0; r < n; ++r) {
          any = any || flag(r, i);
          all = all && flag(r, i);
        }
        const bool want = op == d::reduce_op::min ? all : any;
        CHECK(got[i] == want);
        const std::size_t first = static_cast<std::size_t>(me) * block.size();
        if (i >= first && i < first + block.size()) {
          CHECK(block[i - first] == want);
        }
      }
    }
    tensor b = flags(me, len);
    CHECK_THROWS_AS(d::all_reduce(b, d::reduce_op::avg), std::invalid_argument);
    CHECK_THROWS_AS(d::reduce_scatter(reshape(b, {6, 2}), d::reduce_op::avg),
                    std::invalid_argument);
    d::broadcast(b, 0);
    const auto root = b.to_vector<bool>();
    tensor g = d::all_gather(flags(me, len));
    CHECK(g.shape() == shape{n, static_cast<std::int64_t>(len)});
    const auto all = g.to_vector<bool>();
    tensor in = zeros({static_cast<std::int64_t>(len)}, dtype::boolean);
    d::send(flags(me, len), (me + 1) % n, 12);
    d::recv(in, (me + n - 1) % n, 12);
    const auto received = in.to_vector<bool>();
    for (std::size_t i = 0; i < len; ++i) {
      CHECK(root[i] == flag(0, i));
      CHECK(received[i] == flag((me + n - 1) % n, i));
      for (int r = 0; r < n; ++r) {
        CHECK(all[static_cast<std::size_t>(r) * len + i] == flag(r, i));
      }
    }
  }

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

  bool check_mode();

  TEST_CASE("small all-reduces in flight are fused, with the results of separate ones" *
            doctest::timeout(60)) {
    const auto world = d::communicator::world();
    const auto c = world.split(0, world.rank());
    c.set_fusion(64 * 1024, std::chrono::milliseconds(50));
    const int n = c.size();
    // Sixteen all-reduces issued before any of their inputs is ready; one input fails.
    const bool synchronous = runtime::current().options().synchronous;
    std::promise<void> gate;
    auto opened = gate.get_future().share();
    if (synchronous) {
      gate.set_value();  // each op runs at its call: a closed gate would never open
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
      gate.set_value();
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
      std::promise<void> gate;
      const auto opened = gate.get_future().share();
      if (synchronous) {
        gate.set_value();  // each op runs at its call: a closed gate would never open
      }
      const auto a = issue(fused, opened, n, elements);
      if (!synchronous) {
        gate.set_value();
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
