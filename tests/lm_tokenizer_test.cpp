// cotensor::lm::tokenizer against Hugging Face `tokenizers`: the ids and decoded texts that
// `tokenizers` 0.23.3 gave for a corpus of hard cases on three byte-level BPE tokenizers laid
// out as GPT-2's, Llama 3's and Qwen2's (tests/data/lm/make_tokenizers.py made both).

#include "cotensor/lm.hpp"

#include "io/json.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace json = cotensor::detail::json;
using cotensor::lm::tokenizer;

const std::filesystem::path data = std::filesystem::path(COTENSOR_TEST_DATA_DIR) / "lm";

json::value expected() {
  std::ifstream in(data / "expected.json", std::ios::binary);
  REQUIRE(in);
  std::ostringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

std::vector<std::int32_t> ids_of(const json::value& list) {
  std::vector<std::int32_t> ids;
  for (const json::value& id : list.items) {
    ids.push_back(static_cast<std::int32_t>(*id.as_index()));
  }
  return ids;
}

// A file of tests/data/lm/gpt2 with `from` replaced by `to`, written beside the build's tests.
std::filesystem::path
edited(const std::string& name, const std::string& from, const std::string& to) {
  std::ifstream in(data / "gpt2" / "tokenizer.json", std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  const auto at = s.find(from);
  REQUIRE(at != std::string::npos);
  s.replace(at, from.size(), to);
  const auto path = std::filesystem::temp_directory_path() / ("cotensor-lm-" + name + ".json");
  std::ofstream(path, std::ios::binary) << s;
  return path;
}

}  // namespace

TEST_SUITE("lm.tokenizer") {
  TEST_CASE("encode gives the ids of the tokenizers library, decode its text") {
    const json::value want = expected();
    std::map<std::string, tokenizer> loaded;
    int cases = 0;
    for (const json::value& c : want.find("cases")->items) {
      const std::string& name = c.find("tokenizer")->text;
      if (!loaded.contains(name)) {
        loaded.emplace(name, tokenizer::from_file(data / name / "tokenizer.json"));
      }
      const tokenizer& t = loaded.at(name);
      const std::string& text = c.find("text")->text;
      CAPTURE(name);
      CAPTURE(text);
      const std::vector<std::int32_t> ids = ids_of(*c.find("ids"));
      CHECK(t.encode(text) == ids);
      CHECK(t.decode(ids) == c.find("decoded")->text);
      ++cases;
    }
    CHECK(cases >= 50);
    for (const auto& [name, t] : loaded) {
      CAPTURE(name);
      CHECK(t.vocab_size() ==
            static_cast<std::size_t>(*want.find("vocab_size")->find(name)->as_index()));
    }
  }

  TEST_CASE("text_stream gives decode's text in whole characters, id by id") {
    const json::value want = expected();
    std::map<std::string, tokenizer> loaded;
    const auto whole_utf8 = [](const std::string& s) {
      // Each piece is UTF-8 on its own: no lead byte without its continuation bytes at the end.
      std::size_t i = 0;
      while (i < s.size()) {
        const auto b = static_cast<unsigned char>(s[i]);
        const std::size_t n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
        if (i + n > s.size()) {
          return false;
        }
        i += n;
      }
      return true;
    };
    for (const json::value& c : want.find("cases")->items) {
      const std::string& name = c.find("tokenizer")->text;
      if (!loaded.contains(name)) {
        loaded.emplace(name, tokenizer::from_file(data / name / "tokenizer.json"));
      }
      CAPTURE(name);
      CAPTURE(c.find("text")->text);
      cotensor::lm::text_stream stream(loaded.at(name));
      std::string all;
      for (const std::int32_t id : ids_of(*c.find("ids"))) {
        const std::string piece = stream.push(id);
        CHECK(whole_utf8(piece));
        all += piece;
      }
      all += stream.finish();
      CHECK(all == c.find("decoded")->text);
    }
  }

  TEST_CASE("text_stream holds a character until its last byte comes, and ends a cut one") {
    const auto gpt2 = tokenizer::from_file(data / "gpt2" / "tokenizer.json");
    // 日 is E6 97 A5: one byte-level token each in this small vocabulary.
    const auto ids = gpt2.encode("\xE6\x97\xA5");
    REQUIRE(ids.size() == 3);
    cotensor::lm::text_stream stream(gpt2);
    CHECK(stream.push(ids[0]).empty());
    CHECK(stream.push(ids[1]).empty());
    CHECK(stream.push(ids[2]) == "\xE6\x97\xA5");
    CHECK(stream.push(ids[0]).empty());
    CHECK(stream.finish() == "\xEF\xBF\xBD");  // a character cut short
    CHECK(stream.finish().empty());
    // A byte that cannot start a character is replaced at once.
    const auto bad = gpt2.encode("\xFF");
    REQUIRE(bad.size() == 1);
    CHECK(stream.push(bad[0]) == "\xEF\xBF\xBD");
    const std::int32_t past = static_cast<std::int32_t>(gpt2.vocab_size());
    CHECK_THROWS_AS(stream.push(past), std::out_of_range);
  }

  TEST_CASE("special tokens: added by the post-processor, matched in text, skipped by decode") {
    const auto llama3 = tokenizer::from_file(data / "llama3" / "tokenizer.json");
    const std::int32_t bos = llama3.token_to_id("<|begin_of_text|>");
    REQUIRE(bos >= 0);
    CHECK(llama3.is_special(bos));
    const auto ids = llama3.encode("hi");
    REQUIRE(!ids.empty());
    CHECK(ids.front() == bos);
    CHECK(llama3.encode("").size() == 1);
    const auto gpt2 = tokenizer::from_file(data / "gpt2" / "tokenizer.json");
    const std::int32_t eot = gpt2.token_to_id("<|endoftext|>");
    const auto with = gpt2.encode("a<|endoftext|>b");
    CHECK(std::count(with.begin(), with.end(), eot) == 1);
    CHECK(gpt2.decode(with) == "ab");
    CHECK(gpt2.token_to_id("no such token") == -1);
  }

  TEST_CASE("decode turns bytes that are not UTF-8 into U+FFFD, and refuses unknown ids") {
    const auto gpt2 = tokenizer::from_file(data / "gpt2" / "tokenizer.json");
    // The byte-level characters of 0xE6 and 0x97 alone (the first two bytes of 日).
    const auto ids = gpt2.encode("\xE6\x97");
    CHECK(gpt2.decode(ids) == "\xEF\xBF\xBD");
    const std::vector<std::int32_t> past{static_cast<std::int32_t>(gpt2.vocab_size())};
    CHECK_THROWS_AS(gpt2.decode(past), std::out_of_range);
  }

  TEST_CASE("token_bytes: the bytes of each id, part of a character or a special token's text") {
    const auto gpt2 = tokenizer::from_file(data / "gpt2" / "tokenizer.json");
    // Every id's bytes, put together, are the text's bytes, a character split across ids
    // included (日本 in bytes that the merges may cut anywhere).
    const std::string text = "Hello, world! \xE6\x97\xA5\xE6\x9C\xAC and more";
    std::string joined;
    for (const std::int32_t id : gpt2.encode(text)) {
      joined += gpt2.token_bytes(id);
    }
    CHECK(joined == text);
    const auto split = gpt2.encode("\xE6\x97");
    REQUIRE(split.size() == 2);
    CHECK(gpt2.token_bytes(split[0]) == "\xE6");  // where decode gives U+FFFD
    CHECK(gpt2.decode(std::span(split).first(1)) == "\xEF\xBF\xBD");
    CHECK(gpt2.token_bytes(gpt2.token_to_id("\xC4\xA0the")) == " the");  // Ġthe
    const std::int32_t eot = gpt2.token_to_id("<|endoftext|>");
    CHECK(gpt2.token_bytes(eot) == "<|endoftext|>");  // special: as written
    CHECK_THROWS_AS(gpt2.token_bytes(static_cast<std::int32_t>(gpt2.vocab_size())),
                    std::out_of_range);
    CHECK_THROWS_AS(gpt2.token_bytes(-1), std::out_of_range);
  }

  TEST_CASE("what a file asks that is not supported is refused, naming it") {
    CHECK_THROWS_WITH(tokenizer::from_file(data / "no-such-file.json"),
                      doctest::Contains("cannot open"));
    CHECK_THROWS_WITH(
        tokenizer::from_file(edited("wordpiece", "\"type\": \"BPE\"", "\"type\": \"WordPiece\"")),
        doctest::Contains("model type \"WordPiece\""));
    CHECK_THROWS_WITH(tokenizer::from_file(edited("fallback", "\"byte_fallback\": false",
                                                  "\"byte_fallback\": true")),
                      doctest::Contains("byte_fallback"));
    CHECK_THROWS_WITH(tokenizer::from_file(edited("normalizer", "\"normalizer\": null",
                                                  "\"normalizer\": {\"type\": \"NFKC\"}")),
                      doctest::Contains("normalizer \"NFKC\""));
    CHECK_THROWS_WITH(tokenizer::from_file(edited("prefix", "\"add_prefix_space\": false",
                                                  "\"add_prefix_space\": true")),
                      doctest::Contains("add_prefix_space"));
    CHECK_THROWS_WITH(tokenizer::from_file(edited("broken", "\"model\"", "\"model\" oops")),
                      doctest::Contains("not JSON"));
  }
}
