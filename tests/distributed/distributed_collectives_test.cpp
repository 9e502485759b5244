// Run by mpirun on 2 and 3 ranks (tests/distributed/CMakeLists.txt): every rank runs every case,
// in the same order, and checks its own results against a sequential computation.

#include "cotensor/distributed.hpp"
#include <cotensor/cotensor.hpp>

#include "distributed_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

// The collectives' results: every collective on every dtype against a sequential computation,
// their arguments, and split communicators.

namespace {

using namespace cotensor;
namespace d = cotensor::dist;
using cotensor::test::check_mode;
using cotensor::test::input;
using cotensor::test::value;

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

  TEST_CASE("bool collectives: sum and max are a logical or, min a logical and: avg refused" *
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
}  // TEST_SUITE
