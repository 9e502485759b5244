#pragma once

#include <cotensor/dtype.hpp>

#include <cstdint>

namespace cotensor::serving {

template <class T>
struct element_tag {};

// Calls `f(element_tag<T>{})` with the element type `T` of `t` and returns what it returns.
template <class F>
decltype(auto) visit_element_type(dtype t, F&& f) {
  switch (t) {
  case dtype::boolean:
    return f(element_tag<bool>{});
  case dtype::int32:
    return f(element_tag<std::int32_t>{});
  case dtype::int64:
    return f(element_tag<std::int64_t>{});
  case dtype::float16:
    return f(element_tag<float16_t>{});
  case dtype::bfloat16:
    return f(element_tag<bfloat16_t>{});
  case dtype::float32:
    return f(element_tag<float>{});
  case dtype::float64:
    break;
  }
  return f(element_tag<double>{});
}

}  // namespace cotensor::serving
