// A language-model request's parameters read from JSON, and one generation run to its end:
// tokens awaited one at a time, their text streamed with stop strings trimmed.

// GCC 12 pairs the coroutine frame's allocation with Asio's sized operator delete and warns of a
// mismatch that is not there (GCC bug 109224, fixed in GCC 13).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#include "serving/lm_state.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

namespace cotensor::serving::detail {

namespace {

using clock_type = std::chrono::steady_clock;

[[noreturn]] void refuse(std::string_view param, const std::string& what) {
  throw lm_request_error(400, "'" + std::string(param) + "' " + what, std::string(param));
}

// The field `name` of `o`, or null when it is absent or JSON null.
const json::value* field(const json::object& o, std::string_view name) {
  const json::value* v = o.if_contains(name);
  return v == nullptr || v->is_null() ? nullptr : v;
}

std::int64_t integer(const json::value& v, std::string_view name) {
  if (v.is_int64()) {
    return v.get_int64();
  }
  if (v.is_uint64()) {
    refuse(name, "is too large");
  }
  if (v.is_double() && std::nearbyint(v.get_double()) == v.get_double() &&
      std::abs(v.get_double()) < 9.0e15) {
    return static_cast<std::int64_t>(v.get_double());
  }
  refuse(name, "must be an integer");
}

double number(const json::value& v, std::string_view name) {
  if (v.is_number()) {
    return v.to_number<double>();
  }
  refuse(name, "must be a number");
}

bool boolean(const json::value& v, std::string_view name) {
  if (!v.is_bool()) {
    refuse(name, "must be true or false");
  }
  return v.get_bool();
}

// The length of the longest end of `text` that begins one of `stops` (and is not all of it).
std::size_t stop_prefix_at_end(std::string_view text, const std::vector<std::string>& stops) {
  std::size_t longest = 0;
  for (const auto& stop : stops) {
    for (std::size_t n = std::min(stop.size() - 1, text.size()); n > longest; --n) {
      if (text.ends_with(std::string_view(stop).substr(0, n))) {
        longest = n;
        break;
      }
    }
  }
  return longest;
}

}  // namespace

void read_sampling(const json::object& o, generation_request& r, sampling_route route) {
  auto& p = r.params;
  const bool chat = route == sampling_route::chat;
  if (const auto* v = field(o, "echo")) {
    if (route != sampling_route::completions && boolean(*v, "echo")) {
      refuse("echo", "is only supported on /v1/completions");
    }
    r.echo = boolean(*v, "echo");
  }
  // Chat's max_completion_tokens, which OpenAI's chat API has in place of the deprecated
  // max_tokens, wins where both are given (as in vLLM).
  std::string_view max_name = chat ? "max_completion_tokens" : "max_tokens";
  const json::value* max_tokens = field(o, max_name);
  if (chat && max_tokens == nullptr) {
    max_name = "max_tokens";
    max_tokens = field(o, max_name);
  }
  if (max_tokens != nullptr) {
    const std::int64_t n = integer(*max_tokens, max_name);
    if (n < (r.echo ? 0 : 1)) {
      refuse(max_name, "must be at least " + std::string(r.echo ? "0" : "1 (0 with echo)") +
                           ", not " + std::to_string(n));
    }
    p.max_tokens = static_cast<int>(std::min<std::int64_t>(n, std::numeric_limits<int>::max()));
    r.max_tokens_given = true;
  }
  if (const auto* v = field(o, "temperature")) {
    const double t = number(*v, "temperature");
    if (!(t >= 0.0 && t <= 100.0)) {
      refuse("temperature", "must be between 0 and 100");
    }
    p.temperature = static_cast<float>(t);
  }
  if (const auto* v = field(o, "top_p")) {
    const double t = number(*v, "top_p");
    if (!(t > 0.0 && t <= 1.0)) {
      refuse("top_p", "must be in (0, 1]");
    }
    p.top_p = static_cast<float>(t);
  }
  if (const auto* v = field(o, "top_k")) {
    const std::int64_t k = integer(*v, "top_k");
    if (k < -1 || k > std::numeric_limits<int>::max()) {
      refuse("top_k", "must be -1 (off), 0 (off) or a positive count");
    }
    p.top_k = k < 0 ? 0 : static_cast<int>(k);
  }
  for (const auto& [name, penalty] : {std::pair{"presence_penalty", &p.presence_penalty},
                                      std::pair{"frequency_penalty", &p.frequency_penalty}}) {
    if (const auto* v = field(o, name)) {
      const double x = number(*v, name);
      if (!(x >= -2.0 && x <= 2.0)) {
        refuse(name, "must be between -2 and 2");
      }
      *penalty = static_cast<float>(x);
    }
  }
  if (const auto* v = field(o, "repetition_penalty")) {
    const double x = number(*v, "repetition_penalty");
    if (!(x <= std::numeric_limits<float>::max() && static_cast<float>(x) > 0.0F)) {
      refuse("repetition_penalty", "must be above 0 (1: none) and within float's range");
    }
    p.repetition_penalty = static_cast<float>(x);
  }
  if (const auto* v = field(o, "logit_bias")) {
    if (!v->is_object()) {
      refuse("logit_bias", "must be an object of token ids to numbers");
    }
    for (const auto& [key, value] : v->get_object()) {
      std::int32_t id = 0;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (ec != std::errc{} || end != key.data() + key.size() || id < 0) {
        refuse("logit_bias", "keys must be token ids, not '" + std::string(key) + "'");
      }
      const double bias = number(value, "logit_bias");
      if (!(bias >= -100.0 && bias <= 100.0)) {
        refuse("logit_bias", "values must be between -100 and 100");
      }
      p.logit_bias.emplace_back(id, static_cast<float>(bias));
    }
    // "1" and "01" are two keys of one id.
    std::vector<std::int32_t> ids;
    for (const auto& [id, bias] : p.logit_bias) {
      ids.push_back(id);
    }
    std::ranges::sort(ids);
    if (const auto twice = std::ranges::adjacent_find(ids); twice != ids.end()) {
      refuse("logit_bias", "names id " + std::to_string(*twice) + " twice");
    }
  }
  if (const auto* v = field(o, "seed")) {
    p.seed = static_cast<std::uint64_t>(integer(*v, "seed"));
  }
  if (const auto* v = field(o, "stop")) {
    if (v->is_string()) {
      p.stop.emplace_back(v->get_string());
    } else if (v->is_array()) {
      for (const auto& s : v->get_array()) {
        if (!s.is_string()) {
          refuse("stop", "must be a string or a list of strings");
        }
        p.stop.emplace_back(s.get_string());
      }
    } else {
      refuse("stop", "must be a string or a list of strings");
    }
    if (std::ranges::any_of(p.stop, [](const std::string& s) { return s.empty(); })) {
      refuse("stop", "must not hold an empty string");
    }
    // Every token is checked against every stop string, on the generator's thread too: bounded.
    if (p.stop.size() > max_stops || std::ranges::any_of(p.stop, [](const std::string& s) {
          return s.size() > max_stop_bytes;
        })) {
      refuse("stop", "may hold at most " + std::to_string(max_stops) + " strings of at most " +
                         std::to_string(max_stop_bytes) + " bytes");
    }
  }
  if (const auto* v = field(o, "ignore_eos")) {
    p.ignore_eos = boolean(*v, "ignore_eos");
  }
  if (const auto* v = field(o, "n")) {
    const std::int64_t n = integer(*v, "n");
    if (route == sampling_route::generate && n != 1) {
      refuse("n", "must be 1 on this route (use /v1/completions or /v1/chat/completions)");
    }
    if (n < 1 || n > static_cast<std::int64_t>(max_choices)) {
      refuse("n", "must be between 1 and " + std::to_string(max_choices));
    }
    r.choices = static_cast<std::size_t>(n);
  }
  // Log-probabilities: a count on /v1/completions, a flag (and top_logprobs' count) on chat.
  const auto count = [](const json::value& v, std::string_view name) {
    const std::int64_t n = integer(v, name);
    if (n < 0 || n > lm::max_logprobs) {
      refuse(name, "must be between 0 and " + std::to_string(lm::max_logprobs));
    }
    return static_cast<int>(n);
  };
  const json::value* logprobs = field(o, "logprobs");
  const json::value* top = field(o, "top_logprobs");
  switch (route) {
  case sampling_route::generate:
    if (logprobs != nullptr && !(logprobs->is_bool() && !logprobs->get_bool())) {
      refuse("logprobs", "is not supported on this route (use /v1/completions)");
    }
    if (top != nullptr) {
      refuse("top_logprobs", "is not supported on this route (use /v1/chat/completions)");
    }
    break;
  case sampling_route::completions:
    if (logprobs != nullptr && !(logprobs->is_bool() && !logprobs->get_bool())) {
      p.logprobs = count(*logprobs, "logprobs");
      if (r.echo) {
        p.prompt_logprobs = p.logprobs;  // the echoed prompt's are listed too
      }
    }
    if (top != nullptr) {
      refuse("top_logprobs", "is a chat field: /v1/completions takes the count as 'logprobs'");
    }
    break;
  case sampling_route::chat:
    if (logprobs != nullptr && boolean(*logprobs, "logprobs")) {
      p.logprobs = top != nullptr ? count(*top, "top_logprobs") : 0;
    } else if (top != nullptr) {
      refuse("top_logprobs", "needs \"logprobs\": true");
    }
    break;
  }
}

void fit_context(const served_lm& s, generation_request& r) {
  const auto context = static_cast<std::size_t>(s.gen.context_length());
  const std::size_t prompt = r.prompt.size();
  // A sequence holds cache blocks for its prompt and `max_tokens` from its admission on.
  const auto& g = s.lm->options.generator;
  const std::size_t cache = s.gen.stats().kv_blocks_total * static_cast<std::size_t>(g.block_size);
  if (prompt == 0) {
    throw lm_request_error(400, "the prompt is empty", "prompt");
  }
  if (prompt >= context) {
    throw lm_request_error(400,
                           "this model's maximum context length is " + std::to_string(context) +
                               " tokens; the prompt has " + std::to_string(prompt) +
                               " tokens, leaving none to generate",
                           "prompt");
  }
  if (!r.max_tokens_given) {
    // The default: the route's, cut to what the context and the cache hold.
    const std::size_t room = std::min(context, cache);
    if (prompt >= room) {
      throw lm_request_error(400,
                             "the KV cache holds " + std::to_string(cache) +
                                 " tokens of one sequence; the prompt has " +
                                 std::to_string(prompt),
                             "prompt");
    }
    r.params.max_tokens =
        static_cast<int>(std::min(static_cast<std::size_t>(r.params.max_tokens), room - prompt));
    return;
  }
  const auto wanted = static_cast<std::size_t>(r.params.max_tokens);
  if (prompt + wanted > context) {
    throw lm_request_error(400,
                           "this model's maximum context length is " + std::to_string(context) +
                               " tokens; you requested " + std::to_string(prompt + wanted) +
                               " tokens (" + std::to_string(prompt) + " in the prompt, " +
                               std::to_string(wanted) + " for the completion)",
                           "max_tokens");
  }
  if (prompt + wanted > cache) {
    throw lm_request_error(
        400,
        "the KV cache holds " + std::to_string(cache) + " tokens of one sequence; you requested " +
            std::to_string(prompt + wanted) + " (" + std::to_string(prompt) + " in the prompt, " +
            std::to_string(wanted) + " for the completion): ask for fewer, or raise kv_cache_bytes",
        "max_tokens");
  }
}

std::string failure_message(const generation_result& g) {
  if (g.reason != lm::finish_reason::error) {
    return {};
  }
  try {
    if (g.error) {
      std::rethrow_exception(g.error);
    }
  } catch (const std::exception& e) {
    return std::string("the generation failed: ") + e.what();
  } catch (...) {
  }
  return "the generation failed";
}

std::string_view finish_name(lm::finish_reason r) noexcept {
  switch (r) {
  case lm::finish_reason::stop:
    return "stop";
  case lm::finish_reason::length:
    return "length";
  default:
    return "abort";
  }
}

submitted_generation submit_generation(served_lm& s, generation_request r) {
  submitted_generation g{.seq = {}, .prompt_size = r.prompt.size(), .stops = r.params.stop};
  for (const auto& [id, bias] : r.params.logit_bias) {
    if (id >= s.lm->model.vocab_size()) {
      throw lm_request_error(400,
                             "'logit_bias' holds id " + std::to_string(id) +
                                 ", past the model's vocabulary of " +
                                 std::to_string(s.lm->model.vocab_size()),
                             "logit_bias");
    }
  }
  try {
    g.seq = s.gen.submit(std::move(r.prompt), std::move(r.params));
  } catch (const std::length_error& e) {
    throw lm_request_error(503, std::string("the server is busy: ") + e.what());
  } catch (const std::invalid_argument& e) {
    throw lm_request_error(400, e.what());
  } catch (const std::out_of_range& e) {
    throw lm_request_error(400, e.what(), "prompt");
  }
  return g;
}

void count_ended(lm_counters& c, clock_type::time_point start, lm::finish_reason reason) {
  c.e2e.observe(clock_type::now() - start);
  if (reason == lm::finish_reason::stop || reason == lm::finish_reason::length) {
    ++(reason == lm::finish_reason::stop ? c.finished_stop : c.finished_length);
    ++c.success;
  } else {
    ++c.aborted;
  }
}

asio::awaitable<generation_result> generate(served_lm& s,
                                            generation_request r,
                                            clock_type::time_point start,
                                            const generation_sink& on_text) {
  co_return co_await generate(s, submit_generation(s, std::move(r)), start, on_text);
}

asio::awaitable<generation_result> generate(served_lm& s,
                                            submitted_generation submitted,
                                            clock_type::time_point start,
                                            const generation_sink& on_text,
                                            std::vector<lm::token_logprobs>* prompt_logprobs) {
  lm::sequence seq = std::move(submitted.seq);
  const std::vector<std::string>& stops = submitted.stops;
  s.counters.prompt_tokens += submitted.prompt_size;

  generation_result out;
  // Counted however the coroutine ends: a cancellation that comes between two waits throws
  // from the next one, and the frame is destroyed without reaching the end.
  struct count_end {
    lm_counters& c;
    clock_type::time_point start;
    const lm::finish_reason& reason;
    ~count_end() { count_ended(c, start, reason); }
  } const counted{s.counters, start, out.reason};
  lm::text_stream pieces(s.lm->model.tokenizer());
  const std::size_t vocabulary = s.lm->model.tokenizer().vocab_size();
  // Submitted: the client hears so now (a stream's head; nothing for a whole answer).
  if (!co_await on_text({}, {})) {
    out.reason = lm::finish_reason::cancelled;
    co_return out;
  }
  std::string text;      // every token's text so far
  std::size_t sent = 0;  // of `text`, given to on_text
  bool stopped = false;  // a stop string found: nothing more is sent
  auto last = clock_type::now();
  // Sends what is safe to send of `text`: up to a stop string found (then ends), or all but
  // an end that could still become one.
  const auto send = [&](bool at_end) -> asio::awaitable<bool> {
    std::size_t upto = text.size();
    if (!stops.empty()) {
      const std::size_t from = sent > 0 ? sent - std::min(sent, std::size_t{256}) : 0;
      for (const auto& stop : stops) {
        const auto at = std::string_view(text).find(stop, from);
        if (at != std::string_view::npos && at < upto) {
          upto = at;
          stopped = true;
        }
      }
      if (!stopped && !at_end) {
        upto -= stop_prefix_at_end(text, stops);
      }
    }
    upto = std::max(upto, sent);
    if (upto == sent) {
      co_return true;
    }
    const std::string_view piece = std::string_view(text).substr(sent, upto - sent);
    out.text.append(piece);
    sent = upto;
    // The tokens since the last piece go with this one.
    const std::span<const generated_token> tokens =
        std::span<const generated_token>(out.logprobs).subspan(out.logprobs_given);
    out.logprobs_given = out.logprobs.size();
    co_return co_await on_text(piece, tokens);
  };

  for (bool first = true;; first = false) {
    auto [ec, id] = co_await seq.async_next(asio::as_tuple(asio::use_awaitable));
    if (first && prompt_logprobs != nullptr) {
      *prompt_logprobs = seq.prompt_logprobs();  // the prompt is computed (or it never will be)
      if (!ec && !co_await on_text({}, {})) {    // which the client hears now
        seq.cancel();
        out.reason = lm::finish_reason::cancelled;
        break;
      }
    }
    if (ec) {
      // Cancelled: the client left (the wait's cancellation cancelled the sequence too).
      out.reason = ec == asio::error::operation_aborted ? lm::finish_reason::cancelled
                                                        : lm::finish_reason::error;
      out.error = seq.error();
      break;
    }
    if (!id) {
      // An end-of-sequence id is not delivered, but counted (as vLLM counts it) and listed
      // last, without text, when log-probabilities are asked for.
      if (auto end = seq.end_token()) {
        ++out.completion_tokens;
        ++s.counters.generation_tokens;
        if (end->logprobs) {
          out.logprobs.push_back({end->id, std::move(*end->logprobs)});
        }
      }
      text += pieces.finish();
      out.reason = seq.finish_reason();
      if (!co_await send(true)) {
        out.reason = lm::finish_reason::cancelled;
      } else if (stopped) {
        out.reason = lm::finish_reason::stop;
      }
      break;
    }
    const auto now = clock_type::now();
    (out.completion_tokens == 0 ? s.counters.time_to_first_token : s.counters.inter_token)
        .observe(now - (out.completion_tokens == 0 ? start : last));
    last = now;
    ++out.completion_tokens;
    ++s.counters.generation_tokens;
    if (auto lp = seq.logprobs()) {
      out.logprobs.push_back({*id, std::move(*lp)});
    }
    // A padded vocabulary (Qwen2's 151,936 ids for 151,665 tokens) can sample an id the
    // tokenizer lacks: it has no text.
    if (static_cast<std::size_t>(*id) < vocabulary) {
      text += pieces.push(*id);
    }
    if (!co_await send(false)) {
      seq.cancel();
      out.reason = lm::finish_reason::cancelled;
      break;
    }
    if (stopped) {
      seq.cancel();  // the generator ends there too; this frees the blocks without a step
      out.reason = lm::finish_reason::stop;
      break;
    }
  }
  co_return out;
}

}  // namespace cotensor::serving::detail
