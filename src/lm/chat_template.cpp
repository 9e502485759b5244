// chat_template::render (<cotensor/lm.hpp>): the tree of chat_template_parse.cpp walked with
// Jinja's semantics: a scope per loop iteration (a `set` in a loop stays there; `if` opens
// none), Python's operators on chat_template_value.hpp's values, undefined values printing as
// nothing and failing when used as operands.

#include "cotensor/lm.hpp"

#include "lm/chat_template_value.hpp"

#include <cmath>

namespace cotensor::lm {

namespace jinja {
namespace {

class renderer {
public:
  enum class flow : std::uint8_t { normal, break_, continue_ };

  explicit renderer(mapping globals) { frames_.push_back(std::move(globals)); }

  std::string run(const node& root) {
    frames_.emplace_back();
    exec(root);
    return std::move(out_);
  }

private:
  value lookup(const node& at, const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      if (const value* v = it->find(name)) {
        return *v;
      }
    }
    (void)at;
    return value::undefined("'" + name + "' is undefined");
  }

  flow exec(const node& n) {
    switch (n.type) {
    case node::kind::block:
      for (const node& kid : n.kids) {
        if (const flow f = exec(kid); f != flow::normal) {
          return f;
        }
      }
      return flow::normal;
    case node::kind::text:
      out_ += n.name;
      return flow::normal;
    case node::kind::output:
      out_ += to_str(eval(n.kids[0]));
      return flow::normal;
    case node::kind::if_:
      for (std::size_t i = 0; i + 1 < n.kids.size(); i += 2) {
        if (truthy(eval(n.kids[i]))) {
          return exec(n.kids[i + 1]);
        }
      }
      return n.kids.size() % 2 == 1 ? exec(n.kids.back()) : flow::normal;
    case node::kind::for_:
      loop(n);
      return flow::normal;
    case node::kind::set:
      frames_.back().set(n.name, eval(n.kids[0]));
      return flow::normal;
    case node::kind::set_attr: {
      const value target = lookup(n, n.name);
      if (!target.is(value::kind::ns)) {
        fail(n, "cannot assign attribute on non-namespace object");
      }
      target.dict->set(n.keys[0], eval(n.kids[0]));
      return flow::normal;
    }
    case node::kind::break_:
      return flow::break_;
    case node::kind::continue_:
      return flow::continue_;
    default:
      fail(n, "not a statement");
    }
  }

  void bind(const node& n, const value& item, mapping& frame) {
    if (n.keys.size() == 1) {
      frame.set(n.keys[0], item);
      return;
    }
    const std::vector<value> parts = iterate(n, item);
    if (parts.size() != n.keys.size()) {
      fail(n, parts.size() < n.keys.size() ? "not enough values to unpack"
                                           : "too many values to unpack");
    }
    for (std::size_t k = 0; k < parts.size(); ++k) {
      frame.set(n.keys[k], parts[k]);
    }
  }

  void loop(const node& n) {
    const value seq = eval(n.kids[0]);
    if (seq.is(value::kind::none) || seq.is_number()) {
      fail(n.kids[0], "'" + type_name(seq) + "' object is not iterable");
    }
    std::vector<value> items;
    for (value& item : iterate(n.kids[0], seq)) {
      if (!n.kids[1].omitted) {
        mapping frame;
        bind(n, item, frame);
        frames_.push_back(std::move(frame));
        const bool keep = truthy(eval(n.kids[1]));
        frames_.pop_back();
        if (!keep) {
          continue;
        }
      }
      items.push_back(std::move(item));
    }
    if (items.empty()) {
      frames_.emplace_back();
      exec(n.kids[3]);
      frames_.pop_back();
      return;
    }
    const auto count = static_cast<std::int64_t>(items.size());
    for (std::int64_t i = 0; i < count; ++i) {
      const auto k = static_cast<std::size_t>(i);
      mapping info;
      info.set("index", value::of(i + 1));
      info.set("index0", value::of(i));
      info.set("revindex", value::of(count - i));
      info.set("revindex0", value::of(count - i - 1));
      info.set("first", value::of(i == 0));
      info.set("last", value::of(i + 1 == count));
      info.set("length", value::of(count));
      info.set("depth", value::of(std::int64_t{1}));
      info.set("depth0", value::of(std::int64_t{0}));
      if (i > 0) {
        info.set("previtem", items[k - 1]);
      }
      if (i + 1 < count) {
        info.set("nextitem", items[k + 1]);
      }
      mapping frame;
      bind(n, items[k], frame);
      frame.set("loop", value::of_dict(std::move(info)));
      frames_.push_back(std::move(frame));
      const flow f = exec(n.kids[2]);
      frames_.pop_back();
      if (f == flow::break_) {
        break;
      }
    }
  }

