#pragma once

// The inside of a cotensor::lm::chat_template (<cotensor/lm.hpp>): the values a template
// computes with (Python's, as Jinja sees them), the parsed tree, and the helpers that give
// values Python's behaviour. Parsed by chat_template_parse.cpp, rendered by chat_template.cpp,
// helpers in chat_template_value.cpp.

#include "cotensor/lm.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace cotensor::lm::jinja {

struct sequence;
struct mapping;

/// A value of a template: Jinja's Undefined, or a Python value (None, bool, int, float, str,
/// list, dict, a namespace).
struct value {
  enum class kind : std::uint8_t {
    undefined,
    none,
    boolean,
    integer,
    number,
    string,
    list,
    dict,
    ns
  };
  kind type = kind::undefined;
  bool boolean = false;
  bool tuple = false;  // a list that is a Python tuple (repr "(a, b)"; never equal to a list)
  std::int64_t integer = 0;
  double number = 0.0;
  std::string text;  // a string; for an undefined, why ("'x' is undefined")
  std::shared_ptr<const sequence> list;
  std::shared_ptr<mapping> dict;  // a dict (never changed once made) or a namespace (changed)

  static value undefined(std::string why) {
    value v;
    v.text = std::move(why);
    return v;
  }
  static value none() { return with(kind::none); }
  static value of(bool b) {
    value v = with(kind::boolean);
    v.boolean = b;
    return v;
  }
  static value of(std::int64_t i) {
    value v = with(kind::integer);
    v.integer = i;
    return v;
  }
  static value of(double d) {
    value v = with(kind::number);
    v.number = d;
    return v;
  }
  static value of(std::string s) {
    value v = with(kind::string);
    v.text = std::move(s);
    return v;
  }
  static value of_list(std::vector<value> items, bool tuple = false);
  static value of_dict(mapping m, bool is_namespace = false);

  bool is(kind k) const noexcept { return type == k; }
  bool is_number() const noexcept {
    return type == kind::boolean || type == kind::integer || type == kind::number;
  }

private:
  static value with(kind k) {
    value v;
    v.type = k;
    return v;
  }
};

struct sequence {
  std::vector<value> items;
};

struct mapping {
  struct entry {
    std::string key;
    value val;
  };
  std::vector<entry> entries;  // in insertion order, as Python's dict
  const value* find(std::string_view key) const;
  void set(std::string key, value v);
};

/// A node of the parsed tree: an expression or a statement. What `kids`, `name` and `keys` hold
/// depends on the kind (chat_template_parse.cpp says).
struct node {
  enum class kind : std::uint8_t {
    // expressions
    literal,
    name,
    attr,
    item,
    slice,
    call,
    filter,
    test,
    unary,
    binary,
    op_and,
    op_or,
    op_not,
    cond,
    list,
    dict,
    // statements
    text,
    output,
    if_,
    for_,
    set,
    set_attr,
    break_,
    continue_,
    block,
  };
  kind type = kind::literal;
  int line = 0;
  int column = 0;
  bool negated = false;  // a test's `is not`
  bool omitted = false;  // a literal standing for a part left out (a slice's bound)
  std::string name;      // a name, an operator, a filter or test, a text
  value lit;             // a literal's value
  std::vector<node> kids;
  std::vector<std::string> keys;  // keyword names of a call's arguments ("" when positional);
                                  // a for loop's target names; set_attr's attribute

  static node at(kind k, int line, int column, std::string name) {
    node n;
    n.type = k;
    n.line = line;
    n.column = column;
    n.name = std::move(name);
    return n;
  }
};

/// "chat_template: line L, column C: " and `what`.
std::string where(int line, int column, std::string_view what);

/// Python's str(v) (Jinja's output of a value; an undefined prints nothing).
std::string to_str(const value& v);
/// Python's repr(v).
std::string repr(const value& v);
/// Python's bool(v).
bool truthy(const value& v);
/// Python's `a == b`.
bool equal(const value& a, const value& b);
/// Python's `a < b`; nothing where Python raises TypeError.
std::optional<bool> less(const value& a, const value& b);
/// The Python type name of `v` ("str", "int", "dict", "NoneType", "Undefined").
std::string type_name(const value& v);
/// transformers' tojson: json.dumps(v, ensure_ascii=..., indent=..., sort_keys=...); throws
/// std::invalid_argument for a value JSON cannot hold.
std::string to_json(const value& v, bool ensure_ascii, std::optional<int> indent, bool sort_keys);

