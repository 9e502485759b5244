#pragma once

// Random programs for differential tests of the engine: programs of tensor ops over a handful of
// live tensors (shapes of rank 0 to 3 with broadcasting, reshapes sharing a buffer, in-place
// writes, random waits), run by cotensor and by a plain sequential interpreter written here, which
// uses no cotensor call. Any mistake in the engine's ordering of reads and writes — a read
// that misses an earlier write, a write that overtakes a read — shows up as a different value.
//
// Comparison:
// - Elementwise ops must give bit-identical results: the kernels use plain float arithmetic
//   (no FMA contraction), and the reference computes exactly the same float expressions.
//   exp, tanh and sigmoid are the exception: cotensor computes them with glibc's vector math
//   library (within 4 ulp), the reference with libm (within 1), so they are compared with a
//   tolerance of 1e-5 relative (~80 ulp, far below any mistake in the data) plus 1e-30.
// - matmul (OpenBLAS), sum and mean (accumulated in double by the engine, in some order) are
//   compared with a tolerance of 1e-4 relative to the sum of the magnitudes of the terms, plus
//   1e-5 absolute (the error bound of a dot product or a sum, far above float rounding for our
//   sizes, far below any mistake in the data). So that the rest of the program stays
//   bit-comparable, the engine copies each such result as it is made (`r * 1.0F`, exact), and
//   the reference adopts that copy once it has checked it.
// - Every value is checked: the live handles at the end, reads in the middle, and the value of
//   each handle the program drops, through an exact copy made when it is dropped.
// - Values stay bounded (|x| <= 1e4, no division by a value near zero, exp only of small
//   values): programs never produce inf or NaN, which would make different values compare
//   alike.
// On a mismatch, the failure names the seed, the op index and the whole program: every program
// is a deterministic function of its seed (std::mt19937, no library distributions).

//
// Used by tests/differential_test.cpp (programs from seeds) and by the libFuzzer target
// tests/fuzz/program_fuzzer.cpp (programs drawn from the fuzzer's bytes).

#include <cotensor/cotensor.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/system/system_error.hpp>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <functional>
#include <initializer_list>
#include <map>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
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

// --- the generator -----------------------------------------------------------------------------

/// Bounds on the values of a buffer, tracked by the generator (in double, loosely) so that it
/// only emits ops whose results stay finite and away from a division by zero.
struct range {
  double lo = 0.0;
  double hi = 0.0;
  double magnitude() const { return std::max(std::fabs(lo), std::fabs(hi)); }
  bool excludes_zero() const { return lo >= 0.25 || hi <= -0.25; }
};

constexpr double max_magnitude = 1e4;
// Broadcasts and matmuls of reshaped tensors can multiply sizes (the fuzzer made tensors of a
// million elements): the generator makes none larger than this, so that a sum of squashed
// values stays within max_magnitude and programs stay fast.
constexpr std::int64_t max_elements = 4096;

inline range span_of(std::initializer_list<double> values) {
  return {std::min(values), std::max(values)};
}

inline range combine(arith k, range a, range b) {
  switch (k) {
  case arith::add:
    return {a.lo + b.lo, a.hi + b.hi};
  case arith::sub:
    return {a.lo - b.hi, a.hi - b.lo};
  case arith::mul:
    return span_of({a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi});
  case arith::div:
    break;
  }
  // b excludes zero (the generator checks): a * [1/b.hi, 1/b.lo].
  return combine(arith::mul, a, {1.0 / b.hi, 1.0 / b.lo});
}

inline double sigmoid_of(double x) { return 1.0 / (1.0 + std::exp(-x)); }

inline range after(elementwise k, range a) {
  switch (k) {
  case elementwise::neg:
    return {-a.hi, -a.lo};
  case elementwise::relu:
    return {std::max(a.lo, 0.0), std::max(a.hi, 0.0)};
  case elementwise::exp:
    return {std::exp(a.lo), std::exp(a.hi)};
  case elementwise::tanh:
    return {std::tanh(a.lo), std::tanh(a.hi)};
  case elementwise::sigmoid:
    break;
  }
  return {sigmoid_of(a.lo), sigmoid_of(a.hi)};
}