  arguments args(const node& n) {
    arguments a;
    for (std::size_t i = 1; i < n.kids.size(); ++i) {
      if (n.keys[i].empty()) {
        a.positional.push_back(eval(n.kids[i]));
      } else {
        a.named.push_back({n.keys[i], eval(n.kids[i])});
      }
    }
    return a;
  }

  value slice(const node& n) {
    const value obj = eval(n.kids[0]);
    if (obj.is(value::kind::undefined)) {
      fail_undefined(n, obj);
    }
    if (!obj.is(value::kind::list) && !obj.is(value::kind::string)) {
      fail(n, "'" + type_name(obj) + "' object is not subscriptable");
    }
    std::optional<std::int64_t> bound[3];
    for (int k = 0; k < 3; ++k) {
      const node& b = n.kids[static_cast<std::size_t>(k) + 1];
      const value v = b.omitted ? value::none() : eval(b);
      if (v.is(value::kind::integer) || v.is(value::kind::boolean)) {
        bound[k] = v.is(value::kind::boolean) ? v.boolean : v.integer;
      } else if (!v.is(value::kind::none)) {
        fail(b, "slice indices must be integers or None");
      }
    }
    const std::vector<std::size_t> off =
        obj.is(value::kind::string) ? char_offsets(obj.text) : std::vector<std::size_t>{};
    const std::int64_t len = obj.is(value::kind::string)
                                 ? static_cast<std::int64_t>(off.size()) - 1
                                 : static_cast<std::int64_t>(obj.list->items.size());
    const std::int64_t step = bound[2].value_or(1);
    if (step == 0) {
      fail(n, "slice step cannot be zero");
    }
    // Python's PySlice_AdjustIndices.
    const auto adjust = [&](std::optional<std::int64_t> b, std::int64_t otherwise) {
      if (!b) {
        return otherwise;
      }
      std::int64_t x = *b < 0 ? *b + len : *b;
      if (x < 0) {
        x = step < 0 ? -1 : 0;
      } else if (x >= len) {
        x = step < 0 ? len - 1 : len;
      }
      return x;
    };
    const std::int64_t start = adjust(bound[0], step < 0 ? len - 1 : 0);
    const std::int64_t stop = adjust(bound[1], step < 0 ? -1 : len);
    std::vector<value> items;
    std::string text;
    for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      const auto k = static_cast<std::size_t>(i);
      if (obj.is(value::kind::string)) {
        text += obj.text.substr(off[k], off[k + 1] - off[k]);
      } else {
        items.push_back(obj.list->items[k]);
      }
    }
    return obj.is(value::kind::string) ? value::of(std::move(text))
                                       : value::of_list(std::move(items));
  }

