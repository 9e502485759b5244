// chat_template::parse (<cotensor/lm.hpp>): a recursive-descent parser, over the tokens of
// chat_template_lex.cpp, of the subset chat_template_value.hpp's tree holds. Whatever is not
// in the subset is refused here, naming itself and its line and column.

#include "cotensor/lm.hpp"

#include "lm/chat_template_lex.hpp"
#include "lm/chat_template_value.hpp"

#include <algorithm>

namespace cotensor::lm {

namespace jinja {
namespace {

class parser {
public:
  explicit parser(std::vector<token> tokens) : t_(std::move(tokens)) {}

  node parse_template() {
    std::string end;
    return body({}, end, t_.front());
  }

private:
  using tk = token::kind;

  const token& peek(std::size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  const token& next() { return t_[std::min(i_++, t_.size() - 1)]; }
  bool is_op(std::string_view op, std::size_t ahead = 0) const {
    return peek(ahead).type == tk::op && peek(ahead).text == op;
  }
  bool is_name(std::string_view n) const { return peek().type == tk::name && peek().text == n; }
  bool accept_op(std::string_view op) { return is_op(op) ? (++i_, true) : false; }
  bool accept_name(std::string_view n) { return is_name(n) ? (++i_, true) : false; }

  [[noreturn]] static void fail(const token& t, std::string_view what) {
    refuse_at(t.line, t.column, what);
  }
  void expect_op(std::string_view op) {
    if (!accept_op(op)) {
      fail(peek(), "expected '" + std::string(op) + "', found " + describe(peek()));
    }
  }
  const token& expect(tk type, std::string_view what) {
    if (peek().type != type) {
      fail(peek(), "expected " + std::string(what) + ", found " + describe(peek()));
    }
    return next();
  }

  static node make(node::kind k, const token& at, std::string name = {}) {
    return node::at(k, at.line, at.column, std::move(name));
  }
  static node omitted(const token& at) {
    node n = make(node::kind::literal, at);
    n.omitted = true;
    return n;
  }

  // Statements up to one whose name is in `ends` (its name consumed, in `end`); `open` is the
  // tag that opened the block, named if the template ends first.
  node body(std::initializer_list<std::string_view> ends, std::string& end, const token& open) {
    node block = make(node::kind::block, open);
    const auto not_closed = [&] {
      return "the block opened at line " + std::to_string(open.line) + ", column " +
             std::to_string(open.column) + " is not closed (no '{% " +
             std::string(*(ends.end() - 1)) + " %}')";
    };
    while (true) {
      const token& t = peek();
      if (t.type == tk::eof) {
        if (ends.size() != 0) {
          fail(open, not_closed());
        }
        return block;
      }
      if (t.type == tk::data) {
        block.kids.push_back(make(node::kind::text, next(), t.text));
      } else if (t.type == tk::var_begin) {
        node out = make(node::kind::output, next());
        out.kids.push_back(expression());
        expect(tk::var_end, "'}}'");
        block.kids.push_back(std::move(out));
      } else {
        const token& begin = expect(tk::block_begin, "a tag");
        const token& name = expect(tk::name, "a statement name");
        if (std::find(ends.begin(), ends.end(), name.text) != ends.end()) {
          end = name.text;
          return block;
        }
        if (ends.size() != 0 &&
            (name.text.starts_with("end") || name.text == "elif" || name.text == "else")) {
          fail(name, "unexpected '{% " + name.text + " %}': " + not_closed());
        }
        block.kids.push_back(statement(begin, name));
      }
    }
  }

  node statement(const token& begin, const token& name) {
    std::string end;
    if (name.text == "if") {
      node n = make(node::kind::if_, begin);
      n.kids.push_back(expression());
      expect(tk::block_end, "'%}'");
      n.kids.push_back(body({"elif", "else", "endif"}, end, begin));
      while (end == "elif") {
        n.kids.push_back(expression());
        expect(tk::block_end, "'%}'");
        n.kids.push_back(body({"elif", "else", "endif"}, end, begin));
      }
      if (end == "else") {
        expect(tk::block_end, "'%}'");
        n.kids.push_back(body({"endif"}, end, begin));
      }
      expect(tk::block_end, "'%}'");
      return n;
    }
    if (name.text == "for") {
      node n = make(node::kind::for_, begin);
      const bool paren = accept_op("(");
      do {
        n.keys.push_back(expect(tk::name, "a loop variable").text);
      } while (accept_op(","));
      if (paren) {
        expect_op(")");
      }
      if (!accept_name("in")) {
        fail(peek(), "expected 'in', found " + describe(peek()));
      }
      n.kids.push_back(expression(false));
      n.kids.push_back(accept_name("if") ? expression() : omitted(begin));
      if (is_name("recursive")) {
        fail(peek(), "recursive loops are not supported");
      }
      expect(tk::block_end, "'%}'");
      n.kids.push_back(body({"else", "endfor"}, end, begin));
      if (end == "else") {
        expect(tk::block_end, "'%}'");
        n.kids.push_back(body({"endfor"}, end, begin));
      } else {
        n.kids.push_back(make(node::kind::block, begin));
      }
      expect(tk::block_end, "'%}'");
      return n;
    }
    if (name.text == "set") {
      const token& target = expect(tk::name, "a variable name");
      node n = make(node::kind::set, begin, target.text);
      if (accept_op(".")) {
        n.type = node::kind::set_attr;
        n.keys.push_back(expect(tk::name, "an attribute name").text);
      }
      if (peek().type == tk::block_end) {
        fail(peek(), "block assignments ('{% set x %}...{% endset %}') are not supported");
      }
      if (is_op(",")) {
        fail(peek(), "assigning to several names is not supported");
      }
      expect_op("=");
      n.kids.push_back(tuple_or_expression());
      expect(tk::block_end, "'%}'");
      return n;
    }
    if (name.text == "break" || name.text == "continue") {
      node n = make(name.text == "break" ? node::kind::break_ : node::kind::continue_, begin);
      expect(tk::block_end, "'%}'");
      return n;
    }
    if (name.text == "generation") {  // transformers' assistant-mask extension: its body as is
      expect(tk::block_end, "'%}'");
      node n = body({"endgeneration"}, end, begin);
      expect(tk::block_end, "'%}'");
      return n;
    }
    if (name.text.starts_with("end") || name.text == "elif" || name.text == "else") {
      fail(name, "unexpected '{% " + name.text + " %}'");
    }
    fail(name, "the statement '" + name.text + "' is not supported");
  }

  node tuple_or_expression() {
    node first = expression();
    if (!is_op(",")) {
      return first;
    }
    node list = make(node::kind::list, peek(), "tuple");
    list.kids.push_back(std::move(first));
    while (accept_op(",") && peek().type != tk::block_end && peek().type != tk::var_end) {
      list.kids.push_back(expression());
    }
    return list;
  }

  node expression(bool with_condition = true) {
    node e = binary_chain(0);
    while (with_condition && is_name("if")) {
      node c = make(node::kind::cond, next());
      c.kids.push_back(std::move(e));
      c.kids.push_back(binary_chain(0));
      if (accept_name("else")) {
        c.kids.push_back(expression());
      }
      e = std::move(c);
    }
    return e;
  }

  // Levels, loosest first: or, and, not, comparisons, + -, ~, * / // %, **, unary.
  node binary_chain(int level) {
    if (level == 2) {
      if (is_name("not")) {
        node n = make(node::kind::op_not, next());
        n.kids.push_back(binary_chain(2));
        return n;
      }
      return comparison();
    }
    if (level == 7) {
      node left = unary(true);
      while (is_op("**")) {
        node p = make(node::kind::binary, next(), "**");
        p.kids.push_back(std::move(left));
        p.kids.push_back(unary(true));
        left = std::move(p);
      }
      return left;
    }
    node left = binary_chain(level + 1);
    while (true) {
      const token& t = peek();
      const bool word = t.type == tk::name;
      const bool hit = (level == 0 && word && t.text == "or") ||
                       (level == 1 && word && t.text == "and") ||
                       (level == 4 && (is_op("+") || is_op("-"))) || (level == 5 && is_op("~")) ||
                       (level == 6 && (is_op("*") || is_op("/") || is_op("//") || is_op("%")));
      if (!hit) {
        return left;
      }
      const node::kind k = level == 0   ? node::kind::op_or
                           : level == 1 ? node::kind::op_and
                                        : node::kind::binary;
      node n = make(k, next(), t.text);
      n.kids.push_back(std::move(left));
      n.kids.push_back(binary_chain(level + 1));
      left = std::move(n);
    }
  }

  node comparison() {
    node left = binary_chain(4);
    node result;
    bool chained = false;
    while (true) {
      std::string op;
      const token& at = peek();
      if (at.type == tk::op && (at.text == "==" || at.text == "!=" || at.text == "<" ||
                                at.text == ">" || at.text == "<=" || at.text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        op = next().text;
      } else if (is_name("not") && peek(1).type == tk::name && peek(1).text == "in") {
        i_ += 2;
        op = "not in";
      } else {
        return chained ? result : left;
      }
      node cmp = make(node::kind::binary, at, op);
      cmp.kids.push_back(left);
      left = binary_chain(4);
      cmp.kids.push_back(left);
      if (chained) {  // a < b < c: (a < b) and (b < c)
        node both = make(node::kind::op_and, at);
        both.kids.push_back(std::move(result));
        both.kids.push_back(std::move(cmp));
        result = std::move(both);
      } else {
        result = std::move(cmp);
      }
      chained = true;
    }
  }

  node unary(bool with_filter) {
    node n;
    if (is_op("-") || is_op("+")) {
      const token& op = next();
      n = make(node::kind::unary, op, op.text);
      n.kids.push_back(unary(false));
    } else {
      n = primary();
    }
    n = postfix(std::move(n));
    if (!with_filter) {
      return n;
    }
    return filters_and_tests(std::move(n));
  }

  node primary() {
    const token& t = peek();
    if (t.type == tk::name) {
      next();
      node n = make(node::kind::literal, t);
      if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
        n.lit = value::of(t.text == "true" || t.text == "True");
      } else if (t.text == "none" || t.text == "None") {
        n.lit = value::none();
      } else {
        n = make(node::kind::name, t, t.text);
      }
      return n;
    }
    if (t.type == tk::string) {
      node n = make(node::kind::literal, t);
      std::string s;
      while (peek().type == tk::string) {
        s += next().text;
      }
      n.lit = value::of(std::move(s));
      return n;
    }
    if (t.type == tk::integer || t.type == tk::number) {
      next();
      node n = make(node::kind::literal, t);
      n.lit = t.type == tk::integer ? value::of(t.integer) : value::of(t.number);
      return n;
    }
    if (accept_op("(")) {
      if (accept_op(")")) {
        return make(node::kind::list, t, "tuple");
      }
      node e = tuple_or_expression();
      expect_op(")");
      return e;
    }
    if (accept_op("[")) {
      node n = make(node::kind::list, t);
      while (!accept_op("]")) {
        n.kids.push_back(expression());
        if (!is_op("]")) {
          expect_op(",");
        }
      }
      return n;
    }
    if (accept_op("{")) {
      node n = make(node::kind::dict, t);
      while (!accept_op("}")) {
        n.kids.push_back(expression());
        expect_op(":");
        n.kids.push_back(expression());
        if (!is_op("}")) {
          expect_op(",");
        }
      }
      return n;
    }
    fail(t, "expected an expression, found " + describe(t));
  }

  void arguments(node& n) {  // after '('
    while (!accept_op(")")) {
      if (peek().type == tk::name && is_op("=", 1)) {
        n.keys.push_back(next().text);
        next();
      } else {
        n.keys.emplace_back();
      }
      n.kids.push_back(expression());
      if (!is_op(")")) {
        expect_op(",");
      }
    }
  }

  node postfix(node n) {
    while (true) {
      const token& t = peek();
      if (accept_op(".")) {
        const token& a = peek();
        if (a.type == tk::integer) {
          node item = make(node::kind::item, next());
          item.kids.push_back(std::move(n));
          node key = make(node::kind::literal, a);
          key.lit = value::of(a.integer);
          item.kids.push_back(std::move(key));
          n = std::move(item);
          continue;
        }
        node attr = make(node::kind::attr, expect(tk::name, "an attribute name"), a.text);
        attr.kids.push_back(std::move(n));
        n = std::move(attr);
      } else if (accept_op("[")) {
        node parts[3] = {omitted(t), omitted(t), omitted(t)};
        int colons = 0;
        while (!accept_op("]")) {
          if (accept_op(":")) {
            if (++colons > 2) {
              fail(t, "a slice has at most two ':'");
            }
          } else {
            parts[colons] = expression();
          }
        }
        node s = make(colons == 0 ? node::kind::item : node::kind::slice, t);
        s.kids.push_back(std::move(n));
        for (int k = 0; k <= (colons == 0 ? 0 : 2); ++k) {
          s.kids.push_back(std::move(parts[k]));
        }
        n = std::move(s);
      } else if (is_op("(")) {
        if (n.type == node::kind::name && !known("function", n.name)) {
          fail(t, "the function '" + n.name + "' is not supported");
        }
        if (n.type == node::kind::attr && !known("method", n.name)) {
          fail(t, "the method '" + n.name + "' is not supported");
        }
        if (n.type != node::kind::name && n.type != node::kind::attr) {
          fail(t, "only functions and methods can be called");
        }
        node call = make(node::kind::call, next());
        call.kids.push_back(std::move(n));
        call.keys.emplace_back();
        arguments(call);
        n = std::move(call);
      } else {
        return n;
      }
    }
  }

  node filters_and_tests(node n) {
    while (true) {
      if (accept_op("|")) {
        const token& f = expect(tk::name, "a filter name");
        if (!known("filter", f.text)) {
          fail(f, "the filter '" + f.text + "' is not supported");
        }
        node call = make(node::kind::filter, f, f.text);
        call.kids.push_back(std::move(n));
        call.keys.emplace_back();
        if (accept_op("(")) {
          arguments(call);
        }
        n = std::move(call);
      } else if (accept_name("is")) {
        const bool negated = accept_name("not");
        const token& name = peek();
        if (name.type != tk::name &&
            !(name.type == tk::op && (name.text == "==" || name.text == "!="))) {
          fail(name, "expected a test name, found " + describe(name));
        }
        next();
        if (!known("test", name.text)) {
          fail(name, "the test '" + name.text + "' is not supported");
        }
        node test = make(node::kind::test, name, name.text);
        test.negated = negated;
        test.kids.push_back(std::move(n));
        test.keys.emplace_back();
        const token& a = peek();
        if (accept_op("(")) {
          arguments(test);
        } else if ((a.type == tk::name || a.type == tk::string || a.type == tk::integer ||
                    a.type == tk::number || is_op("[") || is_op("{")) &&
                   !(a.type == tk::name &&
                     (a.text == "else" || a.text == "or" || a.text == "and" || a.text == "is"))) {
          test.keys.emplace_back();
          test.kids.push_back(postfix(primary()));
        }
        n = std::move(test);
      } else {
        return n;
      }
    }
  }

  std::vector<token> t_;
  std::size_t i_ = 0;
};

}  // namespace

}  // namespace jinja

chat_template::chat_template(std::shared_ptr<const impl> p) noexcept : impl_(std::move(p)) {}

chat_template chat_template::parse(std::string_view source) {
  auto p = std::make_shared<impl>();
  p->source = std::string(source);
  p->root = jinja::parser(jinja::lex(source)).parse_template();
  return chat_template(std::move(p));
}

const std::string& chat_template::source() const noexcept { return impl_->source; }

}  // namespace cotensor::lm
