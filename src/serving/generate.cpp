// A language model's v2 routes: its metadata, readiness and configuration, and the Triton/KServe
// generate extension (POST .../generate, and .../generate_stream as server-sent events).

// GCC 12 pairs the coroutine frame's allocation with Asio's sized operator delete and warns of a
// mismatch that is not there (GCC bug 109224, fixed in GCC 13).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#include "serving/handler_state.hpp"

#include <chrono>

namespace cotensor::serving::detail {

namespace {

json::array text_spec(std::string_view name) {
  return json::array{json::object{{"name", name}, {"datatype", "BYTES"}, {"shape", {1}}}};
}

}  // namespace

asio::awaitable<std::optional<handler::response>>
handler_state::lm_route(const handler::request& req,
                        served_lm& s,
                        std::string_view action,
                        handler::response_stream& out) {
  const auto start = std::chrono::steady_clock::now();
  const bool get = req.method() == http::verb::get || req.method() == http::verb::head;
  const language_model& l = *s.lm;
  if (action.empty() || action == "ready" || action == "config") {
    if (!get) {
      co_return wrong_method(req, "GET");
    }
    if (action.empty()) {
      co_return reply(req, http::status::ok,
                      json::serialize(json::object{{"name", l.name},
                                                   {"versions", json::array{"1"}},
                                                   {"platform", "cotensor_lm"},
                                                   {"inputs", text_spec("text_input")},
                                                   {"outputs", text_spec("text_output")}}));
    }
    if (action == "ready") {
      co_return reply(req, ready_ ? http::status::ok : http::status::service_unavailable,
                      json::serialize(json::object{{"name", l.name}, {"ready", ready_.load()}}));
    }
    const auto& g = l.options.generator;
    co_return reply(req, http::status::ok,
                    json::serialize(json::object{{"name", l.name},
                                                 {"backend", "cotensor_lm"},
                                                 {"architecture", l.model.architecture()},
                                                 {"context_length", s.gen.context_length()},
                                                 {"max_running", g.max_running},
                                                 {"max_waiting", g.max_waiting},
                                                 {"kv_cache_blocks", s.gen.stats().kv_blocks_total},
                                                 {"block_size", g.block_size},
                                                 {"token_budget", g.token_budget},
                                                 {"prefix_caching", g.prefix_caching}}));
  }
  const bool streamed = action == "generate_stream";
  if (!streamed && action != "generate") {
    if (action == "infer") {
      co_return error(req, http::status::bad_request,
                      "'" + l.name + "' is a language model: use /generate or /generate_stream");
    }
    co_return error(req, http::status::not_found, "no such route");
  }
  if (req.method() != http::verb::post) {
    co_return wrong_method(req, "POST");
  }
  if (!ready_) {
    auto res = error(req, http::status::service_unavailable, "the server is shutting down");
    res.set(http::field::retry_after, "1");
    co_return res;
  }
  boost::system::error_code ec;
  const json::value body = json::parse(req.body(), ec);
  if (ec || !body.is_object()) {
    co_return error(req, http::status::bad_request,
                    ec ? "the body is not valid JSON: " + ec.message()
                       : std::string("the body must be a JSON object"));
  }
  generation_request r;
  try {
    const json::object& o = body.get_object();
    const json::value* text = o.if_contains("text_input");
    if (text == nullptr || !text->is_string()) {
      throw lm_request_error(400, "'text_input' must be a string", "text_input");
    }
    // The sampling fields: at the top level (Triton maps them to inputs) or in `parameters`,
    // which wins.
    json::object fields = o;
    if (const json::value* p = o.if_contains("parameters"); p != nullptr && !p->is_null()) {
      if (!p->is_object()) {
        throw lm_request_error(400, "'parameters' must be an object", "parameters");
      }
      for (const auto& [k, v] : p->get_object()) {
        fields[k] = v;
      }
    }
    if (l.options.default_max_tokens > 0) {
      r.params.max_tokens = static_cast<int>(l.options.default_max_tokens);
    }
    read_sampling(fields, r, sampling_route::generate);
    const std::string_view prompt = text->get_string();
    if (prompt.size() > static_cast<std::size_t>(s.gen.context_length()) * 1024) {
      throw lm_request_error(400, "'text_input' is past this model's context", "text_input");
    }
    r.prompt = co_await off_loop([&] { return l.model.tokenizer().encode(prompt); });
    fit_context(s, r);
  } catch (const lm_request_error& e) {
    co_return error(req, static_cast<http::status>(e.status), e.what());
  }

  const auto message = [&](std::string_view text) {
    return json::object{{"model_name", l.name}, {"model_version", "1"}, {"text_output", text}};
  };
  bool begun = false;
  const auto on_text = [&](std::string_view text,
                           std::span<const generated_token>) -> asio::awaitable<bool> {
    if (!streamed) {
      co_return true;
    }
    if (!begun) {
      begun = true;
      auto head = reply(req, http::status::ok, {}, "text/event-stream");
      head.set(http::field::cache_control, "no-cache");
      if (!co_await out.begin(std::move(head))) {
        co_return false;
      }
    }
    if (text.empty()) {
      co_return true;  // submitted: the head only
    }
    auto m = message(text);
    m["done"] = false;
    co_return co_await out.write("data: " + json::serialize(m) + "\n\n");
  };
  generation_result g;
  try {
    g = co_await generate(s, std::move(r), start, on_text);
  } catch (const lm_request_error& e) {
    auto res = error(req, static_cast<http::status>(e.status), e.what());
    if (e.status == 503) {
      res.set(http::field::retry_after, "1");
    }
    co_return res;
  }
  if (g.reason == lm::finish_reason::cancelled) {
    co_return std::nullopt;
  }
  const std::string failure = failure_message(g);
  if (!streamed) {
    if (!failure.empty()) {
      co_return error(req, http::status::internal_server_error, failure);
    }
    auto m = message(g.text);
    m["finish_reason"] = finish_name(g.reason);
    co_return reply(req, http::status::ok, json::serialize(m));
  }
  if (!begun) {
    begun = true;
    auto head = reply(req, http::status::ok, {}, "text/event-stream");
    head.set(http::field::cache_control, "no-cache");
    if (!co_await out.begin(std::move(head))) {
      co_return std::nullopt;
    }
  }
  // The status is sent already: a failure is an event (as Triton's).
  if (!failure.empty()) {
    co_await out.write("data: " + protocol::error_body(failure) + "\n\n");
    co_return std::nullopt;
  }
  auto last = message("");
  last["done"] = true;
  last["finish_reason"] = finish_name(g.reason);
  co_await out.write("data: " + json::serialize(last) + "\n\n");
  co_return std::nullopt;
}

}  // namespace cotensor::serving::detail
