#pragma once

// The differential tests' reference (tests/support/differential.hpp): a plain sequential
// interpreter of a program, which uses no cotensor call, checked against what cotensor observed.

#include "program.hpp"
#include "runner.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace cotensor::test::differential {

// --- the reference -----------------------------------------------------------------------------

/// Runs `p` sequentially on plain vectors and compares with what cotensor observed. Returns an
/// empty string when everything matches, or what differs first.
class reference {
public:
  reference(const program& p, const observations& seen) : p_(p), seen_(seen) {}

  std::string check() {
    if (!seen_.problems.empty()) {
      return "seed " + std::to_string(p_.seed) + ": " + seen_.problems.front() + "\n" + listing(p_);
    }
    slots_.resize(static_cast<std::size_t>(p_.slots));
    for (index_ = 0; index_ < p_.ops.size(); ++index_) {
      const op& o = p_.ops[index_];
      if (!run(o)) {
        return failure_;
      }
      // The generator keeps values finite; a program that breaks this would test less.
      const int written = written_slot(o);
      const auto outside = [](float x) { return !(std::isfinite(x) && std::fabs(x) <= 1e6F); };
      if (written >= 0 && std::ranges::any_of(values(written), outside)) {
        std::ostringstream value;
        value << *std::ranges::find_if(values(written), outside);
        fail("generator error: a value left the range the generator promises: " + value.str());
        return failure_;
      }
    }
    if (seen_.at_end.size() != p_.live_at_end.size()) {
      return "seed " + std::to_string(p_.seed) + ": final reads missing";
    }
    for (std::size_t i = 0; i < p_.live_at_end.size(); ++i) {
      const int s = p_.live_at_end[i];
      if (!same("final value of t" + std::to_string(s), seen_.at_end[i], values(s))) {
        failure_ += "\n(at the end of the program)\n" + listing(p_);
        return failure_;
      }
    }
    return {};
  }

private:
  struct slot {
    int buffer = -1;
    extents shape;
  };

  std::vector<float>& values(int s) {
    return buffers_[static_cast<std::size_t>(slots_[static_cast<std::size_t>(s)].buffer)];
  }
  const extents& shape(int s) const { return slots_[static_cast<std::size_t>(s)].shape; }
  void make(int s, extents shape, std::vector<float> v) {
    buffers_.push_back(std::move(v));
    slots_[static_cast<std::size_t>(s)] = {static_cast<int>(buffers_.size()) - 1, std::move(shape)};
  }

  bool fail(const std::string& what) {
    std::ostringstream os;
    os << "seed " << p_.seed << ", op #" << index_ << " (" << describe(p_.ops[index_])
       << "): " << what << "\n"
       << listing(p_);
    failure_ = os.str();
    return false;
  }

  static std::string show(float v) {
    std::ostringstream os;
    os.precision(9);
    os << v << " (0x" << std::hex << std::bit_cast<std::uint32_t>(v) << ")";
    return os.str();
  }

  /// Bit-identical comparison.
  bool
  same(const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
    if (got.size() != want.size()) {
      failure_ = "seed " + std::to_string(p_.seed) + ": " + what + ": " +
                 std::to_string(got.size()) + " values, expected " + std::to_string(want.size());
      return false;
    }
    for (std::size_t j = 0; j < got.size(); ++j) {
      if (std::bit_cast<std::uint32_t>(got[j]) != std::bit_cast<std::uint32_t>(want[j])) {
        failure_ = "seed " + std::to_string(p_.seed) + ": " + what + ", element " +
                   std::to_string(j) + ": cotensor " + show(got[j]) + ", reference " +
                   show(want[j]);
        return false;
      }
    }
    return true;
  }

  /// Elements in [o, i] order: index into `s` of the element at output index `flat` of `out`.
  static std::int64_t source_index(const extents& s, const extents& out, std::int64_t flat) {
    std::int64_t index = 0;
    std::int64_t stride = 1;
    for (std::size_t d = 0; d < out.size(); ++d) {
      const std::size_t od = out.size() - 1 - d;
      const std::int64_t coordinate = flat % out[od];
      flat /= out[od];
      if (d < s.size()) {
        const std::int64_t extent = s[s.size() - 1 - d];
        if (extent != 1) {
          index += coordinate * stride;
        }
        stride *= extent;
      }
    }
    return index;
  }

