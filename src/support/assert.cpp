#include "support/assert.hpp"

#include <cstdio>
#include <cstdlib>

namespace cotensor::detail {

void assert_fail(const char* expr, const char* file, int line) noexcept {
  std::fprintf(stderr, "%s:%d: cotensor assertion failed: %s\n", file, line, expr);
  std::abort();
}

}  // namespace cotensor::detail
