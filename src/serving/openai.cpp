// The OpenAI-compatible routes of the language models: GET /v1/models[/{id}],
// POST /v1/completions and POST /v1/chat/completions, whole or streamed as server-sent events
// (each chunk `data: {json}`, then `data: [DONE]`), errors in OpenAI's shape.

// GCC 12 pairs the coroutine frame's allocation with Asio's sized operator delete and warns of a
// mismatch that is not there (GCC bug 109224, fixed in GCC 13).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#include "serving/handler_state.hpp"
#include "serving/openai_logprobs.hpp"
#include "serving/openai_request.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/channel.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <span>

namespace cotensor::serving::detail {

namespace {

std::int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// "cmpl-" and 24 hex digits: a random start, then a counter.
std::string completion_id(std::string_view prefix) {
  static const std::uint64_t base = std::random_device{}() * 0x9E3779B97F4A7C15ULL;
  static std::atomic<std::uint64_t> next{0};
  char digits[25];
  std::snprintf(digits, sizeof digits, "%016llx%08llx", static_cast<unsigned long long>(base),
                static_cast<unsigned long long>(next.fetch_add(1) & 0xFFFFFFFFULL));
  return std::string(prefix) + digits;
}

json::object usage(std::size_t prompt, std::size_t completion) {
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion}};
}

json::object failure_body(std::string_view message) {
  return {{"message", message}, {"type", "server_error"}, {"param", nullptr}, {"code", 500}};
}

std::string event(const json::value& v) { return "data: " + json::serialize(v) + "\n\n"; }

}  // namespace

handler::response handler_state::openai_error(const handler::request& req,
                                              int status,
                                              std::string_view message,
                                              std::string_view param) const {
  // OpenAI's types: every 4xx is an invalid request.
  const std::string_view type = status < 500    ? "invalid_request_error"
                                : status == 503 ? "service_unavailable_error"
                                                : "server_error";
  json::object e{{"message", message},
                 {"type", type},
                 {"param", param.empty() ? json::value(nullptr) : json::value(param)},
                 {"code", status}};
  auto res =
      reply(req, static_cast<http::status>(status), json::serialize(json::object{{"error", e}}));
  if (status == 503) {
    res.set(http::field::retry_after, "1");
  }
  return res;
}

