#pragma once

// The programs of tests/differential/dtype_programs.cpp: random single-op programs over
// cotensor's seven dtypes, drawn from a seed, run on cotensor and written as one JSON line each.

#include <cotensor/cotensor.hpp>

#include "dtype_json.hpp"

#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace dtype_programs {

using cotensor::dtype;
using cotensor::shape;
using cotensor::tensor;

inline constexpr dtype all_dtypes[] = {dtype::boolean, dtype::int32,    dtype::int64,
                                       dtype::float16, dtype::bfloat16, dtype::float32,
                                       dtype::float64};
inline constexpr dtype float_dtypes[] = {dtype::float16, dtype::bfloat16, dtype::float32,
                                         dtype::float64};

class chooser {
public:
  explicit chooser(std::uint64_t seed) : rng_(seed) {}
  /// Uniform in [0, n).
  std::uint64_t below(std::uint64_t n) { return rng_() % n; }
  /// Uniform in [lo, hi].
  std::int64_t between(std::int64_t lo, std::int64_t hi) {
    return lo + static_cast<std::int64_t>(below(static_cast<std::uint64_t>(hi - lo) + 1));
  }
  bool chance(int percent) { return below(100) < static_cast<std::uint64_t>(percent); }
  /// Uniform in [0, 1) with 53 bits.
  double unit() { return static_cast<double>(rng_() >> 11U) * 0x1p-53; }
  /// Roughly normal (sum of uniforms), exact to compute everywhere.
  double normal() {
    double s = 0.0;
    for (int i = 0; i < 4; ++i) {
      s += unit();
    }
    return (s - 2.0) * 1.7320508075688772;
  }
  template <class T, std::size_t N>
  T pick(const T (&xs)[N]) {
    return xs[below(N)];
  }

private:
  std::mt19937_64 rng_;
};

class program_maker {
public:
  explicit program_maker(std::uint64_t seed) : c_(seed) {}

  /// One program as a JSON line.
  std::string make(std::uint64_t id) {
    inputs_.clear();
    params_.clear();
    std::optional<tensor> result;
    std::string error;
    try {
      result = run_random_op();
      bytes_ = bytes_of(*result);  // waits: a kernel's error surfaces here
    } catch (const std::exception& e) {
      result.reset();
      error = e.what();
    }
    std::string line = "{\"id\":" + std::to_string(id) + ",\"op\":" + json_string(op_) +
                       ",\"params\":{" + params_ + "},\"inputs\":[";
    for (std::size_t i = 0; i < inputs_.size(); ++i) {
      const tensor& t = inputs_[i].value;
      line += (i == 0 ? "" : ",");
      line += "{\"dtype\":" + json_string(std::string(cotensor::name(t.dtype()))) +
              ",\"shape\":" + json_shape(t.shape()) + ",\"hex\":\"" + hex(inputs_[i].bytes) + "\"}";
    }
    line += "]";
    if (result) {
      line += ",\"out\":{\"dtype\":" + json_string(std::string(cotensor::name(result->dtype()))) +
              ",\"shape\":" + json_shape(result->shape()) + ",\"hex\":\"" + hex(bytes_) + "\"}";
    } else {
      line += ",\"error\":" + json_string(error);
    }
    return line + "}";
  }

private:
  void param(const std::string& key, const std::string& json_value) {
    params_ += (params_.empty() ? "" : ",") + json_string(key) + ":" + json_value;
  }

  dtype any_dtype() { return c_.pick(all_dtypes); }
  dtype float_dtype() { return c_.pick(float_dtypes); }

  std::vector<std::int64_t> random_extents(int max_rank, int max_extent = 4) {
    const auto rank = c_.between(0, max_rank);
    std::vector<std::int64_t> e;
    for (std::int64_t d = 0; d < rank; ++d) {
      e.push_back(c_.chance(6) ? 0 : c_.between(1, max_extent));
    }
    return e;
  }

  /// Extents that broadcast with `e`: some dimensions 1, some leading ones dropped or added.
  std::vector<std::int64_t> broadcast_partner(std::vector<std::int64_t> e) {
    if (!e.empty() && c_.chance(30)) {
      e.erase(e.begin(), e.begin() + c_.between(0, static_cast<std::int64_t>(e.size())));
    }
    for (auto& x : e) {
      if (c_.chance(30)) {
        x = 1;
      }
    }
    if (e.size() < 4 && c_.chance(15)) {
      e.insert(e.begin(), c_.between(1, 3));
    }
    return e;
  }

