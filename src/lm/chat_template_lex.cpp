// The lexer of chat_template::parse (<cotensor/lm.hpp>): Jinja's, with transformers' settings
// (trim_blocks, lstrip_blocks, a single trailing newline dropped, newlines made "\n"), giving
// the text between tags (whitespace control applied) and the tokens of each tag.

#include "lm/chat_template_lex.hpp"

#include "support/utf8.hpp"

#include <algorithm>
#include <array>

namespace cotensor::lm::jinja {

namespace {

bool name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool digit(char c) { return c >= '0' && c <= '9'; }
bool tag_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

class lexer {
public:
  explicit lexer(std::string_view source) {
    // Newlines as "\n", and one trailing newline dropped (keep_trailing_newline=False).
    for (std::size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') {
          ++i;
        }
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') {
      src_.pop_back();
    }
    line_starts_.push_back(0);
    for (std::size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') {
        line_starts_.push_back(i + 1);
      }
    }
  }

  std::vector<token> run() {
    std::size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      std::size_t tag = pos;
      while ((tag = src_.find('{', tag)) != std::string::npos &&
             (tag + 1 >= src_.size() ||
              std::string_view("{%#").find(src_[tag + 1]) == std::string_view::npos)) {
        ++tag;
      }
      if (tag == std::string::npos) {
        emit_data(pos, src_.substr(pos));
        break;
      }
      std::string text = src_.substr(pos, tag - pos);
      const char kind = src_[tag + 1];
      const char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+')
                            ? src_[tag + 2]
                            : '\0';
      if (sign == '-') {
        text = strip(text, nullptr, false, true);
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: the spaces between a line's start and a block or comment tag.
        const std::size_t l_pos = text.rfind('\n') + 1;  // npos + 1 == 0
        if ((l_pos > 0 || line_starting) && l_pos < text.size() && all_space(text, l_pos)) {
          text.resize(l_pos);
        }
      }
      emit_data(pos, std::move(text));
      std::size_t p = tag + 2 + (sign != '\0' ? 1 : 0);
      if (kind == '#') {
        const std::size_t end = comment_end(p);
        if (end == std::string::npos) {
          fail(tag, "the comment is not closed (no '#}')");
        }
        line_starting = src_[end - 1] == '\n';
        pos = end;
        continue;
      }
      const bool block = kind == '%';
      push(block ? token::kind::block_begin : token::kind::var_begin, tag, "");
      pos = tag_body(tag, p, block);
      line_starting = src_[pos - 1] == '\n';
    }
    push(token::kind::eof, src_.size(), "");
    return std::move(out_);
  }