asio::awaitable<std::optional<handler::response>>
handler_state::openai(const handler::request& req, handler::response_stream& out) {
  const std::string_view target(req.target().data(), req.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  const bool get = req.method() == http::verb::get || req.method() == http::verb::head;
  if (path == "/v1/models" || path.starts_with("/v1/models/")) {
    if (!get) {
      auto res = openai_error(req, 405, "method not allowed; use GET");
      res.set(http::field::allow, "GET");
      co_return res;
    }
    const auto card = [](const served_lm& s) {
      return json::object{{"id", s.lm->name},
                          {"object", "model"},
                          {"created", 0},
                          {"owned_by", "cotensor"},
                          {"max_model_len", s.gen.context_length()}};
    };
    if (path == "/v1/models") {
      json::array data;
      for (const auto& [name, s] : lms_) {
        data.emplace_back(card(*s));
      }
      co_return reply(req, http::status::ok,
                      json::serialize(json::object{{"object", "list"}, {"data", data}}));
    }
    const std::string_view id = path.substr(std::string_view("/v1/models/").size());
    if (served_lm* s = find_lm(id)) {
      co_return reply(req, http::status::ok, json::serialize(card(*s)));
    }
    co_return openai_error(req, 404, "the model '" + std::string(id) + "' does not exist", "model");
  }
  const bool chat = path == "/v1/chat/completions";
  if (!chat && path != "/v1/completions") {
    co_return openai_error(req, 404, "no such route: " + std::string(path));
  }
  if (req.method() != http::verb::post) {
    auto res = openai_error(req, 405, "method not allowed; use POST");
    res.set(http::field::allow, "POST");
    co_return res;
  }
  boost::system::error_code ec;
  const json::value body = json::parse(req.body(), ec);
  if (ec || !body.is_object()) {
    co_return openai_error(req, 400,
                           ec ? "the body is not valid JSON: " + ec.message()
                              : std::string("the body must be a JSON object"));
  }
  const json::object& o = body.get_object();
  const json::value* model = o.if_contains("model");
  if (model == nullptr || !model->is_string()) {
    co_return openai_error(req, 400, "'model' must be the name of a model", "model");
  }
  served_lm* s = find_lm(model->get_string());
  if (s == nullptr) {
    co_return openai_error(
        req, 404, "the model '" + std::string(model->get_string()) + "' does not exist", "model");
  }
  co_return co_await openai_generate(req, *s, chat, o, out);
}

asio::awaitable<std::optional<handler::response>>
handler_state::openai_generate(const handler::request& req,
                               served_lm& s,
                               bool chat,
                               const json::object& o,
                               handler::response_stream& out) {
  const auto start = std::chrono::steady_clock::now();
  if (!ready_) {
    co_return openai_error(req, 503, "the server is shutting down");
  }
  generation_request r;
  std::vector<std::vector<std::int32_t>> prompts;  // a completion's batch, or the chat's one
  std::vector<generation_request> requests;        // one for each prompt
  streaming streamed;
  try {
    // The default: the model's (cotensor.json), else OpenAI's 16 for completions and what fits
    // for chat.
    const std::size_t fallback =
        chat ? static_cast<std::size_t>(s.gen.context_length()) : std::size_t{16};
    const std::size_t configured = s.lm->options.default_max_tokens;
    r.params.max_tokens = static_cast<int>(configured > 0 ? configured : fallback);
    read_sampling(o, r, chat ? sampling_route::chat : sampling_route::completions);
    streamed = read_streaming(o);
    refuse_unsupported(o);
    // A request that can never be taken whole is a 400, not a 503 to retry without end: its
    // sequences are submitted at once, so all of them wait at first.
    const std::size_t capacity = s.lm->options.generator.max_waiting;
    if (r.choices > capacity) {
      throw lm_request_error(400,
                             "'n' is " + std::to_string(r.choices) + ", past the " +
                                 std::to_string(capacity) +
                                 " sequences this model queues at once (max_waiting)",
                             "n");
    }
    prompts = co_await off_loop([&]() -> std::vector<std::vector<std::int32_t>> {
      const std::int64_t context = s.gen.context_length();
      if (chat) {
        return {chat_prompt(o.if_contains("messages"), s.lm->model, context)};
      }
      return completion_prompts(o.if_contains("prompt"), s.lm->model, context,
                                capacity / r.choices);
    });
    requests = prompt_requests(s, r, prompts);
  } catch (const lm_request_error& e) {
    co_return openai_error(req, e.status, e.what(), e.param);
  }
  const bool stream = streamed.stream;
  const bool include_usage = streamed.include_usage;
  // The echoed prompts.
  const bool echo = r.echo;
  const std::vector<std::string> echo_texts =
      echo ? completion_prompt_texts(o.if_contains("prompt"), prompts, s.lm->model.tokenizer())
           : std::vector<std::string>{};

  // Every choice is submitted before anything is answered: a refusal (a full queue) refuses the
  // request whole, and the choices submitted before it are cancelled as they go. Choice k is
  // sample k % n of prompt k / n (OpenAI's order) and samples under seed + k % n, so a prompt's
  // choices differ and a seed still gives the same answer.
  const std::size_t n = r.choices;
  const std::size_t choices = prompts.size() * n;
  std::size_t prompt_tokens = 0;
  for (const auto& p : prompts) {
    prompt_tokens += p.size();
  }
  const bool logprobs = r.params.logprobs.has_value();
  std::vector<submitted_generation> submitted;
  try {
    for (std::size_t k = 0; k < choices; ++k) {
      generation_request& of = requests[k / n];
      generation_request one = k % n + 1 < n ? of : std::move(of);
      if (one.params.seed) {
        *one.params.seed += k % n;
      }
      submitted.push_back(submit_generation(s, std::move(one)));
    }
  } catch (const lm_request_error& e) {
    co_return openai_error(req, e.status, e.what(), e.param);
  }
  // A choice whose coroutine never begins (the client gone before the choices start, or before the
  // stream's head is written: Asio's cancellation stops a coroutine at its first step) is counted
  // as generate counts a cancelled one, however this coroutine ends.
  struct count_unbegun {
    served_lm& s;
    clock_type::time_point start;
    std::vector<bool> begun;
    ~count_unbegun() {
      for (const bool b : begun) {
        if (!b) {
          count_ended(s.counters, start, lm::finish_reason::cancelled);
        }
      }
    }
  } counted{s, start, std::vector<bool>(choices, false)};

  const std::string id = completion_id(chat ? "chatcmpl-" : "cmpl-");
  const std::int64_t created = unix_seconds();
  const std::string_view object = chat ? "chat.completion.chunk" : "text_completion";
  const lm::tokenizer& tokenizer = s.lm->model.tokenizer();
  // Each choice's characters begun so far (completion_logprobs's text_offset).
  std::vector<std::size_t> text_offsets(choices, 0);
  // Choice i's `logprobs` for `tokens`: null when the request asks for none.
  const auto logprobs_of = [&](std::size_t i,
                               std::span<const generated_token> tokens) -> json::value {
    if (!logprobs) {
      return nullptr;
    }
    if (chat) {
      return chat_logprobs(tokenizer, tokens);
    }
    return completion_logprobs(tokenizer, tokens, text_offsets[i]);
  };
  // Choice i's `logprobs` for the echoed prompt, whose log-probabilities `scored` holds.
  const auto echo_logprobs_of = [&](std::size_t i,
                                    const std::vector<lm::token_logprobs>& scored) -> json::value {
    if (!logprobs) {
      return nullptr;
    }
    return prompt_logprobs(tokenizer, prompts[i / n], scored, text_offsets[i]);
  };
  // One streamed chunk of choice i: a piece of text (or the role's opening delta, or the last,
  // empty one, or the echoed prompt) and the tokens that came with it (or `listed`, the
  // echoed prompt's).
  const auto chunk = [&](std::size_t i, std::string_view text,
                         std::span<const generated_token> tokens, const json::value& finish,
                         bool role = false, const json::value* listed = nullptr) {
    json::object choice{{"index", i}};
    if (chat) {
      json::object delta;
      if (role) {
        delta["role"] = "assistant";
      }
      if (!text.empty() || role) {
        delta["content"] = text;
      }
      choice["delta"] = std::move(delta);
    } else {
      choice["text"] = text;
    }
    // A chunk without tokens has none to list (the role's, the last).
    choice["logprobs"] = listed != nullptr ? *listed
                         : tokens.empty()  ? json::value(nullptr)
                                           : logprobs_of(i, tokens);
    choice["finish_reason"] = finish;
    return event(json::object{{"id", id},
                              {"object", object},
                              {"created", created},
                              {"model", s.lm->name},
                              {"choices", json::array{std::move(choice)}}});
  };
  if (stream) {
    // The head, and a chat's role for every choice.
    auto head = reply(req, http::status::ok, {}, "text/event-stream");
    head.set(http::field::cache_control, "no-cache");
    if (!co_await out.begin(std::move(head))) {
      co_return std::nullopt;
    }
    for (std::size_t i = 0; chat && i < choices; ++i) {
      // The events are made before each co_await: GCC 12 cannot keep an initializer list's
      // array across one.
      const std::string role = chunk(i, {}, {}, nullptr, true);
      if (!co_await out.write(role)) {
        co_return std::nullopt;
      }
    }
  }

  // The choices run at once, each a coroutine on this connection's strand. Streamed, their
  // events meet in one channel without room, read by one writer: a choice's send waits until
  // the writer takes its event, so a client that stops reading pauses every choice. After a
  // failed write the writer takes and drops the events, and each send says the client is gone,
  // which cancels that choice's sequence. The last choice to end closes the channel, which ends
  // the writer (Asio 1.81's close does not complete a send that waits: nothing may close it
  // while a choice runs).
  const auto executor = co_await asio::this_coro::executor;
  using event_channel = asio::experimental::channel<void(boost::system::error_code, std::string)>;
  event_channel events(executor, 0);
  std::size_t running = choices;
  bool gone = false;  // a write failed
  const auto send = [&](std::string e) -> asio::awaitable<bool> {
    auto [ec] = co_await events.async_send(boost::system::error_code{}, std::move(e),
                                           asio::as_tuple(asio::use_awaitable));
    co_return !ec && !gone;
  };
  std::vector<generation_result> results(choices);
  std::vector<std::vector<lm::token_logprobs>> prompt_scores(choices);
  const auto run_choice = [&](std::size_t i) -> asio::awaitable<void> {
    struct ended {
      std::size_t& running;
      event_channel& channel;
      ~ended() {
        if (--running == 0) {
          channel.close();
        }
      }
    } const leaving{running, events};
    // Streamed, the echoed prompt is the first chunk, sent once the prompt is computed (its
    // log-probabilities known): with the first piece of text, or at the end.
    bool echoed = !echo;
    const auto echo_first = [&, i]() -> asio::awaitable<bool> {
      if (echoed) {
        co_return true;
      }
      echoed = true;
      const json::value listed = echo_logprobs_of(i, prompt_scores[i]);
      co_return co_await send(chunk(i, echo_texts[i / n], {}, nullptr, false, &listed));
    };
    bool submitted_heard = false;
    const auto on_text = [&, i](std::string_view text,
                                std::span<const generated_token> tokens) -> asio::awaitable<bool> {
      if (!stream) {
        co_return true;  // a whole answer
      }
      if (text.empty()) {
        // The first: submitted. The second (with echo): the prompt is computed.
        const bool computed = std::exchange(submitted_heard, true);
        co_return !computed || co_await echo_first();
      }
      if (!co_await echo_first()) {
        co_return false;
      }
      co_return co_await send(chunk(i, text, tokens, nullptr));
    };
    generation_result& g = results[i];
    counted.begun[i] = true;
    g = co_await generate(s, std::move(submitted[i]), start, on_text,
                          echo ? &prompt_scores[i] : nullptr);
    if (stream && g.reason != lm::finish_reason::cancelled &&
        g.reason != lm::finish_reason::error && !co_await echo_first()) {
      co_return;  // the client is gone
    }
    if (stream && g.reason != lm::finish_reason::cancelled) {
      // The status is sent already: a failure is an event. The last chunk lists the tokens no
      // piece of text carried (a stop string's, held back).
      const std::string failure = failure_message(g);
      const auto unlisted = std::span<const generated_token>(g.logprobs).subspan(g.logprobs_given);
      json::object failed{{"error", failure_body(failure)}};
      if (choices > 1) {
        failed["index"] = i;  // which choice failed
      }
      std::string last = failure.empty()
                             ? chunk(i, {}, unlisted, json::value(finish_name(g.reason)))
                             : event(failed);
      co_await send(std::move(last));
    }
  };
  const auto write_events = [&]() -> asio::awaitable<void> {
    // Leaving other than at the close (cancelled, or an exception), the writer lets the
    // choices go: cancel completes the sends that wait, then close fails those to come.
    struct let_go {
      event_channel& channel;
      bool closed = false;
      ~let_go() {
        if (!closed) {
          channel.cancel();
          channel.close();
        }
      }
    } guard{events};
    for (;;) {
      auto [ec, e] = co_await events.async_receive(asio::as_tuple(asio::use_awaitable));
      if (ec == asio::experimental::error::channel_closed) {
        guard.closed = true;  // every choice has ended
        co_return;
      }
      if (ec) {
        co_return;
      }
      if (!gone && !co_await out.write(e)) {
        gone = true;  // the client is gone: each choice hears so at its next send
      }
    }
  };
  using spawned = decltype(asio::co_spawn(executor, run_choice(0), asio::deferred));
  std::vector<spawned> tasks;
  for (std::size_t i = 0; i < choices; ++i) {
    tasks.push_back(asio::co_spawn(executor, run_choice(i), asio::deferred));
  }
  if (stream) {
    tasks.push_back(asio::co_spawn(executor, write_events(), asio::deferred));
  }
  auto [order, errors] = co_await asio::experimental::make_parallel_group(std::move(tasks))
                             .async_wait(asio::experimental::wait_for_all(), asio::use_awaitable);
  for (const std::exception_ptr& e : errors) {
    if (e) {
      std::rethrow_exception(e);
    }
  }
  if (std::ranges::any_of(results, [](const generation_result& g) {
        return g.reason == lm::finish_reason::cancelled;
      })) {
    co_return std::nullopt;  // the client is gone; nothing more is sent
  }
  std::size_t completion_tokens = 0;
  for (const generation_result& g : results) {
    completion_tokens += g.completion_tokens;
  }
  if (!stream) {
    json::array listed;
    for (std::size_t i = 0; i < choices; ++i) {
      const generation_result& g = results[i];
      if (const std::string failure = failure_message(g); !failure.empty()) {
        co_return openai_error(req, 500, failure);
      }
      json::object choice{{"index", i}};
      if (chat) {
        choice["message"] = json::object{{"role", "assistant"}, {"content", g.text}};
      } else {
        choice["text"] = echo ? echo_texts[i / n] + g.text : g.text;
      }
      json::value lp = echo ? echo_logprobs_of(i, prompt_scores[i]) : json::value(nullptr);
      if (lp.is_object()) {
        append_logprobs(lp.as_object(), logprobs_of(i, g.logprobs).as_object());
      } else {
        lp = logprobs_of(i, g.logprobs);
      }
      choice["logprobs"] = std::move(lp);
      choice["finish_reason"] = finish_name(g.reason);
      listed.emplace_back(std::move(choice));
    }
    co_return reply(
        req, http::status::ok,
        json::serialize(json::object{{"id", id},
                                     {"object", chat ? std::string_view("chat.completion")
                                                     : std::string_view("text_completion")},
                                     {"created", created},
                                     {"model", s.lm->name},
                                     {"choices", std::move(listed)},
                                     {"usage", usage(prompt_tokens, completion_tokens)}}));
  }
  if (include_usage) {
    const std::string last =
        event(json::object{{"id", id},
                           {"object", object},
                           {"created", created},
                           {"model", s.lm->name},
                           {"choices", json::array{}},
                           {"usage", usage(prompt_tokens, completion_tokens)}});
    co_await out.write(last);
  }
  co_await out.write("data: [DONE]\n\n");
  co_return std::nullopt;
}

}  // namespace cotensor::serving::detail
