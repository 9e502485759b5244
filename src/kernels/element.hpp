#pragma once

// Element types for the kernels of every backend: visiting a runtime dtype as a C++ type, the
// type each computes in (float16 and bfloat16 compute in float and round once), and the
// elementwise functions every dtype shares. Header-only and constexpr, so that each loop
// inlines them and CUDA's device code (--expt-relaxed-constexpr) calls the same functions: the
// GPU computes the CPU's bits wherever the operations are exact.

#include "cotensor/dtype.hpp"

#include "core/visit_dtype.hpp"
#include "kernels/kernel_table.hpp"

#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

namespace cotensor::detail {

template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>;
template <class T>
inline constexpr bool is_int_v = std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t>;
template <class T>
inline constexpr bool is_float_v = is_half_v<T> || std::is_floating_point_v<T>;

/// Calls `f(type_tag<T>{})` with the C++ type of `t` when it is a float dtype; nothing for
/// another (the frontend lets none through to a float kernel).
template <class F>
void visit_float(dtype t, F&& f) {
  visit_dtype(t, [&](auto tag) {
    if constexpr (is_float_v<typename decltype(tag)::type>) {
      f(tag);
    }
  });
}

/// The type `T`'s elementwise math runs in.
template <class T>
using compute_t = std::conditional_t<is_half_v<T>, float, T>;

template <class T>
constexpr compute_t<T> load(T x) noexcept {
  return static_cast<compute_t<T>>(x);
}
template <class T>
constexpr T store(compute_t<T> x) noexcept {
  return T(x);
}

/// `x` as integer `I`: saturating at I's range, NaN to 0 (C++ leaves these undefined).
template <class I, class F>
constexpr I saturate(F x) noexcept {
  constexpr F lo = static_cast<F>(std::numeric_limits<I>::min());  // -2^(N-1), exact
  if (!(x == x)) {
    return 0;
  }
  if (x >= -lo) {
    return std::numeric_limits<I>::max();
  }
  if (x <= lo) {
    return std::numeric_limits<I>::min();
  }
  return static_cast<I>(x);
}

/// `x` converted from `From` to `To` as `astype` does.
template <class To, class From>
constexpr To convert(From x) noexcept {
  if constexpr (std::is_same_v<To, From>) {
    return x;
  } else if constexpr (std::is_same_v<To, bool>) {
    return load(x) != 0;
  } else if constexpr (is_int_v<To> && is_float_v<From>) {
    return saturate<To>(load(x));
  } else if constexpr (is_half_v<To>) {
    return To(static_cast<float>(x));  // from int or double: through float, as PyTorch does
  } else if constexpr (is_half_v<From>) {
    return static_cast<To>(static_cast<float>(x));
  } else {
    return static_cast<To>(x);  // integer widening, wrapping narrowing (C++20), int to float
  }
}

// Two's-complement arithmetic on signed integers, with no undefined behaviour: computed in the
// unsigned type, whose conversion back is modular in C++20.
template <class T>
constexpr T wrap_add(T x, T y) noexcept {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(x) + static_cast<U>(y));
}
template <class T>
constexpr T wrap_sub(T x, T y) noexcept {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(x) - static_cast<U>(y));
}
template <class T>
constexpr T wrap_mul(T x, T y) noexcept {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(x) * static_cast<U>(y));
}

template <class C>
constexpr bool is_nan(C x) noexcept {
  if constexpr (std::is_floating_point_v<C>) {
    return x != x;
  } else {
    return false;
  }
}

/// `x ⊗ y` on compute type `C`; the result is `C`, or bool for comparisons and logical ops.
template <binary_op Op, class C>
constexpr auto apply_binary(C x, C y) noexcept {
  if constexpr (Op == binary_op::add) {
    if constexpr (std::is_same_v<C, bool>) {
      return static_cast<bool>(x || y);
    } else if constexpr (std::is_integral_v<C>) {
      return wrap_add(x, y);
    } else {
      return static_cast<C>(x + y);
    }
  } else if constexpr (Op == binary_op::sub) {
    if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>) {
      return wrap_sub(x, y);
    } else {
      return static_cast<C>(x - y);
    }
  } else if constexpr (Op == binary_op::mul) {
    if constexpr (std::is_same_v<C, bool>) {
      return static_cast<bool>(x && y);
    } else if constexpr (std::is_integral_v<C>) {
      return wrap_mul(x, y);
    } else {
      return static_cast<C>(x * y);
    }
  } else if constexpr (Op == binary_op::div) {
    return static_cast<C>(x / y);
  } else if constexpr (Op == binary_op::maximum) {
    return is_nan(x) ? x : (is_nan(y) ? y : (x > y ? x : y));
  } else if constexpr (Op == binary_op::minimum) {
    return is_nan(x) ? x : (is_nan(y) ? y : (x < y ? x : y));
  } else if constexpr (Op == binary_op::eq) {
    return x == y;
  } else if constexpr (Op == binary_op::ne) {
    return x != y;
  } else if constexpr (Op == binary_op::lt) {
    return x < y;
  } else if constexpr (Op == binary_op::le) {
    return x <= y;
  } else if constexpr (Op == binary_op::gt) {
    return x > y;
  } else if constexpr (Op == binary_op::ge) {
    return x >= y;
  } else if constexpr (Op == binary_op::logical_and) {
    return static_cast<bool>(x != C{}) && static_cast<bool>(y != C{});
  } else {
    static_assert(Op == binary_op::logical_or);
    return static_cast<bool>(x != C{}) || static_cast<bool>(y != C{});
  }
}

