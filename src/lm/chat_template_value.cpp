// The values of a chat template behaving as Python's (chat_template_value.hpp): str(), repr(),
// truth, equality and order, json.dumps.

#include "lm/chat_template_value.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace cotensor::lm::jinja {

value value::of_list(std::vector<value> items, bool tuple) {
  value v = with(kind::list);
  v.tuple = tuple;
  v.list = std::make_shared<const sequence>(sequence{std::move(items)});
  return v;
}

value value::of_dict(mapping m, bool is_namespace) {
  value v = with(is_namespace ? kind::ns : kind::dict);
  v.dict = std::make_shared<mapping>(std::move(m));
  return v;
}

const value* mapping::find(std::string_view key) const {
  for (const entry& e : entries) {
    if (e.key == key) {
      return &e.val;
    }
  }
  return nullptr;
}

void mapping::set(std::string key, value v) {
  for (entry& e : entries) {
    if (e.key == key) {
      e.val = std::move(v);
      return;
    }
  }
  entries.push_back({std::move(key), std::move(v)});
}

std::string where(int line, int column, std::string_view what) {
  return "chat_template: line " + std::to_string(line) + ", column " + std::to_string(column) +
         ": " + std::string(what);
}

namespace {

std::string float_repr(double d) {
  if (std::isnan(d)) {
    return "nan";
  }
  if (std::isinf(d)) {
    return d < 0 ? "-inf" : "inf";
  }
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  const std::string sci(buf, r.ptr);
  const std::size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  const bool neg = mant[0] == '-';
  if (neg) {
    mant.erase(0, 1);
  }
  std::string digits = mant.substr(0, 1) + (mant.size() > 2 ? mant.substr(2) : "");
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<std::size_t>(exp) + 1 >= digits.size()) {
      out += digits + std::string(static_cast<std::size_t>(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<std::size_t>(exp) + 1) + "." +
             digits.substr(static_cast<std::size_t>(exp) + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) {
    out += "." + digits.substr(1);
  }
  const int a = std::abs(exp);
  out += std::string("e") + (exp < 0 ? "-" : "+") + (a < 10 ? "0" : "") + std::to_string(a);
  return out;
}

std::string hex4(std::uint32_t u) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s = "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) {
    s += digits[(u >> shift) & 0xF];
  }
  return s;
}

std::string json_string(std::string_view s, bool ensure_ascii) {
  std::string out = "\"";
  std::size_t n = 0;
  for (std::size_t i = 0; i < s.size(); i += n) {
    const std::uint32_t c = code_point(s, i, n);
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\b':
      out += "\\b";
      break;
    case '\f':
      out += "\\f";
      break;
    default:
      if (c < 0x20) {
        out += hex4(c);
      } else if (ensure_ascii && c >= 0x80) {
        if (c >= 0x10000) {
          out += hex4(0xD800 + ((c - 0x10000) >> 10)) + hex4(0xDC00 + ((c - 0x10000) & 0x3FF));
        } else {
          out += hex4(c);
        }
      } else {
        out += s.substr(i, n);
      }
    }
  }
  return out + "\"";
}

std::string string_repr(std::string_view s) {
  const bool single =
      s.find('\'') == std::string_view::npos || s.find('"') != std::string_view::npos;
  const char q = single ? '\'' : '"';
  std::string out(1, q);
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == q || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      static constexpr char digits[] = "0123456789abcdef";
      out += "\\x";
      out += digits[c >> 4];
      out += digits[c & 0xF];
    } else {
      out += ch;
    }
  }
  return out + q;
}

void dump(const value& v,
          std::string& out,
          bool ensure_ascii,
          std::optional<int> indent,
          bool sort_keys,
          int level) {
  using kind = value::kind;
  const auto newline = [&](int l) {
    if (indent) {
      out += '\n';
      out += std::string(static_cast<std::size_t>(std::max(0, *indent * l)), ' ');
    }
  };
  const char* sep = indent ? "," : ", ";
  switch (v.type) {
  case kind::none:
    out += "null";
    return;
  case kind::boolean:
    out += v.boolean ? "true" : "false";
    return;
  case kind::integer:
    out += std::to_string(v.integer);
    return;
  case kind::number:
    out += std::isnan(v.number)   ? "NaN"
           : std::isinf(v.number) ? (v.number < 0 ? "-Infinity" : "Infinity")
                                  : float_repr(v.number);
    return;
  case kind::string:
    out += json_string(v.text, ensure_ascii);
    return;
  case kind::list:
    if (v.list->items.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (std::size_t i = 0; i < v.list->items.size(); ++i) {
      out += i != 0 ? sep : "";
      newline(level + 1);
      dump(v.list->items[i], out, ensure_ascii, indent, sort_keys, level + 1);
    }
    newline(level);
    out += ']';
    return;
  case kind::dict: {
    if (v.dict->entries.empty()) {
      out += "{}";
      return;
    }
    std::vector<const mapping::entry*> entries;
    for (const auto& e : v.dict->entries) {
      entries.push_back(&e);
    }
    if (sort_keys) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto* a, const auto* b) { return a->key < b->key; });
    }
    out += '{';
    for (std::size_t i = 0; i < entries.size(); ++i) {
      out += i != 0 ? sep : "";
      newline(level + 1);
      out += json_string(entries[i]->key, ensure_ascii) + ": ";
      dump(entries[i]->val, out, ensure_ascii, indent, sort_keys, level + 1);
    }
    newline(level);
    out += '}';
    return;
  }
  default:
    throw std::invalid_argument("Object of type " + type_name(v) + " is not JSON serializable");
  }
}

}  // namespace

