// Python's string methods on UTF-8, by code point (chat_template_value.hpp), and the methods and
// global functions of a chat template: strings' and dicts' methods, transformers' raise_exception,
// strftime_now and namespace, Jinja's range and dict.

#include "lm/chat_template_value.hpp"

#include <algorithm>
#include <ctime>
#include <set>
#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

namespace cotensor::lm::jinja {

// The code point at s[i] and its length in bytes; a byte that starts no valid UTF-8 character
// stands for itself.
std::uint32_t code_point(std::string_view s, std::size_t i, std::size_t& n) {
  const auto b = static_cast<unsigned char>(s[i]);
  const int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
  if (len == 0 || i + static_cast<std::size_t>(len) > s.size()) {
    n = 1;
    return b;
  }
  std::uint32_t cp = len == 1 ? b : b & (0xFF >> (len + 1));
  for (int k = 1; k < len; ++k) {
    const auto c = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
    if ((c & 0xC0) != 0x80) {
      n = 1;
      return b;
    }
    cp = (cp << 6) | (c & 0x3F);
  }
  n = static_cast<std::size_t>(len);
  return cp;
}

bool py_space(std::uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

namespace {

template <class F>
std::string icu_map(std::string_view s, F f) {
  icu::UnicodeString u =
      icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<std::int32_t>(s.size())));
  f(u);
  std::string out;
  u.toUTF8String(out);
  return out;
}

bool cased(std::uint32_t c) {
  const auto cp = static_cast<UChar32>(c);
  return u_isULowercase(cp) || u_isUUppercase(cp) || u_istitle(cp);
}

}  // namespace

std::vector<std::size_t> char_offsets(std::string_view s) {
  std::vector<std::size_t> out;
  std::size_t n = 0;
  for (std::size_t i = 0; i < s.size(); i += n) {
    out.push_back(i);
    code_point(s, i, n);
  }
  out.push_back(s.size());
  return out;
}

bool space_at(std::string_view s, std::size_t i, std::size_t& n) {
  return py_space(code_point(s, i, n));
}

std::string strip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::set<std::uint32_t> set;
  std::size_t n = 0;
  if (chars != nullptr) {
    for (std::size_t i = 0; i < chars->size(); i += n) {
      set.insert(code_point(*chars, i, n));
    }
  }
  const auto strips = [&](std::uint32_t c) {
    return chars == nullptr ? py_space(c) : set.contains(c);
  };
  const std::vector<std::size_t> at = char_offsets(s);
  std::size_t first = 0;
  std::size_t last = at.size() - 1;  // characters [first, last)
  while (left && first < last && strips(code_point(s, at[first], n))) {
    ++first;
  }
  while (right && last > first && strips(code_point(s, at[last - 1], n))) {
    --last;
  }
  return std::string(s.substr(at[first], at[last] - at[first]));
}

std::string upper(std::string_view s) {
  return icu_map(s, [](icu::UnicodeString& u) { u.toUpper(icu::Locale::getRoot()); });
}

std::string lower(std::string_view s) {
  return icu_map(s, [](icu::UnicodeString& u) { u.toLower(icu::Locale::getRoot()); });
}

std::string capitalize(std::string_view s) {
  if (s.empty()) {
    return {};
  }
  std::size_t n = 0;
  const std::uint32_t first = code_point(s, 0, n);
  std::string out;
  icu::UnicodeString(static_cast<UChar32>(u_totitle(static_cast<UChar32>(first))))
      .toUTF8String(out);
  return out + lower(s.substr(n));
}

std::string title(std::string_view s) {
  std::string out;
  bool previous_cased = false;
  std::size_t n = 0;
  for (std::size_t i = 0; i < s.size(); i += n) {
    const std::uint32_t c = code_point(s, i, n);
    out += previous_cased ? lower(s.substr(i, n)) : capitalize(s.substr(i, n));
    previous_cased = cased(c);
  }
  return out;
}

std::vector<std::string> split(std::string_view s, const std::string* sep, std::int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep != nullptr) {
    std::size_t start = 0;
    std::size_t hit = 0;
    while ((maxsplit < 0 || static_cast<std::int64_t>(out.size()) < maxsplit) &&
           (hit = s.find(*sep, start)) != std::string_view::npos) {
      out.emplace_back(s.substr(start, hit - start));
      start = hit + sep->size();
    }
    out.emplace_back(s.substr(start));
    return out;
  }
  std::size_t n = 0;
  std::size_t i = 0;
  while (true) {
    while (i < s.size() && space_at(s, i, n)) {
      i += n;
    }
    if (i >= s.size()) {
      return out;
    }
    if (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) == maxsplit) {
      out.push_back(strip(s.substr(i), nullptr, false, true));
      return out;
    }
    const std::size_t start = i;
    while (i < s.size() && !space_at(s, i, n)) {
      i += n;
    }
    out.emplace_back(s.substr(start, i - start));
  }
}

std::string
replace(std::string_view s, std::string_view old, std::string_view with, std::int64_t count) {
  std::string out;
  std::int64_t done = 0;
  if (old.empty()) {
    const std::vector<std::size_t> at = char_offsets(s);
    for (std::size_t k = 0; k + 1 < at.size(); ++k) {
      if (count < 0 || done++ < count) {
        out += with;
      }
      out += s.substr(at[k], at[k + 1] - at[k]);
    }
    return (count < 0 || done < count) ? out + std::string(with) : out;
  }
  std::size_t start = 0;
  std::size_t hit = 0;
  while ((count < 0 || done < count) && (hit = s.find(old, start)) != std::string_view::npos) {
    out += s.substr(start, hit - start);
    out += with;
    start = hit + old.size();
    ++done;
  }
  return out + std::string(s.substr(start));
}

