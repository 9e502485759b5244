#include "cotensor/dtype.hpp"

#include "core/visit_dtype.hpp"

#include <ostream>

namespace cotensor {

std::string_view name(dtype t) noexcept {
  static constexpr std::string_view names[] = {"bool",     "int32",   "int64",  "float16",
                                               "bfloat16", "float32", "float64"};
  return detail::dtype_entry(names, t, "unknown");
}

std::ostream& operator<<(std::ostream& os, dtype t) { return os << name(t); }

}  // namespace cotensor
