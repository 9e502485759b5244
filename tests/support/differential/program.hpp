#pragma once

// The program model of the differential tests (tests/support/differential.hpp): shapes and
// broadcasting, the ops a program is made of and their float semantics (shared by the run on
// cotensor and the reference), and a program's listing for failure messages.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace cotensor::test::differential {

using extents = std::vector<std::int64_t>;

inline std::int64_t count(const extents& s) {
  std::int64_t n = 1;
  for (std::int64_t e : s) {
    n *= e;
  }
  return n;
}

inline std::string to_string(const extents& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    out += (i == 0 ? "" : ", ") + std::to_string(s[i]);
  }
  return out + "]";
}

/// NumPy broadcasting of two shapes; false when they do not broadcast.
inline bool broadcast(const extents& a, const extents& b, extents& out) {
  const std::size_t rank = std::max(a.size(), b.size());
  out.assign(rank, 1);
  for (std::size_t d = 0; d < rank; ++d) {
    const std::int64_t ea = d < a.size() ? a[a.size() - 1 - d] : 1;
    const std::int64_t eb = d < b.size() ? b[b.size() - 1 - d] : 1;
    if (ea != eb && ea != 1 && eb != 1) {
      return false;
    }
    out[rank - 1 - d] = ea == 1 ? eb : ea;
  }
  return true;
}

// --- the ops -----------------------------------------------------------------------------------

enum class arith : std::uint8_t { add, sub, mul, div };
enum class elementwise : std::uint8_t { neg, relu, exp, tanh, sigmoid };

constexpr const char* arith_symbol[] = {"+", "-", "*", "/"};
constexpr const char* elementwise_name[] = {"-", "relu", "exp", "tanh", "sigmoid"};

inline float apply(arith k, float a, float b) {
  switch (k) {
  case arith::add:
    return a + b;
  case arith::sub:
    return a - b;
  case arith::mul:
    return a * b;
  case arith::div:
    break;
  }
  return a / b;
}

inline float apply(elementwise k, float x) {
  switch (k) {
  case elementwise::neg:
    return -x;
  case elementwise::relu:
    return x > 0.0F ? x : 0.0F;
  case elementwise::exp:
    return std::exp(x);
  case elementwise::tanh:
    return std::tanh(x);
  case elementwise::sigmoid:
    break;
  }
  return x < 0.0F ? std::exp(x) / (1.0F + std::exp(x)) : 1.0F / (1.0F + std::exp(-x));
}

// The user functions given to `map`; the reference calls the same lambdas.
constexpr auto square = [](float v) { return v * v; };
constexpr auto absolute = [](float v) { return std::fabs(v); };
constexpr auto clamp_unit = [](float v) { return std::clamp(v, -1.0F, 1.0F); };
constexpr auto halve = [](float v) { return v * 0.5F; };
constexpr auto raised_tanh = [](float v) { return std::tanh(v) + 1.0F; };
// The identity, slowly (a few microseconds an element): later ops pile up behind it, so the
// engine's queues fill and its ordering rules are exercised, not just its fast path.
constexpr auto slow_identity = [](float v) {
  volatile float sink = v;
  for (int i = 0; i < 2000; ++i) {
    sink = sink * 1.0F;
  }
  return v;
};
constexpr int map_functions = 6;
constexpr const char* map_name[] = {"v*v",   "|v|",       "clamp(v,-1,1)",
                                    "v*0.5", "tanh(v)+1", "slow identity"};

/// Calls `f` with the map function number `i`.
template <class F>
decltype(auto) with_map_function(int i, F&& f) {
  switch (i) {
  case 0:
    return f(square);
  case 1:
    return f(absolute);
  case 2:
    return f(clamp_unit);
  case 3:
    return f(halve);
  case 4:
    return f(raised_tanh);
  default:
    break;
  }
  return f(slow_identity);
}

enum class kind : std::uint8_t {
  from_values,      // out = from_vector(values, shape)
  filled,           // out = full(shape, scalar)
  binary,           // out = a ⊗ b
  binary_scalar,    // out = a ⊗ s, or s ⊗ a
  unary,            // out = f(a)
  map,              // out = map(a, function)
  in_place,         // a ⊗= b
  in_place_scalar,  // a ⊗= s
  reshape,          // out = reshape(a, shape): the same buffer
  transpose,        // out = transpose(a)
  matmul,           // out = matmul(a, b)            (compared with tolerance)
  sum_all,          // out = sum(a) or a.sum()       (compared with tolerance)
  mean_all,         // out = mean(a)                 (compared with tolerance)
  sum_axis,         // out = sum(a, axis)            (compared with tolerance)
  mean_axis,        // out = mean(a, axis)           (compared with tolerance)
  drop,             // the handle a is reset (its buffer lives on while ops or views use it)
  wait_one,         // a.wait()
  wait_all,         // wait_all()
  read_values,      // a.to_vector(), compared
  read_item,        // a.item(), compared
  cancelled_wait,   // a.async_wait cancelled as it starts: completes once, aborted or not
  async_map,        // out = map(a, function) as an async_op ended on another thread, later
  async_in_place,   // a ⊗= s as an async_op ended on another thread, later
};

inline bool tolerant(kind k) {
  return k == kind::matmul || k == kind::sum_all || k == kind::mean_all || k == kind::sum_axis ||
         k == kind::mean_axis;
}

