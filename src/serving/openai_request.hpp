#pragma once

// What the OpenAI routes (openai.cpp) read of a request beside its sampling fields
// (read_sampling): the prompts of a completion, each fit to the context, the chat's messages
// rendered with the model's template, streaming, and the fields refused rather than ignored.
// Each throws lm_request_error (400) naming the field.

#include <cotensor/lm.hpp>

#include "serving/lm_state.hpp"

#include <boost/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace cotensor::serving::detail {

// The prompts of a completion request (`prompt`, null when absent): a string, a list of ids, or
// a batch, a list of strings or of lists of ids (at most `most`), each id in the vocabulary. A
// text is refused before tokenizing when its bytes must hold more tokens than `context`.
std::vector<std::vector<std::int32_t>> completion_prompts(const json::value* p,
                                                          const lm::model& m,
                                                          std::int64_t context,
                                                          std::size_t most);

// The chat's `messages` (null when absent), rendered with the model's template and tokenized
// as `transformers`' apply_chat_template does (no special tokens added: the template writes
// them). A model without a template, or messages it refuses, is a 400.
std::vector<std::int32_t>
chat_prompt(const json::value* m, const lm::model& model, std::int64_t context);

// `stream` and `stream_options.include_usage` (only with `stream`).
struct streaming {
  bool stream = false;
  bool include_usage = false;
};
streaming read_streaming(const json::object& o);

// `r` (its sampling read) for each of `prompts`, each fit to the context (fit_context); a
// refusal of one prompt of several names its place ("prompt 2: ...").
std::vector<generation_request>
prompt_requests(const served_lm& s,
                const generation_request& r,
                const std::vector<std::vector<std::int32_t>>& prompts);

// What a request may ask that is not served: refused with 400 naming the field, never ignored
// (an answer computed without it would be silently wrong).
void refuse_unsupported(const json::object& o);

// The texts echoed completions begin with, one for each prompt: the prompt as the request wrote
// it, or, for a prompt of ids, their text (`ids`, as completion_prompts read them).
std::vector<std::string> completion_prompt_texts(const json::value* p,
                                                 const std::vector<std::vector<std::int32_t>>& ids,
                                                 const lm::tokenizer& t);

}  // namespace cotensor::serving::detail