inline range after_map(int function, range a) {
  switch (function) {
  case 0:
    return a.lo >= 0 ? range{a.lo * a.lo, a.hi * a.hi}
                     : (a.hi <= 0 ? range{a.hi * a.hi, a.lo * a.lo}
                                  : range{0.0, a.magnitude() * a.magnitude()});
  case 1:
    return a.lo >= 0 ? a : (a.hi <= 0 ? range{-a.hi, -a.lo} : range{0.0, a.magnitude()});
  case 2:
    return {std::clamp(a.lo, -1.0, 1.0), std::clamp(a.hi, -1.0, 1.0)};
  case 3:
    return {a.lo * 0.5, a.hi * 0.5};
  case 4:
    return {std::tanh(a.lo) + 1.0, std::tanh(a.hi) + 1.0};
  default:
    break;
  }
  return a;
}

class generator {
public:
  struct options {
    int length = 30;    // ops, not counting drops
    bool waits = true;  // emit waits and reads in the middle of the program
    int max_live = 7;   // handles kept alive at once
    // Also emit async waits cancelled as they start (with waits only). Off, the programs of
    // every seed are what they were before the option existed.
    bool cancellations = false;
    // Also emit async ops (`async_op`) that another thread ends after a random delay. Off, the
    // programs of every seed are what they were before the option existed.
    bool async_ops = false;
  };

  /// Where the generator's choices come from: any source of 32-bit words.
  using source = std::function<std::uint32_t()>;

  generator(std::uint32_t seed, options opts) : generator(seed, opts, std::mt19937(seed)) {}
  /// A program drawn from `next` (the fuzzer's bytes); `seed` only names it.
  generator(std::uint32_t seed, options opts, source next) : next_(std::move(next)), opts_(opts) {
    p_.seed = seed;
    m_ = 1 + below(4);
    n_ = 1 + below(4);
    k_ = 1 + below(4);
  }

  program make() {
    for (int i = 0; i < 3; ++i) {
      make_new();
    }
    // The length counts ops that issue work or wait, not the drops that keep the live set small.
    const auto length = [this] {
      return std::ranges::count_if(p_.ops, [](const op& o) { return o.what != kind::drop; });
    };
    while (length() < opts_.length) {
      step();
      while (live_count() > opts_.max_live) {
        emit_drop(pick_live());
      }
    }
    for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
      if (slots_[static_cast<std::size_t>(i)].live) {
        p_.live_at_end.push_back(i);
      }
    }
    p_.slots = static_cast<int>(slots_.size());
    return std::move(p_);
  }