  value arithmetic(const node& n, const value& a, const value& b) {
    const std::string& op = n.name;
    if (op == "~") {
      return value::of(to_str(a) + to_str(b));
    }
    if (a.is(value::kind::undefined) || b.is(value::kind::undefined)) {
      fail_undefined(n, a.is(value::kind::undefined) ? a : b);
    }
    if (op == "==" || op == "!=") {
      return value::of(equal(a, b) == (op == "=="));
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      const bool flip = op == ">" || op == "<=";
      const std::optional<bool> lt = flip ? less(b, a) : less(a, b);
      if (!lt) {
        fail(n, "'" + op + "' not supported between instances of '" + type_name(a) + "' and '" +
                    type_name(b) + "'");
      }
      return value::of(op.size() == 1 ? *lt : !*lt);
    }
    const auto unsupported = [&]() -> value {
      fail(n, "unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" +
                  type_name(b) + "'");
    };
    if (op == "+" && a.type == b.type && a.is(value::kind::string)) {
      return value::of(a.text + b.text);
    }
    if (op == "+" && a.is(value::kind::list) && b.is(value::kind::list)) {
      std::vector<value> items = a.list->items;
      items.insert(items.end(), b.list->items.begin(), b.list->items.end());
      return value::of_list(std::move(items));
    }
    if (op == "*" && (a.is(value::kind::string) || a.is(value::kind::list) ||
                      b.is(value::kind::string) || b.is(value::kind::list))) {
      const value& seq = a.is(value::kind::string) || a.is(value::kind::list) ? a : b;
      const value& times = &seq == &a ? b : a;
      if (!times.is(value::kind::integer) && !times.is(value::kind::boolean)) {
        return unsupported();
      }
      const std::int64_t t = times.is(value::kind::boolean) ? times.boolean : times.integer;
      std::string s;
      std::vector<value> items;
      for (std::int64_t i = 0; i < t; ++i) {
        if (seq.is(value::kind::string)) {
          s += seq.text;
        } else {
          items.insert(items.end(), seq.list->items.begin(), seq.list->items.end());
        }
      }
      return seq.is(value::kind::string) ? value::of(std::move(s))
                                         : value::of_list(std::move(items));
    }
    if (!a.is_number() || !b.is_number()) {
      return unsupported();
    }
    const bool floating = a.is(value::kind::number) || b.is(value::kind::number) || op == "/";
    const auto fa = a.is(value::kind::number)
                        ? a.number
                        : static_cast<double>(a.is(value::kind::boolean) ? a.boolean : a.integer);
    const auto fb = b.is(value::kind::number)
                        ? b.number
                        : static_cast<double>(b.is(value::kind::boolean) ? b.boolean : b.integer);
    const std::int64_t ia = a.is(value::kind::boolean) ? a.boolean : a.integer;
    const std::int64_t ib = b.is(value::kind::boolean) ? b.boolean : b.integer;
    if ((op == "/" || op == "//" || op == "%") && fb == 0.0) {
      fail(n, "division by zero");
    }
    if (op == "+")
      return floating ? value::of(fa + fb) : value::of(ia + ib);
    if (op == "-")
      return floating ? value::of(fa - fb) : value::of(ia - ib);
    if (op == "*")
      return floating ? value::of(fa * fb) : value::of(ia * ib);
    if (op == "/")
      return value::of(fa / fb);
    if (op == "//") {
      if (floating) {
        return value::of(std::floor(fa / fb));
      }
      const std::int64_t q = ia / ib;
      return value::of((ia % ib != 0 && ((ia < 0) != (ib < 0))) ? q - 1 : q);
    }
    if (op == "%") {
      if (floating) {
        const double r = std::fmod(fa, fb);
        return value::of(r != 0 && ((r < 0) != (fb < 0)) ? r + fb : r);
      }
      const std::int64_t r = ia % ib;
      return value::of(r != 0 && ((r < 0) != (ib < 0)) ? r + ib : r);
    }
    if (op == "**") {
      if (!floating && ib >= 0) {
        std::int64_t r = 1;
        for (std::int64_t i = 0; i < ib; ++i) {
          r *= ia;
        }
        return value::of(r);
      }
      return value::of(std::pow(fa, fb));
    }
    return unsupported();
  }

