// The builtins of a chat template (chat_template_value.hpp): Jinja's filters and tests of the
// subset, attribute and item lookup. The methods and functions are in chat_template_text.cpp.

#include "lm/chat_template_value.hpp"

#include <algorithm>
#include <cmath>
#include <set>

namespace cotensor::lm::jinja {

const value* arguments::get(std::size_t index, std::string_view name) const {
  if (index < positional.size()) {
    return &positional[index];
  }
  for (const auto& e : named) {
    if (e.key == name) {
      return &e.val;
    }
  }
  return nullptr;
}

void fail(const node& at, std::string_view what) {
  throw std::runtime_error(where(at.line, at.column, what));
}

void fail_undefined(const node& at, const value& u) {
  fail(at, u.text.empty() ? "an undefined value is used" : u.text);
}

namespace {

std::string object_name(const value& v) { return "'" + type_name(v) + " object'"; }

}  // namespace

std::string text_of(const value* v, std::string otherwise) {
  return v == nullptr ? otherwise : to_str(*v);
}

std::int64_t whole(const node& at, const value* v, std::int64_t otherwise) {
  if (v == nullptr || v->is(value::kind::none)) {
    return otherwise;
  }
  if (v->is(value::kind::integer) || v->is(value::kind::boolean)) {
    return v->is(value::kind::boolean) ? v->boolean : v->integer;
  }
  fail(at, "an integer is expected, not " + type_name(*v));
}

std::int64_t length(const node& at, const value& v) {
  switch (v.type) {
  case value::kind::undefined:
    return 0;
  case value::kind::string:
    return static_cast<std::int64_t>(char_offsets(v.text).size()) - 1;
  case value::kind::list:
    return static_cast<std::int64_t>(v.list->items.size());
  case value::kind::dict:
    return static_cast<std::int64_t>(v.dict->entries.size());
  default:
    fail(at, "object of type '" + type_name(v) + "' has no len()");
  }
}

bool contains(const node& at, const value& seq, const value& x) {
  switch (seq.type) {
  case value::kind::undefined:
    return false;
  case value::kind::string:
    if (!x.is(value::kind::string)) {
      fail(at, "'in <string>' requires string as left operand, not " + type_name(x));
    }
    return seq.text.find(x.text) != std::string::npos;
  case value::kind::list:
    return std::any_of(seq.list->items.begin(), seq.list->items.end(),
                       [&](const value& v) { return equal(v, x); });
  case value::kind::dict:
    return x.is(value::kind::string) && seq.dict->find(x.text) != nullptr;
  default:
    fail(at, "argument of type '" + type_name(seq) + "' is not iterable");
  }
}

value pairs(const mapping& m) {
  std::vector<value> out;
  for (const auto& e : m.entries) {
    out.push_back(value::of_list({value::of(e.key), e.val}, true));
  }
  return value::of_list(std::move(out));
}

namespace {

// select/reject/selectattr/rejectattr: the items whose (attribute's) test is `keep`.
value select(const node& at, const value& v, const arguments& a, bool by_attr, bool keep) {
  std::size_t first = 0;
  std::string attribute;
  if (by_attr) {
    attribute = text_of(a.get(0, "attribute"));
    first = 1;
  }
  const value* test = a.get(first, "");
  arguments rest;
  for (std::size_t i = first + 1; i < a.positional.size(); ++i) {
    rest.positional.push_back(a.positional[i]);
  }
  std::vector<value> out;
  for (const value& item : iterate(at, v)) {
    const value x = by_attr ? get_attr(at, item, attribute) : item;
    const bool pass = test == nullptr ? truthy(x) : apply_test(at, to_str(*test), x, rest);
    if (pass == keep) {
      out.push_back(item);
    }
  }
  return value::of_list(std::move(out));
}

}  // namespace

bool known(std::string_view what, std::string_view name) {
  static const std::set<std::string, std::less<>> filters{
      "abs",        "capitalize", "count",  "default",    "d",      "first",  "float", "int",
      "items",      "join",       "last",   "length",     "list",   "lower",  "map",   "reject",
      "rejectattr", "replace",    "select", "selectattr", "string", "tojson", "trim",  "upper"};
  static const std::set<std::string, std::less<>> tests{
      "boolean", "defined", "divisibleby", "eq",       "equalto", "==",       "even", "false",
      "float",   "in",      "integer",     "iterable", "mapping", "ne",       "!=",   "none",
      "number",  "odd",     "sequence",    "string",   "true",    "undefined"};
  static const std::set<std::string, std::less<>> methods{
      "strip", "lstrip", "rstrip",  "startswith", "endswith",   "split",
      "upper", "lower",  "replace", "title",      "capitalize", "join",
      "find",  "count",  "get",     "items",      "keys",       "values"};
  static const std::set<std::string, std::less<>> functions{"raise_exception", "strftime_now",
                                                            "namespace", "range", "dict"};
  const auto& set = what == "filter"   ? filters
                    : what == "test"   ? tests
                    : what == "method" ? methods
                                       : functions;
  return set.contains(name);
}

std::vector<value> iterate(const node& at, const value& v) {
  switch (v.type) {
  case value::kind::undefined:
    return {};
  case value::kind::list:
    return v.list->items;
  case value::kind::dict: {
    std::vector<value> keys;
    for (const auto& e : v.dict->entries) {
      keys.push_back(value::of(e.key));
    }
    return keys;
  }
  case value::kind::string: {
    std::vector<value> chars;
    const std::vector<std::size_t> at_ = char_offsets(v.text);
    for (std::size_t i = 0; i + 1 < at_.size(); ++i) {
      chars.push_back(value::of(v.text.substr(at_[i], at_[i + 1] - at_[i])));
    }
    return chars;
  }
  default:
    fail(at, "'" + type_name(v) + "' object is not iterable");
  }
}

value get_attr(const node& at, const value& obj, std::string_view name) {
  if (obj.is(value::kind::undefined)) {
    fail_undefined(at, obj);
  }
  if (obj.is(value::kind::dict) || obj.is(value::kind::ns)) {
    if (const value* v = obj.dict->find(name)) {
      return *v;
    }
  }
  return value::undefined(object_name(obj) + " has no attribute '" + std::string(name) + "'");
}

value get_item(const node& at, const value& obj, const value& key) {
  if (obj.is(value::kind::undefined)) {
    fail_undefined(at, obj);
  }
  if ((obj.is(value::kind::dict) || obj.is(value::kind::ns)) && key.is(value::kind::string)) {
    return get_attr(at, obj, key.text);
  }
  if ((obj.is(value::kind::list) || obj.is(value::kind::string)) &&
      (key.is(value::kind::integer) || key.is(value::kind::boolean))) {
    const std::int64_t n = length(at, obj);
    std::int64_t i = key.is(value::kind::boolean) ? key.boolean : key.integer;
    i = i < 0 ? i + n : i;
    if (i >= 0 && i < n) {
      if (obj.is(value::kind::list)) {
        return obj.list->items[static_cast<std::size_t>(i)];
      }
      const std::vector<std::size_t> off = char_offsets(obj.text);
      const auto k = static_cast<std::size_t>(i);
      return value::of(obj.text.substr(off[k], off[k + 1] - off[k]));
    }
  }
  return value::undefined(object_name(obj) + " has no element " + repr(key));
}

value apply_filter(const node& at, std::string_view name, const value& v, const arguments& a) {
  using kind = value::kind;
  const auto text = [&] { return to_str(v); };
  if (name == "trim") {
    const value* chars = a.get(0, "chars");
    const std::string set = chars != nullptr && !chars->is(kind::none) ? to_str(*chars) : "";
    return value::of(
        strip(text(), chars != nullptr && !chars->is(kind::none) ? &set : nullptr, true, true));
  }
  if (name == "length" || name == "count") {
    return value::of(length(at, v));
  }
  if (name == "upper" || name == "lower" || name == "capitalize" || name == "string") {
    return value::of(name == "upper"    ? upper(text())
                     : name == "lower"  ? lower(text())
                     : name == "string" ? text()
                                        : capitalize(text()));
  }
  if (name == "replace") {
    return value::of(replace(text(), text_of(a.get(0, "old")), text_of(a.get(1, "new")),
                             whole(at, a.get(2, "count"), -1)));
  }
  if (name == "default" || name == "d") {
    const value* otherwise = a.get(0, "default_value");
    const value* boolean = a.get(1, "boolean");
    const bool use =
        v.is(kind::undefined) || (boolean != nullptr && truthy(*boolean) && !truthy(v));
    return use ? (otherwise != nullptr ? *otherwise : value::of(std::string())) : v;
  }
  if (name == "tojson") {
    const value* ascii = a.get(0, "ensure_ascii");
    const value* indent = a.get(1, "indent");
    const value* sort = a.get(3, "sort_keys");
    if (a.get(2, "separators") != nullptr && !a.get(2, "separators")->is(kind::none)) {
      fail(at, "tojson's separators are not supported");
    }
    try {
      return value::of(to_json(v, ascii != nullptr && truthy(*ascii),
                               indent != nullptr && !indent->is(kind::none)
                                   ? std::optional<int>(static_cast<int>(whole(at, indent, 0)))
                                   : std::nullopt,
                               sort != nullptr && truthy(*sort)));
    } catch (const std::invalid_argument& e) {
      fail(at, e.what());
    }
  }
  if (name == "join") {
    const std::string sep = text_of(a.get(0, "d"));
    const value* attribute = a.get(1, "attribute");
    std::string out;
    bool first = true;
    for (const value& item : iterate(at, v)) {
      out += first ? "" : sep;
      out += to_str(attribute != nullptr ? get_attr(at, item, to_str(*attribute)) : item);
      first = false;
    }
    return value::of(std::move(out));
  }
  if (name == "first" || name == "last") {
    const std::vector<value> items = iterate(at, v);
    if (items.empty()) {
      return value::undefined("No " + std::string(name) + " item, sequence was empty.");
    }
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") {
    return value::of_list(iterate(at, v));
  }
  if (name == "items") {
    if (v.is(kind::undefined)) {
      return value::of_list({});
    }
    if (!v.is(kind::dict)) {
      fail(at, "Can only get item pairs from a mapping.");
    }
    return pairs(*v.dict);
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    return select(at, v, a, name.ends_with("attr"), name.starts_with("select"));
  }
  if (name == "map") {
    std::vector<value> out;
    const value* attribute = a.get(99, "attribute");
    for (const value& item : iterate(at, v)) {
      if (attribute != nullptr) {
        value x = get_attr(at, item, to_str(*attribute));
        const value* otherwise = a.get(99, "default");
        out.push_back(x.is(kind::undefined) && otherwise != nullptr ? *otherwise : x);
      } else if (!a.positional.empty()) {
        arguments rest;
        rest.positional.assign(a.positional.begin() + 1, a.positional.end());
        const std::string filter = to_str(a.positional[0]);
        if (filter == "map" || filter == "select" || filter == "reject" ||
            filter.ends_with("attr") ||
            std::string_view("trim length count upper lower capitalize string replace default "
                             "d tojson join first last list items abs int float")
                    .find(filter) == std::string_view::npos) {
          fail(at, "the filter '" + filter + "' is not supported in map");
        }
        out.push_back(apply_filter(at, filter, item, rest));
      } else {
        out.push_back(item);
      }
    }
    return value::of_list(std::move(out));
  }
  if (name == "abs") {
    if (v.is(kind::number)) {
      return value::of(std::fabs(v.number));
    }
    if (v.is(kind::integer) || v.is(kind::boolean)) {
      return value::of(std::abs(whole(at, &v, 0)));
    }
    fail(at, "bad operand type for abs(): '" + type_name(v) + "'");
  }
  if (name == "int" || name == "float") {
    const bool as_int = name == "int";
    const value* otherwise = a.get(0, "default");
    const value fallback = otherwise != nullptr ? *otherwise
                           : as_int             ? value::of(std::int64_t{0})
                                                : value::of(0.0);
    double d = 0;
    if (v.is(kind::integer) || v.is(kind::boolean)) {
      d = static_cast<double>(whole(at, &v, 0));
    } else if (v.is(kind::number)) {
      d = v.number;
    } else if (v.is(kind::string)) {
      const std::string s = strip(v.text, nullptr, true, true);
      try {
        std::size_t used = 0;
        d = std::stod(s, &used);
        if (used != s.size()) {
          return fallback;
        }
      } catch (const std::exception&) {
        return fallback;
      }
    } else {
      return fallback;
    }
    return as_int ? value::of(static_cast<std::int64_t>(d)) : value::of(d);
  }
  fail(at, "the filter '" + std::string(name) + "' is not supported");
}

bool apply_test(const node& at, std::string_view name, const value& v, const arguments& a) {
  using kind = value::kind;
  const value* arg = a.get(0, "");
  const auto need_arg = [&]() -> const value& {
    if (arg == nullptr) {
      fail(at, "the test '" + std::string(name) + "' takes an argument");
    }
    return *arg;
  };
  if (name == "defined" || name == "undefined") {
    return v.is(kind::undefined) == (name == "undefined");
  }
  if (name == "none") {
    return v.is(kind::none);
  }
  if (name == "boolean") {
    return v.is(kind::boolean);
  }
  if (name == "true" || name == "false") {
    return v.is(kind::boolean) && v.boolean == (name == "true");
  }
  if (name == "integer") {
    return v.is(kind::integer);
  }
  if (name == "float") {
    return v.is(kind::number);
  }
  if (name == "number") {
    return v.is_number();
  }
  if (name == "string") {
    return v.is(kind::string);
  }
  if (name == "mapping") {
    return v.is(kind::dict);
  }
  if (name == "iterable" || name == "sequence") {
    return v.is(kind::undefined) || v.is(kind::string) || v.is(kind::list) || v.is(kind::dict);
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    const std::int64_t n = whole(at, &v, 0);
    const std::int64_t by = name == "divisibleby" ? whole(at, &need_arg(), 1) : 2;
    if (by == 0) {
      fail(at, "integer division or modulo by zero");
    }
    return name == "odd" ? n % 2 != 0 : n % by == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") {
    return equal(v, need_arg());
  }
  if (name == "ne" || name == "!=") {
    return !equal(v, need_arg());
  }
  if (name == "in") {
    return contains(at, need_arg(), v);
  }
  fail(at, "the test '" + std::string(name) + "' is not supported");
}

}  // namespace cotensor::lm::jinja