struct op {
  kind what = kind::filled;
  int out = -1;  // the slot made by this op
  int a = -1;
  int b = -1;
  float scalar = 0.0F;
  bool scalar_left = false;
  bool member_form = false;  // a.sum() rather than sum(a)
  arith arith_op = arith::add;
  elementwise unary_op = elementwise::neg;
  int function = 0;
  int cancellation = 0;  // cancelled_wait: 0 terminal, 1 partial, 2 total
  int axis = 0;
  int delay_us = 0;  // async ops: how long after its start another thread ends it
  extents shape = {};
  std::vector<float> values = {};
};

/// Whether cotensor's result of `o` is compared with a tolerance (and then adopted) rather than
/// bit for bit.
inline bool tolerant(const op& o) {
  return tolerant(o.what) || (o.what == kind::unary &&
                              (o.unary_op == elementwise::exp || o.unary_op == elementwise::tanh ||
                               o.unary_op == elementwise::sigmoid));
}

/// The slot whose values `o` sets, or -1.
inline int written_slot(const op& o) {
  if (o.what == kind::in_place || o.what == kind::in_place_scalar ||
      o.what == kind::async_in_place) {
    return o.a;
  }
  return o.out;
}

struct program {
  std::uint32_t seed = 0;
  std::vector<op> ops;
  int slots = 0;                 // handles the program makes, in order
  std::vector<int> live_at_end;  // slots read back at the end
};

inline std::string describe(const op& o) {
  std::ostringstream os;
  const auto t = [](int i) { return "t" + std::to_string(i); };
  switch (o.what) {
  case kind::from_values:
    os << t(o.out) << " = from_vector(" << o.values.size() << " values, " << to_string(o.shape)
       << ")";
    break;
  case kind::filled:
    os << t(o.out) << " = full(" << to_string(o.shape) << ", " << o.scalar << ")";
    break;
  case kind::binary:
    os << t(o.out) << " = " << t(o.a) << " " << arith_symbol[static_cast<int>(o.arith_op)] << " "
       << t(o.b);
    break;
  case kind::binary_scalar:
    os << t(o.out) << " = ";
    if (o.scalar_left) {
      os << o.scalar << " " << arith_symbol[static_cast<int>(o.arith_op)] << " " << t(o.a);
    } else {
      os << t(o.a) << " " << arith_symbol[static_cast<int>(o.arith_op)] << " " << o.scalar;
    }
    break;
  case kind::unary:
    os << t(o.out) << " = " << elementwise_name[static_cast<int>(o.unary_op)] << "(" << t(o.a)
       << ")";
    break;
  case kind::map:
    os << t(o.out) << " = map(" << t(o.a) << ", " << map_name[o.function] << ")";
    break;
  case kind::in_place:
    os << t(o.a) << " " << arith_symbol[static_cast<int>(o.arith_op)] << "= " << t(o.b);
    break;
  case kind::in_place_scalar:
    os << t(o.a) << " " << arith_symbol[static_cast<int>(o.arith_op)] << "= " << o.scalar;
    break;
  case kind::reshape:
    os << t(o.out) << " = reshape(" << t(o.a) << ", " << to_string(o.shape) << ")";
    break;
  case kind::transpose:
    os << t(o.out) << " = transpose(" << t(o.a) << ")";
    break;
  case kind::matmul:
    os << t(o.out) << " = matmul(" << t(o.a) << ", " << t(o.b) << ")";
    break;
  case kind::sum_all:
    os << t(o.out) << (o.member_form ? " = " + t(o.a) + ".sum()" : " = sum(" + t(o.a) + ")");
    break;
  case kind::mean_all:
    os << t(o.out) << " = mean(" << t(o.a) << ")";
    break;
  case kind::sum_axis:
    os << t(o.out) << " = sum(" << t(o.a) << ", " << o.axis << ")";
    break;
  case kind::mean_axis:
    os << t(o.out) << " = mean(" << t(o.a) << ", " << o.axis << ")";
    break;
  case kind::drop:
    os << t(o.a) << " = tensor{}";
    break;
  case kind::wait_one:
    os << t(o.a) << ".wait()";
    break;
  case kind::wait_all:
    os << "wait_all()";
    break;
  case kind::read_values:
    os << t(o.a) << ".to_vector()";
    break;
  case kind::read_item:
    os << t(o.a) << ".item()";
    break;
  case kind::cancelled_wait:
    os << t(o.a) << ".async_wait(...), cancelled ("
       << (o.cancellation == 0   ? "terminal"
           : o.cancellation == 1 ? "partial"
                                 : "total")
       << ")";
    break;
  case kind::async_map:
    os << t(o.out) << " = async map(" << t(o.a) << ", " << map_name[o.function] << "), ended "
       << o.delay_us << " us later";
    break;
  case kind::async_in_place:
    os << "async " << t(o.a) << " " << arith_symbol[static_cast<int>(o.arith_op)] << "= "
       << o.scalar << ", ended " << o.delay_us << " us later";
    break;
  }
  return os.str();
}

inline std::string listing(const program& p) {
  std::ostringstream os;
  os << "program of seed " << p.seed << ":\n";
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    os << "  #" << i << "  " << describe(p.ops[i]) << "\n";
  }
  return os.str();
}

}  // namespace cotensor::test::differential
