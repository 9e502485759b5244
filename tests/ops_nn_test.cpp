// The ops models are made of: softmax, log_softmax, gelu, layer_norm, concat, slice,
// index_select, and matmul batched and per dtype, each against a reference computed here.
#include "cotensor/ops.hpp"
#include <cotensor/cotensor.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

using namespace cotensor;

namespace {

template <class F>
void check_rejected(F f) {
  const auto issued = runtime::current().stats().issued;
  CHECK_THROWS_AS(f(), std::invalid_argument);
  CHECK(runtime::current().stats().issued == issued);
}

// The row-major product of [m, k] and [k, n] in double.
std::vector<double> reference_matmul(const std::vector<double>& a,
                                     const std::vector<double>& b,
                                     std::int64_t m,
                                     std::int64_t k,
                                     std::int64_t n) {
  std::vector<double> c(static_cast<std::size_t>(m * n), 0.0);
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t p = 0; p < k; ++p) {
      for (std::int64_t j = 0; j < n; ++j) {
        c[static_cast<std::size_t>(i * n + j)] +=
            a[static_cast<std::size_t>(i * k + p)] * b[static_cast<std::size_t>(p * n + j)];
      }
    }
  }
  return c;
}

}  // namespace

TEST_SUITE("ops_nn") {

  TEST_CASE("softmax and log_softmax are stable and sum to one") {
    const tensor x = from_vector({1.0F, 2.0F, 3.0F, 1000.0F, 1000.0F, -1000.0F}, {2, 3});
    const auto s = softmax(x).to_vector();
    const double e = std::exp(1.0);
    const double z = 1.0 + e + e * e;
    CHECK(s[0] == doctest::Approx(1.0 / z).epsilon(1e-6));
    CHECK(s[2] == doctest::Approx(e * e / z).epsilon(1e-6));
    CHECK(s[3] == 0.5F);  // no overflow at 1000
    CHECK(s[5] == 0.0F);
    const auto l = log_softmax(x).to_vector();
    CHECK(l[0] == doctest::Approx(-std::log(z)).epsilon(1e-6));
    CHECK(l[3] == doctest::Approx(-std::log(2.0)).epsilon(1e-6));
    CHECK(l[5] == doctest::Approx(-2000.0 - std::log(2.0)).epsilon(1e-6));  // no log(0)
    for (dtype t : {dtype::float16, dtype::bfloat16, dtype::float64}) {
      CAPTURE(name(t));
      const tensor y = softmax(x.astype(t));
      CHECK(y.dtype() == t);
      CHECK(sum(y.astype(dtype::float32), 1).to_vector()[0] == doctest::Approx(1.0).epsilon(1e-2));
    }
    CHECK(softmax(arange(3)).dtype() == dtype::float32);  // integers compute as float32
    const tensor scalar = full({}, 1.0F);
    check_rejected([&] { return softmax(scalar); });
  }

  TEST_CASE("gelu in its exact and tanh forms") {
    const tensor x = from_vector({-3.0F, -1.0F, 0.0F, 0.5F, 2.0F}, {5});
    const auto g = gelu(x).to_vector();
    const auto gt = gelu(x, true).to_vector();
    const float xs[] = {-3.0F, -1.0F, 0.0F, 0.5F, 2.0F};
    for (int i = 0; i < 5; ++i) {
      const double v = xs[i];
      CHECK(g[static_cast<std::size_t>(i)] ==
            doctest::Approx(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)))).epsilon(1e-6));
      const double k = std::sqrt(2.0 / 3.14159265358979323846);
      CHECK(gt[static_cast<std::size_t>(i)] ==
            doctest::Approx(0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v))))
                .epsilon(1e-6));
    }
    CHECK(gelu(x.astype(dtype::bfloat16)).dtype() == dtype::bfloat16);
    CHECK(gelu(x.astype(dtype::float64)).to_vector<double>()[4] ==
          doctest::Approx(2.0 * 0.5 * (1.0 + std::erf(2.0 / std::sqrt(2.0)))));
  }

  TEST_CASE("gelu's tanh form in float16 and bfloat16: the double form rounded, within an ulp") {
    // Computed in float for the halves (cpu/unary.cpp's gelu_tanh_half_span): against the
    // double form rounded to the half, over [-12, 12] (the tail down to bfloat16's subnormals)
    // and beyond, every result within one of the half's ulps and nearly all equal.
    std::vector<float> xs;
    for (int i = -12000; i <= 12000; ++i) {
      xs.push_back(static_cast<float>(i) * 0.001F);
    }
    for (const float v : {-1e4F, -300.0F, 300.0F, 1e4F, 65504.0F, -0.0F}) {
      xs.push_back(v);
    }
    const auto tanh_form = [](double x) {
      const double k = 0.79788456080286535588;
      return x / (1.0 + std::exp(-2.0 * k * (x + 0.044715 * x * x * x)));
    };
    for (const dtype t : {dtype::bfloat16, dtype::float16}) {
      CAPTURE(t);
      const tensor x = from_vector(xs, {static_cast<std::int64_t>(xs.size())}).astype(t);
      const auto held = x.astype(dtype::float32).to_vector();
      std::vector<float> want_f(held.size());
      for (std::size_t i = 0; i < held.size(); ++i) {
        want_f[i] = static_cast<float>(tanh_form(held[i]));
      }
      const auto want = from_vector(want_f, {static_cast<std::int64_t>(want_f.size())})
                            .astype(t)
                            .astype(dtype::float32)
                            .to_vector();
      const auto got = gelu(x, true).astype(dtype::float32).to_vector();
      // One ulp of the half at |v|: the gap to the next value away from zero.
      const auto ulp = [t](float v) {
        const float next = from_vector({std::nextafter(std::fabs(v), INFINITY)}, {1})
                               .astype(t)
                               .astype(dtype::float32)
                               .item();
        const float here = from_vector({std::fabs(v)}, {1}).astype(t).astype(dtype::float32).item();
        return next > here ? next - here : std::numeric_limits<float>::denorm_min();
      };
      std::size_t equal = 0;
      for (std::size_t i = 0; i < got.size(); ++i) {
        if (got[i] == want[i] && std::signbit(got[i]) == std::signbit(want[i])) {
          ++equal;
          continue;
        }
        CAPTURE(held[i]);
        CHECK(std::fabs(got[i] - want[i]) <= ulp(want[i]));
      }
      CHECK(equal >= got.size() * 999 / 1000);
      // Infinities and NaN as the float32 form gives them (-inf: NaN, as PyTorch's too).
      const tensor specials = from_vector({INFINITY, -INFINITY, NAN}, {3});
      const auto special = gelu(specials.astype(t), true).astype(dtype::float32).to_vector();
      const auto special32 = gelu(specials, true).to_vector();
      for (std::size_t i = 0; i < 3; ++i) {
        CHECK((std::isnan(special32[i]) ? std::isnan(special[i]) : special[i] == special32[i]));
      }
    }
  }

  TEST_CASE("gelu keeps its relative accuracy far in the negative tail") {
    // 1 + erf(x/√2) and 1 + tanh(u) cancel for x ≪ 0 (to 0 in double below about −8.3):
    // the results are tiny but far from 0, and must be within a few ulps.
    const std::vector<double> xs = {-3.0, -6.0, -8.0, -10.0};
    const auto exact = [](long double x) { return 0.5L * x * std::erfc(-x / std::sqrt(2.0L)); };
    const auto tanh_form = [](long double x) {
      const long double k = std::sqrt(2.0L / 3.14159265358979323846L);
      return x / (1.0L + std::exp(-2.0L * k * (x + 0.044715L * x * x * x)));
    };
    const tensor x64 = from_vector(xs, {4});
    const auto g64 = gelu(x64).to_vector<double>();
    const auto t64 = gelu(x64, true).to_vector<double>();
    const auto g32 = gelu(x64.astype(dtype::float32)).to_vector<float>();
    const auto t32 = gelu(x64.astype(dtype::float32), true).to_vector<float>();
    for (std::size_t i = 0; i < xs.size(); ++i) {
      CAPTURE(xs[i]);
      const auto e = static_cast<double>(exact(xs[i]));
      const auto t = static_cast<double>(tanh_form(xs[i]));
      CHECK(e < 0.0);
      CHECK(std::fabs(g64[i] - e) <= 1e-14 * std::fabs(e));
      CHECK(std::fabs(t64[i] - t) <= 1e-14 * std::fabs(t));
      CHECK(std::fabs(g32[i] - e) <= 1e-6 * std::fabs(e));
      CHECK(std::fabs(t32[i] - t) <= 1e-6 * std::fabs(t));
    }
  }

  TEST_CASE("layer_norm normalises the last axis and applies weight and bias") {
    const tensor x = from_vector({1.0F, 2.0F, 3.0F, 4.0F, 10.0F, 10.0F, 10.0F, 10.0F}, {2, 4});
    const tensor w = from_vector({1.0F, 2.0F, 1.0F, 1.0F}, {4});
    const tensor b = from_vector({0.0F, 0.0F, 0.0F, 1.0F}, {4});
    const auto y = layer_norm(x, w, b, 1e-5).to_vector();
    const double mean = 2.5;
    const double sd = std::sqrt(1.25 + 1e-5);
    CHECK(y[0] == doctest::Approx((1.0 - mean) / sd).epsilon(1e-6));
    CHECK(y[1] == doctest::Approx(2.0 * (2.0 - mean) / sd).epsilon(1e-6));
    CHECK(y[3] == doctest::Approx((4.0 - mean) / sd + 1.0).epsilon(1e-6));
    CHECK(y[4] == 0.0F);  // a constant row
    CHECK(y[7] == 1.0F);
    const auto plain = layer_norm(x, tensor(), tensor()).to_vector();
    CHECK(plain[1] == doctest::Approx((2.0 - mean) / sd).epsilon(1e-6));
    CHECK(layer_norm(x.astype(dtype::float16), w.astype(dtype::float16), tensor()).dtype() ==
          dtype::float16);
    const tensor short_weight = from_vector({1.0F}, {1});
    const tensor w64 = w.astype(dtype::float64);
    const tensor ints = arange(4);
    check_rejected([&] { return layer_norm(x, short_weight, tensor()); });
    check_rejected([&] { return layer_norm(x, w64, tensor()); });
    check_rejected([&] { return layer_norm(ints, tensor(), tensor()); });
  }

  TEST_CASE("layer_norm's rows are the bits of its scalar formula, in every dtype and with or "
            "without weight and bias") {
    // Row lengths past, at and short of the partial sums' 8 lanes; each element's expression as
    // the kernel's: the sums j % 8 in double, added pairwise, ((x - mean) * inv) * w + b in
    // double, rounded to float (then to the dtype; float64 stays double). This file is compiled
    // without fused multiply-adds; the library's AVX-512 and AVX2 clones must give the same bits.
    for (const std::int64_t cols : {5, 8, 771}) {
      const std::int64_t rows = 3;
      std::vector<float> xv(static_cast<std::size_t>(rows * cols));
      std::vector<float> wv(static_cast<std::size_t>(cols));
      std::vector<float> bv(static_cast<std::size_t>(cols));
      for (std::size_t i = 0; i < xv.size(); ++i) {
        xv[i] = std::sin(0.37F * static_cast<float>(i)) * 3.0F + 0.25F;
      }
      for (std::size_t j = 0; j < wv.size(); ++j) {
        wv[j] = 1.0F + 0.01F * static_cast<float>(j % 17);
        bv[j] = 0.1F * static_cast<float>(j % 5) - 0.2F;
      }
      for (const dtype t : {dtype::float32, dtype::float64, dtype::bfloat16, dtype::float16}) {
        for (const int affine : {0, 1, 2, 3}) {  // weight (bit 0) and bias (bit 1), or neither
          CAPTURE(cols);
          CAPTURE(t);
          CAPTURE(affine);
          const bool with_weight = (affine & 1) != 0;
          const bool with_bias = (affine & 2) != 0;
          // The inputs as the dtype holds them.
          const auto x = from_vector(xv, {rows, cols}).astype(t);
          const auto w = from_vector(wv, {cols}).astype(t);
          const auto b = from_vector(bv, {cols}).astype(t);
          const auto xs = x.astype(dtype::float64).to_vector<double>();
          const auto ws = w.astype(dtype::float64).to_vector<double>();
          const auto bs = b.astype(dtype::float64).to_vector<double>();
          const auto y64 = layer_norm(x, with_weight ? w : tensor(), with_bias ? b : tensor(), 1e-5)
                               .astype(dtype::float64)
                               .to_vector<double>();
          for (std::int64_t r = 0; r < rows; ++r) {
            const double* row = xs.data() + r * cols;
            const auto sum = [&](auto term) {
              double lane[8] = {};
              for (std::int64_t j = 0; j < cols; ++j) {
                lane[j % 8] += term(j);
              }
              return ((lane[0] + lane[4]) + (lane[2] + lane[6])) +
                     ((lane[1] + lane[5]) + (lane[3] + lane[7]));
            };
            const double mean =
                sum([&](std::int64_t j) { return row[j]; }) / static_cast<double>(cols);
            const double var = sum([&](std::int64_t j) {
                                 const double d = row[j] - mean;
                                 return d * d;
                               }) /
                               static_cast<double>(cols);
            const double inv = 1.0 / std::sqrt(var + 1e-5);
            // In double; rounded to float, then to the dtype (float64: not rounded).
            std::vector<double> want(static_cast<std::size_t>(cols));
            for (std::int64_t j = 0; j < cols; ++j) {
              const auto at = static_cast<std::size_t>(j);
              double v = (row[j] - mean) * inv;
              if (with_weight) {
                v = v * ws[at];
              }
              if (with_bias) {
                v = v + bs[at];
              }
              want[at] = t == dtype::float64 ? v : static_cast<double>(static_cast<float>(v));
            }
            const auto rounded =
                from_vector(want, {cols}).astype(t).astype(dtype::float64).to_vector<double>();
            for (std::int64_t j = 0; j < cols; ++j) {
              CHECK(y64[static_cast<std::size_t>(r * cols + j)] ==
                    rounded[static_cast<std::size_t>(j)]);
            }
          }
        }
      }
    }
  }

  TEST_CASE("concat, slice and index_select copy the right elements") {
    const tensor a = from_vector({1.0F, 2.0F, 3.0F, 4.0F}, {2, 2});
    const tensor b = from_vector({5.0F, 6.0F}, {2, 1});
    const tensor c1 = concat({a, b}, 1);
    CHECK(c1.shape() == shape{2, 3});
    CHECK(c1.to_vector() == std::vector<float>{1, 2, 5, 3, 4, 6});
    const tensor c0 = concat({a, reshape(b, {1, 2})}, 0);
    CHECK(c0.shape() == shape{3, 2});
    CHECK(c0.to_vector() == std::vector<float>{1, 2, 3, 4, 5, 6});
    CHECK(concat({arange(2), arange(3)}).to_vector<std::int64_t>() ==
          std::vector<std::int64_t>{0, 1, 0, 1, 2});
    check_rejected([&] { return concat({a, b}, 0); });
    const tensor a64 = a.astype(dtype::float64);
    check_rejected([&] { return concat({a, a64}, 0); });
    check_rejected([] { return concat({}, 0); });

    const tensor x = reshape(arange(24, dtype::int32), {2, 3, 4});
    const tensor s = slice(x, 1, 1, 3);
    CHECK(s.shape() == shape{2, 2, 4});
    CHECK(s.to_vector<std::int32_t>() ==
          std::vector<std::int32_t>{4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 20, 21, 22, 23});
    CHECK(slice(x, -1, -2, 100).to_vector<std::int32_t>()[0] == 2);  // clamped, as Python slices
    CHECK(slice(x, 0, 5, 9).shape() == shape{0, 3, 4});

    const tensor table = from_vector({0.0F, 0.1F, 1.0F, 1.1F, 2.0F, 2.1F}, {3, 2});
    const tensor ids = from_vector(std::vector<std::int64_t>{2, 0, 2}, {3});
    const tensor e = index_select(table, 0, ids);
    CHECK(e.shape() == shape{3, 2});
    CHECK(e.to_vector() == std::vector<float>{2.0F, 2.1F, 0.0F, 0.1F, 2.0F, 2.1F});
    CHECK(index_select(table, 1, from_vector(std::vector<std::int64_t>{1}, {1})).to_vector() ==
          std::vector<float>{0.1F, 1.1F, 2.1F});
    const tensor bad = index_select(table, 0, from_vector(std::vector<std::int64_t>{3}, {1}));
    CHECK_THROWS_AS(bad.wait(), std::out_of_range);  // found by the kernel: the op's error
    const tensor float_ids = from_vector({1.0F}, {1});
    check_rejected([&] { return index_select(table, 0, float_ids); });
  }

  TEST_CASE("matmul is batched over leading dimensions") {
    manual_seed(3);
    const tensor a = randn({2, 3, 4});
    const tensor b = randn({4, 5});
    const tensor bb = randn({2, 4, 5});
    const tensor c = matmul(a, b);
    CHECK(c.shape() == shape{2, 3, 5});
    const tensor cb = matmul(a, bb);
    CHECK(cb.shape() == shape{2, 3, 5});
    const auto av = a.to_vector<double>();
    const auto bv = b.to_vector<double>();
    const auto bbv = bb.to_vector<double>();
    const auto cv = c.to_vector<double>();
    const auto cbv = cb.to_vector<double>();
    for (std::size_t i = 0; i < 2; ++i) {
      const std::vector<double> ai(av.begin() + static_cast<std::ptrdiff_t>(i * 12),
                                   av.begin() + static_cast<std::ptrdiff_t>(i * 12 + 12));
      const std::vector<double> bi(bbv.begin() + static_cast<std::ptrdiff_t>(i * 20),
                                   bbv.begin() + static_cast<std::ptrdiff_t>(i * 20 + 20));
      const auto want = reference_matmul(ai, bv, 3, 4, 5);
      const auto want_b = reference_matmul(ai, bi, 3, 4, 5);
      for (std::size_t j = 0; j < 15; ++j) {
        CHECK(cv[i * 15 + j] == doctest::Approx(want[j]).epsilon(1e-5));
        CHECK(cbv[i * 15 + j] == doctest::Approx(want_b[j]).epsilon(1e-5));
      }
    }
    const tensor other_batch = randn({3, 4, 5});
    const tensor b64 = b.astype(dtype::float64);
    const tensor bools = ones({2, 2}, dtype::boolean);
    check_rejected([&] { return matmul(a, other_batch); });  // batch dims differ
    check_rejected([&] { return matmul(a, b64); });
    check_rejected([&] { return matmul(bools, bools); });
  }

  TEST_CASE("matmul per dtype: float64 exact to double, halves through float32, integers exact") {
    manual_seed(5);
    const tensor a = randn({17, 33});
    const tensor b = randn({33, 9});
    const auto want = reference_matmul(a.to_vector<double>(), b.to_vector<double>(), 17, 33, 9);
    const auto d = matmul(a.astype(dtype::float64), b.astype(dtype::float64)).to_vector<double>();
    for (std::size_t i = 0; i < want.size(); ++i) {
      CHECK(d[i] == doctest::Approx(want[i]).epsilon(1e-12));
    }
    for (dtype t : {dtype::float16, dtype::bfloat16}) {
      CAPTURE(name(t));
      const tensor ha = a.astype(t);
      const tensor hb = b.astype(t);
      const auto h = matmul(ha, hb);
      CHECK(h.dtype() == t);
      // Against the product of the rounded inputs, in double, rounded once to `t`.
      const auto exact =
          reference_matmul(ha.to_vector<double>(), hb.to_vector<double>(), 17, 33, 9);
      const auto got = h.to_vector<double>();
      for (std::size_t i = 0; i < exact.size(); ++i) {
        const double ulp = t == dtype::float16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
        CHECK(std::fabs(got[i] - exact[i]) <= ulp * std::max(1.0, std::fabs(exact[i])));
      }
    }
    const tensor ia = from_vector(std::vector<std::int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
    const tensor ib = from_vector(std::vector<std::int64_t>{7, 8, 9, 10, 11, (1LL << 62)}, {3, 2});
    const auto ic = matmul(ia, ib).to_vector<std::int64_t>();
    CHECK(ic[0] == 1 * 7 + 2 * 9 + 3 * 11);
    CHECK(ic[2] == 4 * 7 + 5 * 9 + 6 * 11);
    CHECK(ic[3] == static_cast<std::int64_t>(
                       4 * 8 + 5 * 10 + static_cast<std::uint64_t>(6) * (1ULL << 62)));  // wraps
    CHECK(matmul(ia.astype(dtype::int32), ib.astype(dtype::int32)).dtype() == dtype::int32);
  }

}  // TEST_SUITE("ops_nn")
