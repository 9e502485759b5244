#pragma once

// Settings read from the environment, strictly: a malformed value is refused with an error that
// names the variable, never replaced by a default (a typo must not go unnoticed).

#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

namespace cotensor::detail {

/// Throws std::invalid_argument("cotensor: environment variable NAME='VALUE' is not EXPECTED").
[[noreturn]] void
bad_environment_variable(const char* name, std::string_view value, std::string_view expected);

/// The whole number in the environment variable `name`; std::nullopt when it is unset or empty.
/// Throws std::invalid_argument (see bad_environment_variable) when it is anything else than a
/// decimal number from `min` to `max`. Reads the environment: like std::getenv, it must not race
/// a setenv on another thread.
std::optional<std::uint64_t>
whole_number_from_environment(const char* name,
                              std::uint64_t min = 0,
                              std::uint64_t max = std::numeric_limits<std::uint64_t>::max());

}  // namespace cotensor::detail
