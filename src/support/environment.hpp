#pragma once

// The process's environment as cotensor reads and changes it.
//
// Settings are read strictly: a malformed value is refused with an error that names the
// variable, never replaced by a default (a typo must not go unnoticed).
//
// cotensor changes the environment once, for the ~1.5 ms in which OpenBLAS loads with the first
// GEMM (cpu/openblas.hpp), on a backend worker. glibc's setenv may free the array that a
// concurrent getenv walks, so cotensor's own readers of the environment are ordered against that
// change by environment_mutex(): its getenv calls (environment_variable) and its calls into
// libraries that read the environment as they start (MPI_Init_thread, ncclCommInitRank, the
// dlopen of a CUDA library). A program's own threads are not: see cpu/openblas.hpp.

#include <cstdint>
#include <limits>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>

namespace cotensor::detail {

/// Held exclusively while cotensor changes the environment, shared while it reads it. Never held
/// while user code runs.
std::shared_mutex& environment_mutex() noexcept;

/// The value of the environment variable `name`, copied under a shared lock of
/// environment_mutex(); std::nullopt when it is unset.
std::optional<std::string> environment_variable(const char* name);

/// Throws std::invalid_argument("cotensor: environment variable NAME='VALUE' is not EXPECTED").
[[noreturn]] void
bad_environment_variable(const char* name, std::string_view value, std::string_view expected);

/// The whole number in the environment variable `name`; std::nullopt when it is unset or empty.
/// Throws std::invalid_argument (see bad_environment_variable) when it is anything else than a
/// decimal number from `min` to `max`.
std::optional<std::uint64_t>
whole_number_from_environment(const char* name,
                              std::uint64_t min = 0,
                              std::uint64_t max = std::numeric_limits<std::uint64_t>::max());

}  // namespace cotensor::detail