/// The element type `binary_op` writes for operands of type T.
template <binary_op Op, class T>
using binary_out_t = std::conditional_t<writes_bool(Op), bool, T>;

/// Whether a kernel is ever asked for `Op` on `T` (the frontend casts or refuses the rest):
/// keeps the instantiations to those.
template <binary_op Op, class T>
inline constexpr bool binary_exists =
    !(std::is_same_v<T, bool> && (Op == binary_op::sub || Op == binary_op::div ||
                                  Op == binary_op::maximum || Op == binary_op::minimum)) &&
    !(is_int_v<T> && Op == binary_op::div);

/// Calls `f(std::integral_constant<Enum, E>{})` for the runtime `e`, with `E` the one of `First,
/// Rest...` that equals it (the last for a value that is none of them): the switch from a
/// runtime op to the kernel compiled for it, written once for every op enum.
template <class Enum, Enum First, Enum... Rest, class F>
decltype(auto) visit_enum(Enum e, F&& f) {
  if constexpr (sizeof...(Rest) == 0) {
    return f(std::integral_constant<Enum, First>{});
  } else {
    if (e == First) {
      return f(std::integral_constant<Enum, First>{});
    }
    return visit_enum<Enum, Rest...>(e, std::forward<F>(f));
  }
}

/// Calls `f(std::integral_constant<binary_op, Op>{})` for the runtime `op`. A switch, not
/// visit_enum: every small op's kernel passes here, and GCC makes a jump table of the switch but
/// a chain of compares and calls of visit_enum's recursion, which made the chapter's
/// dependency_graph_1000 3 % slower (bench/ab.sh, 2026-11-27).
template <class F>
decltype(auto) visit_binary(binary_op op, F&& f) {
  using enum binary_op;
  switch (op) {
  case add:
    return f(std::integral_constant<binary_op, add>{});
  case sub:
    return f(std::integral_constant<binary_op, sub>{});
  case mul:
    return f(std::integral_constant<binary_op, mul>{});
  case div:
    return f(std::integral_constant<binary_op, div>{});
  case maximum:
    return f(std::integral_constant<binary_op, maximum>{});
  case minimum:
    return f(std::integral_constant<binary_op, minimum>{});
  case eq:
    return f(std::integral_constant<binary_op, eq>{});
  case ne:
    return f(std::integral_constant<binary_op, ne>{});
  case lt:
    return f(std::integral_constant<binary_op, lt>{});
  case le:
    return f(std::integral_constant<binary_op, le>{});
  case gt:
    return f(std::integral_constant<binary_op, gt>{});
  case ge:
    return f(std::integral_constant<binary_op, ge>{});
  case logical_and:
    return f(std::integral_constant<binary_op, logical_and>{});
  case logical_or:
    break;
  }
  return f(std::integral_constant<binary_op, logical_or>{});
}

/// Calls `f(std::integral_constant<unary_op, Op>{})` for the runtime `op`.
template <class F>
decltype(auto) visit_unary(unary_op op, F&& f) {
  using enum unary_op;
  return visit_enum<unary_op, neg, relu, exp, log, sqrt, tanh, sigmoid, abs, logical_not, gelu_erf,
                    gelu_tanh>(op, std::forward<F>(f));
}

/// Calls `f(std::integral_constant<reduce_op, Op>{})` for the runtime `op`.
template <class F>
decltype(auto) visit_reduce(reduce_op op, F&& f) {
  using enum reduce_op;
  return visit_enum<reduce_op, sum, max, min, argmax, argmin>(op, std::forward<F>(f));
}

/// A scalar operand as compute type `C`.
template <class C>
constexpr C scalar_as(scalar_arg s) noexcept {
  if constexpr (std::is_same_v<C, bool>) {
    return s.i != 0;
  } else if constexpr (std::is_integral_v<C>) {
    return static_cast<C>(s.i);
  } else {
    return static_cast<C>(s.f);
  }
}

}  // namespace cotensor::detail