value call_method(const node& at, const value& obj, std::string_view name, const arguments& a) {
  using kind = value::kind;
  if (obj.is(kind::string)) {
    const std::string& s = obj.text;
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const value* chars = a.get(0, "chars");
      const std::string set = chars != nullptr && !chars->is(kind::none) ? to_str(*chars) : "";
      return value::of(strip(s, chars != nullptr && !chars->is(kind::none) ? &set : nullptr,
                             name != "rstrip", name != "lstrip"));
    }
    if (name == "startswith" || name == "endswith") {
      const value& what = a.positional.empty() ? value::of(std::string()) : a.positional[0];
      const std::vector<value> options =
          what.is(kind::list) ? what.list->items : std::vector<value>{what};
      return value::of(std::any_of(options.begin(), options.end(), [&](const value& o) {
        if (!o.is(kind::string)) {
          fail(at,
               std::string(name) + " first arg must be str or a tuple of str, not " + type_name(o));
        }
        return name == "startswith" ? s.starts_with(o.text) : s.ends_with(o.text);
      }));
    }
    if (name == "split") {
      const value* sep = a.get(0, "sep");
      const std::string by = sep != nullptr && !sep->is(kind::none) ? to_str(*sep) : "";
      if (sep != nullptr && !sep->is(kind::none) && by.empty()) {
        fail(at, "empty separator");
      }
      std::vector<value> parts;
      for (std::string& p : split(s, sep != nullptr && !sep->is(kind::none) ? &by : nullptr,
                                  whole(at, a.get(1, "maxsplit"), -1))) {
        parts.push_back(value::of(std::move(p)));
      }
      return value::of_list(std::move(parts));
    }
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
      return value::of(name == "upper"   ? upper(s)
                       : name == "lower" ? lower(s)
                       : name == "title" ? title(s)
                                         : capitalize(s));
    }
    if (name == "replace") {
      return value::of(replace(s, text_of(a.get(0, "old")), text_of(a.get(1, "new")),
                               whole(at, a.get(2, "count"), -1)));
    }
    if (name == "join") {
      std::string out;
      bool first = true;
      for (const value& item : iterate(at, a.positional.empty() ? value() : a.positional[0])) {
        if (!item.is(kind::string)) {
          fail(at, "sequence item: expected str instance, " + type_name(item) + " found");
        }
        out += (first ? "" : s) + item.text;
        first = false;
      }
      return value::of(std::move(out));
    }
    if (name == "find" || name == "count") {
      const std::string sub = text_of(a.get(0, "sub"));
      if (name == "find") {
        const std::size_t hit = s.find(sub);
        return value::of(hit == std::string::npos
                             ? std::int64_t{-1}
                             : static_cast<std::int64_t>(char_offsets(s.substr(0, hit)).size()) -
                                   1);
      }
      if (sub.empty()) {
        return value::of(static_cast<std::int64_t>(char_offsets(s).size()));
      }
      std::int64_t n = 0;
      for (std::size_t at_ = s.find(sub); at_ != std::string::npos;
           at_ = s.find(sub, at_ + sub.size())) {
        ++n;
      }
      return value::of(n);
    }
  }
  if (obj.is(kind::dict)) {
    if (name == "get") {
      const value* key = a.get(0, "key");
      const value* otherwise = a.get(1, "default");
      const value* hit =
          key != nullptr && key->is(kind::string) ? obj.dict->find(key->text) : nullptr;
      return hit != nullptr ? *hit : otherwise != nullptr ? *otherwise : value::none();
    }
    if (name == "items") {
      return pairs(*obj.dict);
    }
    if (name == "keys" || name == "values") {
      std::vector<value> out;
      for (const auto& e : obj.dict->entries) {
        out.push_back(name == "keys" ? value::of(e.key) : e.val);
      }
      return value::of_list(std::move(out));
    }
  }
  fail(at, "'" + type_name(obj) + " object' has no method '" + std::string(name) + "'");
}

value call_function(const node& at, std::string_view name, const arguments& a) {
  if (name == "raise_exception") {
    throw std::runtime_error(text_of(a.get(0, "message")));
  }
  if (name == "strftime_now") {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[256];
    const std::size_t n =
        std::strftime(buf, sizeof buf, text_of(a.get(0, "format")).c_str(), &local);
    return value::of(std::string(buf, n));
  }
  if (name == "namespace" || name == "dict") {
    mapping m;
    if (!a.positional.empty() && a.positional[0].is(value::kind::dict)) {
      m = *a.positional[0].dict;
    }
    for (const auto& e : a.named) {
      m.set(e.key, e.val);
    }
    return value::of_dict(std::move(m), name == "namespace");
  }
  if (name == "range") {
    const bool one = a.positional.size() == 1;
    const std::int64_t start = one ? 0 : whole(at, a.get(0, ""), 0);
    const std::int64_t stop = whole(at, a.get(one ? 0 : 1, ""), 0);
    const std::int64_t step = whole(at, a.get(2, ""), 1);
    if (step == 0) {
      fail(at, "range() arg 3 must not be zero");
    }
    std::vector<value> out;
    for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (out.size() >= 100000) {
        fail(at, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
      }
      out.push_back(value::of(i));
    }
    return value::of_list(std::move(out));
  }
  fail(at, "the function '" + std::string(name) + "' is not supported");
}

}  // namespace cotensor::lm::jinja