  /// A value for a float element: mostly normal samples at a random scale, sometimes small
  /// integers, halves, and IEEE special values.
  double float_value(dtype t) {
    const auto r = c_.below(100);
    if (r < 6) {
      constexpr double specials[] = {0.0, -0.0, INFINITY, -INFINITY, NAN};
      return c_.pick(specials);
    }
    if (r < 12 && allow_huge_) {
      const double big = t == dtype::float16 ? 65504.0 : t == dtype::float64 ? 1e300 : 3e38;
      const double tiny = t == dtype::float16 ? 6e-8 : t == dtype::float64 ? 5e-324 : 1e-40;
      const double v = c_.chance(50) ? big * (0.5 + c_.unit()) : tiny * (1 + c_.between(0, 3));
      return c_.chance(50) ? -v : v;
    }
    if (r < 20 && t == dtype::float64) {
      // Just off a float16 or bfloat16 rounding tie (1 + 2^-11 or 2^-8, ± 2^-40, scaled): a
      // cast that rounds through float32 first rounds these twice, and wrongly.
      const double tie = 1.0 + (c_.chance(50) ? 0x1p-11 : 0x1p-8);
      const double v = std::ldexp(tie + (c_.chance(50) ? 0x1p-40 : -0x1p-40),
                                  static_cast<int>(c_.between(-3, 3)));
      return c_.chance(50) ? -v : v;
    }
    if (r < 20) {  // around the float→int cast edges
      constexpr double edges[] = {2147483647.0, 2147483648.0, -2147483649.0, 9.3e18, -9.3e18,
                                  0.5,          1.5,          2.5,           -0.5,   -2.5};
      return c_.pick(edges);
    }
    if (r < 40) {
      return static_cast<double>(c_.between(-8, 8)) * (c_.chance(50) ? 1.0 : 0.5);
    }
    const double scale = std::ldexp(1.0, static_cast<int>(c_.between(-4, 4)));
    return c_.normal() * scale;
  }

  std::int64_t int_value(dtype t) {
    if (c_.chance(8)) {
      if (t == dtype::int32) {
        constexpr std::int64_t edges[] = {INT32_MIN, INT32_MAX, INT32_MIN + 1, 65504, 16842753};
        return c_.pick(edges);
      }
      // 16842753 = 2^24 + 2^16 + 1 is just above a bfloat16 tie that float32 rounds onto.
      constexpr std::int64_t edges[] = {INT64_MIN, INT64_MAX,       INT64_MIN + 1,   16777217,
                                        16842753,  (1LL << 53) + 1, -(1LL << 40) - 1};
      return c_.pick(edges);
    }
    return c_.between(-9, 9);
  }

  /// A random tensor, recorded as an input.
  tensor make_input(dtype t, std::vector<std::int64_t> extents) {
    shape s{std::span<const std::int64_t>(extents)};
    std::vector<std::uint8_t> bytes;
    for (std::int64_t i = 0; i < s.numel(); ++i) {
      switch (t) {
      case dtype::boolean:
        bytes.push_back(c_.chance(50) ? 1 : 0);
        break;
      case dtype::int32:
        append(bytes, static_cast<std::int32_t>(int_value(t)));
        break;
      case dtype::int64:
        append(bytes, int_value(t));
        break;
      case dtype::float16:
        append(bytes, cotensor::float16_t(static_cast<float>(float_value(t))).bits);
        break;
      case dtype::bfloat16:
        append(bytes, cotensor::bfloat16_t(static_cast<float>(float_value(t))).bits);
        break;
      case dtype::float32:
        append(bytes, static_cast<float>(float_value(t)));
        break;
      case dtype::float64:
        append(bytes, float_value(t));
        break;
      }
    }
    tensor value = cotensor::detail::from_host(bytes.data(), static_cast<std::size_t>(s.numel()), t,
                                               s, cotensor::device::cpu());
    inputs_.push_back({value, std::move(bytes)});
    return value;
  }

