// cotensor::lm::chat_template against Hugging Face `transformers`: what its jinja2 environment
// renders for Qwen2.5's ChatML, Llama 3's and Llama 3.1's templates and a template walking
// through the whole subset (tests/data/lm/make_chat_templates.py recorded them in
// chat_templates/expected.json), the ids `apply_chat_template` gives with the tiny models'
// tokenizers, and the constructs refused at parse time.

#include "cotensor/lm.hpp"

#include "io/json.hpp"
#include "support/lm_fixtures.hpp"

#include <doctest/doctest.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace json = cotensor::detail::json;
using cotensor::lm::chat_message;
using cotensor::lm::chat_template;
using cotensor::lm::model;

const std::filesystem::path& data = cotensor::test::lm_data;
const std::filesystem::path templates = data / "chat_templates";

std::string read_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<chat_message> messages_of(const json::value& list) {
  std::vector<chat_message> out;
  for (const json::value& m : list.items) {
    out.push_back({m.find("role")->text, m.find("content")->text});
  }
  return out;
}

// What parse throws for `source`, or "" if it parses.
std::string parse_error(std::string_view source) {
  try {
    chat_template::parse(source);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

std::string render(std::string_view source, std::vector<chat_message> messages = {}) {
  return chat_template::parse(source).render(messages, true, "<s>", "</s>");
}

using files = std::map<std::string, std::string>;

// A copy of the gpt2-tiny folder, with the files of `extra` added, removed when destroyed.
struct model_folder {
  std::filesystem::path dir;
  explicit model_folder(const files& extra) {
    dir = std::filesystem::temp_directory_path() / "cotensor-lm-chat-template";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    for (const char* f :
         {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"}) {
      std::filesystem::copy_file(data / "gpt2-tiny" / f, dir / f);
    }
    for (const auto& [name, text] : extra) {
      std::ofstream(dir / name, std::ios::binary) << text;
    }
  }
  ~model_folder() { std::filesystem::remove_all(dir); }
  model_folder(const model_folder&) = delete;
  model_folder& operator=(const model_folder&) = delete;
};

// Loads `dir` and waits for its weights (so that the folder may go).
model load_and_wait(const std::filesystem::path& dir) {
  model m = model::load(dir);
  const std::vector<std::int32_t> ids{1};
  (void)m.logits(ids).to_vector<float>();
  return m;
}

}  // namespace

TEST_SUITE("lm.chat_template") {
  TEST_CASE("every rendering transformers recorded is reproduced byte for byte") {
    const json::value expected = json::parse_file(templates / "expected.json", "test");
    const json::value& renders = *expected.find("renders");
    REQUIRE(renders.items.size() >= 64);
    std::map<std::string, chat_template> parsed;
    std::map<std::string, int> per_template;
    for (const json::value& r : renders.items) {
      const std::string file = r.find("template")->text;
      if (!parsed.contains(file)) {
        parsed.emplace(file, chat_template::parse(read_file(templates / file)));
      }
      const json::value* bos = r.find("bos_token");
      const json::value* eos = r.find("eos_token");
      const auto messages = messages_of(*r.find("messages"));
      const bool agp = r.find("add_generation_prompt")->boolean;
      CAPTURE(file);
      CAPTURE(agp);
      CAPTURE(messages.back().content);
      // A null bos_token was not passed; the templates that have none never read it.
      const std::string got = parsed.at(file).render(messages, agp, bos->text, eos->text);
      CHECK(got == r.find("text")->text);
      ++per_template[file];
    }
    for (const char* file :
         {"chatml_qwen2.5.jinja", "llama3.jinja", "llama3.1.jinja", "features.jinja"}) {
      CAPTURE(file);
      CHECK(per_template[file] == 16);
    }
  }

  TEST_CASE("the tiny models' chats tokenize to the ids of transformers' apply_chat_template") {
    const json::value expected = json::parse_file(templates / "expected.json", "test");
    std::map<std::string, model> models;
    for (const char* name : {"qwen2-tiny", "llama-tiny"}) {
      models.emplace(name, model::load(data / name));
    }
    const model& qwen = models.at("qwen2-tiny");
    const model& llama = models.at("llama-tiny");
    REQUIRE(qwen.chat_template() != nullptr);
    REQUIRE(llama.chat_template() != nullptr);
    CHECK(qwen.chat_template()->source() == read_file(templates / "chatml_qwen2.5.jinja"));
    CHECK(llama.chat_template()->source() == read_file(templates / "llama3.jinja"));
    std::size_t checked = 0;
    for (const json::value& entry : expected.find("ids")->items) {
      const model& m = models.at(entry.find("model")->text);
      std::vector<std::int32_t> want;
      for (const json::value& id : entry.find("ids")->items) {
        want.push_back(static_cast<std::int32_t>(*id.as_index()));
      }
      const std::string text = m.render_chat(messages_of(*entry.find("messages")));
      CAPTURE(text);
      CHECK(m.tokenizer().encode(text, false) == want);
      ++checked;
    }
    CHECK(checked == 8);
    // Llama 3's chat holds its one <|begin_of_text|>: encoding it with special tokens doubles it.
    const std::vector<chat_message> hi{{"user", "Hi"}};
    const auto once = llama.tokenizer().encode(llama.render_chat(hi), false);
    const auto twice = llama.tokenizer().encode(llama.render_chat(hi));
    REQUIRE(once.size() + 1 == twice.size());
    CHECK(once[0] == llama.tokenizer().token_to_id("<|begin_of_text|>"));
    CHECK(twice[1] == once[0]);
    CHECK(llama.render_chat(hi, false).ends_with("Hi<|eot_id|>"));
  }

  TEST_CASE("encode without special tokens leaves out only the post-processor's ids") {
    const auto t = cotensor::lm::tokenizer::from_file(data / "llama3" / "tokenizer.json");
    const auto with = t.encode("Hello <|eot_id|> world", true);
    const auto without = t.encode("Hello <|eot_id|> world", false);
    REQUIRE(with.size() == without.size() + 1);
    CHECK(with[0] == t.token_to_id("<|begin_of_text|>"));
    CHECK(std::vector<std::int32_t>(with.begin() + 1, with.end()) == without);
    CHECK(t.encode("Hello") == t.encode("Hello", true));
    CHECK(std::find(without.begin(), without.end(), t.token_to_id("<|eot_id|>")) != without.end());
  }

  TEST_CASE("refused constructs name themselves with their line and column") {
    CHECK(parse_error("line one\n  {{ x | foo }}") ==
          "chat_template: line 2, column 10: the filter 'foo' is not supported");
    CHECK(parse_error("{% macro m() %}{% endmacro %}") ==
          "chat_template: line 1, column 4: the statement 'macro' is not supported");
    CHECK(parse_error("{% for m in messages %}\n{% if m %}x{% endfor %}") ==
          "chat_template: line 2, column 15: unexpected '{% endfor %}': the block opened at "
          "line 2, column 1 is not closed (no '{% endif %}')");
    CHECK(parse_error("a\n{% if x %}\nb") == "chat_template: line 2, column 1: the block opened "
                                             "at line 2, column 1 is not closed (no '{% endif "
                                             "%}')");
    CHECK(parse_error("{{ x is frobbed }}") ==
          "chat_template: line 1, column 9: the test 'frobbed' is not supported");
    CHECK(parse_error("{{ x.frob() }}") ==
          "chat_template: line 1, column 10: the method 'frob' is not supported");
    CHECK(parse_error("{{ cycler(1) }}") ==
          "chat_template: line 1, column 10: the function 'cycler' is not supported");
    CHECK(parse_error("ok\n{{ x ") == "chat_template: line 2, column 1: the tag '{{' is not "
                                      "closed (no '}}')");
    CHECK(parse_error("{# never closed") ==
          "chat_template: line 1, column 1: the comment is not closed (no '#}')");
    CHECK(parse_error("{% endif %}") ==
          "chat_template: line 1, column 4: unexpected '{% endif %}'");
    CHECK(parse_error("{% include 'x.jinja' %}").find("the statement 'include'") !=
          std::string::npos);
    CHECK(parse_error("{% set x %}y{% endset %}").find("block assignments") != std::string::npos);
    CHECK(parse_error("{{ 'abc }}").find("the string is not closed") != std::string::npos);
    CHECK(parse_error("{{ a b }}").find("expected '}}'") != std::string::npos);
    // Columns count characters, not bytes.
    CHECK(parse_error("日本 {{ x|nope }}").find("column 9:") != std::string::npos);
  }

  TEST_CASE("raise_exception surfaces the template's own message") {
    CHECK_THROWS_WITH_AS(render("{% if messages[0].role != 'user' %}{{ raise_exception('Only "
                                "user roles!') }}{% endif %}",
                                {{"system", "s"}}),
                         "Only user roles!", std::runtime_error);
    CHECK(render("{% if messages[0].role != 'user' %}{{ raise_exception('x') }}{% endif %}ok",
                 {{"user", "u"}}) == "ok");
  }

  TEST_CASE("runtime errors say where and what, as Python would") {
    CHECK_THROWS_WITH_AS(render("\n  {{ 1 + 'a' }}"),
                         "chat_template: line 2, column 8: unsupported operand type(s) for +: "
                         "'int' and 'str'",
                         std::runtime_error);
    CHECK_THROWS_WITH_AS(render("{{ 'a' + nope }}"),
                         "chat_template: line 1, column 8: 'nope' is undefined",
                         std::runtime_error);
    CHECK_THROWS_WITH_AS(render("{{ nope.attr }}"),
                         "chat_template: line 1, column 9: 'nope' is undefined",
                         std::runtime_error);
    CHECK_THROWS_WITH_AS(render("{{ 1 < 'a' }}"), doctest::Contains("'<' not supported"),
                         std::runtime_error);
    CHECK_THROWS_WITH_AS(render("{{ nope | tojson }}"),
                         doctest::Contains("Undefined is not JSON serializable"),
                         std::runtime_error);
    CHECK_THROWS_WITH_AS(render("{% for x in none %}{% endfor %}"),
                         doctest::Contains("'NoneType' object is not iterable"),
                         std::runtime_error);
  }

  TEST_CASE("undefined values print as nothing and are falsy") {
    CHECK(render("[{{ nope }}]{% if nope %}x{% else %}y{% endif %}{{ nope is defined }}") ==
          "[]yFalse");
    CHECK(render("{{ messages[5] }}|{{ messages[0].nope }}|{{ messages[0].nope | length }}",
                 {{"user", "u"}}) == "||0");
    CHECK(render("{% for x in nope %}x{% else %}none{% endfor %}") == "none");
  }

  TEST_CASE("strftime_now formats the current local time") {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    const std::string year = std::to_string(local.tm_year + 1900);
    const std::string got = render("{{ strftime_now('%Y') }}");
    CHECK((got == year || got == std::to_string(local.tm_year + 1901)));
  }

  TEST_CASE("a model without a chat template has none, and render_chat throws logic_error") {
    const model m = model::load(data / "gpt2-tiny");
    CHECK(m.chat_template() == nullptr);
    const std::vector<chat_message> hi{{"user", "hi"}};
    CHECK_THROWS_AS(m.render_chat(hi), std::logic_error);
  }

  TEST_CASE("a folder's template: chat_template.jinja first, a list's default, bad ones refused") {
    const std::vector<chat_message> hi{{"user", "hi"}};
    SUBCASE("a template that does not parse makes load throw naming tokenizer_config.json") {
      const model_folder f(files{
          {"tokenizer_config.json", R"({"chat_template": "{{ bos_token }}\n{{ x | foo }}"})"}});
      CHECK_THROWS_WITH_AS(model::load(f.dir),
                           doctest::Contains("tokenizer_config.json: chat_template: line 2, "
                                             "column 8: the filter 'foo' is not supported"),
                           std::runtime_error);
    }
    SUBCASE("a bad chat_template.jinja is named") {
      const model_folder f(files{{"chat_template.jinja", "{% if %}"}});
      CHECK_THROWS_WITH_AS(model::load(f.dir), doctest::Contains("chat_template.jinja"),
                           std::runtime_error);
    }
    SUBCASE("chat_template.jinja takes precedence over tokenizer_config.json") {
      const model_folder f(files{
          {"chat_template.jinja", "J{{ bos_token }}{{ messages[0].content }}{{ eos_token }}\n"},
          {"tokenizer_config.json",
           R"({"chat_template": "T", "bos_token": {"content": "<b>", "special": true},
                "eos_token": "<e>"})"}});
      const model m = load_and_wait(f.dir);
      CHECK(m.render_chat(hi) == "J<b>hi<e>");
    }
    SUBCASE("a list of named templates: the default") {
      const model_folder f(files{{"tokenizer_config.json",
                                  R"({"chat_template": [{"name": "tool_use", "template": "tools"},
                                  {"name": "default", "template": "D{{ bos_token }}|"}]})"}});
      const model m = load_and_wait(f.dir);
      CHECK(m.render_chat(hi) == "D|");  // no bos_token: undefined, printed as nothing
    }
  }
}
