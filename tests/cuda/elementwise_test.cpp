#include "cotensor/ops.hpp"
#include <cotensor/cotensor.hpp>

#include "compare.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

// Elementwise ops on a GPU against the same ops on the CPU. + - * / are correctly rounded IEEE
// operations on both backends (the CUDA kernels are built without FMA contraction, with IEEE
// division and without flushing denormals), so their results must be the same bits. exp, log,
// tanh and sigmoid come from two different math libraries: each GPU result must be within
// CUDA's documented bound of the exact value, and so within the sum of both libraries' bounds
// of the CPU's result. sqrt, relu and negation are exact on both.

using namespace cotensor;
using namespace cotensor::test::cuda;

namespace {

using binary_fn = tensor (*)(const tensor&, const tensor&);

struct binary_case {
  const char* name;
  binary_fn f;
};

const binary_case binary_ops[] = {
    {"+", [](const tensor& a, const tensor& b) { return a + b; }},
    {"-", [](const tensor& a, const tensor& b) { return a - b; }},
    {"*", [](const tensor& a, const tensor& b) { return a * b; }},
    {"/", [](const tensor& a, const tensor& b) { return a / b; }},
};

// Divisors: uniform in [-4, 4), pushed away from 0 so that quotients stay finite.
std::vector<float> divisors(std::int64_t n, std::uint32_t seed) {
  auto v = uniform(n, seed, -4.0F, 4.0F);
  for (auto& x : v) {
    if (std::fabs(x) < 0.25F) {
      x += 0.5F;
    }
  }
  return v;
}

struct shape_pair {
  shape a;
  shape b;
};

// Broadcasting cases: scalar-shaped (rank 0), either side broadcast, both sides broadcast,
// rank 3, a zero-element result, and sizes large enough to go to the backend rather than run
// at their call.
std::vector<shape_pair> broadcast_cases() {
  return {
      {{}, {}},
      {{}, {5}},
      {{5}, {}},
      {{1}, {7, 3}},
      {{4, 1}, {3}},
      {{2, 3, 4}, {3, 1}},
      {{2, 1, 4}, {1, 3, 1}},
      {{5, 1, 6}, {5, 4, 1}},
      {{2, 3, 4}, {}},
      {{2, 3, 4}, {2, 3, 4}},
      {{0, 3}, {3}},
      {{300, 257}, {257}},
      {{1000, 1}, {1, 1000}},
      {{64, 1, 512}, {64, 32, 512}},
  };
}

// Values that every unary op must handle as the CPU does, beside the random ones.
std::vector<float> specials(bool with_nan) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0F,
                          -0.0F,
                          1.0F,
                          -1.0F,
                          inf,
                          -inf,
                          std::numeric_limits<float>::denorm_min(),
                          -std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::min(),
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::lowest(),
                          1e-30F,
                          -1e-30F};
  if (with_nan) {
    v.push_back(std::numeric_limits<float>::quiet_NaN());
  }
  return v;
}

using unary_fn = tensor (*)(const tensor&);
using exact_fn = double (*)(double);

struct unary_case {
  const char* name;
  unary_fn f;
  exact_fn exact;          // the function in double precision: the exact value, to float rounding
  float lo;                // random inputs in [lo, hi)
  float hi;                //
  std::int64_t cuda_ulps;  // CUDA's error bound, in ulp of the exact value
  std::int64_t cpu_ulps;   // the CPU's (ops.hpp)
  bool with_nan;           // NaN among the inputs
};

double exact_sigmoid(double x) {
  return x < 0 ? std::exp(x) / (1 + std::exp(x)) : 1 / (1 + std::exp(-x));
}

