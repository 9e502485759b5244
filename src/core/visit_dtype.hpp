#pragma once

// A runtime dtype visited as its C++ element type: the one switch over `dtype` that kernels,
// the frontend and serving share.

#include "cotensor/dtype.hpp"

#include "support/enum_table.hpp"

#include <cstddef>
#include <cstdint>

namespace cotensor::detail {

template <class T>
struct type_tag {
  using type = T;
};

/// Calls `f(type_tag<T>{})` with the C++ element type of `t`.
template <class F>
decltype(auto) visit_dtype(dtype t, F&& f) {
  switch (t) {
  case dtype::boolean:
    return f(type_tag<bool>{});
  case dtype::int32:
    return f(type_tag<std::int32_t>{});
  case dtype::int64:
    return f(type_tag<std::int64_t>{});
  case dtype::float16:
    return f(type_tag<float16_t>{});
  case dtype::bfloat16:
    return f(type_tag<bfloat16_t>{});
  case dtype::float32:
    return f(type_tag<float>{});
  case dtype::float64:
    break;
  }
  return f(type_tag<double>{});
}

/// The entry of `table` for `t`: the table lists one per dtype, in the order of the enumerators
/// (`other` for a value that names no dtype).
template <class T, std::size_t N>
constexpr T dtype_entry(const T (&table)[N], dtype t, std::type_identity_t<T> other) noexcept {
  static_assert(N == dtype_count, "one entry per dtype");
  return entry_for(table, t, other);
}

}  // namespace cotensor::detail
