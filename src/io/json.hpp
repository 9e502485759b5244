#pragma once

// A strict JSON reader and a string writer: just enough for safetensors headers (an object of
// objects of strings, integer arrays and a string map). RFC 8259 grammar; numbers are kept as
// their text, so integers of any size are checked exactly by their reader.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cotensor::detail::json {

/// A parsed JSON value.
struct value {
  struct member;
  enum class kind : std::uint8_t { null, boolean, number, string, array, object };
  kind type = kind::null;
  bool boolean = false;
  std::string text;             // a string's contents, a number's text
  std::vector<value> items;     // an array's elements
  std::vector<member> members;  // an object's members, in order

  /// The number as a non-negative integer that fits an int64, or nothing.
  std::optional<std::int64_t> as_index() const;
  /// The member `key` of an object, or null if absent (or not an object).
  const value* find(std::string_view key) const;
};

/// An object's member. (Not a std::pair: libstdc++'s pair checks its members' traits where
/// `value` is still incomplete, which clang refuses.)
struct value::member {
  std::string key;
  value val;
};

/// Parses `text` (one value, surrounded by whitespace at most); throws std::runtime_error
/// saying what is wrong where, as "byte 12: expected ':'". Nesting deeper than 64 is refused.
value parse(std::string_view text);

/// Reads and parses the file `file`; throws std::runtime_error("WHO: FILE: cannot open it") or
/// ("WHO: FILE: not JSON: " and what parse says), `who` naming the reader.
value parse_file(const std::filesystem::path& file, std::string_view who);

/// `s` as a JSON string literal, quotes included.
std::string quote(std::string_view s);

}  // namespace cotensor::detail::json