private:
  struct slot {
    int buffer;
    extents shape;
    bool live;
  };

  // Deterministic everywhere: only the source's words (std::mt19937's output by default), no
  // library distributions.
  int below(int n) { return static_cast<int>(next_() % static_cast<std::uint32_t>(n)); }
  bool chance(int percent) { return below(100) < percent; }
  float random_value() {  // in [-2, 2], a multiple of 1/1000
    return static_cast<float>(below(4001) - 2000) / 1000.0F;
  }
  float random_scalar() {
    constexpr float scalars[] = {0.5F, 2.0F, -1.5F, 3.0F, 0.25F, -0.75F, 0.125F, -2.0F, 1.25F};
    return scalars[below(static_cast<int>(std::size(scalars)))];
  }

  const slot& at(int i) const { return slots_[static_cast<std::size_t>(i)]; }
  range& range_of(int i) { return ranges_[static_cast<std::size_t>(at(i).buffer)]; }
  int live_count() const {
    return static_cast<int>(std::ranges::count_if(slots_, [](const slot& s) { return s.live; }));
  }
  int pick_live() {
    std::vector<int> live;
    for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
      if (at(i).live) {
        live.push_back(i);
      }
    }
    return live[static_cast<std::size_t>(below(static_cast<int>(live.size())))];
  }
  template <class Pred>
  std::vector<int> live_where(Pred pred) const {
    std::vector<int> out;
    for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
      if (at(i).live && pred(at(i))) {
        out.push_back(i);
      }
    }
    return out;
  }
  int pick(const std::vector<int>& from) {
    return from[static_cast<std::size_t>(below(static_cast<int>(from.size())))];
  }

  extents random_shape() {
    // A family over the program's extents m, n, k, so that many pairs broadcast: row vectors
    // [n] and [1, n] over [m, n] and [k, m, n], columns [m, 1], scalars.
    switch (below(12)) {
    case 0:
      return {};
    case 1:
      return {n_};
    case 2:
      return {1, n_};
    case 3:
    case 4:
      return {m_, n_};
    case 5:
      return {m_, 1};
    case 6:
      return {k_, m_, n_};
    case 7:
      return {k_, 1, n_};
    case 8:
      return {m_, k_};
    case 9:
      return {k_, n_};
    case 10:
      return {n_, m_};
    default:
      break;
    }
    return {1};
  }

  int add_slot(int buffer, extents shape) {
    slots_.push_back({buffer, std::move(shape), true});
    return static_cast<int>(slots_.size()) - 1;
  }
  int add_buffer(range r) {
    ranges_.push_back(r);
    return static_cast<int>(ranges_.size()) - 1;
  }
  int emit(op o, range r) {
    o.out = add_slot(add_buffer(r), std::move(o.shape));
    o.shape = at(o.out).shape;
    p_.ops.push_back(std::move(o));
    return p_.ops.back().out;
  }

  int emit_values(extents shape) {
    op o{.what = kind::from_values, .shape = std::move(shape)};
    o.values.resize(static_cast<std::size_t>(count(o.shape)));
    for (float& v : o.values) {
      v = random_value();
    }
    return emit(std::move(o), {-2.0, 2.0});
  }
  int make_new() {
    if (chance(80)) {
      return emit_values(random_shape());
    }
    const float value = random_value();
    return emit(op{.what = kind::filled, .scalar = value, .shape = random_shape()}, {value, value});
  }
  int emit_unary(elementwise k, int a) {
    return emit(op{.what = kind::unary, .a = a, .unary_op = k, .shape = at(a).shape},
                after(k, range_of(a)));
  }
  /// A tensor with the values of `a` squashed into [-1, 1].
  int squash(int a) { return emit_unary(elementwise::tanh, a); }
  /// A tensor computed from `a` whose values are at least 0.25 away from zero: 2 + tanh(a).
  int nonzero(int a) {
    const int t = squash(a);
    return emit(op{.what = kind::binary_scalar,
                   .a = t,
                   .scalar = 2.0F,
                   .scalar_left = true,
                   .arith_op = arith::add,
                   .shape = at(t).shape},
                combine(arith::add, {2.0, 2.0}, range_of(t)));
  }
  void emit_drop(int a) {
    slots_[static_cast<std::size_t>(a)].live = false;
    p_.ops.push_back(op{.what = kind::drop, .a = a});
  }
  void emit_access(kind k, int a) { p_.ops.push_back(op{.what = k, .a = a}); }

  void step() {
    const int base = opts_.waits ? (opts_.cancellations ? 112 : 108) : 100;
    const int roll = below(base + (opts_.async_ops ? 10 : 0));
    if (roll >= base) {
      step_async(roll - base);
    } else if (roll < 8) {
      make_new();
    } else if (roll < 26) {
      step_binary();
    } else if (roll < 36) {
      step_binary_scalar();
    } else if (roll < 46) {
      step_unary();
    } else if (roll < 51) {
      step_map();
    } else if (roll < 61) {
      step_in_place();
    } else if (roll < 69) {
      step_in_place_scalar();
    } else if (roll < 76) {
      step_reshape();
    } else if (roll < 80) {
      step_transpose();
    } else if (roll < 86) {
      step_matmul();
    } else if (roll < 96) {
      step_reduce();
    } else if (roll < 98) {
      emit_drop(pick_live());
      if (live_count() == 0) {
        make_new();
      }
    } else if (roll < 100) {
      make_new();
    } else if (roll < 108) {
      step_wait();
    } else {
      p_.ops.push_back(
          op{.what = kind::cancelled_wait, .a = pick_live(), .cancellation = below(3)});
    }
  }

  void step_binary() {
    const int a = pick_live();
    extents out;
    auto partners = live_where([&](const slot& s) { return broadcast(at(a).shape, s.shape, out); });
    const int b = partners.empty() ? emit_values(at(a).shape) : pick(partners);
    const auto k = static_cast<arith>(below(4));
    const int divisor = k == arith::div && !range_of(b).excludes_zero() ? nonzero(b) : b;
    const range r = combine(k, range_of(a), range_of(divisor));
    if (r.magnitude() > max_magnitude) {
      squash(a);
      return;
    }
    broadcast(at(a).shape, at(divisor).shape, out);
    if (count(out) > max_elements) {
      squash(a);
      return;
    }
    emit(op{.what = kind::binary, .a = a, .b = divisor, .arith_op = k, .shape = out}, r);
  }

  void step_binary_scalar() {
    int a = pick_live();
    const auto k = static_cast<arith>(below(4));
    const bool left = chance(50);
    const float s = random_scalar();
    if (k == arith::div && left && !range_of(a).excludes_zero()) {
      a = nonzero(a);
    }
    const range r = left ? combine(k, {s, s}, range_of(a)) : combine(k, range_of(a), {s, s});
    if (r.magnitude() > max_magnitude) {
      squash(a);
      return;
    }
    emit(op{.what = kind::binary_scalar,
            .a = a,
            .scalar = s,
            .scalar_left = left,
            .arith_op = k,
            .shape = at(a).shape},
         r);
  }

  void step_unary() {
    int a = pick_live();
    const auto k = static_cast<elementwise>(below(5));
    if (k == elementwise::exp && range_of(a).hi > 4.0) {
      a = squash(a);  // exp only of values <= 4
    }
    emit_unary(k, a);
  }

  void step_map() {
    int a = pick_live();
    const int f = below(map_functions);
    if (f == 0 && range_of(a).magnitude() > 100.0) {
      a = squash(a);
    }
    emit(op{.what = kind::map, .a = a, .function = f, .shape = at(a).shape},
         after_map(f, range_of(a)));
  }

  // An async op: a map (0-4) or an in-place scalar op (5-9), ended 0-300 us after its start.
  void step_async(int roll) {
    const int delay = below(300);
    if (roll < 5) {
      step_map();
      p_.ops.back().what = kind::async_map;
      p_.ops.back().delay_us = delay;
      return;
    }
    const auto before = p_.ops.size();
    step_in_place_scalar();
    if (p_.ops.size() > before && p_.ops.back().what == kind::in_place_scalar) {
      p_.ops.back().what = kind::async_in_place;
      p_.ops.back().delay_us = delay;
    }
  }

  void step_in_place() {
    const int a = pick_live();
    extents out;
    // b must broadcast into a's shape; it may be a itself, or a view of a's buffer.
    auto partners = live_where(
        [&](const slot& s) { return broadcast(at(a).shape, s.shape, out) && out == at(a).shape; });
    const int b = partners.empty() ? emit_values(at(a).shape) : pick(partners);
    const auto k = static_cast<arith>(below(4));
    const int rhs = k == arith::div && !range_of(b).excludes_zero() ? nonzero(b) : b;
    const range r = combine(k, range_of(a), range_of(rhs));
    if (r.magnitude() > max_magnitude) {
      squash(a);
      return;
    }
    range_of(a) = r;
    p_.ops.push_back(op{.what = kind::in_place, .a = a, .b = rhs, .arith_op = k});
  }

  void step_in_place_scalar() {
    const int a = pick_live();
    const auto k = static_cast<arith>(below(4));
    const float s = random_scalar();
    const range r = combine(k, range_of(a), {s, s});
    if (r.magnitude() > max_magnitude) {
      squash(a);
      return;
    }
    range_of(a) = r;
    p_.ops.push_back(op{.what = kind::in_place_scalar, .a = a, .scalar = s, .arith_op = k});
  }

  void step_reshape() {
    const int a = pick_live();
    std::int64_t rest = count(at(a).shape);
    // A random factorisation of the element count into 0 to 3 extents.
    const int rank = rest == 1 ? below(4) : 1 + below(3);
    extents shape;
    for (int d = 0; d + 1 < rank; ++d) {
      std::vector<std::int64_t> divisors;
      for (std::int64_t f = 1; f <= rest; ++f) {
        if (rest % f == 0) {
          divisors.push_back(f);
        }
      }
      const std::int64_t f =
          divisors[static_cast<std::size_t>(below(static_cast<int>(divisors.size())))];
      shape.push_back(f);
      rest /= f;
    }
    if (rank > 0) {
      shape.push_back(rest);
    }
    op o{.what = kind::reshape, .a = a, .shape = shape};
    o.out = add_slot(at(a).buffer, std::move(shape));  // shares a's buffer and its range
    p_.ops.push_back(std::move(o));
  }

  void step_transpose() {
    auto matrices = live_where([](const slot& s) { return s.shape.size() == 2; });
    if (matrices.empty()) {
      step_unary();
      return;
    }
    const int a = pick(matrices);
    emit(op{.what = kind::transpose, .a = a, .shape = {at(a).shape[1], at(a).shape[0]}},
         range_of(a));
  }

  void step_matmul() {
    auto matrices = live_where([](const slot& s) { return s.shape.size() == 2; });
    int a = matrices.empty() ? emit_values({m_, k_}) : pick(matrices);
    const std::int64_t inner = at(a).shape[1];
    auto partners =
        live_where([&](const slot& s) { return s.shape.size() == 2 && s.shape[0] == inner; });
    int b = partners.empty() ? emit_values({inner, 1 + below(4)}) : pick(partners);
    if (static_cast<double>(inner) * range_of(a).magnitude() * range_of(b).magnitude() >
        max_magnitude) {
      a = squash(a);
      b = squash(b);
    }
    if (at(a).shape[0] * at(b).shape[1] > max_elements) {
      squash(a);
      return;
    }
    const double bound =
        static_cast<double>(inner) * range_of(a).magnitude() * range_of(b).magnitude();
    emit(op{.what = kind::matmul, .a = a, .b = b, .shape = {at(a).shape[0], at(b).shape[1]}},
         {-bound, bound});
  }

  void step_reduce() {
    int a = pick_live();
    const auto n = static_cast<double>(count(at(a).shape));
    // A sum of up to max_elements values could leave the bound (found by the fuzzer): sum a
    // squashed copy. Consumes no choice: the programs of seeds that never get here are
    // unchanged.
    if (n * range_of(a).magnitude() > max_magnitude) {
      a = squash(a);
    }
    const range r = range_of(a);
    const int choice = below(at(a).shape.empty() ? 2 : 4);
    if (choice == 0) {
      emit(op{.what = kind::sum_all, .a = a, .member_form = chance(50), .shape = {}},
           {r.lo * n, r.hi * n});
    } else if (choice == 1) {
      emit(op{.what = kind::mean_all, .a = a, .shape = {}}, r);
    } else {
      const int rank = static_cast<int>(at(a).shape.size());
      const int axis = below(rank);
      extents shape = at(a).shape;
      const auto extent = static_cast<double>(shape[static_cast<std::size_t>(axis)]);
      shape.erase(shape.begin() + axis);
      const int written_axis = chance(30) ? axis - rank : axis;  // negative axes too
      if (choice == 2) {
        emit(op{.what = kind::sum_axis, .a = a, .axis = written_axis, .shape = shape},
             {r.lo * extent, r.hi * extent});
      } else {
        emit(op{.what = kind::mean_axis, .a = a, .axis = written_axis, .shape = shape}, r);
      }
    }
  }

  void step_wait() {
    switch (below(4)) {
    case 0:
      emit_access(kind::wait_one, pick_live());
      break;
    case 1:
      p_.ops.push_back(op{.what = kind::wait_all});
      break;
    case 2:
      emit_access(kind::read_values, pick_live());
      break;
    default: {
      auto scalars = live_where([](const slot& s) { return count(s.shape) == 1; });
      emit_access(scalars.empty() ? kind::read_values : kind::read_item,
                  scalars.empty() ? pick_live() : pick(scalars));
      break;
    }
    }
  }

  source next_;
  options opts_;
  program p_;
  std::int64_t m_;
  std::int64_t n_;
  std::int64_t k_;
  std::vector<slot> slots_;
  std::vector<range> ranges_;
};

