#include "lm/byte_level.hpp"

#include "support/utf8.hpp"

#include <array>
#include <cstdint>
#include <unordered_map>

namespace cotensor::lm::detail {
namespace {

// The length of the well-formed UTF-8 sequence at s[i], or 0 if there is none: with `prefix` the
// number of bytes that begin one (at least 1), which Unicode's "maximal subpart" replaces by one
// U+FFFD.
std::size_t
utf8_sequence(std::string_view s, std::size_t i, std::size_t& prefix, bool* cut_short = nullptr) {
  const auto byte = [&](std::size_t j) { return static_cast<unsigned char>(s[j]); };
  const unsigned char b0 = byte(i);
  prefix = 1;
  if (cut_short != nullptr) {
    *cut_short = false;
  }
  if (b0 < 0x80) {
    return 1;
  }
  std::size_t length = 0;
  unsigned char lo = 0x80;
  unsigned char hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    length = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    length = 3;
    lo = b0 == 0xE0 ? 0xA0 : 0x80;
    hi = b0 == 0xED ? 0x9F : 0xBF;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    length = 4;
    lo = b0 == 0xF0 ? 0x90 : 0x80;
    hi = b0 == 0xF4 ? 0x8F : 0xBF;
  } else {
    return 0;
  }
  for (std::size_t k = 1; k < length; ++k) {
    if (i + k >= s.size()) {
      if (cut_short != nullptr) {
        *cut_short = true;
      }
      return 0;
    }
    const unsigned char b = byte(i + k);
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) {
      return 0;
    }
    prefix = k + 1;
  }
  return length;
}

// GPT-2's bytes_to_unicode: each byte a printable character (UTF-8), and back.
struct byte_alphabet {
  std::array<std::string, 256> of_byte;
  std::unordered_map<char32_t, unsigned char> to_byte;

  byte_alphabet() {
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const char32_t c =
          printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      ::cotensor::detail::append_utf8(of_byte[static_cast<std::size_t>(b)], c);
      to_byte.emplace(c, static_cast<unsigned char>(b));
    }
  }
};

const byte_alphabet& alphabet() {
  static const byte_alphabet a;
  return a;
}

}  // namespace

const std::string& byte_level_char(unsigned char b) noexcept { return alphabet().of_byte[b]; }

bool byte_level_to_bytes(std::string_view token, std::string& out) {
  const byte_alphabet& bytes = alphabet();
  const std::size_t size = out.size();
  for (std::size_t j = 0; j < token.size();) {
    std::size_t prefix = 0;
    const std::size_t n = utf8_sequence(token, j, prefix);
    char32_t c = 0;
    if (n > 0) {
      c = n == 1 ? static_cast<unsigned char>(token[j])
                 : static_cast<unsigned char>(token[j]) & (0x7F >> n);
      for (std::size_t k = 1; k < n; ++k) {
        c = (c << 6) | (static_cast<unsigned char>(token[j + k]) & 0x3F);
      }
    }
    const auto b = n > 0 ? bytes.to_byte.find(c) : bytes.to_byte.end();
    if (b == bytes.to_byte.end()) {
      out.resize(size);
      return false;
    }
    out += static_cast<char>(b->second);
    j += n;
  }
  return true;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const std::size_t done = utf8_lossy_complete(bytes, out);
  if (done < bytes.size()) {
    out += "\xEF\xBF\xBD";  // a last sequence cut short is one maximal subpart
  }
  return out;
}

std::size_t utf8_lossy_complete(std::string_view bytes, std::string& out) {
  std::size_t i = 0;
  while (i < bytes.size()) {
    std::size_t prefix = 0;
    bool cut_short = false;
    const std::size_t n = utf8_sequence(bytes, i, prefix, &cut_short);
    if (cut_short) {
      break;
    }
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      i += prefix;
    } else {
      out.append(bytes.substr(i, n));
      i += n;
    }
  }
  return i;
}

}  // namespace cotensor::lm::detail
