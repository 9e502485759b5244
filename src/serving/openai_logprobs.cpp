// The log-probabilities of the OpenAI routes' answers, listed as OpenAI's and vLLM's clients
// read them (openai_logprobs.hpp).

#include "serving/openai_logprobs.hpp"

#include <algorithm>

namespace cotensor::serving::detail {

namespace {

// A token as a listing of log-probabilities shows it: its text (an incomplete UTF-8 character's
// bytes as U+FFFD, a special token as written) and, for chat, its bytes.
std::string token_text(const lm::tokenizer& t, std::int32_t id) {
  if (id < 0 || static_cast<std::size_t>(id) >= t.vocab_size()) {
    return {};  // a padded vocabulary's id past the tokenizer's: no text
  }
  return t.is_special(id) ? t.token_bytes(id) : t.decode(std::span(&id, 1));
}

json::array token_bytes(const lm::tokenizer& t, std::int32_t id) {
  json::array out;
  if (id >= 0 && static_cast<std::size_t>(id) < t.vocab_size()) {
    for (const char c : t.token_bytes(id)) {
      out.emplace_back(static_cast<unsigned char>(c));
    }
  }
  return out;
}

// The bytes `id` puts in the completion's text, as decode joins them: none for a special token
// or an id past the tokenizer's.
std::string text_bytes(const lm::tokenizer& t, std::int32_t id) {
  const bool has_text = id >= 0 && static_cast<std::size_t>(id) < t.vocab_size();
  return has_text && !t.is_special(id) ? t.token_bytes(id) : std::string();
}

bool continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0U) == 0x80U; }

}  // namespace

json::object chat_logprobs(const lm::tokenizer& t, std::span<const generated_token> tokens) {
  json::array content;
  for (const generated_token& g : tokens) {
    json::array top;
    for (const lm::token_logprob& alt : g.logprobs.top) {
      top.emplace_back(json::object{{"token", token_text(t, alt.id)},
                                    {"logprob", alt.logprob},
                                    {"bytes", token_bytes(t, alt.id)}});
    }
    content.emplace_back(json::object{{"token", token_text(t, g.id)},
                                      {"logprob", g.logprobs.logprob},
                                      {"bytes", token_bytes(t, g.id)},
                                      {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

namespace {

// /v1/completions' listing as it is made, a token at a time.
struct completion_listing {
  json::array texts;
  json::array own;
  json::array top;
  json::array offsets;

  // `id` with its log-probabilities (null entries for none). `characters` counts a UTF-8 lead
  // byte or ASCII each, of the bytes decode joins: a token's offset is the character its first
  // byte belongs to.
  void add(const lm::tokenizer& t,
           std::int32_t id,
           const lm::token_logprobs* logprobs,
           std::size_t& characters) {
    std::string text = token_text(t, id);
    if (logprobs != nullptr) {
      json::object likeliest;
      for (const lm::token_logprob& alt : logprobs->top) {
        likeliest[token_text(t, alt.id)] = alt.logprob;
      }
      likeliest[text] = logprobs->logprob;
      own.emplace_back(logprobs->logprob);
      top.emplace_back(std::move(likeliest));
    } else {
      own.emplace_back(nullptr);
      top.emplace_back(nullptr);
    }
    const std::string bytes = text_bytes(t, id);
    // A token that begins inside a character (its first byte a continuation) is at it.
    const bool inside = !bytes.empty() && continuation(bytes.front()) && characters > 0;
    offsets.emplace_back(characters - (inside ? 1 : 0));
    characters += static_cast<std::size_t>(
        std::ranges::count_if(bytes, [](char c) { return !continuation(c); }));
    texts.emplace_back(std::move(text));
  }

  json::object done() {
    return {{"tokens", std::move(texts)},
            {"token_logprobs", std::move(own)},
            {"top_logprobs", std::move(top)},
            {"text_offset", std::move(offsets)}};
  }
};

}  // namespace

json::object completion_logprobs(const lm::tokenizer& t,
                                 std::span<const generated_token> tokens,
                                 std::size_t& characters) {
  completion_listing out;
  for (const generated_token& g : tokens) {
    out.add(t, g.id, &g.logprobs, characters);
  }
  return out.done();
}

json::object prompt_logprobs(const lm::tokenizer& t,
                             std::span<const std::int32_t> ids,
                             std::span<const lm::token_logprobs> scored,
                             std::size_t& characters) {
  completion_listing out;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    out.add(t, ids[i], i > 0 && i - 1 < scored.size() ? &scored[i - 1] : nullptr, characters);
  }
  return out.done();
}

void append_logprobs(json::object& a, json::object b) {
  for (auto& [key, entries] : b) {
    json::array& to = a[key].as_array();
    for (json::value& v : entries.as_array()) {
      to.emplace_back(std::move(v));
    }
  }
}

}  // namespace cotensor::serving::detail
