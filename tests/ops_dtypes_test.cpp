// Ops on every dtype: promotion, weak scalars, wrapping, division, comparisons, where,
// reductions, casts, reading back and printing (docs/dtypes.md states each rule).
#include "cotensor/ops.hpp"
#include <cotensor/cotensor.hpp>

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

using namespace cotensor;

namespace {

constexpr dtype all[] = {dtype::boolean,  dtype::int32,   dtype::int64,  dtype::float16,
                         dtype::bfloat16, dtype::float32, dtype::float64};

std::string printed(const tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

template <class F>
void check_rejected(F f) {
  const auto issued = runtime::current().stats().issued;
  CHECK_THROWS_AS(f(), std::invalid_argument);
  CHECK(runtime::current().stats().issued == issued);
}

}  // namespace

TEST_SUITE("ops_dtypes") {

  TEST_CASE("tensors of every dtype are made, converted and read back") {
    for (dtype t : all) {
      CAPTURE(name(t));
      const tensor z = zeros({2, 3}, t);
      const tensor o = ones({2, 3}, t);
      CHECK(z.dtype() == t);
      CHECK(o.dtype() == t);
      CHECK(z.to_vector<double>() == std::vector<double>(6, 0.0));
      CHECK(o.to_vector<double>() == std::vector<double>(6, 1.0));
      CHECK(full({1}, 3.0, t).item<std::int64_t>() == (t == dtype::boolean ? 1 : 3));
      CHECK(arange(5, t).dtype() == t);
    }
    CHECK(arange(4).dtype() == dtype::int64);
    CHECK(arange(4).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1, 2, 3});
    CHECK(from_vector(std::vector<bool>{true, false, true}, {3}).to_vector<bool>() ==
          std::vector<bool>{true, false, true});
    CHECK(from_vector(std::vector<std::int32_t>{-7, 9}, {2}).dtype() == dtype::int32);
    CHECK(from_vector(std::vector<double>{0.1}, {1}).item<double>() == 0.1);
    CHECK(from_vector(std::vector<float16_t>{float16_t(1.5F)}, {1}).item() == 1.5F);
    CHECK(from_vector(std::vector<bfloat16_t>{bfloat16_t(-2.0F)}, {1}).dtype() == dtype::bfloat16);
    CHECK(from_vector({1, 2, 3}, {3}).dtype() == dtype::float32);  // a braced list is float32
    CHECK(tensor().dtype() == dtype::float32);
  }

  TEST_CASE("tensor with tensor promotes as PyTorch and JAX do") {
    for (dtype a : all) {
      for (dtype b : all) {
        CAPTURE(name(a));
        CAPTURE(name(b));
        const tensor x = ones({2}, a);
        const tensor y = ones({2}, b);
        const dtype p = promote_types(a, b);
        CHECK((x + y).dtype() == p);
        CHECK((x * y).dtype() == p);
        CHECK((x / y).dtype() == (is_floating(p) ? p : dtype::float32));  // true division
        CHECK((x < y).dtype() == dtype::boolean);
        CHECK(maximum(x, y).dtype() == p);
        CHECK(where(ones({2}, dtype::boolean), x, y).dtype() == p);
      }
    }
    CHECK((ones({1}, dtype::int64) + ones({1}, dtype::float16)).dtype() == dtype::float16);
    CHECK((ones({1}, dtype::float16) + ones({1}, dtype::bfloat16)).dtype() == dtype::float32);
  }

