// serving::handler: its public members and the routing of the v2 REST routes, with health, and
// of the language models' routes (inference is in inference.cpp, the metadata routes in
// metadata.cpp, statistics in statistics.cpp, /metrics in metrics.cpp, the language models'
// routes in openai.cpp and generate.cpp; the state they share in handler_state.hpp).

// GCC 12 pairs the coroutine frame's allocation with Asio's sized operator delete and warns of a
// mismatch that is not there (GCC bug 109224, fixed in GCC 13).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#include "serving/handler_state.hpp"

#include <charconv>

namespace cotensor::serving {

namespace detail {

namespace {

// The path's segments after the leading '/', query dropped: "/v2/models/m" -> {v2, models, m}.
std::vector<std::string_view> segments(std::string_view target) {
  target = target.substr(0, target.find('?'));
  std::vector<std::string_view> out;
  while (!target.empty()) {
    if (target.front() == '/') {
      target.remove_prefix(1);
      continue;
    }
    const auto end = target.find('/');
    out.push_back(target.substr(0, end));
    target = end == std::string_view::npos ? std::string_view{} : target.substr(end);
  }
  return out;
}

}  // namespace

asio::awaitable<handler::response> handler_state::handle(const handler::request& req) {
  const auto path = segments(req.target());
  const bool get = req.method() == http::verb::get || req.method() == http::verb::head;
  if (path.size() == 1 && path[0] == "metrics") {
    if (!get) {
      co_return wrong_method(req, "GET");
    }
    co_return reply(req, http::status::ok, metrics(), "text/plain; version=0.0.4");
  }
  if (path.empty() || path[0] != "v2") {
    co_return error(req, http::status::not_found, "no such route");
  }
  if (path.size() == 1) {
    co_return get ? server_metadata(req) : wrong_method(req, "GET");
  }
  if (path[1] == "health" && path.size() == 3 && (path[2] == "live" || path[2] == "ready")) {
    if (!get) {
      co_return wrong_method(req, "GET");
    }
    if (path[2] == "live") {
      co_return reply(req, http::status::ok, R"({"live":true})");
    }
    co_return ready_ ? reply(req, http::status::ok, R"({"ready":true})")
                     : reply(req, http::status::service_unavailable, R"({"ready":false})");
  }
  if (path[1] != "models" || path.size() < 3) {
    co_return error(req, http::status::not_found, "no such route");
  }
  if (path.size() == 3 && path[2] == "stats") {
    co_return get ? statistics(req, {}, 0) : wrong_method(req, "GET");
  }
  // /v2/models/{name}[/versions/{v}][/ready|/config|/infer|/stats]
  const std::string_view name = path[2];
  std::size_t next = 3;
  std::int64_t version = 0;
  if (path.size() > 4 && path[3] == "versions") {
    const auto v = path[4];
    const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), version);
    if (ec != std::errc{} || p != v.data() + v.size() || version < 1) {
      co_return error(req, http::status::bad_request,
                      "version '" + std::string(v) + "' is not a positive integer");
    }
    next = 5;
  }
  if (path.size() > next + 1) {
    co_return error(req, http::status::not_found, "no such route");
  }
  served_model* s = find(name, version);
  if (s == nullptr) {
    if (repo_.versions(name).empty()) {
      co_return error(req, http::status::not_found, "no model '" + std::string(name) + "'");
    }
    co_return error(req, http::status::not_found,
                    "model '" + std::string(name) + "' has no version " + std::to_string(version));
  }
  const std::string_view action = path.size() > next ? path[next] : std::string_view{};
  if (action.empty()) {
    co_return get ? model_metadata(req, *s, version == 0) : wrong_method(req, "GET");
  }
  if (action == "ready") {
    if (!get) {
      co_return wrong_method(req, "GET");
    }
    json::object o{{"name", s->name}, {"ready", ready_.load()}};
    co_return reply(req, ready_ ? http::status::ok : http::status::service_unavailable,
                    json::serialize(o));
  }
  if (action == "config") {
    co_return get ? model_config_json(req, *s) : wrong_method(req, "GET");
  }
  if (action == "stats") {
    co_return get ? statistics(req, name, version) : wrong_method(req, "GET");
  }
  if (action == "infer") {
    if (req.method() != http::verb::post) {
      co_return wrong_method(req, "POST");
    }
    co_return co_await infer(req, *s);
  }
  co_return error(req, http::status::not_found, "no such route");
}

asio::awaitable<std::optional<handler::response>>
handler_state::handle(const handler::request& req, handler::response_stream& out) {
  const auto path = segments(req.target());
  if (!path.empty() && path[0] == "v1") {
    co_return co_await openai(req, out);
  }
  // /v2/models/{language model}[/versions/1][/ready|/config|/generate|/generate_stream]
  if (path.size() >= 3 && path[0] == "v2" && path[1] == "models") {
    if (served_lm* s = find_lm(path[2])) {
      std::size_t next = 3;
      if (path.size() > 4 && path[3] == "versions") {
        if (path[4] != "1") {
          co_return error(req, http::status::not_found,
                          "model '" + std::string(path[2]) + "' has no version " +
                              std::string(path[4]));
        }
        next = 5;
      }
      if (path.size() > next + 1) {
        co_return error(req, http::status::not_found, "no such route");
      }
      co_return co_await lm_route(req, *s, path.size() > next ? path[next] : "", out);
    }
  }
  co_return co_await handle(req);
}

}  // namespace detail

namespace {

// Keeps a streamed answer whole, for `handler::handle(req)`.
class buffered_stream final : public handler::response_stream {
public:
  asio::awaitable<bool> begin(handler::response head) override {
    head_ = std::move(head);
    began_ = true;
    co_return true;
  }
  asio::awaitable<bool> write(std::string_view piece) override {
    body_.append(piece);
    co_return true;
  }
  // The whole answer; a 500 when nothing began (the request was cancelled first).
  handler::response take(unsigned version) && {
    if (!began_) {
      handler::response res{http::status::internal_server_error, version};
      res.set(http::field::content_type, "application/json");
      res.body() = R"({"error":"the request was cancelled before an answer began"})";
      return res;
    }
    head_.chunked(false);
    head_.body() = std::move(body_);
    return std::move(head_);
  }

private:
  handler::response head_;
  std::string body_;
  bool began_ = false;
};

}  // namespace

handler::handler(asio::any_io_executor executor,
                 const model_repository& models,
                 handler_options options)
    : state_(std::make_shared<detail::handler_state>(
          std::move(executor), models, std::move(options))) {}

handler::~handler() = default;

bool handler::matches(std::string_view target) noexcept {
  target = target.substr(0, target.find('?'));
  return target == "/metrics" || target == "/v2" || target.starts_with("/v2/") || target == "/v1" ||
         target.starts_with("/v1/");
}

asio::awaitable<handler::response> handler::handle(const request& req) {
  // Keep the state alive across the suspension, whatever happens to this handler meanwhile.
  auto state = state_;
  buffered_stream whole;
  if (auto res = co_await state->handle(req, whole)) {
    co_return std::move(*res);
  }
  co_return std::move(whole).take(req.version());
}

asio::awaitable<std::optional<handler::response>> handler::handle(const request& req,
                                                                  response_stream& out) {
  auto state = state_;
  co_return co_await state->handle(req, out);
}

std::string handler::metrics() const { return state_->metrics(); }

void handler::shutdown() { state_->shutdown(); }

}  // namespace cotensor::serving