std::string type_name(const value& v) {
  switch (v.type) {
  case value::kind::undefined:
    return "Undefined";
  case value::kind::none:
    return "NoneType";
  case value::kind::boolean:
    return "bool";
  case value::kind::integer:
    return "int";
  case value::kind::number:
    return "float";
  case value::kind::string:
    return "str";
  case value::kind::list:
    return "list";
  case value::kind::dict:
    return "dict";
  case value::kind::ns:
    return "Namespace";
  }
  return "object";
}

std::string repr(const value& v) {
  switch (v.type) {
  case value::kind::undefined:
    return "Undefined";
  case value::kind::string:
    return string_repr(v.text);
  case value::kind::list: {
    std::string out = v.tuple ? "(" : "[";
    for (std::size_t i = 0; i < v.list->items.size(); ++i) {
      out += (i != 0 ? ", " : "") + repr(v.list->items[i]);
    }
    return out + (!v.tuple ? "]" : v.list->items.size() == 1 ? ",)" : ")");
  }
  case value::kind::dict:
  case value::kind::ns: {
    std::string out = v.is(value::kind::ns) ? "<Namespace {" : "{";
    for (std::size_t i = 0; i < v.dict->entries.size(); ++i) {
      const auto& e = v.dict->entries[i];
      out += (i != 0 ? ", " : "") + string_repr(e.key) + ": " + repr(e.val);
    }
    return out + (v.is(value::kind::ns) ? "}>" : "}");
  }
  default:
    return to_str(v);
  }
}

std::string to_str(const value& v) {
  switch (v.type) {
  case value::kind::undefined:
    return "";
  case value::kind::none:
    return "None";
  case value::kind::boolean:
    return v.boolean ? "True" : "False";
  case value::kind::integer:
    return std::to_string(v.integer);
  case value::kind::number:
    return float_repr(v.number);
  case value::kind::string:
    return v.text;
  default:
    return repr(v);
  }
}

bool truthy(const value& v) {
  switch (v.type) {
  case value::kind::undefined:
  case value::kind::none:
    return false;
  case value::kind::boolean:
    return v.boolean;
  case value::kind::integer:
    return v.integer != 0;
  case value::kind::number:
    return v.number != 0.0;
  case value::kind::string:
    return !v.text.empty();
  case value::kind::list:
    return !v.list->items.empty();
  case value::kind::dict:
    return !v.dict->entries.empty();
  case value::kind::ns:
    return true;
  }
  return false;
}

namespace {
double as_double(const value& v) {
  return v.is(value::kind::number)    ? v.number
         : v.is(value::kind::boolean) ? (v.boolean ? 1.0 : 0.0)
                                      : static_cast<double>(v.integer);
}
std::int64_t as_int(const value& v) {
  return v.is(value::kind::boolean) ? (v.boolean ? 1 : 0) : v.integer;
}
}  // namespace

bool equal(const value& a, const value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is(value::kind::number) || b.is(value::kind::number)) {
      return as_double(a) == as_double(b);
    }
    return as_int(a) == as_int(b);
  }
  if (a.type != b.type || a.tuple != b.tuple) {
    return false;
  }
  switch (a.type) {
  case value::kind::undefined:
  case value::kind::none:
    return true;
  case value::kind::string:
    return a.text == b.text;
  case value::kind::list:
    return std::equal(a.list->items.begin(), a.list->items.end(), b.list->items.begin(),
                      b.list->items.end(), equal);
  case value::kind::dict:
    return a.dict->entries.size() == b.dict->entries.size() &&
           std::all_of(a.dict->entries.begin(), a.dict->entries.end(), [&](const auto& e) {
             const value* other = b.dict->find(e.key);
             return other != nullptr && equal(e.val, *other);
           });
  default:
    return a.dict == b.dict;
  }
}

std::optional<bool> less(const value& a, const value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is(value::kind::number) || b.is(value::kind::number)) {
      return as_double(a) < as_double(b);
    }
    return as_int(a) < as_int(b);
  }
  if (a.is(value::kind::string) && b.is(value::kind::string)) {
    return a.text < b.text;
  }
  if (a.is(value::kind::list) && b.is(value::kind::list)) {
    const auto& x = a.list->items;
    const auto& y = b.list->items;
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equal(x[i], y[i])) {
        return less(x[i], y[i]);
      }
    }
    return x.size() < y.size();
  }
  return std::nullopt;
}

std::string to_json(const value& v, bool ensure_ascii, std::optional<int> indent, bool sort_keys) {
  std::string out;
  dump(v, out, ensure_ascii, indent, sort_keys, 0);
  return out;
}

}  // namespace cotensor::lm::jinja