  TEST_CASE("a C++ scalar is weak: it keeps the tensor's dtype within its kind") {
    CHECK((ones({2}, dtype::float16) * 2.5).dtype() == dtype::float16);
    CHECK((ones({2}, dtype::bfloat16) + 1).dtype() == dtype::bfloat16);
    CHECK((ones({2}, dtype::int32) + 2).dtype() == dtype::int32);
    CHECK((ones({2}, dtype::int32) + std::int64_t{2}).dtype() == dtype::int32);
    CHECK((ones({2}, dtype::int32) * 0.5).dtype() == dtype::float32);
    CHECK((ones({2}, dtype::boolean) + 1).dtype() == dtype::int64);
    CHECK((ones({2}, dtype::boolean) * 1.5F).dtype() == dtype::float32);
    CHECK((ones({2}, dtype::float32) * 0.5).dtype() == dtype::float32);  // double stays weak
    CHECK((2.0 * ones({2}, dtype::float64)).dtype() == dtype::float64);
    CHECK((ones({2}, dtype::int32) < 1.5).dtype() == dtype::boolean);
    CHECK((ones({2}, dtype::int32) < 1.5).to_vector<bool>() == std::vector<bool>{true, true});
    CHECK((ones({2}, dtype::float16) * 2.5).to_vector() == std::vector<float>{2.5F, 2.5F});
    // The scalar becomes an element of the tensor's dtype first (NEP 50, PyTorch): 0.1 is
    // float16(0.1) = 0.0999755859375, so it compares equal to a float16 0.1 and adds as one.
    const tensor tenth = full({1}, 0.1, dtype::float16);
    CHECK((tenth == 0.1).to_vector<bool>() == std::vector<bool>{true});
    CHECK((tenth < 0.1).to_vector<bool>() == std::vector<bool>{false});
    // 0.1201171875 + bfloat16(0.1) is a tie between two bfloat16s (even: 0.220703125); with
    // 0.1 unrounded it would round down to 0.2197265625.
    const tensor b = full({1}, 0.1201171875, dtype::bfloat16);
    CHECK((b + 0.1).item() == 0.220703125F);
    // The scalar converts as astype converts a float64, so `x + v` is `x + full(v, dtype)`.
    for (const double v : {0.1, 1.0 + 0x1p-11 + 0x1p-40, 1.0 + 0x1p-8 - 0x1p-40, 1e5, -3e38}) {
      CAPTURE(v);
      for (const dtype t : {dtype::float16, dtype::bfloat16, dtype::float32}) {
        const tensor as_cast = from_vector(std::vector<double>{v}, {1}).astype(t);
        CHECK(((zeros({1}, t) + v) == as_cast).item<bool>());
      }
    }
    // An integer scalar that does not fit the tensor's integer dtype is refused, as NumPy does.
    const tensor i32 = ones({2}, dtype::int32);
    check_rejected([&] { return i32 + (std::int64_t{1} << 40); });
  }

  TEST_CASE("a C++ scalar's result dtype, for every tensor dtype and scalar kind") {
    // The weak-scalar table of docs/dtypes.md: tensor + true, tensor + 2, tensor * 2.5.
    struct row {
      dtype tensor_dtype, with_bool, with_int, with_float;
    };
    const row rows[] = {
        {dtype::boolean, dtype::boolean, dtype::int64, dtype::float32},
        {dtype::int32, dtype::int32, dtype::int32, dtype::float32},
        {dtype::int64, dtype::int64, dtype::int64, dtype::float32},
        {dtype::float16, dtype::float16, dtype::float16, dtype::float16},
        {dtype::bfloat16, dtype::bfloat16, dtype::bfloat16, dtype::bfloat16},
        {dtype::float32, dtype::float32, dtype::float32, dtype::float32},
        {dtype::float64, dtype::float64, dtype::float64, dtype::float64},
    };
    for (const row& r : rows) {
      CAPTURE(name(r.tensor_dtype));
      const tensor x = ones({2}, r.tensor_dtype);
      CHECK((x + true).dtype() == r.with_bool);
      CHECK((x + 2).dtype() == r.with_int);
      CHECK((x * 2.5).dtype() == r.with_float);
      CHECK((2.5F * x).dtype() == r.with_float);  // float and double are alike: both weak
    }
    CHECK((ones({2}, dtype::int32) + true).to_vector<std::int32_t>() ==
          std::vector<std::int32_t>{2, 2});
    CHECK((ones({2}, dtype::boolean) + 2).to_vector<std::int64_t>() ==
          std::vector<std::int64_t>{3, 3});
    // The scalar is rounded to the tensor's dtype only by the result: float16 computes in
    // float32, so 1 + 0.0001 is 1.0001 rounded once to float16, 1.
    CHECK((ones({1}, dtype::float16) + 0.0001).item() == 1.0F);
    CHECK((ones({1}, dtype::float16) * 70000.0).item() == INFINITY);  // beyond 65504
  }

