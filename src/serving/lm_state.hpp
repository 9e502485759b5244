#pragma once

// The language models a handler serves: each one's generator and counters (lm_metrics.cpp),
// a request's generation parameters read from JSON, and one generation run to its end with
// its text streamed in pieces (lm_generation.cpp). The OpenAI routes (openai.cpp) and the
// generate extension (generate.cpp) are built on them.

#include <cotensor/lm.hpp>
#include <cotensor/serving.hpp>

#include "serving/http_metrics.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/json.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace cotensor::serving::detail {

namespace json = boost::json;

// The bounds of the language models' latency histograms, in seconds.
inline constexpr std::array<double, 16> lm_latency_bounds = {
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0};

// Counters of one language model, for /metrics (vLLM's equivalents in docs/server.md).
struct lm_counters {
  // From the request read to its first token; between two tokens of one request; from the
  // request read to its last token.
  duration_histogram time_to_first_token{lm_latency_bounds};
  duration_histogram inter_token{lm_latency_bounds};
  duration_histogram e2e{lm_latency_bounds};
  std::atomic<std::uint64_t> prompt_tokens{0};
  std::atomic<std::uint64_t> generation_tokens{0};
  std::atomic<std::uint64_t> success{0};  // requests answered in full, by finish reason:
  std::atomic<std::uint64_t> finished_stop{0};
  std::atomic<std::uint64_t> finished_length{0};
  std::atomic<std::uint64_t> aborted{0};  // client gone, or a failed step
};

// One served language model: the repository's (which outlives the handler), its generator,
// its counters.
struct served_lm {
  explicit served_lm(const language_model& l) : lm(&l), gen(l.model, l.options.generator) {}
  const language_model* lm;
  lm::generator gen;
  lm_counters counters;
};

// The Prometheus text of the language models' counters and their generators' figures.
std::string lm_metrics(const std::vector<const served_lm*>& models);

// A request the routes refuse: the HTTP status, the message and the offending field.
struct lm_request_error : std::runtime_error {
  lm_request_error(int http_status, std::string message, std::string field = {})
      : std::runtime_error(std::move(message)), status(http_status), param(std::move(field)) {}
  int status;
  std::string param;
};

// What a request asks to generate. The fields of OpenAI's requests and of the generate
// extension's `parameters` alike; missing ones keep the defaults of `params`.
struct generation_request {
  std::vector<std::int32_t> prompt;
  lm::sampling_params params;
  bool max_tokens_given = false;  // else `params.max_tokens` is the route's default
  std::size_t choices = 1;        // OpenAI's `n`: completions of the one prompt
  bool echo = false;              // /v1/completions' `echo`: the prompt before each choice's text
};

// The most choices (`n`) one OpenAI request may ask for.
inline constexpr std::size_t max_choices = 16;

// The most stop strings of a request, and their longest.
inline constexpr std::size_t max_stops = 16;
inline constexpr std::size_t max_stop_bytes = 1024;

// The route whose request read_sampling reads: its fields differ.
enum class sampling_route : std::uint8_t {
  generate,     // the generate extension: `logprobs` false or null only
  completions,  // /v1/completions: `logprobs` the count of likeliest tokens, 0 to
                // lm::max_logprobs
  chat,         // /v1/chat/completions: `max_completion_tokens`; `logprobs` true or false,
                // `top_logprobs` 0 to lm::max_logprobs with it
};

// Reads the sampling fields of `o` into `r.params`: `max_tokens` (and, for chat,
// `max_completion_tokens`), `temperature`, `top_p`, `top_k` (-1 or 0: off), `seed`, `stop` (a
// string or a list of strings), `ignore_eos`, `n` (1 to max_choices on the OpenAI routes, only 1
// on the generate extension's), `logprobs` and `top_logprobs` as the route has them, and
// /v1/completions' `echo` (with `logprobs`, the prompt's too: `prompt_logprobs`; with it
// `max_tokens` may be 0, the prompt alone). Throws
// lm_request_error (400) naming the field for a wrong type or a value out of range.
void read_sampling(const json::object& o, generation_request& r, sampling_route route);

// Fits the request to the model's context and to what the KV cache holds of one sequence: a
// prompt that fills either, or `max_tokens` past either, is refused (400, saying the lengths);
// without `max_tokens`, the default is cut to what fits.
void fit_context(const served_lm& s, generation_request& r);

// A generated token with the log-probabilities that came with it (a request that asks for them).
struct generated_token {
  std::int32_t id;
  lm::token_logprobs logprobs;
};

// How a generation ended.
struct generation_result {
  std::string text;  // all the text given to `on_text`, stop text trimmed
  lm::finish_reason reason = lm::finish_reason::none;
  std::size_t completion_tokens = 0;
  std::exception_ptr error;  // of a failed step
  // Every token with its log-probabilities, when the request asks for them; the first
  // `logprobs_given` went to `on_text` with its pieces, the others came after the last.
  std::vector<generated_token> logprobs;
  std::size_t logprobs_given = 0;
};

// What `generate` hands on: a piece of new text, and the tokens (with their log-probabilities,
// when asked for) that came since the last piece; returns false when its client is gone.
using generation_sink =
    std::function<asio::awaitable<bool>(std::string_view, std::span<const generated_token>)>;

// A request submitted to a generator: its sequence, and what `generate` needs of the request.
struct submitted_generation {
  lm::sequence seq;
  std::size_t prompt_size = 0;
  std::vector<std::string> stops;
};

// Submits `r` (one choice: `r.choices` is not read) to `s`'s generator. Throws lm_request_error:
// 503 when the generator's waiting queue is full, 400 when the generator refuses the request.
submitted_generation submit_generation(served_lm& s, generation_request r);

// Runs a submitted request on `s`'s generator to its end: `on_text` gets an empty piece first,
// then each piece of new text (never part of a UTF-8 character; the text of a stop string and
// what could still become one held back), and returns false when its client is gone, which
// cancels the sequence. `prompt_logprobs`, when not null, gets the sequence's
// (`sequence::prompt_logprobs`) once the prompt is computed, and `on_text` then a second empty
// piece, before any text. The end-of-sequence id that ends a sequence counts as a completion
// token and, with log-probabilities, is listed last. Counts the request's tokens and latencies
// from `start`.
asio::awaitable<generation_result>
generate(served_lm& s,
         submitted_generation g,
         std::chrono::steady_clock::time_point start,
         const generation_sink& on_text,
         std::vector<lm::token_logprobs>* prompt_logprobs = nullptr);
// submit_generation, then generate (throws as submit_generation).
asio::awaitable<generation_result> generate(served_lm& s,
                                            generation_request r,
                                            std::chrono::steady_clock::time_point start,
                                            const generation_sink& on_text);

// Counts a request's end as `generate` does: its latency from `start`, and a success (`stop`,
// `length`) or an abort (anything else). For a request `generate` did not run, with
// `cancelled`.
void count_ended(lm_counters& c,
                 std::chrono::steady_clock::time_point start,
                 lm::finish_reason reason);

// Why a generation failed, in words ("the generation failed: ..."); empty unless it did.
std::string failure_message(const generation_result& g);

// "stop", "length", or "abort" (a cancelled or failed sequence).
std::string_view finish_name(lm::finish_reason r) noexcept;

}  // namespace cotensor::serving::detail
