#include "support/environment.hpp"

#include <charconv>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace cotensor::detail {

std::shared_mutex& environment_mutex() noexcept {
  // Never destroyed: threads that outlive static destructors (a communication thread finalising
  // MPI at exit) may still take it.
  static auto* const m = new std::shared_mutex;
  return *m;
}

std::optional<std::string> environment_variable(const char* name) {
  const std::shared_lock lock(environment_mutex());
  const char* value = std::getenv(name);
  if (value == nullptr) {
    return std::nullopt;
  }
  return std::string(value);
}

void bad_environment_variable(const char* name, std::string_view value, std::string_view expected) {
  std::string message = "cotensor: environment variable ";
  message += name;
  message += "='";
  message += value;
  message += "' is not ";
  message += expected;
  throw std::invalid_argument(message);
}

std::optional<std::uint64_t>
whole_number_from_environment(const char* name, std::uint64_t min, std::uint64_t max) {
  const auto s = environment_variable(name);
  if (!s || s->empty()) {
    return std::nullopt;
  }
  const std::string_view text(*s);
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value < min || value > max) {
    if (min == 0 && max == std::numeric_limits<std::uint64_t>::max()) {
      bad_environment_variable(name, text, "a non-negative integer");
    }
    bad_environment_variable(
        name, text, "an integer from " + std::to_string(min) + " to " + std::to_string(max));
  }
  return value;
}

}  // namespace cotensor::detail