  value eval(const node& n) {
    switch (n.type) {
    case node::kind::literal:
      return n.lit;
    case node::kind::name:
      return lookup(n, n.name);
    case node::kind::attr:
      return get_attr(n, eval(n.kids[0]), n.name);
    case node::kind::item:
      return get_item(n, eval(n.kids[0]), eval(n.kids[1]));
    case node::kind::slice:
      return slice(n);
    case node::kind::call: {
      const node& callee = n.kids[0];
      if (callee.type == node::kind::name) {
        return call_function(n, callee.name, args(n));
      }
      const value obj = eval(callee.kids[0]);
      if (obj.is(value::kind::undefined)) {
        fail_undefined(callee, obj);
      }
      return call_method(n, obj, callee.name, args(n));
    }
    case node::kind::filter:
      return apply_filter(n, n.name, eval(n.kids[0]), args(n));
    case node::kind::test:
      return value::of(apply_test(n, n.name, eval(n.kids[0]), args(n)) != n.negated);
    case node::kind::unary: {
      const value v = eval(n.kids[0]);
      if (v.is(value::kind::undefined)) {
        fail_undefined(n, v);
      }
      if (!v.is_number()) {
        fail(n, "bad operand type for unary " + n.name + ": '" + type_name(v) + "'");
      }
      if (v.is(value::kind::number)) {
        return value::of(n.name == "-" ? -v.number : v.number);
      }
      const std::int64_t i = v.is(value::kind::boolean) ? v.boolean : v.integer;
      return value::of(n.name == "-" ? -i : i);
    }
    case node::kind::binary: {
      const value a = eval(n.kids[0]);
      const value b = eval(n.kids[1]);
      if (n.name == "in" || n.name == "not in") {
        return value::of(apply_test(n, "in", a, arguments{{b}, {}}) == (n.name == "in"));
      }
      return arithmetic(n, a, b);
    }
    case node::kind::op_and: {
      value a = eval(n.kids[0]);
      return truthy(a) ? eval(n.kids[1]) : a;
    }
    case node::kind::op_or: {
      value a = eval(n.kids[0]);
      return truthy(a) ? a : eval(n.kids[1]);
    }
    case node::kind::op_not:
      return value::of(!truthy(eval(n.kids[0])));
    case node::kind::cond:
      if (truthy(eval(n.kids[1]))) {
        return eval(n.kids[0]);
      }
      return n.kids.size() > 2
                 ? eval(n.kids[2])
                 : value::undefined("the inline if expression on line " + std::to_string(n.line) +
                                    " evaluated to false and no else section "
                                    "was defined.");
    case node::kind::list: {
      std::vector<value> items;
      for (const node& kid : n.kids) {
        items.push_back(eval(kid));
      }
      return value::of_list(std::move(items), n.name == "tuple");
    }
    case node::kind::dict: {
      mapping m;
      for (std::size_t i = 0; i + 1 < n.kids.size(); i += 2) {
        const value key = eval(n.kids[i]);
        if (!key.is(value::kind::string)) {
          fail(n.kids[i], "only strings are supported as dict keys");
        }
        m.set(key.text, eval(n.kids[i + 1]));
      }
      return value::of_dict(std::move(m));
    }
    default:
      fail(n, "not an expression");
    }
  }

  std::vector<mapping> frames_;
  std::string out_;
};

}  // namespace
}  // namespace jinja

std::string chat_template::impl::render(std::span<const chat_message> messages,
                                        bool add_generation_prompt,
                                        const std::string* bos_token,
                                        const std::string* eos_token) const {
  using jinja::value;
  std::vector<value> list;
  for (const chat_message& m : messages) {
    jinja::mapping message;
    message.set("role", value::of(m.role));
    message.set("content", value::of(m.content));
    list.push_back(value::of_dict(std::move(message)));
  }
  jinja::mapping globals;
  globals.set("messages", value::of_list(std::move(list)));
  globals.set("tools", value::none());
  globals.set("documents", value::none());
  globals.set("add_generation_prompt", value::of(add_generation_prompt));
  if (bos_token != nullptr) {
    globals.set("bos_token", value::of(*bos_token));
  }
  if (eos_token != nullptr) {
    globals.set("eos_token", value::of(*eos_token));
  }
  return jinja::renderer(std::move(globals)).run(root);
}

std::string chat_template::render(std::span<const chat_message> messages,
                                  bool add_generation_prompt,
                                  std::string_view bos_token,
                                  std::string_view eos_token) const {
  const std::string bos(bos_token);
  const std::string eos(eos_token);
  return impl_->render(messages, add_generation_prompt, &bos, &eos);
}

}  // namespace cotensor::lm
