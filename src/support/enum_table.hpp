#pragma once

// A table indexed by an enum, in place of a switch whose arms only return constants.

#include <cstddef>
#include <type_traits>

namespace cotensor::detail {

/// The entry of `table` for `e`, whose value indexes it (the table lists one entry per
/// enumerator, in their order), or `other` for a value past its end, which names no enumerator.
template <class T, std::size_t N, class Enum>
constexpr T entry_for(const T (&table)[N], Enum e, std::type_identity_t<T> other) noexcept {
  static_assert(std::is_enum_v<Enum>);
  const auto i = static_cast<std::size_t>(e);
  return i < N ? table[i] : other;
}

}  // namespace cotensor::detail