  TEST_CASE("integers wrap on overflow and divide truly") {
    const tensor big = from_vector(std::vector<std::int32_t>{INT32_MAX, INT32_MIN}, {2});
    CHECK((big + 1).to_vector<std::int32_t>() ==
          std::vector<std::int32_t>{INT32_MIN, INT32_MIN + 1});
    CHECK((big * 2).to_vector<std::int32_t>() == std::vector<std::int32_t>{-2, 0});
    CHECK((-big).to_vector<std::int32_t>() == std::vector<std::int32_t>{-INT32_MAX, INT32_MIN});
    CHECK(abs(big).to_vector<std::int32_t>() == std::vector<std::int32_t>{INT32_MAX, INT32_MIN});
    const tensor l = from_vector(std::vector<std::int64_t>{INT64_MAX}, {1});
    CHECK((l + l).item<std::int64_t>() == -2);
    const tensor l3 = from_vector(std::vector<std::int64_t>{3}, {1});
    CHECK((l3 / l3).dtype() == dtype::float32);  // int64 too: float32, as PyTorch and JAX
    const tensor t2 = ones({2}, dtype::boolean);
    CHECK((t2 / t2).dtype() == dtype::float32);
    CHECK((t2 / t2).to_vector() == std::vector<float>{1.0F, 1.0F});
    const tensor seven = from_vector(std::vector<std::int32_t>{7, -7}, {2});
    const tensor q = seven / from_vector(std::vector<std::int32_t>{2, 0}, {2});
    CHECK(q.dtype() == dtype::float32);
    CHECK(q.to_vector()[0] == 3.5F);
    CHECK(std::isinf(q.to_vector()[1]));  // 7 / 0 is inf, not a crash
    CHECK((seven / 2).to_vector() == std::vector<float>{3.5F, -3.5F});
  }

  TEST_CASE("bool arithmetic is logical and its subtraction is refused") {
    const tensor t = from_vector(std::vector<bool>{true, false, true, false}, {4});
    const tensor u = from_vector(std::vector<bool>{true, true, false, false}, {4});
    CHECK((t + u).dtype() == dtype::boolean);
    CHECK((t + u).to_vector<bool>() == std::vector<bool>{true, true, true, false});
    CHECK((t * u).to_vector<bool>() == std::vector<bool>{true, false, false, false});
    CHECK((t & u).to_vector<bool>() == std::vector<bool>{true, false, false, false});
    CHECK((t | u).to_vector<bool>() == std::vector<bool>{true, true, true, false});
    CHECK((!t).to_vector<bool>() == std::vector<bool>{false, true, false, true});
    check_rejected([&] { return t - u; });
    check_rejected([&] { return -t; });
    const tensor f4 = ones({4});
    check_rejected([&] { return f4 & u; });  // & and | take bool only
    CHECK(logical_and(ones({2}), zeros({2}, dtype::int32)).to_vector<bool>() ==
          std::vector<bool>{false, false});
    CHECK(logical_not(from_vector({0.0F, 2.0F}, {2})).to_vector<bool>() ==
          std::vector<bool>{true, false});
  }

  TEST_CASE("in-place ops keep the left dtype and refuse a result of a higher kind") {
    tensor i = from_vector(std::vector<std::int32_t>{1, 2}, {2});
    i += 3;
    i *= from_vector(std::vector<std::int32_t>{2, 2}, {2});
    CHECK(i.to_vector<std::int32_t>() == std::vector<std::int32_t>{8, 10});
    check_rejected([&] { i += 0.5; });
    check_rejected([&] { i /= 2; });
    const tensor f2 = ones({2});
    check_rejected([&] { i += f2; });
    tensor f = ones({2}, dtype::float16);
    f += from_vector(std::vector<std::int64_t>{1, 2}, {2});  // float16 + int64 is float16: fits
    f *= 0.5;
    CHECK(f.to_vector() == std::vector<float>{1.0F, 1.5F});
    CHECK(f.dtype() == dtype::float16);
    tensor b = ones({2}, dtype::boolean);
    check_rejected([&] { b += 1; });  // bool + int is int64
    const tensor i2 = ones({2}, dtype::int32);
    check_rejected([&] { b += i2; });
    check_rejected([&] { i /= i2; });  // true division is float32
    // A wider dtype of the same kind is computed in it and stored rounded, as PyTorch does.
    tensor h = ones({2}, dtype::float16);
    h += from_vector({0x1p-11F + 0x1p-20F, 0.25F}, {2});  // float32: rounds once, up
    CHECK(h.dtype() == dtype::float16);
    CHECK(h.to_vector<double>() == std::vector<double>{1.0 + 0x1p-10, 1.25});
    tensor bf = ones({1}, dtype::bfloat16);
    bf *= full({1}, 3.0, dtype::float16);  // bfloat16 with float16 is float32
    CHECK(bf.dtype() == dtype::bfloat16);
    CHECK(bf.item() == 3.0F);
    tensor j = from_vector(std::vector<std::int32_t>{INT32_MAX, 5}, {2});
    j += from_vector(std::vector<std::int64_t>{1, (1LL << 32) + 1}, {2});  // wraps into int32
    CHECK(j.dtype() == dtype::int32);
    CHECK(j.to_vector<std::int32_t>() == std::vector<std::int32_t>{INT32_MIN, 6});
    tensor g = zeros({2, 2}, dtype::float16);
    g -= from_vector({1.0F, 2.0F}, {2});  // broadcast into g
    CHECK(g.to_vector() == std::vector<float>{-1.0F, -2.0F, -1.0F, -2.0F});
  }

