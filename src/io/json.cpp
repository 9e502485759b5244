#include "io/json.hpp"

#include "support/utf8.hpp"

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace cotensor::detail::json {

namespace {

constexpr int max_depth = 64;

class parser {
public:
  explicit parser(std::string_view text) : text_(text) {}

  value parse_document() {
    skip_space();
    value v = parse_value(0);
    skip_space();
    if (pos_ != text_.size()) {
      fail("unexpected text after the value");
    }
    return v;
  }

private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("byte " + std::to_string(pos_) + ": " + what);
  }
  bool at_end() const noexcept { return pos_ >= text_.size(); }
  char peek() const noexcept { return at_end() ? '\0' : text_[pos_]; }
  void skip_space() noexcept {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) {
      ++pos_;
    }
  }
  void expect(char c) {
    if (peek() != c || at_end()) {
      fail(std::string("expected '") + c + "'");
    }
    ++pos_;
  }
  void expect_word(std::string_view w) {
    if (text_.substr(pos_, w.size()) != w) {
      fail("expected a JSON value");
    }
    pos_ += w.size();
  }

  // The elements of an object or an array, from its opening bracket to `close`: `element`
  // parses one, from its first character; the spaces and commas around them are read here.
  template <class F>
  void parse_elements(char close, F&& element) {
    ++pos_;
    skip_space();
    if (peek() == close) {
      ++pos_;
      return;
    }
    for (;;) {
      skip_space();
      element();
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect(close);
      return;
    }
  }

  value parse_value(int depth) {
    if (depth > max_depth) {
      fail("nested deeper than 64");
    }
    value v;
    switch (peek()) {
    case '{':
      v.type = value::kind::object;
      parse_elements('}', [&] {
        if (peek() != '"') {
          fail("expected a member name");
        }
        std::string key = parse_string();
        skip_space();
        expect(':');
        skip_space();
        v.members.push_back(value::member{std::move(key), parse_value(depth + 1)});
      });
      return v;
    case '[':
      v.type = value::kind::array;
      parse_elements(']', [&] { v.items.push_back(parse_value(depth + 1)); });
      return v;
    case '"':
      v.type = value::kind::string;
      v.text = parse_string();
      return v;
    case 't':
      expect_word("true");
      v.type = value::kind::boolean;
      v.boolean = true;
      return v;
    case 'f':
      expect_word("false");
      v.type = value::kind::boolean;
      return v;
    case 'n':
      expect_word("null");
      return v;
    default:
      v.type = value::kind::number;
      v.text = parse_number();
      return v;
    }
  }

  static bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }

  std::string parse_number() {
    const std::size_t start = pos_;
    if (peek() == '-') {
      ++pos_;
    }
    if (peek() == '0') {
      ++pos_;
    } else if (is_digit(peek()) && !at_end()) {
      while (!at_end() && is_digit(peek())) {
        ++pos_;
      }
    } else {
      fail("expected a JSON value");
    }
    if (peek() == '.' && !at_end()) {
      ++pos_;
      if (at_end() || !is_digit(peek())) {
        fail("expected a digit");
      }
      while (!at_end() && is_digit(peek())) {
        ++pos_;
      }
    }
    if (!at_end() && (peek() == 'e' || peek() == 'E')) {
      ++pos_;
      if (peek() == '+' || peek() == '-') {
        ++pos_;
      }
      if (at_end() || !is_digit(peek())) {
        fail("expected a digit");
      }
      while (!at_end() && is_digit(peek())) {
        ++pos_;
      }
    }
    return std::string(text_.substr(start, pos_ - start));
  }

  unsigned hex4() {
    unsigned u = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = peek();
      if (at_end()) {
        fail("truncated \\u escape");
      }
      u <<= 4U;
      if (c >= '0' && c <= '9') {
        u |= static_cast<unsigned>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        u |= static_cast<unsigned>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        u |= static_cast<unsigned>(c - 'A' + 10);
      } else {
        fail("bad \\u escape");
      }
      ++pos_;
    }
    return u;
  }

  std::string parse_string() {
    expect('"');
    std::string out;
    for (;;) {
      if (at_end()) {
        fail("unterminated string");
      }
      const char c = text_[pos_++];
      if (c == '"') {
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) {
        fail("control character in a string");
      }
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_end()) {
        fail("unterminated string");
      }
      const char e = text_[pos_++];
      switch (e) {
      case '"':
      case '\\':
      case '/':
        out += e;
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        unsigned cp = hex4();
        if (cp >= 0xD800 && cp < 0xDC00) {
          if (text_.substr(pos_, 2) != "\\u") {
            fail("unpaired surrogate");
          }
          pos_ += 2;
          const unsigned low = hex4();
          if (low < 0xDC00 || low >= 0xE000) {
            fail("unpaired surrogate");
          }
          cp = 0x10000 + ((cp - 0xD800) << 10U) + (low - 0xDC00);
        } else if (cp >= 0xDC00 && cp < 0xE000) {
          fail("unpaired surrogate");
        }
        append_utf8(out, static_cast<char32_t>(cp));
        break;
      }
      default:
        fail("bad escape");
      }
    }
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

}  // namespace

std::optional<std::int64_t> value::as_index() const {
  if (type != kind::number || text.empty() || text.size() > 19) {
    return std::nullopt;
  }
  std::int64_t n = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') {
      return std::nullopt;  // negative, fractional or exponent form
    }
    const auto digit = static_cast<std::int64_t>(c - '0');
    if (n > (INT64_MAX - digit) / 10) {
      return std::nullopt;
    }
    n = n * 10 + digit;
  }
  return n;
}

const value* value::find(std::string_view key) const {
  for (const auto& [k, v] : members) {
    if (k == key) {
      return &v;
    }
  }
  return nullptr;
}

value parse(std::string_view text) { return parser(text).parse_document(); }

std::string quote(std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out = "\"";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      out += "\\u00";
      out += hex[u >> 4U];
      out += hex[u & 0xFU];
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

value parse_file(const std::filesystem::path& file, std::string_view who) {
  const auto fail = [&](const std::string& what) {
    throw std::runtime_error(std::string(who) + ": " + file.string() + ": " + what);
  };
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    fail("cannot open it");
  }
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return parse(text.str());
  } catch (const std::exception& e) {
    fail(std::string("not JSON: ") + e.what());
  }
  return {};  // not reached: fail throws
}

}  // namespace cotensor::detail::json