inline program generate(std::uint32_t seed, generator::options opts) {
  return generator(seed, opts).make();
}

// --- running on cotensor -----------------------------------------------------------------------

/// What a run on cotensor observed: values read in the middle of the program and copies of the
/// tolerance-compared results (by op index), and the final values of the live handles.
struct observations {
  std::map<std::size_t, std::vector<float>> at_op;
  std::vector<std::vector<float>> at_end;  // in the order of program::live_at_end
  std::vector<std::string> problems;       // a cancelled wait that misbehaved
};

/// Starts `t.async_wait` on a private io_context, cancels it at once with `type` and runs the
/// io_context until the handler has run. Returns "" or what went wrong: the handler must run
/// exactly once, with no error (the wait won) or operation_aborted (the cancellation won).
inline std::string cancelled_wait(const cotensor::tensor& t, boost::asio::cancellation_type type) {
  namespace asio = boost::asio;
  asio::io_context io;
  asio::cancellation_signal signal;
  int calls = 0;
  std::exception_ptr error;
  t.async_wait(asio::bind_cancellation_slot(signal.slot(),
                                            asio::bind_executor(io, [&](std::exception_ptr e) {
                                              ++calls;
                                              error = std::move(e);
                                            })));
  signal.emit(type);
  io.run();
  if (calls != 1) {
    return "a cancelled wait ran its handler " + std::to_string(calls) + " times";
  }
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const boost::system::system_error& e) {
      if (e.code() != asio::error::operation_aborted) {
        return std::string("a cancelled wait completed with ") + e.what();
      }
    } catch (const std::exception& e) {
      return std::string("a cancelled wait completed with ") + e.what();
    }
  }
  return {};
}