  TEST_CASE("comparisons, where, maximum, minimum and clamp on every dtype") {
    const tensor x = from_vector({1.0F, NAN, -3.0F, 2.0F}, {4});
    const tensor y = from_vector({1.0F, 0.0F, 5.0F, -2.0F}, {4});
    CHECK((x == y).to_vector<bool>() == std::vector<bool>{true, false, false, false});
    CHECK((x != y).to_vector<bool>() == std::vector<bool>{false, true, true, true});
    CHECK((x < y).to_vector<bool>() == std::vector<bool>{false, false, true, false});
    CHECK((x >= y).to_vector<bool>() == std::vector<bool>{true, false, false, true});
    const auto mx = maximum(x, y).to_vector();
    CHECK(std::isnan(mx[1]));  // NaN propagates
    CHECK(mx[2] == 5.0F);
    CHECK(minimum(x, y).to_vector()[3] == -2.0F);
    const auto c = clamp(x, -1.0, 1.5).to_vector();
    CHECK(c[0] == 1.0F);
    CHECK(std::isnan(c[1]));
    CHECK(c[2] == -1.0F);
    CHECK(c[3] == 1.5F);
    const tensor ints = from_vector(std::vector<std::int64_t>{-5, 0, 5}, {3});
    CHECK(clamp(ints, -2, 2).dtype() == dtype::int64);
    CHECK(clamp(ints, -2, 2).to_vector<std::int64_t>() == std::vector<std::int64_t>{-2, 0, 2});
    // Bounds beyond int64 are float bounds (no undefined conversion to int64: UBSan checks it).
    CHECK(clamp(ints, -1e19, 1e19).dtype() == dtype::float32);
    CHECK(clamp(ints, -1e19, 1e19).to_vector() == std::vector<float>{-5, 0, 5});
    CHECK(clamp(ints, -1e19, 2.5).to_vector() == std::vector<float>{-5, 0, 2.5F});
    const tensor cond = from_vector(std::vector<bool>{true, false}, {2, 1});
    const tensor w = where(cond, ints, from_vector({0.5F}, {1}));  // [2, 3], float32
    CHECK(w.shape() == shape{2, 3});
    CHECK(w.to_vector() == std::vector<float>{-5, 0, 5, 0.5F, 0.5F, 0.5F});
    // maximum and minimum of bools are logical or and and, as in NumPy and PyTorch.
    const tensor p = from_vector(std::vector<bool>{true, false, true, false}, {4});
    const tensor q = from_vector(std::vector<bool>{true, true, false, false}, {4});
    CHECK(maximum(p, q).dtype() == dtype::boolean);
    CHECK(maximum(p, q).to_vector<bool>() == std::vector<bool>{true, true, true, false});
    CHECK(minimum(p, q).to_vector<bool>() == std::vector<bool>{true, false, false, false});
    CHECK(maximum(p, from_vector(std::vector<bool>{false}, {1})).to_vector<bool>() ==
          std::vector<bool>{true, false, true, false});  // broadcast
    const tensor not_bool = ones({4});
    check_rejected([&] { return where(not_bool, x, y); });  // the condition must be bool
    for (dtype t : all) {
      CAPTURE(name(t));
      const tensor a = arange(4, t);
      CHECK((a == a).to_vector<bool>() == std::vector<bool>(4, true));
      CHECK((a > 1).to_vector<bool>() ==
            std::vector<bool>{false, false, t != dtype::boolean, t != dtype::boolean});
    }
  }