/// The code point at `s[i]` and its length in bytes in `n`; a byte that starts no valid UTF-8
/// character stands for itself.
std::uint32_t code_point(std::string_view s, std::size_t i, std::size_t& n);
/// Whether `c` is Python whitespace (str.isspace).
bool py_space(std::uint32_t c);
/// The byte offset of each character (code point) of UTF-8 `s`, and `s.size()` last.
std::vector<std::size_t> char_offsets(std::string_view s);
/// Whether the code point at `s[i]` (its length in `n`) is Python whitespace (str.isspace).
bool space_at(std::string_view s, std::size_t i, std::size_t& n);
/// Python's s.strip(chars) (chars none: whitespace), at the left, right or both.
std::string strip(std::string_view s, const std::string* chars, bool left, bool right);
/// Python's s.upper(), s.lower(), s.capitalize(), s.title().
std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string capitalize(std::string_view s);
std::string title(std::string_view s);
/// Python's s.split(sep, maxsplit) (sep none: runs of whitespace).
std::vector<std::string> split(std::string_view s, const std::string* sep, std::int64_t maxsplit);
/// Python's s.replace(old, new, count).
std::string
replace(std::string_view s, std::string_view old, std::string_view with, std::int64_t count);

/// A parse error: std::invalid_argument with `where`'s prefix.
[[noreturn]] void refuse_at(int line, int column, std::string_view what);

/// A call's arguments, evaluated: positional, then by keyword.
struct arguments {
  std::vector<value> positional;
  std::vector<mapping::entry> named;
  /// The argument at `index` or called `name`; null if neither is given.
  const value* get(std::size_t index, std::string_view name) const;
};

/// A render error at `at`: std::runtime_error with `where`'s prefix.
[[noreturn]] void fail(const node& at, std::string_view what);
/// The error of using the undefined `u` at `at` (its reason, as "'x' is undefined").
[[noreturn]] void fail_undefined(const node& at, const value& u);
/// The items a for loop or a filter walks over: a list's items, a dict's keys, a string's
/// characters, nothing for an undefined; fails for anything else.
std::vector<value> iterate(const node& at, const value& v);
/// `obj.name` and `obj[key]` as Jinja's sandbox looks them up (missing: an undefined).
value get_attr(const node& at, const value& obj, std::string_view name);
value get_item(const node& at, const value& obj, const value& key);
/// The text of an optional argument (`otherwise` when absent): Python's str().
std::string text_of(const value* v, std::string otherwise = {});
/// An optional integer argument (`otherwise` when absent or none); fails for another type.
std::int64_t whole(const node& at, const value* v, std::int64_t otherwise);
/// A dict's items as a list of (key, value) tuples.
value pairs(const mapping& m);
/// Whether `name` is a builtin `what` ("filter", "test", "method", "function") of the subset.
bool known(std::string_view what, std::string_view name);
/// The builtins of chat_template_builtins.cpp: `v | name(args)`, `v is name(args)`,
/// `obj.name(args)` and the global functions (`raise_exception`, ...).
value apply_filter(const node& at, std::string_view name, const value& v, const arguments& a);
bool apply_test(const node& at, std::string_view name, const value& v, const arguments& a);
value call_method(const node& at, const value& obj, std::string_view name, const arguments& a);
value call_function(const node& at, std::string_view name, const arguments& a);

}  // namespace cotensor::lm::jinja

namespace cotensor::lm {

struct chat_template::impl {
  std::string source;
  jinja::node root;  // a block
  /// Renders with undefined `bos_token` or `eos_token` where they are null.
  std::string render(std::span<const chat_message> messages,
                     bool add_generation_prompt,
                     const std::string* bos_token,
                     const std::string* eos_token) const;
};

}  // namespace cotensor::lm
