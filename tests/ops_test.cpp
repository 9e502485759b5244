#include "cotensor/ops.hpp"

#include <cotensor/cotensor.hpp>

#include "cpu/openblas.hpp"
#include "support/environment.hpp"
#include "support/scoped_environment.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace cotensor;

namespace {

std::vector<float> values(const tensor& t) { return t.to_vector(); }

// How many units in the last place `got` is from the exact value `want`, measured in the
// spacing of floats at `want` (denormal spacing below the normal range). Equal infinities and
// two NaNs are 0 apart; anything else against an infinity or a NaN is infinitely far.
double ulps(float got, double want) {
  if (std::isnan(want) || std::isnan(got)) {
    return std::isnan(want) && std::isnan(got) ? 0.0 : INFINITY;
  }
  const auto rounded = static_cast<float>(want);
  if (got == rounded) {
    return 0.0;
  }
  if (std::isinf(got) || std::isinf(rounded)) {
    return INFINITY;
  }
  const float magnitude = std::max(std::fabs(rounded), std::numeric_limits<float>::min());
  const double spacing = std::nextafter(magnitude, INFINITY) - magnitude;
  return std::fabs(static_cast<double>(got) - want) / spacing;
}

// Checks that `f` throws std::invalid_argument and issues nothing.
template <class F>
void check_rejected(F f) {
  const auto issued = runtime::current().stats().issued;
  CHECK_THROWS_AS(f(), std::invalid_argument);
  CHECK(runtime::current().stats().issued == issued);
}

}  // namespace