  /// Nice finite values for ops whose peers disagree on specials in ways that are not ours to
  /// settle (row-wise ops, matmul).
  tensor make_tame_input(dtype t, std::vector<std::int64_t> extents) {
    shape s{std::span<const std::int64_t>(extents)};
    std::vector<std::uint8_t> bytes;
    for (std::int64_t i = 0; i < s.numel(); ++i) {
      const double v = c_.chance(30) ? static_cast<double>(c_.between(-4, 4)) : c_.normal() * 2;
      switch (t) {
      case dtype::boolean:
        bytes.push_back(v > 0 ? 1 : 0);
        break;
      case dtype::int32:
        append(bytes, static_cast<std::int32_t>(std::lround(v)));
        break;
      case dtype::int64:
        append(bytes, static_cast<std::int64_t>(std::lround(v)));
        break;
      case dtype::float16:
        append(bytes, cotensor::float16_t(static_cast<float>(v)).bits);
        break;
      case dtype::bfloat16:
        append(bytes, cotensor::bfloat16_t(static_cast<float>(v)).bits);
        break;
      case dtype::float32:
        append(bytes, static_cast<float>(v));
        break;
      case dtype::float64:
        append(bytes, v);
        break;
      }
    }
    tensor value = cotensor::detail::from_host(bytes.data(), static_cast<std::size_t>(s.numel()), t,
                                               s, cotensor::device::cpu());
    inputs_.push_back({value, std::move(bytes)});
    return value;
  }

  // `x name s`, or `s name x` when `left`, through the public operators (a comparison with
  // the scalar on the left is the mirrored one with it on the right: s < x is x > s).
  static tensor
  run_scalar(const std::string& name, const tensor& x, cotensor::scalar s, bool left) {
    if (name == "add") {
      return left ? s + x : x + s;
    }
    if (name == "sub") {
      return left ? s - x : x - s;
    }
    if (name == "mul") {
      return left ? s * x : x * s;
    }
    if (name == "div") {
      return left ? s / x : x / s;
    }
    if (name == "eq") {
      return x == s;
    }
    if (name == "ne") {
      return x != s;
    }
    if (name == "lt") {
      return left ? x > s : x < s;
    }
    if (name == "le") {
      return left ? x >= s : x <= s;
    }
    if (name == "gt") {
      return left ? x < s : x > s;
    }
    if (name == "ge") {
      return left ? x <= s : x >= s;
    }
    std::abort();
  }

  tensor run_binary(const std::string& name, const tensor& a, const tensor& b) {
    if (name == "add") {
      return a + b;
    }
    if (name == "sub") {
      return a - b;
    }
    if (name == "mul") {
      return a * b;
    }
    if (name == "div") {
      return a / b;
    }
    if (name == "maximum") {
      return cotensor::maximum(a, b);
    }
    if (name == "minimum") {
      return cotensor::minimum(a, b);
    }
    if (name == "eq") {
      return a == b;
    }
    if (name == "ne") {
      return a != b;
    }
    if (name == "lt") {
      return a < b;
    }
    if (name == "le") {
      return a <= b;
    }
    if (name == "gt") {
      return a > b;
    }
    if (name == "ge") {
      return a >= b;
    }
    if (name == "logical_and") {
      return cotensor::logical_and(a, b);
    }
    return cotensor::logical_or(a, b);
  }

  tensor run_unary(const std::string& name, const tensor& x) {
    if (name == "neg") {
      return -x;
    }
    if (name == "abs") {
      return cotensor::abs(x);
    }
    if (name == "exp") {
      return cotensor::exp(x);
    }
    if (name == "log") {
      return cotensor::log(x);
    }
    if (name == "sqrt") {
      return cotensor::sqrt(x);
    }
    if (name == "tanh") {
      return cotensor::tanh(x);
    }
    if (name == "sigmoid") {
      return cotensor::sigmoid(x);
    }
    if (name == "relu") {
      return cotensor::relu(x);
    }
    if (name == "logical_not") {
      return cotensor::logical_not(x);
    }
    if (name == "gelu") {
      return cotensor::gelu(x, false);
    }
    return cotensor::gelu(x, true);
  }

  tensor run_reduce(const std::string& name, const tensor& x, std::optional<int> axis, bool keep) {
    using fn_all = tensor (*)(const tensor&);
    using fn_axis = tensor (*)(const tensor&, int, bool);
    static const std::tuple<const char*, fn_all, fn_axis> table[] = {
        {"sum", cotensor::sum, cotensor::sum},
        {"mean", cotensor::mean, cotensor::mean},
        {"max", cotensor::max, cotensor::max},
        {"min", cotensor::min, cotensor::min},
        {"argmax", cotensor::argmax, cotensor::argmax},
        {"argmin", cotensor::argmin, cotensor::argmin}};
    for (const auto& [n, all, along] : table) {
      if (name == n) {
        return axis ? along(x, *axis, keep) : all(x);
      }
    }
    std::abort();
  }

