#include "cotensor/dtype.hpp"

#include <ostream>

namespace cotensor {

std::string_view name(dtype t) noexcept {
  switch (t) {
  case dtype::boolean:
    return "bool";
  case dtype::int32:
    return "int32";
  case dtype::int64:
    return "int64";
  case dtype::float16:
    return "float16";
  case dtype::bfloat16:
    return "bfloat16";
  case dtype::float32:
    return "float32";
  case dtype::float64:
    return "float64";
  }
  return "unknown";
}

std::ostream& operator<<(std::ostream& os, dtype t) { return os << name(t); }

}  // namespace cotensor