private:
  bool all_space(std::string_view s, std::size_t from) const {
    std::size_t n = 0;
    for (std::size_t i = from; i < s.size(); i += n) {
      if (!space_at(s, i, n)) {
        return false;
      }
    }
    return true;
  }

  std::size_t skip_space(std::size_t p) const {
    std::size_t n = 0;
    while (p < src_.size() && space_at(src_, p, n)) {
      p += n;
    }
    return p;
  }

  std::size_t comment_end(std::size_t p) const {
    for (; p + 1 < src_.size(); ++p) {
      if (src_.compare(p, 3, "+#}") == 0) {
        return p + 3;
      }
      if (src_.compare(p, 3, "-#}") == 0) {
        return skip_space(p + 3);
      }
      if (src_.compare(p, 2, "#}") == 0) {
        return p + 2 + (p + 2 < src_.size() && src_[p + 2] == '\n' ? 1 : 0);
      }
    }
    return std::string::npos;
  }

  // The tokens of a tag from `p` (after its opening) to its end; returns the offset past it.
  std::size_t tag_body(std::size_t tag, std::size_t p, bool block) {
    std::vector<char> balance;
    while (true) {
      if (p >= src_.size()) {
        fail(tag, block ? "the tag '{%' is not closed (no '%}')"
                        : "the tag '{{' is not closed "
                          "(no '}}')");
      }
      if (balance.empty()) {
        std::size_t end = std::string::npos;
        if (block && src_.compare(p, 3, "+%}") == 0) {
          end = p + 3;
        } else if (src_.compare(p, 3, block ? "-%}" : "-}}") == 0) {
          end = skip_space(p + 3);
        } else if (src_.compare(p, 2, block ? "%}" : "}}") == 0) {
          end = p + 2 + (block && p + 2 < src_.size() && src_[p + 2] == '\n' ? 1 : 0);
        }
        if (end != std::string::npos) {
          push(block ? token::kind::block_end : token::kind::var_end, p, "");
          return end;
        }
      }
      const char c = src_[p];
      if (tag_space(c)) {
        ++p;
      } else if (digit(c)) {
        p = lex_number(p);
      } else if (name_start(c)) {
        std::size_t e = p;
        while (e < src_.size() && (name_start(src_[e]) || digit(src_[e]))) {
          ++e;
        }
        push(token::kind::name, p, src_.substr(p, e - p));
        p = e;
      } else if (c == '\'' || c == '"') {
        p = lex_string(p);
      } else {
        static constexpr std::array<std::string_view, 6> two{"//", "**", "==", "!=", ">=", "<="};
        const auto it = std::find_if(
            two.begin(), two.end(), [&](std::string_view o) { return src_.compare(p, 2, o) == 0; });
        if (it != two.end()) {
          push(token::kind::op, p, std::string(*it));
          p += 2;
          continue;
        }
        if (std::string_view("+-*/%~[](){},.:|=<>;").find(c) == std::string_view::npos) {
          fail(p, "unexpected character '" + std::string(1, c) + "'");
        }
        if (c == '(' || c == '[' || c == '{') {
          balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
        } else if (c == ')' || c == ']' || c == '}') {
          if (balance.empty() || balance.back() != c) {
            fail(p, "unexpected '" + std::string(1, c) + "'");
          }
          balance.pop_back();
        }
        push(token::kind::op, p, std::string(1, c));
        ++p;
      }
    }
  }

  std::size_t lex_number(std::size_t p) {
    std::size_t e = p;
    while (e < src_.size() && (digit(src_[e]) || src_[e] == '_')) {
      ++e;
    }
    bool floating = false;
    if (e + 1 < src_.size() && src_[e] == '.' && digit(src_[e + 1])) {
      floating = true;
      for (++e; e < src_.size() && (digit(src_[e]) || src_[e] == '_');) {
        ++e;
      }
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      std::size_t x = e + 1;
      if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) {
        ++x;
      }
      if (x < src_.size() && digit(src_[x])) {
        floating = true;
        for (e = x; e < src_.size() && digit(src_[e]);) {
          ++e;
        }
      }
    }
    std::string text = src_.substr(p, e - p);
    std::erase(text, '_');
    push(floating ? token::kind::number : token::kind::integer, p, text);
    try {
      if (floating) {
        out_.back().number = std::stod(text);
      } else {
        out_.back().integer = std::stoll(text);
      }
    } catch (const std::exception&) {
      fail(p, "the number " + text + " is out of range");
    }
    return e;
  }

  // A string literal, unescaped as Python's "unicode-escape" does.
  std::size_t lex_string(std::size_t p) {
    const char quote = src_[p];
    std::string s;
    std::size_t i = p + 1;
    for (; i < src_.size() && src_[i] != quote; ++i) {
      if (src_[i] != '\\') {
        s += src_[i];
        continue;
      }
      if (++i >= src_.size()) {
        break;
      }
      const char e = src_[i];
      const auto hex = [&](int digits) {
        std::uint32_t cp = 0;
        for (int k = 0; k < digits; ++k) {
          const char h = i + 1 < src_.size() ? src_[++i] : '\0';
          const int v = digit(h)                 ? h - '0'
                        : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                        : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                                 : -1;
          if (v < 0) {
            fail(i, "a truncated \\x, \\u or \\U escape");
          }
          cp = cp * 16 + static_cast<std::uint32_t>(v);
        }
        cotensor::detail::append_utf8(s, cp);
      };
      switch (e) {
      case '\n':
        break;
      case '\\':
        s += '\\';
        break;
      case '\'':
        s += '\'';
        break;
      case '"':
        s += '"';
        break;
      case 'a':
        s += '\a';
        break;
      case 'b':
        s += '\b';
        break;
      case 'f':
        s += '\f';
        break;
      case 'n':
        s += '\n';
        break;
      case 'r':
        s += '\r';
        break;
      case 't':
        s += '\t';
        break;
      case 'v':
        s += '\v';
        break;
      case 'x':
        hex(2);
        break;
      case 'u':
        hex(4);
        break;
      case 'U':
        hex(8);
        break;
      default:
        if (e >= '0' && e <= '7') {
          std::uint32_t cp = static_cast<std::uint32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < src_.size() && src_[i + 1] >= '0' && src_[i + 1] <= '7';
               ++k) {
            cp = cp * 8 + static_cast<std::uint32_t>(src_[++i] - '0');
          }
          cotensor::detail::append_utf8(s, cp);
        } else {
          s += '\\';
          s += e;
        }
      }
    }
    if (i >= src_.size()) {
      fail(p, "the string is not closed");
    }
    push(token::kind::string, p, std::move(s));
    return i + 1;
  }

  void emit_data(std::size_t at, std::string text) {
    if (!text.empty()) {
      push(token::kind::data, at, std::move(text));
    }
  }

  void push(token::kind k, std::size_t at, std::string text) {
    token t;
    t.type = k;
    t.text = std::move(text);
    position(at, t.line, t.column);
    out_.push_back(std::move(t));
  }

  void position(std::size_t at, int& line, int& column) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), at) - 1;
    line = static_cast<int>(it - line_starts_.begin()) + 1;
    column = 1;
    for (std::size_t i = *it; i < at && i < src_.size(); ++i) {
      column += (static_cast<unsigned char>(src_[i]) & 0xC0) != 0x80 ? 1 : 0;
    }
  }

  [[noreturn]] void fail(std::size_t at, std::string_view what) const {
    int line = 0;
    int column = 0;
    position(at, line, column);
    refuse_at(line, column, what);
  }

  std::string src_;
  std::vector<std::size_t> line_starts_;
  std::vector<token> out_;
};

}  // namespace

std::vector<token> lex(std::string_view source) { return lexer(source).run(); }

std::string describe(const token& t) {
  using tk = token::kind;
  switch (t.type) {
  case tk::op:
  case tk::name:
    return "'" + t.text + "'";
  case tk::string:
    return "a string";
  case tk::integer:
  case tk::number:
    return "a number";
  case tk::var_end:
  case tk::block_end:
    return "the end of the tag";
  case tk::eof:
    return "the end of the template";
  default:
    return "text";
  }
}

void refuse_at(int line, int column, std::string_view what) {
  throw std::invalid_argument(where(line, column, what));
}

}  // namespace cotensor::lm::jinja