inline cotensor::shape to_shape(const extents& s) { return cotensor::shape(std::span(s)); }

/// a ⊗ b for tensor ⊗ tensor, tensor ⊗ float and float ⊗ tensor.
template <class L, class R>
inline cotensor::tensor arith_op(arith k, const L& a, const R& b) {
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

inline void in_place_op(arith k, cotensor::tensor& a, const cotensor::tensor& b) {
  switch (k) {
  case arith::add:
    a += b;
    return;
  case arith::sub:
    a -= b;
    return;
  case arith::mul:
    a *= b;
    return;
  case arith::div:
    a /= b;
    return;
  }
}

inline void in_place_op(arith k, cotensor::tensor& a, float s) {
  switch (k) {
  case arith::add:
    a += s;
    return;
  case arith::sub:
    a -= s;
    return;
  case arith::mul:
    a *= s;
    return;
  case arith::div:
    a /= s;
    return;
  }
}

inline cotensor::tensor unary_op(elementwise k, const cotensor::tensor& a) {
  switch (k) {
  case elementwise::neg:
    return -a;
  case elementwise::relu:
    return cotensor::relu(a);
  case elementwise::exp:
    return cotensor::exp(a);
  case elementwise::tanh:
    return cotensor::tanh(a);
  case elementwise::sigmoid:
    break;
  }
  return cotensor::sigmoid(a);
}

/// The threads that end the async ops of programs, after their delay.
inline boost::asio::thread_pool& completers() {
  static auto* const pool = new boost::asio::thread_pool(2);  // lives until the process ends
  return *pool;
}

/// Issues `out = f(in)` elementwise as an async op that a completer thread computes and ends
/// `delay` after its start.
template <class F>
void async_elementwise(const char* name,
                       const cotensor::tensor* in,
                       const cotensor::tensor& out,
                       std::chrono::microseconds delay,
                       F f) {
  auto start = [delay, f](cotensor::async_op_context& ctx, cotensor::async_op_done done) {
    const std::span<const float> src = ctx.reads() == 1 ? ctx.read(0) : ctx.write(0);
    boost::asio::post(completers(),
                      [src, dst = ctx.write(0), delay, f, done = std::move(done)]() mutable {
                        std::this_thread::sleep_for(delay);
                        for (std::size_t i = 0; i < dst.size(); ++i) {
                          dst[i] = static_cast<float>(f(src[i]));
                        }
                        done();
                      });
  };
  if (in != nullptr) {
    cotensor::async_op(name, {*in}, {out}, std::move(start));
  } else {
    cotensor::async_op(name, {}, {out}, std::move(start));
  }
}

inline observations run_on_cotensor(const program& p) {
  std::vector<cotensor::tensor> t(static_cast<std::size_t>(p.slots));
  const auto slot = [&](int i) -> cotensor::tensor& { return t[static_cast<std::size_t>(i)]; };
  std::vector<std::pair<std::size_t, cotensor::tensor>> copies;
  observations seen;
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    const op& o = p.ops[i];
    switch (o.what) {
    case kind::from_values:
      slot(o.out) = cotensor::from_vector(o.values, to_shape(o.shape));
      break;
    case kind::filled:
      slot(o.out) = cotensor::full(to_shape(o.shape), o.scalar);
      break;
    case kind::binary:
      slot(o.out) = arith_op(o.arith_op, slot(o.a), slot(o.b));
      break;
    case kind::binary_scalar:
      slot(o.out) = o.scalar_left ? arith_op(o.arith_op, o.scalar, slot(o.a))
                                  : arith_op(o.arith_op, slot(o.a), o.scalar);
      break;
    case kind::unary:
      slot(o.out) = unary_op(o.unary_op, slot(o.a));
      break;
    case kind::map:
      slot(o.out) =
          with_map_function(o.function, [&](auto f) { return cotensor::map(slot(o.a), f); });
      break;
    case kind::in_place:
      in_place_op(o.arith_op, slot(o.a), slot(o.b));
      break;
    case kind::in_place_scalar:
      in_place_op(o.arith_op, slot(o.a), o.scalar);
      break;
    case kind::reshape:
      slot(o.out) = cotensor::reshape(slot(o.a), to_shape(o.shape));
      break;
    case kind::transpose:
      slot(o.out) = cotensor::transpose(slot(o.a));
      break;
    case kind::matmul:
      slot(o.out) = cotensor::matmul(slot(o.a), slot(o.b));
      break;
    case kind::sum_all:
      slot(o.out) = o.member_form ? slot(o.a).sum() : cotensor::sum(slot(o.a));
      break;
    case kind::mean_all:
      slot(o.out) = cotensor::mean(slot(o.a));
      break;
    case kind::sum_axis:
      slot(o.out) = cotensor::sum(slot(o.a), o.axis);
      break;
    case kind::mean_axis:
      slot(o.out) = cotensor::mean(slot(o.a), o.axis);
      break;
    case kind::drop:
      // The value the handle had is still checked, through an exact copy made now; the
      // buffer itself lives on while ops (or views) use it.
      copies.emplace_back(i, slot(o.a) * 1.0F);
      slot(o.a) = cotensor::tensor{};
      break;
    case kind::wait_one:
      slot(o.a).wait();
      break;
    case kind::wait_all:
      cotensor::wait_all();
      break;
    case kind::read_values:
      seen.at_op[i] = slot(o.a).to_vector();
      break;
    case kind::read_item:
      seen.at_op[i] = {slot(o.a).item()};
      break;
    case kind::async_map: {
      auto out = cotensor::zeros(slot(o.a).shape());
      with_map_function(o.function, [&](auto f) {
        async_elementwise("async_map", &slot(o.a), out, std::chrono::microseconds(o.delay_us), f);
      });
      slot(o.out) = std::move(out);
      break;
    }
    case kind::async_in_place:
      async_elementwise("async_in_place", nullptr, slot(o.a), std::chrono::microseconds(o.delay_us),
                        [k = o.arith_op, s = o.scalar](float x) { return apply(k, x, s); });
      break;
    case kind::cancelled_wait: {
      constexpr boost::asio::cancellation_type types[] = {boost::asio::cancellation_type::terminal,
                                                          boost::asio::cancellation_type::partial,
                                                          boost::asio::cancellation_type::total};
      std::string problem = cancelled_wait(slot(o.a), types[o.cancellation % 3]);
      if (!problem.empty()) {
        seen.problems.push_back("op #" + std::to_string(i) + ": " + problem);
      }
      break;
    }
    }
    if (tolerant(o)) {
      copies.emplace_back(i, slot(o.out) * 1.0F);  // x * 1 is exact: the result as made
    }
  }
  for (auto& [i, copy] : copies) {
    seen.at_op[i] = copy.to_vector();
  }
  for (int s : p.live_at_end) {
    seen.at_end.push_back(slot(s).to_vector());
  }
  return seen;
}

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