  std::vector<float> broadcast_apply(arith k, int a, int b, const extents& out) {
    std::vector<float> result(static_cast<std::size_t>(count(out)));
    const std::vector<float>& va = values(a);
    const std::vector<float>& vb = values(b);
    for (std::int64_t j = 0; j < count(out); ++j) {
      result[static_cast<std::size_t>(j)] =
          apply(k, va[static_cast<std::size_t>(source_index(shape(a), out, j))],
                vb[static_cast<std::size_t>(source_index(shape(b), out, j))]);
    }
    return result;
  }

  /// Checks the result cotensor made at this op against `want` (terms: the sum of the
  /// magnitudes of the terms of each element; the tolerance is 1e-4 of it plus `floor`),
  /// then adopts cotensor's values.
  bool adopt(int out,
             extents s,
             const std::vector<float>& want,
             const std::vector<double>& terms,
             double floor = 1e-5) {
    auto it = seen_.at_op.find(index_);
    if (it == seen_.at_op.end() || it->second.size() != want.size()) {
      return fail("no copy of the result was observed");
    }
    for (std::size_t j = 0; j < want.size(); ++j) {
      const double got = it->second[j];
      const double tolerance = 1e-4 * terms[j] + floor;
      if (!(std::fabs(got - static_cast<double>(want[j])) <= tolerance)) {
        std::ostringstream os;
        os.precision(9);
        os << "element " << j << ": cotensor " << got << ", reference " << want[j] << ", tolerance "
           << tolerance;
        return fail(os.str());
      }
    }
    make(out, std::move(s), it->second);
    return true;
  }

  bool reduce_axis(const op& o, bool mean) {
    const extents& in = shape(o.a);
    const auto rank = static_cast<int>(in.size());
    const auto ax = static_cast<std::size_t>(o.axis < 0 ? o.axis + rank : o.axis);
    std::int64_t outer = 1;
    std::int64_t inner = 1;
    for (std::size_t d = 0; d < in.size(); ++d) {
      if (d < ax) {
        outer *= in[d];
      } else if (d > ax) {
        inner *= in[d];
      }
    }
    const std::int64_t extent = in[ax];
    const std::vector<float>& v = values(o.a);
    std::vector<float> want(static_cast<std::size_t>(outer * inner));
    std::vector<double> terms(want.size());
    for (std::int64_t i = 0; i < outer; ++i) {
      for (std::int64_t j = 0; j < inner; ++j) {
        double total = 0.0;
        double magnitude = 0.0;
        for (std::int64_t e = 0; e < extent; ++e) {
          const double x = v[static_cast<std::size_t>((i * extent + e) * inner + j)];
          total += x;
          magnitude += std::fabs(x);
        }
        const double scale = mean ? static_cast<double>(extent) : 1.0;
        want[static_cast<std::size_t>(i * inner + j)] = static_cast<float>(total / scale);
        terms[static_cast<std::size_t>(i * inner + j)] = magnitude / scale;
      }
    }
    return adopt(o.out, o.shape, want, terms);
  }