TEST_SUITE("ops") {
  TEST_CASE("factories fill their tensors" * doctest::timeout(10)) {
    CHECK(values(zeros({2})) == std::vector<float>{0, 0});
    CHECK(values(ones({2})) == std::vector<float>{1, 1});
    CHECK(values(full({3}, -2.5F)) == std::vector<float>{-2.5F, -2.5F, -2.5F});
    CHECK(values(from_vector({1, 2, 3}, {3})) == std::vector<float>{1, 2, 3});
    CHECK(zeros({0, 3}).numel() == 0);
    CHECK(values(zeros({0, 3})).empty());
  }

  TEST_CASE("from_vector rejects a size that does not fill the shape") {
    CHECK_THROWS_WITH_AS(from_vector({1, 2, 3}, {2, 2}), doctest::Contains("do not fill"),
                         std::invalid_argument);
  }

  TEST_CASE("elementwise arithmetic on tensors of equal shape" * doctest::timeout(10)) {
    auto a = from_vector({1, 2, 3, 4}, {2, 2});
    auto b = from_vector({4, 3, 2, 1}, {2, 2});
    CHECK(values(a + b) == std::vector<float>{5, 5, 5, 5});
    CHECK(values(a - b) == std::vector<float>{-3, -1, 1, 3});
    CHECK(values(a * b) == std::vector<float>{4, 6, 6, 4});
    CHECK(values(a / b) == std::vector<float>{0.25F, 2.0F / 3.0F, 1.5F, 4});
    CHECK(values(-a) == std::vector<float>{-1, -2, -3, -4});
  }

  TEST_CASE("scalar operands work on either side, in the right order" * doctest::timeout(10)) {
    auto x = from_vector({1, 2, 4}, {3});
    CHECK(values(x + 1.0F) == std::vector<float>{2, 3, 5});
    CHECK(values(1.0F + x) == std::vector<float>{2, 3, 5});
    CHECK(values(x - 1.0F) == std::vector<float>{0, 1, 3});
    CHECK(values(1.0F - x) == std::vector<float>{0, -1, -3});
    CHECK(values(x * 2.0F) == std::vector<float>{2, 4, 8});
    CHECK(values(2.0F * x) == std::vector<float>{2, 4, 8});
    CHECK(values(x / 2.0F) == std::vector<float>{0.5F, 1, 2});
    CHECK(values(2.0F / x) == std::vector<float>{2, 1, 0.5F});
  }

  TEST_CASE("a row vector broadcasts over the rows of a matrix" * doctest::timeout(10)) {
    auto m = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
    auto row = from_vector({10, 20, 30}, {3});
    CHECK(values(m + row) == std::vector<float>{11, 22, 33, 14, 25, 36});
    CHECK(values(row - m) == std::vector<float>{9, 18, 27, 6, 15, 24});
    auto col = from_vector({1, 2}, {2, 1});
    CHECK(values(m * col) == std::vector<float>{1, 2, 3, 8, 10, 12});
    auto outer = col + from_vector({0, 10, 20}, {1, 3});
    CHECK(outer.shape() == shape{2, 3});
    CHECK(values(outer) == std::vector<float>{1, 11, 21, 2, 12, 22});
    CHECK(broadcast_shape({4, 1, 3}, {2, 1}) == shape{4, 2, 3});
  }

  TEST_CASE("shapes that cannot broadcast are rejected at the call, enqueuing nothing") {
    auto a = ones({2, 3});
    auto v2 = ones({2});
    auto m32 = ones({3, 2});
    auto m23 = ones({2, 3});
    auto v3 = ones({3});
    auto cube = ones({2, 2, 2});
    auto empty = zeros({0});
    check_rejected([&] { return a + v2; });
    check_rejected([&] { return a * m32; });
    check_rejected([&] { return a - m32; });
    check_rejected([&] { return matmul(a, m23); });
    check_rejected([&] { return matmul(v3, a); });
    check_rejected([&] { return transpose(cube); });
    check_rejected([&] { return reshape(a, {4}); });
    check_rejected([&] { return sum(a, 2); });
    check_rejected([&] { return mean(a, -3); });
    check_rejected([&] { return mean(empty); });
    CHECK_THROWS_WITH_AS(matmul(a, ones({2, 3})), doctest::Contains("inner dimensions"),
                         std::invalid_argument);
  }

  TEST_CASE("matmul multiplies matrices" * doctest::timeout(20)) {
    auto a = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
    auto b = from_vector({7, 8, 9, 10, 11, 12}, {3, 2});
    CHECK(values(matmul(a, b)) == std::vector<float>{58, 64, 139, 154});
    // Large enough to be split into tiles across workers: compare with a naive product.
    const int m = 300;
    const int k = 70;
    const int n = 2500;
    std::vector<float> av(m * k), bv(k * n);
    for (int i = 0; i < m * k; ++i) {
      av[i] = static_cast<float>((i * 7) % 13) - 6.0F;
    }
    for (int i = 0; i < k * n; ++i) {
      bv[i] = static_cast<float>((i * 5) % 11) - 5.0F;
    }
    auto c = matmul(from_vector(av, {m, k}), from_vector(bv, {k, n})).to_vector();
    for (int i = 0; i < m; i += 37) {
      for (int j = 0; j < n; j += 101) {
        float expected = 0;
        for (int p = 0; p < k; ++p) {
          expected += av[i * k + p] * bv[p * n + j];
        }
        CHECK(c[i * n + j] == expected);  // small integers: exact in float
      }
    }
    CHECK(values(matmul(zeros({2, 0}), zeros({0, 3}))) == std::vector<float>(6, 0.0F));
  }

  TEST_CASE("OpenBLAS runs the kernels the CPU's instructions allow, and the environment is as "
            "it was" *
            doctest::timeout(20)) {
    // Debian's OpenBLAS 0.3.21 falls back to its SSE3 kernels ("Prescott") on CPU models it does
    // not know (a Sapphire Rapids Xeon): cotensor chooses by instruction set instead, unless the
    // user set OPENBLAS_CORETYPE, and leaves no OPENBLAS_CORETYPE of its own behind.
    const char* user_choice = std::getenv("OPENBLAS_CORETYPE");
    CHECK(values(matmul(ones({2, 3}), ones({3, 2}))) == std::vector<float>(4, 3.0F));
    const auto& blas = detail::cpu::openblas();
    CHECK(static_cast<bool>(blas.sgemm));
    CHECK(!blas.core.empty());
    if (user_choice == nullptr) {
      CHECK(std::getenv("OPENBLAS_CORETYPE") == nullptr);
      if (const char* wanted = detail::cpu::openblas_coretype(); wanted != nullptr) {
        CHECK(blas.coretype_set == wanted);
        CHECK(blas.core == wanted);  // e.g. Cooperlake, not Prescott
      }
    } else {
      CHECK(blas.coretype_set.empty());
      CHECK(std::string(std::getenv("OPENBLAS_CORETYPE")) == user_choice);
    }
  }

  TEST_CASE("opening OpenBLAS starts no thread pool, and the environment is as it was" *
            doctest::timeout(20)) {
    // With its pool, Debian's pthread OpenBLAS starts a thread per core but one as it loads,
    // and that thread spins ~0.13 s of CPU: cotensor opens it with OPENBLAS_NUM_THREADS=1.
    // Run alone (ctest runs each case in a process of its own), this case opens OpenBLAS here.
    const char* user_choice = std::getenv("OPENBLAS_NUM_THREADS");
    const auto threads = [] {
      std::size_t n = 0;
      for ([[maybe_unused]] const auto& task :
           std::filesystem::directory_iterator("/proc/self/task")) {
        ++n;
      }
      return n;
    };
    const std::size_t before = threads();
    const auto& blas = detail::cpu::openblas();
    CHECK(static_cast<bool>(blas.sgemm));
    if (user_choice == nullptr) {
      CHECK(threads() == before);
      CHECK(blas.num_threads_set);
      CHECK(std::getenv("OPENBLAS_NUM_THREADS") == nullptr);
    } else {
      CHECK(!blas.num_threads_set);
      CHECK(std::string(std::getenv("OPENBLAS_NUM_THREADS")) == user_choice);
    }
  }

  TEST_CASE("the first GEMM opens OpenBLAS only while no thread of cotensor reads the "
            "environment" *
            doctest::timeout(20)) {
    // OpenBLAS opens with variables set for the dlopen (setenv), under an exclusive lock of the
    // environment mutex; a thread of cotensor that reads the environment holds it shared. Run
    // alone (ctest runs each case in a process of its own), the first GEMM is this one.
    const auto mapped = [] {
      std::ifstream maps("/proc/self/maps");
      std::string line;
      while (std::getline(maps, line)) {
        if (line.find("libopenblas") != std::string::npos) {
          return true;
        }
      }
      return false;
    };
    const bool opened_before = mapped();
    // The float32 GEMM on OpenBLAS, not cotensor's own kernel (the CPU may have AVX-512).
    const cotensor::test::scoped_environment blas("COTENSOR_GEMM_F32", "openblas");
    runtime rt({.worker_threads = 1, .inline_small_ops = false});
    std::shared_lock reading(detail::environment_mutex());
    const tensor product = matmul(full({2, 2}, 1.0F), full({2, 2}, 3.0F));
    std::atomic<bool> done{false};
    std::thread waiter([&] {
      product.wait();
      done = true;
    });
    if (opened_before) {
      MESSAGE("OpenBLAS was opened by an earlier case: run this case alone to test the lock");
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      CHECK_FALSE(done.load());  // the worker waits for the lock to open OpenBLAS
    }
    reading.unlock();
    waiter.join();
    CHECK(done.load());
    CHECK(mapped());
    CHECK(product.to_vector() == std::vector<float>{6, 6, 6, 6});
  }

  TEST_CASE("matmuls on both workers at once are all exact (the BLAS is safe to call from two "
            "threads)" *
            doctest::timeout(120)) {
    // Each 128 x 128 product is two SGEMM tiles, one per worker, and many are in flight at once.
    // Debian's single-threaded OpenBLAS build is not safe to call concurrently: with it, 8,000
    // such products gave 19-35 wrong ones per run (bench/README.md).
    runtime rt({.worker_threads = 2});
    constexpr std::int64_t n = 128;
    const tensor average = full({n, n}, 1.0F / static_cast<float>(n));  // x · average = x
    int wrong = 0;
    for (int round = 0; round < 500; ++round) {
      std::vector<tensor> products;
      for (int i = 0; i < 16; ++i) {
        products.push_back(matmul(full({n, n}, static_cast<float>(i + round % 7)), average));
      }
      for (int i = 0; i < 16; ++i) {
        const std::vector<float> got = products[static_cast<std::size_t>(i)].to_vector();
        const auto expected = static_cast<float>(i + round % 7);  // sums of k/128: exact
        wrong +=
            std::all_of(got.begin(), got.end(), [&](float v) { return v == expected; }) ? 0 : 1;
      }
    }
    CHECK(wrong == 0);
  }

  TEST_CASE("transpose and reshape rearrange and view" * doctest::timeout(10)) {
    auto a = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
    auto t = transpose(a);
    CHECK(t.shape() == shape{3, 2});
    CHECK(values(t) == std::vector<float>{1, 4, 2, 5, 3, 6});
    auto r = reshape(a, {3, 2});
    CHECK(r.shape() == shape{3, 2});
    r += 1.0F;  // a view: the write is seen through `a`
    CHECK(values(a) == std::vector<float>{2, 3, 4, 5, 6, 7});
    CHECK(transpose(zeros({0, 4})).shape() == shape{4, 0});
  }

  TEST_CASE("unary functions apply elementwise" * doctest::timeout(10)) {
    auto x = from_vector({-1, 0, 2}, {3});
    CHECK(values(relu(x)) == std::vector<float>{0, 0, 2});
    const std::vector<float> e = values(exp(x));
    const std::vector<float> t = values(tanh(x));
    for (std::size_t i = 0; i < 3; ++i) {
      const double xi = std::vector<double>{-1, 0, 2}[i];
      CHECK(ulps(e[i], std::exp(xi)) <= 4.0);
      CHECK(ulps(t[i], std::tanh(xi)) <= 4.0);
    }
    CHECK(e[1] == 1.0F);
    CHECK(t[1] == 0.0F);
    CHECK(values(sigmoid(x))[1] == 0.5F);
    auto y = from_vector({1, 4, 9}, {3});
    CHECK(values(sqrt(y)) == std::vector<float>{1, 2, 3});
    CHECK(values(log(exp(from_vector({0, 1}, {2}))))[0] == 0.0F);
  }

  TEST_CASE("exp, log, tanh and sigmoid are within 4 ulp over the whole float range" *
            doctest::timeout(30)) {
    // Every 4093rd bit pattern (about a million floats, both signs, denormals to the
    // largest), against the exact value from double-precision libm.
    std::vector<float> xs;
    for (std::uint64_t bits = 0; bits <= 0xFFFF'FFFFU; bits += 4093) {
      float v = 0;
      const auto b = static_cast<std::uint32_t>(bits);
      std::memcpy(&v, &b, sizeof v);
      if (!std::isnan(v)) {
        xs.push_back(v);
      }
    }
    const auto x = from_vector(xs, {static_cast<std::int64_t>(xs.size())});
    struct function {
      const char* name;
      tensor (*f)(const tensor&);
      double (*exact)(double);
    };
    const function functions[] = {
        {"exp", exp, [](double v) { return std::exp(v); }},
        {"log", log, [](double v) { return std::log(v); }},
        {"tanh", tanh, [](double v) { return std::tanh(v); }},
        {"sigmoid", sigmoid, [](double v) { return 1.0 / (1.0 + std::exp(-v)); }},
    };
    for (const function& fn : functions) {
      const std::vector<float> y = values(fn.f(x));
      REQUIRE(y.size() == xs.size());
      double worst = 0;
      float worst_x = 0;
      for (std::size_t i = 0; i < xs.size(); ++i) {
        const double u = ulps(y[i], fn.exact(xs[i]));
        if (u > worst) {
          worst = u;
          worst_x = xs[i];
        }
      }
      INFO(std::string(fn.name), ": ", worst, " ulp at x = ", worst_x);
      CHECK(worst <= 4.0);
    }
  }

  TEST_CASE("exp, log, tanh and sigmoid take infinities, NaN, zeros and overflow" *
            doctest::timeout(10)) {
    constexpr float inf = std::numeric_limits<float>::infinity();
    constexpr float nan = std::numeric_limits<float>::quiet_NaN();
    const auto x = from_vector({-inf, inf, nan, -0.0F, 0.0F, 100.0F, -110.0F, -1.0F}, {8});
    const std::vector<float> e = values(exp(x));
    CHECK(e[0] == 0.0F);
    CHECK(e[1] == inf);
    CHECK(std::isnan(e[2]));
    CHECK(e[3] == 1.0F);
    CHECK(e[5] == inf);   // overflow
    CHECK(e[6] == 0.0F);  // underflow
    const std::vector<float> l = values(log(x));
    CHECK(std::isnan(l[0]));
    CHECK(l[1] == inf);
    CHECK(std::isnan(l[2]));
    CHECK(l[3] == -inf);
    CHECK(l[4] == -inf);
    CHECK(std::isnan(l[7]));  // a negative number
    const std::vector<float> t = values(tanh(x));
    CHECK(t[0] == -1.0F);
    CHECK(t[1] == 1.0F);
    CHECK(std::isnan(t[2]));
    CHECK((t[3] == 0.0F && std::signbit(t[3])));
    CHECK(t[5] == 1.0F);
    const std::vector<float> s = values(sigmoid(x));
    CHECK(s[0] == 0.0F);
    CHECK(s[1] == 1.0F);
    CHECK(std::isnan(s[2]));
    CHECK(s[3] == 0.5F);
    CHECK(s[6] == 0.0F);
  }

  TEST_CASE("an element's exp, log, tanh or sigmoid does not depend on its position or the "
            "tensor's size" *
            doctest::timeout(10)) {
    // The bulk of a tensor and its tail (and a tensor of one) take different paths through
    // the vector loops; the same input must give the same bits on each.
    std::vector<float> xs(1037);
    for (std::size_t i = 0; i < xs.size(); ++i) {
      xs[i] = 0.37F + 0.011F * static_cast<float>(i % 97);
    }
    for (auto f : {exp, log, tanh, sigmoid}) {
      const std::vector<float> whole = values(f(from_vector(xs, {1037})));
      for (std::size_t i : {std::size_t{0}, std::size_t{15}, std::size_t{16}, std::size_t{1030},
                            std::size_t{1036}}) {
        const std::vector<float> one = values(f(from_vector({xs[i]}, {1})));
        CHECK(std::memcmp(&one[0], &whole[i], sizeof(float)) == 0);
        // The same value at every position of the bulk and of the tail.
        CHECK(std::memcmp(&whole[i % 97], &whole[i], sizeof(float)) == 0);
      }
    }
  }

  TEST_CASE("map applies a user function on the backend" * doctest::timeout(10)) {
    auto x = from_vector({1, 2, 3}, {3});
    auto y = map(x, [](float v) { return v * v + 1.0F; });
    CHECK(values(y) == std::vector<float>{2, 5, 10});
    const float offset = 0.5F;
    auto big = map(ones({100000}), [offset](float v) { return v + offset; });
    CHECK(sum(big).item() == doctest::Approx(150000.0));
  }

  TEST_CASE("sum and mean reduce everything or one axis" * doctest::timeout(10)) {
    auto a = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
    CHECK(sum(a).shape() == shape{});
    CHECK(sum(a).item() == 21.0F);
    CHECK(a.sum().item() == 21.0F);
    CHECK(mean(a).item() == 3.5F);
    CHECK(values(sum(a, 0)) == std::vector<float>{5, 7, 9});
    CHECK(values(sum(a, 1)) == std::vector<float>{6, 15});
    CHECK(values(sum(a, -1)) == std::vector<float>{6, 15});
    CHECK(values(mean(a, 0)) == std::vector<float>{2.5F, 3.5F, 4.5F});
    CHECK(sum(zeros({0})).item() == 0.0F);
    auto cube = reshape(from_vector(std::vector<float>(24, 1.0F), {24}), {2, 3, 4});
    CHECK(sum(cube, 1).shape() == shape{2, 4});
    CHECK(values(sum(cube, 1)) == std::vector<float>(8, 3.0F));
    CHECK(sum(ones({1000000})).item() == 1000000.0F);
  }

  TEST_CASE("an MLP forward pass and one SGD step compose the ops" * doctest::timeout(20)) {
    // y = relu(x·W + b); loss = mean((y - t)^2); a gradient step on b by hand.
    auto x = from_vector({1, 2, 3, 4}, {2, 2});
    auto w = from_vector({1, 0, 0, 1}, {2, 2});
    auto b = from_vector({0.5F, -10.0F}, {2});
    auto y = relu(matmul(x, w) + b);
    CHECK(values(y) == std::vector<float>{1.5F, 0, 3.5F, 0});
    auto target = zeros({2, 2});
    auto diff = y - target;
    auto loss = mean(diff * diff);
    CHECK(loss.item() == doctest::Approx((1.5 * 1.5 + 3.5 * 3.5) / 4));
    auto grad_b = mean(diff, 0) * 2.0F;
    b -= grad_b * 0.1F;
    CHECK(values(b)[0] == doctest::Approx(0.5 - 0.1 * 2 * 2.5));
  }
}