// CUDA's bounds (CUDA Math API, without fast math): expf 2 ulp, logf 1, tanhf 2, sqrtf 0 with
// -prec-sqrt=true. The GPU's sigmoid is e / (1 + e) or 1 / (1 + e) with e = expf(-|x|): 2 ulp
// from e, up to 1.5 from the sum and the division, so 4. The CPU's exp, log, tanh, sigmoid
// are within 4 ulp (glibc's libmvec: log near 1 measured at 4 ulp from the rounded exact
// value), so a GPU result may lie cuda_ulps + cpu_ulps from the CPU's.
const unary_case unary_ops[] = {
    // Past ±88.7, exp overflows to inf or reaches the denormals and 0.
    {"exp", [](const tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, -104.0F,
     90.0F, 2, 4, true},
    {"log", [](const tensor& x) { return log(x); }, [](double x) { return std::log(x); }, 0.0F,
     1e6F, 1, 4, true},
    {"log near 1", [](const tensor& x) { return log(x); }, [](double x) { return std::log(x); },
     0.5F, 2.0F, 1, 4, true},
    {"tanh", [](const tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, -12.0F,
     12.0F, 2, 4, true},
    {"tanh near 0", [](const tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); },
     -0.01F, 0.01F, 2, 4, true},
    // Below -88.7 the CPU's sigmoid reaches the denormals: the GPU's must too.
    {"sigmoid", [](const tensor& x) { return sigmoid(x); }, exact_sigmoid, -110.0F, 40.0F, 4, 4,
     true},
    {"sqrt", [](const tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, 0.0F,
     1e6F, 0, 0, true},
    {"sqrt of negatives", [](const tensor& x) { return sqrt(x); },
     [](double x) { return std::sqrt(x); }, -10.0F, 0.0F, 0, 0, true},
    {"relu", [](const tensor& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0.0; },
     -10.0F, 10.0F, 0, 0, false},
    {"negation", [](const tensor& x) { return -x; }, [](double x) { return -x; }, -1e3F, 1e3F, 0, 0,
     true},
};

}  // namespace

TEST_SUITE("cuda.elementwise") {
  TEST_CASE("tensor-tensor + - * / broadcast as on the CPU and give its bits" *
            doctest::timeout(30)) {
    std::uint32_t seed = 1;
    for (const auto& [sa, sb] : broadcast_cases()) {
      const auto a = uniform_twin(sa, seed++, -10.0F, 10.0F);
      const auto b = make_twin(divisors(sb.numel(), seed++), sb);
      for (const auto& op : binary_ops) {
        const std::string name = op.name;
        CAPTURE(name);
        CAPTURE(sa);
        CAPTURE(sb);
        const tensor on_gpu = op.f(a.gpu, b.gpu);
        CHECK(on_gpu.shape() == broadcast_shape(sa, sb));
        check_ulps(on_gpu, op.f(a.cpu, b.cpu));
        // The operands swapped: the broadcast runs the other way.
        check_ulps(op.f(b.gpu, a.gpu), op.f(b.cpu, a.cpu));
      }
    }
  }

  TEST_CASE("shapes that do not broadcast throw invalid_argument at the call" *
            doctest::timeout(10)) {
    const auto a = zeros({2, 3}, gpu);
    const auto b = zeros({4}, gpu);
    for (const auto& op : binary_ops) {
      const std::string name = op.name;
      CAPTURE(name);
      CHECK_THROWS_AS((void)op.f(a, b), std::invalid_argument);
    }
    auto c = zeros({3}, gpu);
    CHECK_THROWS_AS(c += a, std::invalid_argument);  // the result would not fit in place
    CHECK(read_back(c) == std::vector<float>(3, 0.0F));
  }

  TEST_CASE("tensor with float and float with tensor give the CPU's bits" * doctest::timeout(30)) {
    const shape shapes[] = {{}, {7}, {3, 1000}, {2, 3, 4}, {0}};
    const float scalars[] = {2.5F, -0.75F, 0.0F, 1e-3F};
    std::uint32_t seed = 100;
    for (const auto& s : shapes) {
      const auto x = make_twin(divisors(s.numel(), seed++), s);
      for (const float k : scalars) {
        CAPTURE(s);
        CAPTURE(k);
        check_ulps(x.gpu + k, x.cpu + k);
        check_ulps(x.gpu - k, x.cpu - k);
        check_ulps(x.gpu * k, x.cpu * k);
        check_ulps(k + x.gpu, k + x.cpu);
        check_ulps(k - x.gpu, k - x.cpu);
        check_ulps(k * x.gpu, k * x.cpu);
        check_ulps(k / x.gpu, k / x.cpu);  // x has no zeros
        if (k != 0.0F) {
          check_ulps(x.gpu / k, x.cpu / k);
        }
      }
    }
  }

  TEST_CASE("in-place ops with a tensor and with a float give the CPU's bits" *
            doctest::timeout(30)) {
    const shape shapes[] = {{2, 3, 4}, {512, 300}};
    for (const auto& s : shapes) {
      CAPTURE(s);
      const auto start = uniform(s.numel(), 7, -10.0F, 10.0F);
      auto x = make_twin(start, s);
      // Right-hand sides: the same shape, a row, a column (rank 2 against rank 3) and a scalar
      // shape, all broadcast into x's shape.
      const auto last = s[s.rank() - 1];
      const auto same = make_twin(divisors(s.numel(), 8), s);
      const auto row = make_twin(divisors(last, 9), shape{last});
      const auto col = make_twin(divisors(s[s.rank() - 2], 10), shape{s[s.rank() - 2], 1});
      const auto one = make_twin(divisors(1, 11), shape{});
      // Every form, one after the other, issued without waiting: each reads the previous one's
      // result.
      for (auto* t : {&x.cpu, &x.gpu}) {
        const bool on_cpu = t == &x.cpu;
        const auto& rhs_same = on_cpu ? same.cpu : same.gpu;
        const auto& rhs_row = on_cpu ? row.cpu : row.gpu;
        const auto& rhs_col = on_cpu ? col.cpu : col.gpu;
        const auto& rhs_one = on_cpu ? one.cpu : one.gpu;
        *t += rhs_same;
        *t -= rhs_row;
        *t *= rhs_col;
        *t /= rhs_one;
        *t += 1.5F;
        *t -= 0.25F;
        *t *= -3.0F;
        *t /= 7.0F;
        *t /= rhs_same;
        *t *= rhs_row;
        *t -= rhs_col;
        *t += rhs_one;
      }
      check_ulps(x.gpu, x.cpu);
      CHECK(read_back(x.gpu) != start);  // something happened
    }
  }

  TEST_CASE("an in-place op on a GPU tensor is seen through every handle to its buffer" *
            doctest::timeout(10)) {
    auto x = from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, gpu);
    const tensor alias = x;          // a copy of the handle: the same buffer
    auto view = reshape(x, {3, 2});  // a view: the same buffer, another shape
    x += 10.0F;
    view *= 2.0F;
    const std::vector<float> want = {22, 24, 26, 28, 30, 32};
    CHECK(read_back(alias) == want);
    CHECK(read_back(view) == want);
    CHECK(view.shape() == shape{3, 2});
    x += x;  // reads and writes one buffer
    CHECK(read_back(x) == std::vector<float>{44, 48, 52, 56, 60, 64});
  }

  TEST_CASE("exp log tanh sigmoid are within CUDA's ulp bounds and the CPU's: sqrt relu and "
            "negation exact" *
            doctest::timeout(30)) {
    std::uint32_t seed = 1000;
    for (const auto& op : unary_ops) {
      // A small input (run at its call when it can be) and a large one (on the backend).
      for (const std::int64_t n : {std::int64_t{17}, std::int64_t{1} << 16}) {
        const std::string name = op.name;
        CAPTURE(name);
        CAPTURE(n);
        auto values = uniform(n, seed++, op.lo, op.hi);
        for (const float v : specials(op.with_nan)) {
          values.push_back(v);
        }
        const auto n_all = static_cast<std::int64_t>(values.size());
        const auto x = make_twin(values, shape{n_all});
        const tensor y = op.f(x.gpu);
        // Against the CPU: each within its bound of the exact value.
        check_ulps(y, op.f(x.cpu), op.cuda_ulps + op.cpu_ulps);
        // Against the exact value, rounded to float: within CUDA's bound.
        std::vector<float> exact(values.size());
        for (std::size_t i = 0; i < values.size(); ++i) {
          exact[i] = rounded(op.exact(static_cast<double>(values[i])));
        }
        const auto d = compare_ulps(read_back(y), exact, op.cuda_ulps);
        CHECK_MESSAGE(d.count == 0, d.count, " elements off the exact value; ", d.first);
        // Rank 3: a unary op ignores the shape but must keep it.
        const auto x3 = make_twin(values, shape{1, n_all, 1});
        const tensor y3 = op.f(x3.gpu);
        CHECK(y3.shape() == shape{1, n_all, 1});
        CHECK(same_bits(read_back(y3), read_back(y)));
      }
    }
  }

  TEST_CASE("negation flips the sign bit of zeros too, as on the CPU" * doctest::timeout(10)) {
    const std::vector<float> values = {0.0F, -0.0F, 1.0F, -2.0F};
    const auto x = make_twin(values, shape{4});
    const auto got = read_back(-x.gpu);
    CHECK(same_bits(got, (-x.cpu).to_vector()));
    CHECK(std::signbit(got[0]));
    CHECK(!std::signbit(got[1]));
  }

  TEST_CASE("the ulp distance counts the floats between two values" * doctest::timeout(5)) {
    CHECK(ulp_distance(1.0F, 1.0F) == 0);
    CHECK(ulp_distance(1.0F, std::nextafter(1.0F, 2.0F)) == 1);
    CHECK(ulp_distance(0.0F, -0.0F) == 0);
    CHECK(ulp_distance(std::numeric_limits<float>::denorm_min(),
                       -std::numeric_limits<float>::denorm_min()) == 2);
    CHECK(ulp_distance(1.0F, 1.0F + 4 * std::numeric_limits<float>::epsilon()) == 4);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    CHECK(ulp_distance(nan, nan) == 0);
    CHECK(ulp_distance(nan, 1.0F) == std::numeric_limits<std::int64_t>::max());
    CHECK(ulp_distance(std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity()) ==
          1);
  }
}