  tensor run_random_op() {
    static const char* const families[] = {
        "binary",     "binary", "binary", "scalar",       "scalar", "unary",  "unary",
        "clamp",      "where",  "astype", "astype",       "reduce", "reduce", "softmax",
        "layer_norm", "concat", "slice",  "index_select", "matmul"};
    op_ = c_.pick(families);
    if (op_ == "binary") {
      static const char* const names[] = {"add",     "sub", "mul",         "div",       "maximum",
                                          "minimum", "eq",  "ne",          "lt",        "le",
                                          "gt",      "ge",  "logical_and", "logical_or"};
      const std::string name = c_.pick(names);
      param("name", json_string(name));
      auto ea = random_extents(3);
      auto eb = broadcast_partner(ea);
      if (c_.chance(50)) {
        std::swap(ea, eb);
      }
      const tensor a = make_input(any_dtype(), ea);
      const tensor b = make_input(c_.chance(40) ? a.dtype() : any_dtype(), eb);
      return run_binary(name, a, b);
    }
    if (op_ == "scalar") {
      static const char* const names[] = {"add", "sub", "mul", "div", "eq",
                                          "ne",  "lt",  "le",  "gt",  "ge"};
      const std::string name = c_.pick(names);
      const bool left = c_.chance(30);
      param("name", json_string(name));
      param("left", left ? "true" : "false");
      const tensor x = make_input(any_dtype(), random_extents(3));
      const auto kind = c_.below(3);
      cotensor::scalar s = false;
      if (kind == 0) {
        s = cotensor::scalar(c_.chance(50));
        param("kind", "\"bool\"");
        param("value", s.to_int64() != 0 ? "1" : "0");
      } else if (kind == 1) {
        const std::int64_t v = c_.chance(10) ? (1LL << 40) + 3 : c_.between(-5, 5);
        s = cotensor::scalar(v);
        param("kind", "\"int\"");
        param("value", std::to_string(v));
      } else {
        constexpr double values[] = {2.5, -0.5, 0.25, 3.0, 0.1, -1.75, 1e-3, 1e5, 0.0};
        const double v = c_.pick(values);
        s = cotensor::scalar(v);
        param("kind", "\"float\"");
        param("value", json_double(v));
      }
      return run_scalar(name, x, s, left);
    }
    if (op_ == "unary") {
      static const char* const names[] = {"neg",         "abs",  "exp",      "log",
                                          "sqrt",        "tanh", "sigmoid",  "relu",
                                          "logical_not", "gelu", "gelu_tanh"};
      const std::string name = c_.pick(names);
      param("name", json_string(name));
      return run_unary(name, make_input(any_dtype(), random_extents(3)));
    }
    if (op_ == "clamp") {
      const dtype t = c_.chance(50) ? float_dtype() : (c_.chance(50) ? dtype::int32 : dtype::int64);
      constexpr double bounds[] = {-2.0, -1.0, 0.0, 0.5, 1.0, 3.0, -1.5, 2.25};
      double lo = c_.pick(bounds);
      double hi = c_.pick(bounds);
      if (lo > hi && c_.chance(90)) {
        std::swap(lo, hi);
      }
      param("lo", json_double(lo));
      param("hi", json_double(hi));
      return cotensor::clamp(make_input(t, random_extents(3)), lo, hi);
    }
    if (op_ == "where") {
      const auto e = random_extents(3);
      const tensor cond = make_input(dtype::boolean, broadcast_partner(e));
      const tensor a = make_input(any_dtype(), e);
      const tensor b = make_input(c_.chance(40) ? a.dtype() : any_dtype(), broadcast_partner(e));
      return cotensor::where(cond, a, b);
    }
    if (op_ == "astype") {
      const dtype to = any_dtype();
      param("to", json_string(std::string(cotensor::name(to))));
      return make_input(any_dtype(), random_extents(2)).astype(to);
    }
    if (op_ == "reduce") {
      static const char* const names[] = {"sum", "mean", "max", "min", "argmax", "argmin"};
      const std::string name = c_.pick(names);
      param("name", json_string(name));
      allow_huge_ = false;  // no float32 accumulator overflow: the peers' are not ours
      const tensor x = make_input(any_dtype(), random_extents(3, 5));
      allow_huge_ = true;
      std::optional<int> axis;
      if (x.rank() > 0 && c_.chance(60)) {
        const auto r = static_cast<std::int64_t>(x.rank());
        axis = static_cast<int>(c_.between(-r, r - 1));
        const bool keep = c_.chance(50);
        param("axis", std::to_string(*axis));
        param("keepdims", keep ? "true" : "false");
        return run_reduce(name, x, axis, keep);
      }
      param("axis", "null");
      return run_reduce(name, x, axis, false);
    }
    if (op_ == "softmax") {
      static const char* const names[] = {"softmax", "log_softmax"};
      const std::string name = c_.pick(names);
      param("name", json_string(name));
      auto e = random_extents(3, 6);
      if (e.empty()) {
        e.push_back(c_.between(1, 6));
      }
      const tensor x = make_tame_input(c_.chance(85) ? float_dtype() : any_dtype(), e);
      return name == "softmax" ? cotensor::softmax(x) : cotensor::log_softmax(x);
    }
    if (op_ == "layer_norm") {
      auto e = random_extents(3, 6);
      if (e.empty() || e.back() == 0) {
        e.push_back(c_.between(1, 6));
      }
      const dtype t = float_dtype();
      const tensor x = make_tame_input(t, e);
      const bool affine = c_.chance(60);
      param("affine", affine ? "true" : "false");
      tensor w;
      tensor b;
      if (affine) {
        w = make_tame_input(t, {e.back()});
        b = make_tame_input(t, {e.back()});
      }  // else: default-constructed handles, layer_norm's "none"
      param("eps", json_double(1e-5));
      return cotensor::layer_norm(x, w, b, 1e-5);
    }
    if (op_ == "concat") {
      auto e = random_extents(3);
      if (e.empty()) {
        e.push_back(2);
      }
      const auto r = static_cast<std::int64_t>(e.size());
      const int axis = static_cast<int>(c_.between(-r, r - 1));
      param("axis", std::to_string(axis));
      const dtype t = any_dtype();
      std::vector<tensor> xs;
      const auto n = c_.between(1, 3);
      const auto ax = static_cast<std::size_t>(axis < 0 ? axis + r : axis);
      for (std::int64_t i = 0; i < n; ++i) {
        auto ei = e;
        ei[ax] = c_.between(0, 3);
        xs.push_back(make_input(t, ei));
      }
      return cotensor::concat(xs, axis);
    }
    if (op_ == "slice") {
      auto e = random_extents(3, 6);
      if (e.empty()) {
        e.push_back(3);
      }
      const auto r = static_cast<std::int64_t>(e.size());
      const int axis = static_cast<int>(c_.between(-r, r - 1));
      const std::int64_t start = c_.between(-7, 7);
      const std::int64_t stop = c_.between(-7, 7);
      param("axis", std::to_string(axis));
      param("start", std::to_string(start));
      param("stop", std::to_string(stop));
      return cotensor::slice(make_input(any_dtype(), e), axis, start, stop);
    }
    if (op_ == "index_select") {
      auto e = random_extents(3);
      if (e.empty()) {
        e.push_back(3);
      }
      const auto r = static_cast<std::int64_t>(e.size());
      const int axis = static_cast<int>(c_.between(-r, r - 1));
      param("axis", std::to_string(axis));
      const tensor x = make_input(any_dtype(), e);
      const std::int64_t extent = e[static_cast<std::size_t>(axis < 0 ? axis + r : axis)];
      std::vector<std::int64_t> idx(static_cast<std::size_t>(c_.between(0, 5)));
      for (auto& i : idx) {
        // Now and then an index out of range: cotensor must fail the op, as the peers raise.
        i = c_.chance(5) ? extent + c_.between(0, 2)
                         : c_.between(0, std::max<std::int64_t>(0, extent - 1));
      }
      std::vector<std::uint8_t> bytes;
      for (const auto i : idx) {
        append(bytes, i);
      }
      const shape s{static_cast<std::int64_t>(idx.size())};
      tensor index = cotensor::detail::from_host(bytes.data(), idx.size(), dtype::int64, s,
                                                 cotensor::device::cpu());
      inputs_.push_back({index, std::move(bytes)});
      return cotensor::index_select(x, axis, index);
    }
    // matmul: [b..., m, k] x [k, n] or [b..., k, n]
    const dtype t = c_.chance(20) ? (c_.chance(50) ? dtype::int32 : dtype::int64) : float_dtype();
    const auto m = c_.between(0, 4);
    const auto k = c_.between(0, 6);
    const auto n = c_.between(0, 4);
    std::vector<std::int64_t> ea{m, k};
    std::vector<std::int64_t> eb{k, n};
    const auto batched = c_.below(3);
    if (batched > 0) {
      const auto b = c_.between(1, 3);
      ea.insert(ea.begin(), b);
      if (batched == 2) {
        eb.insert(eb.begin(), b);
      }
    }
    const tensor a = make_tame_input(t, ea);
    const tensor b = make_tame_input(t, eb);
    return cotensor::matmul(a, b);
  }

  chooser c_;
  bool allow_huge_ = true;
  std::string op_;
  std::string params_;
  std::vector<input> inputs_;
  std::vector<std::uint8_t> bytes_;
};

}  // namespace dtype_programs
