#pragma once

#include <cstdint>
#include <type_traits>

namespace cotensor {

/// A C++ number as the operand of a tensor op (`x * 0.5`, `2 - x`, `x += 1`, `x == true`):
/// implicit from every arithmetic type, so that one overload of each operator serves them all.
///
/// A scalar is weak in promotion (docs/dtypes.md): it takes the tensor's dtype when it is of
/// the same kind or a lower one (`float16 * 2.5` is float16, `int32 + 2` int32); a floating
/// scalar on an integer or bool tensor gives float32, an integer one on a bool tensor int64.
/// It keeps its value as given: a floating value as a `double`, an integer or bool exactly as
/// an `int64_t` (an unsigned value past `INT64_MAX` wraps to a negative one). The op converts
/// it to the tensor's dtype as `astype` converts, and throws if an integer does not fit.
class scalar {
public:
  /// The number `value`, of the kind of its type (bool, integer or floating).
  template <class S>
  requires std::is_arithmetic_v<S>
  constexpr scalar(S value) noexcept  // NOLINT(google-explicit-constructor): implicit by design
      : value_(static_cast<double>(value)) {
    if constexpr (std::is_same_v<S, bool>) {
      kind_ = kind::boolean;
      exact_ = value ? 1 : 0;
    } else if constexpr (std::is_integral_v<S>) {
      kind_ = kind::integer;
      exact_ = static_cast<std::int64_t>(value);
    }
  }

  /// True if made from `bool`.
  constexpr bool is_boolean() const noexcept { return kind_ == kind::boolean; }
  /// True if made from an integer type other than `bool`.
  constexpr bool is_integral() const noexcept { return kind_ == kind::integer; }
  /// True if made from a floating-point type.
  constexpr bool is_floating_point() const noexcept { return kind_ == kind::floating; }
  /// The value as a `double` (rounded for integers past 2^53).
  constexpr double to_double() const noexcept { return value_; }
  /// The value of a bool (0 or 1) or integer scalar, exactly; 0 for a floating one.
  constexpr std::int64_t to_int64() const noexcept { return exact_; }

private:
  enum class kind : std::uint8_t { boolean, integer, floating };
  kind kind_ = kind::floating;
  double value_ = 0.0;
  std::int64_t exact_ = 0;
};

}  // namespace cotensor
