#pragma once

// The JSON of tests/differential/dtype_programs.cpp: inputs and results as their exact bytes
// (hex, little-endian, row-major), shapes, and strings and doubles as Python reads them.

#include <cotensor/cotensor.hpp>

#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace dtype_programs {

using cotensor::dtype;
using cotensor::shape;
using cotensor::tensor;

/// One input tensor: its bytes, as written and as given to cotensor.
struct input {
  tensor value;
  std::vector<std::uint8_t> bytes;
};

inline std::string hex(const std::vector<std::uint8_t>& bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (const std::uint8_t b : bytes) {
    s.push_back(digits[b >> 4U]);
    s.push_back(digits[b & 15U]);
  }
  return s;
}

inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out.push_back(c);
    }
  }
  return out + "\"";
}

/// A double as a JSON string Python's float.fromhex reads exactly ("inf", "nan" included).
inline std::string json_double(double v) {
  if (std::isnan(v)) {
    return "\"nan\"";
  }
  if (std::isinf(v)) {
    return v > 0 ? "\"inf\"" : "\"-inf\"";
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "\"%a\"", v);
  return buf;
}

inline std::string json_shape(const shape& s) {
  std::string out = "[";
  for (std::size_t d = 0; d < s.rank(); ++d) {
    out += (d == 0 ? "" : ",") + std::to_string(s[d]);
  }
  return out + "]";
}

template <class T>
inline void append(std::vector<std::uint8_t>& bytes, T v) {
  std::uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  bytes.insert(bytes.end(), b, b + sizeof(T));
}

/// The bytes of a computed tensor.
inline std::vector<std::uint8_t> bytes_of(const tensor& t) {
  std::vector<std::uint8_t> bytes;
  switch (t.dtype()) {
  case dtype::boolean:
    for (const bool v : t.to_vector<bool>()) {
      bytes.push_back(v ? 1 : 0);
    }
    break;
  case dtype::int32:
    for (const auto v : t.to_vector<std::int32_t>()) {
      append(bytes, v);
    }
    break;
  case dtype::int64:
    for (const auto v : t.to_vector<std::int64_t>()) {
      append(bytes, v);
    }
    break;
  case dtype::float16:
    for (const auto v : t.to_vector<cotensor::float16_t>()) {
      append(bytes, v.bits);
    }
    break;
  case dtype::bfloat16:
    for (const auto v : t.to_vector<cotensor::bfloat16_t>()) {
      append(bytes, v.bits);
    }
    break;
  case dtype::float32:
    for (const auto v : t.to_vector<float>()) {
      append(bytes, v);
    }
    break;
  case dtype::float64:
    for (const auto v : t.to_vector<double>()) {
      append(bytes, v);
    }
    break;
  }
  return bytes;
}

}  // namespace dtype_programs