  TEST_CASE("maximum and minimum of bool tensors are logical or and and") {
    const tensor a = from_vector(std::vector<bool>{false, false, true, true}, {4});
    const tensor b = from_vector(std::vector<bool>{false, true, false, true}, {4});
    CHECK(maximum(a, b).dtype() == dtype::boolean);
    CHECK(maximum(a, b).to_vector<bool>() == std::vector<bool>{false, true, true, true});
    CHECK(minimum(a, b).to_vector<bool>() == std::vector<bool>{false, false, false, true});
    // Broadcast, and a bool with another dtype promotes as arithmetic does.
    const tensor col = from_vector(std::vector<bool>{true, false}, {2, 1});
    CHECK(maximum(col, a).to_vector<bool>() ==
          std::vector<bool>{true, true, true, true, false, false, true, true});
    const tensor ints = from_vector(std::vector<std::int32_t>{-1, 0, 1, 2}, {4});
    CHECK(maximum(a, ints).dtype() == dtype::int32);
    CHECK(maximum(a, ints).to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 0, 1, 2});
  }

  TEST_CASE("reductions give the documented dtypes and propagate NaN") {
    const tensor b = from_vector(std::vector<bool>{true, true, false}, {3});
    CHECK(sum(b).dtype() == dtype::int64);
    CHECK(sum(b).item<std::int64_t>() == 2);
    const tensor i = from_vector(std::vector<std::int32_t>{1, 2, 3, 4, 5, 6}, {2, 3});
    CHECK(sum(i).dtype() == dtype::int64);
    CHECK(sum(i, 1).to_vector<std::int64_t>() == std::vector<std::int64_t>{6, 15});
    CHECK(sum(i, 0, true).shape() == shape{1, 3});
    CHECK(mean(i).dtype() == dtype::float32);
    CHECK(mean(i).item() == 3.5F);
    CHECK(mean(i, 0).to_vector() == std::vector<float>{2.5F, 3.5F, 4.5F});
    CHECK(max(i).item<std::int32_t>() == 6);
    CHECK(max(i).dtype() == dtype::int32);
    CHECK(min(i, 1).to_vector<std::int32_t>() == std::vector<std::int32_t>{1, 4});
    CHECK(argmax(i).item<std::int64_t>() == 5);
    CHECK(argmax(i, 1, true).shape() == shape{2, 1});
    CHECK(argmin(i, 0).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 0, 0});
    const tensor h = from_vector({0.5F, 0.25F, 0.25F}, {3}).astype(dtype::float16);
    CHECK(sum(h).dtype() == dtype::float16);
    CHECK(sum(h).item() == 1.0F);
    // float16 accumulates in float32: 4096 ones sum to 4096, though 2048 + 1 is not a half.
    CHECK(sum(ones({4096}, dtype::float16)).item() == 4096.0F);
    // bfloat16 too: 4096 ones, though 256 + 1 is not a bfloat16.
    CHECK(sum(ones({4096}, dtype::bfloat16)).dtype() == dtype::bfloat16);
    CHECK(sum(ones({4096}, dtype::bfloat16)).item() == 4096.0F);
    CHECK(sum(ones({4}, dtype::int64)).dtype() == dtype::int64);
    CHECK(sum(ones({4}, dtype::float64)).dtype() == dtype::float64);
    CHECK(mean(ones({4}, dtype::int64)).dtype() == dtype::float32);
    CHECK(mean(b).dtype() == dtype::float32);
    CHECK(mean(b).item() == doctest::Approx(2.0 / 3.0));
    CHECK(mean(h).dtype() == dtype::float16);
    CHECK(argmax(h).dtype() == dtype::int64);
    const tensor n = from_vector({1.0F, NAN, 3.0F, NAN}, {4});
    CHECK(std::isnan(max(n).item()));
    CHECK(argmax(n).item<std::int64_t>() == 1);  // the first NaN
    CHECK(argmin(n).item<std::int64_t>() == 1);
    CHECK(std::isnan(min(n).item()));
    const tensor n2 = from_vector({1.0F, NAN, 3.0F, 4.0F, 5.0F, 6.0F}, {2, 3});
    const auto by_row = max(n2, 1).to_vector();
    CHECK(std::isnan(by_row[0]));
    CHECK(by_row[1] == 6.0F);
    CHECK(argmax(n2, 1).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 2});
    const tensor nh = n.astype(dtype::float16);
    CHECK(std::isnan(max(nh).item()));
    CHECK(argmax(nh).item<std::int64_t>() == 1);
    const tensor first = from_vector({2.0F, 7.0F, 7.0F}, {3});
    CHECK(argmax(first).item<std::int64_t>() == 1);  // the first of equal maxima
    const tensor empty = zeros({0});
    const tensor empty_axis = zeros({2, 0});
    check_rejected([&] { return max(empty); });
    check_rejected([&] { return argmax(empty_axis, 1); });
    CHECK(sum(zeros({0}, dtype::int32)).item<std::int64_t>() == 0);
  }

  TEST_CASE("max, min, argmax and argmin over long rows: the first extreme or the first NaN, in "
            "every floating dtype") {
    // Rows of 64 and more run a vectorised pass and a search (cpu/reduce.cpp); each case here
    // against an element-by-element reference: the extreme early, late, in the tail and tied
    // (the first wins), +0 tied with -0, infinities, and a NaN anywhere (the first NaN wins).
    const std::int64_t cols = 203;  // three blocks of 64 and a tail
    std::vector<std::vector<float>> rows;
    std::vector<float> base(static_cast<std::size_t>(cols));
    for (std::size_t j = 0; j < base.size(); ++j) {
      base[j] = std::sin(0.9F * static_cast<float>(j)) * 4.0F;  // within (-4, 4)
    }
    rows.push_back(base);
    for (const std::size_t at : {std::size_t{0}, std::size_t{70}, std::size_t{200}}) {
      auto r = base;
      r[at] = 9.0F;
      r[(at + 131) % base.size()] = 9.0F;  // a tie
      r[(at + 17) % base.size()] = -9.0F;
      rows.push_back(r);
      auto z = base;
      std::fill(z.begin(), z.end(), -1.0F);
      z[at] = -0.0F;
      z[(at + 64) % base.size()] = 0.0F;
      rows.push_back(z);
      auto inf = base;
      inf[at] = INFINITY;
      inf[(at + 1) % base.size()] = -INFINITY;
      rows.push_back(inf);
      auto nan = base;
      nan[(at + 5) % base.size()] = NAN;
      nan[(at + 100) % base.size()] = NAN;
      rows.push_back(nan);
    }
    for (const std::size_t at : {std::size_t{0}, std::size_t{195}}) {  // first, and in the tail
      auto nan = base;
      nan[at] = NAN;
      rows.push_back(nan);
    }
    std::vector<float> flat;
    for (const auto& r : rows) {
      flat.insert(flat.end(), r.begin(), r.end());
    }
    const auto n_rows = static_cast<std::int64_t>(rows.size());
    // The reference: the first NaN, else the first element no other beats.
    const auto first_extreme = [](const std::vector<float>& r, bool largest) {
      std::size_t best = 0;
      for (std::size_t j = 0; j < r.size(); ++j) {
        if (std::isnan(r[j])) {
          return static_cast<std::int64_t>(j);
        }
        if (largest ? r[j] > r[best] : r[j] < r[best]) {
          best = j;
        }
      }
      return static_cast<std::int64_t>(best);
    };
    for (const dtype t : {dtype::float32, dtype::float64, dtype::bfloat16, dtype::float16}) {
      CAPTURE(t);
      const tensor x = from_vector(flat, {n_rows, cols}).astype(t);
      const auto amax = argmax(x, 1).to_vector<std::int64_t>();
      const auto amin = argmin(x, 1).to_vector<std::int64_t>();
      const auto vmax = max(x, 1).astype(dtype::float32).to_vector();
      const auto vmin = min(x, 1).astype(dtype::float32).to_vector();
      const auto held = x.astype(dtype::float32).to_vector();  // the values as the dtype holds them
      for (std::size_t r = 0; r < rows.size(); ++r) {
        CAPTURE(r);
        const std::vector<float> row(held.begin() + static_cast<std::ptrdiff_t>(r) * cols,
                                     held.begin() + static_cast<std::ptrdiff_t>(r + 1) * cols);
        const auto want_max = first_extreme(row, true);
        const auto want_min = first_extreme(row, false);
        CHECK(amax[r] == want_max);
        CHECK(amin[r] == want_min);
        const float hi = row[static_cast<std::size_t>(want_max)];
        const float lo = row[static_cast<std::size_t>(want_min)];
        CHECK((std::isnan(hi) ? std::isnan(vmax[r]) : vmax[r] == hi));
        CHECK((std::isnan(lo) ? std::isnan(vmin[r]) : vmin[r] == lo));
        CHECK(std::signbit(vmax[r]) == std::signbit(hi));  // +0 or -0: the first one's
        CHECK(std::signbit(vmin[r]) == std::signbit(lo));
      }
      // The whole tensor as one long row.
      CHECK(argmax(x).item<std::int64_t>() == first_extreme(held, true));
    }
  }

  TEST_CASE("casts are defined for NaN, infinities and out-of-range values") {
    const tensor f = from_vector({NAN, INFINITY, -INFINITY, 3e9F, -3e9F, -2.7F, 2.7F}, {7});
    CHECK(f.astype(dtype::int32).to_vector<std::int32_t>() ==
          std::vector<std::int32_t>{0, INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, -2, 2});
    CHECK(f.astype(dtype::int64).to_vector<std::int64_t>() ==
          std::vector<std::int64_t>{0, INT64_MAX, INT64_MIN, 3000000000LL, -3000000000LL, -2, 2});
    CHECK(f.astype(dtype::boolean).to_vector<bool>() ==
          std::vector<bool>{true, true, true, true, true, true, true});
    CHECK(zeros({1}).astype(dtype::boolean).item<bool>() == false);
    const auto h = from_vector({70000.0F, 1e-8F, 0.1F}, {3}).astype(dtype::float16).to_vector();
    CHECK(std::isinf(h[0]));
    CHECK(h[1] == 0.0F);
    CHECK(h[2] == static_cast<float>(float16_t(0.1F)));
    const tensor big = from_vector(std::vector<std::int64_t>{(1LL << 40) + 1, -1}, {2});
    CHECK(big.astype(dtype::int32).to_vector<std::int32_t>() ==
          std::vector<std::int32_t>{1, -1});  // integer narrowing wraps
    for (dtype from : all) {
      for (dtype to : all) {
        CAPTURE(name(from));
        CAPTURE(name(to));
        const tensor x = arange(3, from).astype(to);
        CHECK(x.dtype() == to);
        const auto v = x.to_vector<double>();
        CHECK(v == (from == dtype::boolean || to == dtype::boolean ? std::vector<double>{0, 1, 1}
                                                                   : std::vector<double>{0, 1, 2}));
      }
    }
    // float16/bfloat16 and float64 -> int saturate the same way.
    const tensor hs = f.astype(dtype::float16);  // 3e9 is +inf as a half
    CHECK(hs.astype(dtype::int32).to_vector<std::int32_t>() ==
          std::vector<std::int32_t>{0, INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, -2, 2});
    CHECK(f.astype(dtype::bfloat16).astype(dtype::int64).to_vector<std::int64_t>()[0] == 0);
    const tensor d =
        from_vector(std::vector<double>{0x1p63, -0x1p63, 0x1p63 - 1024.0, 1e300, NAN}, {5});
    CHECK(d.astype(dtype::int64).to_vector<std::int64_t>() ==
          std::vector<std::int64_t>{INT64_MAX, INT64_MIN, INT64_MAX - 1023, INT64_MAX, 0});
    CHECK(d.astype(dtype::int32).to_vector<std::int32_t>() ==
          std::vector<std::int32_t>{INT32_MAX, INT32_MIN, INT32_MAX, INT32_MAX, 0});
    CHECK(from_vector(std::vector<double>{0x1p31 - 0.5}, {1})
              .astype(dtype::int32)
              .item<std::int32_t>() == INT32_MAX);  // truncated toward zero
    CHECK(ones({2}).astype(dtype::float32).storage() != ones({2}).storage());
    CHECK(from_vector({1.5F}, {1}).item<std::int32_t>() == 1);  // item converts as astype
  }

  TEST_CASE("float64 and integers reach float16 and bfloat16 through float32") {
    // Rounded twice, as PyTorch does: 1 + 2^-11 + 2^-40 is just above the float16 tie between
    // 1 and 1 + 2^-10; a direct rounding (NumPy) gives 1 + 2^-10, float32 first lands on the
    // tie and ties-to-even gives 1.
    const tensor d =
        from_vector(std::vector<double>{1.0 + 0x1p-11 + 0x1p-40, 1.0 + 0x1p-8 + 0x1p-40}, {2});
    CHECK(d.astype(dtype::float16).to_vector<double>()[0] == 1.0);
    CHECK(d.astype(dtype::bfloat16).to_vector<double>()[1] == 1.0);
    CHECK(from_vector(std::vector<double>{1.0 + 0x1p-11 + 0x1p-20}, {1})
              .astype(dtype::float16)
              .item<double>() == 1.0 + 0x1p-10);  // float32 keeps 2^-20: rounded up
    // 2^24 + 2^16 + 1 is an int32 just above a bfloat16 tie; float32 rounds it onto the tie.
    const tensor i = from_vector(std::vector<std::int32_t>{(1 << 24) + (1 << 16) + 1}, {1});
    CHECK(i.astype(dtype::bfloat16).item<double>() == 16777216.0);
    // Integers to float16: exact up to 2048, then rounded; past 65519 infinity.
    const tensor ints =
        from_vector(std::vector<std::int64_t>{2049, 2051, 65519, 65520, -(1LL << 40)}, {5});
    const auto h = ints.astype(dtype::float16).to_vector<double>();
    CHECK(h[0] == 2048.0);
    CHECK(h[1] == 2052.0);
    CHECK(h[2] == 65504.0);
    CHECK(h[3] == INFINITY);
    CHECK(h[4] == -INFINITY);
    // item<T>() and to_vector<T>() convert as astype.
    CHECK(d.to_vector<float16_t>()[0].bits == float16_t(1.0F).bits);
  }

  TEST_CASE("printing shows the dtype unless it is float32") {
    CHECK(printed(from_vector(std::vector<std::int32_t>{-1, 7}, {2})) ==
          "tensor([-1, 7], shape=[2], dtype=int32)");
    CHECK(printed(full({2}, 0.1, dtype::float16)) ==
          "tensor([0.0999756, 0.0999756], shape=[2], dtype=float16)");
    CHECK(printed(full({1}, 0.1, dtype::float64)) == "tensor([0.1], shape=[1], dtype=float64)");
    CHECK(printed(full({1}, NAN, dtype::float32)) == "tensor([nan], shape=[1])");
    CHECK(printed(from_vector({1.0F, 2.0F}, {2})) == "tensor([1, 2], shape=[2])");
    CHECK(printed(arange(3)) == "tensor([0, 1, 2], shape=[3], dtype=int64)");
    CHECK(printed(from_vector(std::vector<bool>{true, false}, {2})) ==
          "tensor([True, False], shape=[2], dtype=bool)");
    CHECK(printed(full({1}, 0.5, dtype::bfloat16)) == "tensor([0.5], shape=[1], dtype=bfloat16)");
  }

  TEST_CASE("float16 and bfloat16 ops are one float op, rounded once, on every element") {
    // Every bit pattern as a, against a shuffled b; an odd length leaves a tail past the
    // eight-lane F16C loops; a scalar is first rounded to the dtype (weak, as in PyTorch).
    // NaN results compare as NaN only: which operand's NaN (and sign) a
    // product of two NaNs keeps is the instruction's choice.
    constexpr std::size_t n = 0x10000 + 5;
    auto same = [](float got, float want) {
      return std::isnan(want)
                 ? std::isnan(got)
                 : std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(want);
    };
    auto check_dtype = [&](auto tag) {
      using H = decltype(tag);
      std::vector<H> a(n);
      std::vector<H> b(n);
      for (std::size_t i = 0; i < n; ++i) {
        a[i] = H::from_bits(static_cast<std::uint16_t>(i));
        b[i] = H::from_bits(static_cast<std::uint16_t>(i * 40503U + 12345U));
      }
      const tensor ta = from_vector(a, {static_cast<std::int64_t>(n)});
      const tensor tb = from_vector(b, {static_cast<std::int64_t>(n)});
      const auto sum = (ta + tb).to_vector<H>();
      const auto diff = (ta - tb).to_vector<H>();
      const auto prod = (ta * tb).to_vector<H>();
      const auto quot = (ta / tb).to_vector<H>();
      const auto scaled = (ta * 0.1F).to_vector<H>();
      const auto inverse = (1.5F / ta).to_vector<H>();
      const auto less = (ta < tb).to_vector<bool>();
      for (std::size_t i = 0; i < n; ++i) {
        const float x = a[i];
        const float y = b[i];
        CAPTURE(a[i].bits);
        CAPTURE(b[i].bits);
        REQUIRE(same(sum[i], static_cast<float>(H(x + y))));
        REQUIRE(same(diff[i], static_cast<float>(H(x - y))));
        REQUIRE(same(prod[i], static_cast<float>(H(x * y))));
        REQUIRE(same(quot[i], static_cast<float>(H(x / y))));
        REQUIRE(same(scaled[i], static_cast<float>(H(x * static_cast<float>(H(0.1F))))));
        REQUIRE(same(inverse[i], static_cast<float>(H(1.5F / x))));
        REQUIRE(less[i] == (x < y));
      }
    };
    check_dtype(float16_t{});
    check_dtype(bfloat16_t{});
  }

  TEST_CASE("randn gives float16 and bfloat16 as the float32 samples rounded") {
    manual_seed(7);
    const auto f = randn({1000}).to_vector();
    manual_seed(7);
    const auto h = randn({1000}, dtype::float16).to_vector<float16_t>();
    manual_seed(7);
    const auto b = randn({1000}, dtype::bfloat16).to_vector<bfloat16_t>();
    manual_seed(7);
    const auto d = randn({100000}, dtype::float64).to_vector<double>();
    for (std::size_t i = 0; i < f.size(); ++i) {
      REQUIRE(h[i].bits == float16_t(f[i]).bits);
      REQUIRE(b[i].bits == bfloat16_t(f[i]).bits);
    }
    double m = 0.0;
    double v = 0.0;
    for (double x : d) {
      m += x;
      v += x * x;
    }
    m /= static_cast<double>(d.size());
    v = v / static_cast<double>(d.size()) - m * m;
    CHECK(std::fabs(m) < 0.02);
    CHECK(std::fabs(v - 1.0) < 0.02);
    check_rejected([] { return randn({2}, dtype::int32); });
  }

}  // TEST_SUITE("ops_dtypes")
