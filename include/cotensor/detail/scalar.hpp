#pragma once

// What the operator templates in cotensor's public headers need: C++ scalar operands, and the
// codes of the elementwise ops. Users never name these.

#include <concepts>
#include <cstdint>
#include <type_traits>

namespace cotensor::detail {

/// Elementwise binary ops (the kernels' codes; see src/kernels/kernel_table.hpp).
enum class binary_op : std::uint8_t {
  add,
  sub,
  mul,
  div,
  maximum,
  minimum,
  eq,
  ne,
  lt,
  le,
  gt,
  ge,
  logical_and,
  logical_or,
};

/// A C++ scalar operand: weak in promotion (it takes the tensor's dtype when of the same kind).
struct scalar {
  enum class kind : std::uint8_t { boolean, integer, floating };
  kind k = kind::floating;
  double f = 0.0;      // the value, for every kind
  std::int64_t i = 0;  // the value exactly, for bool and integers
};

template <class S>
concept arithmetic = std::is_arithmetic_v<S>;

template <arithmetic S>
constexpr scalar make_scalar(S s) noexcept {
  if constexpr (std::is_same_v<S, bool>) {
    return {scalar::kind::boolean, s ? 1.0 : 0.0, s ? 1 : 0};
  } else if constexpr (std::is_integral_v<S>) {
    // An unsigned value past INT64_MAX wraps here; the frontend sees a negative value.
    return {scalar::kind::integer, static_cast<double>(s), static_cast<std::int64_t>(s)};
  } else {
    return {scalar::kind::floating, static_cast<double>(s), 0};
  }
}

}  // namespace cotensor::detail