  bool run(const op& o) {
    switch (o.what) {
    case kind::from_values:
      make(o.out, o.shape, o.values);
      return true;
    case kind::filled:
      make(o.out, o.shape, std::vector<float>(static_cast<std::size_t>(count(o.shape)), o.scalar));
      return true;
    case kind::binary: {
      extents out;
      if (!broadcast(shape(o.a), shape(o.b), out) || out != o.shape) {
        return fail("generator error: shapes do not broadcast");
      }
      make(o.out, out, broadcast_apply(o.arith_op, o.a, o.b, out));
      return true;
    }
    case kind::binary_scalar: {
      std::vector<float> v = values(o.a);
      for (float& x : v) {
        x = o.scalar_left ? apply(o.arith_op, o.scalar, x) : apply(o.arith_op, x, o.scalar);
      }
      make(o.out, shape(o.a), std::move(v));
      return true;
    }
    case kind::unary: {
      std::vector<float> v = values(o.a);
      for (float& x : v) {
        x = apply(o.unary_op, x);
      }
      if (tolerant(o)) {  // 1e-4 of a tenth of |f(x)|: 1e-5 relative
        std::vector<double> terms(v.size());
        std::transform(v.begin(), v.end(), terms.begin(),
                       [](float y) { return 0.1 * std::fabs(static_cast<double>(y)); });
        return adopt(o.out, shape(o.a), v, terms, 1e-30);
      }
      make(o.out, shape(o.a), std::move(v));
      return true;
    }
    case kind::map:
    case kind::async_map: {
      std::vector<float> v = values(o.a);
      with_map_function(o.function, [&](auto f) {
        for (float& x : v) {
          x = static_cast<float>(f(x));
        }
      });
      make(o.out, shape(o.a), std::move(v));
      return true;
    }
    case kind::in_place: {
      // Computed into a new vector first: b may share a's buffer.
      std::vector<float> v = broadcast_apply(o.arith_op, o.a, o.b, shape(o.a));
      values(o.a) = std::move(v);
      return true;
    }
    case kind::in_place_scalar:
    case kind::async_in_place:
      for (float& x : values(o.a)) {
        x = apply(o.arith_op, x, o.scalar);
      }
      return true;
    case kind::reshape:
      slots_[static_cast<std::size_t>(o.out)] = {slots_[static_cast<std::size_t>(o.a)].buffer,
                                                 o.shape};
      return true;
    case kind::transpose: {
      const std::int64_t rows = shape(o.a)[0];
      const std::int64_t cols = shape(o.a)[1];
      const std::vector<float>& in = values(o.a);
      std::vector<float> out(in.size());
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t c = 0; c < cols; ++c) {
          out[static_cast<std::size_t>(c * rows + r)] = in[static_cast<std::size_t>(r * cols + c)];
        }
      }
      make(o.out, {cols, rows}, std::move(out));
      return true;
    }
    case kind::matmul: {
      const std::int64_t m = shape(o.a)[0];
      const std::int64_t k = shape(o.a)[1];
      const std::int64_t n = shape(o.b)[1];
      const std::vector<float>& a = values(o.a);
      const std::vector<float>& b = values(o.b);
      std::vector<float> want(static_cast<std::size_t>(m * n));
      std::vector<double> terms(want.size());
      for (std::int64_t i = 0; i < m; ++i) {
        for (std::int64_t j = 0; j < n; ++j) {
          double total = 0.0;
          double magnitude = 0.0;
          for (std::int64_t q = 0; q < k; ++q) {
            const double term = static_cast<double>(a[static_cast<std::size_t>(i * k + q)]) *
                                static_cast<double>(b[static_cast<std::size_t>(q * n + j)]);
            total += term;
            magnitude += std::fabs(term);
          }
          want[static_cast<std::size_t>(i * n + j)] = static_cast<float>(total);
          terms[static_cast<std::size_t>(i * n + j)] = magnitude;
        }
      }
      return adopt(o.out, {m, n}, want, terms);
    }
    case kind::sum_all:
    case kind::mean_all: {
      double total = 0.0;
      double magnitude = 0.0;
      for (float x : values(o.a)) {
        total += x;
        magnitude += std::fabs(static_cast<double>(x));
      }
      const double n = o.what == kind::mean_all ? static_cast<double>(count(shape(o.a))) : 1.0;
      return adopt(o.out, {}, {static_cast<float>(total / n)}, {magnitude / n});
    }
    case kind::sum_axis:
      return reduce_axis(o, false);
    case kind::mean_axis:
      return reduce_axis(o, true);
    case kind::drop: {
      auto it = seen_.at_op.find(index_);
      if (it == seen_.at_op.end()) {
        return fail("no copy of the dropped value was observed");
      }
      if (!same("value when dropped", it->second, values(o.a))) {
        return fail(failure_);
      }
      slots_[static_cast<std::size_t>(o.a)] = {};
      return true;
    }
    case kind::wait_one:
    case kind::wait_all:
    case kind::cancelled_wait:  // checked when it ran (observations::problems)
      return true;
    case kind::read_values:
    case kind::read_item: {
      auto it = seen_.at_op.find(index_);
      if (it == seen_.at_op.end()) {
        return fail("the read was not observed");
      }
      if (!same("value read", it->second, values(o.a))) {
        return fail(failure_);
      }
      return true;
    }
    }
    return fail("unknown op");
  }

  const program& p_;
  const observations& seen_;
  std::vector<std::vector<float>> buffers_;
  std::vector<slot> slots_;
  std::size_t index_ = 0;
  std::string failure_;
};

}  // namespace cotensor::test::differential
