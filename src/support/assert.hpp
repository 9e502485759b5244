#pragma once

// Preconditions that only a bug can break: checked in every build, aborting with the file and
// line (ggml's GGML_ASSERT). Never thrown: a broken invariant is no error to handle.

/// Aborts with the file and line when a precondition that only a bug can break is false.
#define COTENSOR_ASSERT(cond)                                                                      \
  ((cond) ? static_cast<void>(0) : ::cotensor::detail::assert_fail(#cond, __FILE__, __LINE__))

namespace cotensor::detail {

/// Prints "file:line: cotensor assertion failed: expr" to stderr and aborts.
[[noreturn]] void assert_fail(const char* expr, const char* file, int line) noexcept;

}  // namespace cotensor::detail
