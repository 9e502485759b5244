#pragma once

// The tokens of a chat template (chat_template_lex.cpp makes them, chat_template_parse.cpp reads
// them).

#include "lm/chat_template_value.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cotensor::lm::jinja {

/// A token: text between tags, a tag's opening or end, or a token inside a tag.
struct token {
  enum class kind : std::uint8_t {
    data,
    var_begin,
    var_end,
    block_begin,
    block_end,
    name,
    string,
    integer,
    number,
    op,
    eof
  };
  kind type = kind::eof;
  std::string text;
  int line = 0;
  int column = 0;
  std::int64_t integer = 0;
  double number = 0.0;
};

/// The tokens of `source`, ending with `eof`; throws std::invalid_argument (refuse_at) for a
/// tag, comment or string not closed, or a character no token starts with.
std::vector<token> lex(std::string_view source);

/// `t` in an error message: "'name'", "a string", "the end of the tag", ...
std::string describe(const token& t);

}  // namespace cotensor::lm::jinja
