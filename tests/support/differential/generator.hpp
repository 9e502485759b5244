#pragma once

// The generator of the differential tests (tests/support/differential.hpp): random programs,
// a deterministic function of their seed, whose values stay bounded and finite.

#include "program.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <random>
#include <utility>
#include <vector>

namespace cotensor::test::differential {

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

}  // namespace cotensor::test::differential
