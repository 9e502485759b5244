#pragma once

// The `logprobs` of a choice of the OpenAI routes (openai.cpp): the generated tokens with their
// log-probabilities (lm_generation.cpp gives them), listed in each route's shape.

#include <cotensor/lm.hpp>

#include "serving/lm_state.hpp"

#include <boost/json.hpp>

#include <cstddef>
#include <span>

namespace cotensor::serving::detail {

// /v1/chat/completions' `logprobs` of `tokens`: {"content": [{token, logprob, bytes,
// top_logprobs: [{token, logprob, bytes}]}]}. A token's text is its bytes as UTF-8, an
// incomplete character's as U+FFFD, a special token's as written.
json::object chat_logprobs(const lm::tokenizer& t, std::span<const generated_token> tokens);

// /v1/completions' `logprobs` of `tokens`: {"tokens", "token_logprobs", "top_logprobs" (each
// token's likeliest and the token itself, text to log-probability: tokens of the same text
// share an entry, as in OpenAI's and vLLM's), "text_offset"}. `characters` counts those of the
// completion's text begun before the first token, and is left counting past the last: a
// stream's chunks pass it on.
json::object completion_logprobs(const lm::tokenizer& t,
                                 std::span<const generated_token> tokens,
                                 std::size_t& characters);

// The same listing for an echoed prompt (`echo`): `ids` with `scored`, the log-probabilities of
// every id after the first (sequence::prompt_logprobs); the first id's `token_logprobs` and
// `top_logprobs` entries are null, as in OpenAI's and vLLM's. `characters` as above (0 at the
// prompt's start).
json::object prompt_logprobs(const lm::tokenizer& t,
                             std::span<const std::int32_t> ids,
                             std::span<const lm::token_logprobs> scored,
                             std::size_t& characters);

// `b`'s entries after `a`'s, in each of the listing's arrays.
void append_logprobs(json::object& a, json::object b);

}  // namespace cotensor::serving::detail
