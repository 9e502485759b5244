#pragma once

// The state behind serving::handler: the served model versions, their counters, and the routes.
// Shared by handler.cpp (routing), inference.cpp, metadata.cpp, statistics.cpp and metrics.cpp.

#include <cotensor/batcher.hpp>
#include <cotensor/serving.hpp>

#include "serving/lm_state.hpp"
#include "serving/protocol.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cotensor::serving {

namespace http = boost::beast::http;
namespace json = boost::json;
using clock_type = std::chrono::steady_clock;

namespace detail {

// Counters of one model version, for /metrics and /stats (Triton's names).
struct model_counters {
  std::atomic<std::uint64_t> success{0};
  std::atomic<std::uint64_t> failure{0};
  std::atomic<std::uint64_t> fail_ns{0};            // from the request's arrival to its failure
  std::atomic<std::uint64_t> input_ns{0};           // decoding the request, of successful ones
  std::atomic<std::uint64_t> output_ns{0};          // encoding the response, of successful ones
  std::atomic<std::uint64_t> last_inference_ms{0};  // of the last success, since the epoch
  std::atomic<std::uint64_t> inferences{0};         // batch rows inferred
  std::atomic<std::uint64_t> executions{0};         // forward passes of unbatched requests
  std::atomic<std::uint64_t> request_ns{0};
  std::atomic<std::uint64_t> compute_ns{0};   // of unbatched requests
  std::atomic<std::int64_t> running_rows{0};  // of unbatched requests, bounded as a queue
};

struct served_model {
  std::string name;
  std::int64_t version = 0;
  std::shared_ptr<const model> m;
  std::unique_ptr<batcher> batch;  // when the model's requests are batched
  model_counters counters;
};

// What /metrics and /stats both report of a model version, from its counters and its
// batcher's: every forward pass, and the time spent in them and queued for them.
struct model_totals {
  std::uint64_t executions = 0;
  std::uint64_t compute_ns = 0;
  std::uint64_t queue_ns = 0;
};

model_totals totals_of(const served_model& s);

class handler_state {
public:
  handler_state(asio::any_io_executor ex, const model_repository& repo, handler_options options)
      : executor_(std::move(ex)), repo_(repo), options_(std::move(options)) {
    for (const auto& name : repo_.names()) {
      for (const auto v : repo_.versions(name)) {
        auto s = std::make_unique<served_model>();
        s->name = name;
        s->version = v;
        s->m = repo_.find(name, v);
        const auto& c = s->m->config();
        if (options_.dynamic_batching && c.dynamic_batching && c.max_batch_size > 0 &&
            c.inputs.size() == 1 && c.outputs.size() == 1) {
          s->batch = make_batcher(*s);
        }
        served_.emplace(std::pair{name, v}, std::move(s));
      }
    }
    for (const auto& name : repo_.language_model_names()) {
      lms_.emplace(name, std::make_unique<served_lm>(*repo_.find_language_model(name)));
    }
  }

  ~handler_state() { shutdown(); }

  void shutdown() {
    ready_ = false;
    for (auto& [key, s] : served_) {
      if (s->batch) {
        s->batch->shutdown();
      }
    }
  }

  asio::awaitable<handler::response> handle(const handler::request& req);
  // Answers the language models' routes (streaming through `out`) and passes the others on.
  asio::awaitable<std::optional<handler::response>> handle(const handler::request& req,
                                                           handler::response_stream& out);
  std::string metrics() const;

private:
  using response = handler::response;

  std::unique_ptr<batcher> make_batcher(served_model& s);

  served_model* find(std::string_view name, std::int64_t version) {
    if (version == 0) {
      const auto v = repo_.versions(name);
      if (v.empty()) {
        return nullptr;
      }
      version = v.back();
    }
    const auto it = served_.find(std::pair{std::string(name), version});
    return it == served_.end() ? nullptr : it->second.get();
  }

  response reply(const handler::request& req,
                 http::status status,
                 std::string body,
                 std::string_view type = "application/json") const {
    response res{status, req.version()};
    res.set(http::field::content_type, type);
    res.set(http::field::server, options_.server_name);
    res.body() = std::move(body);
    return res;
  }

  response error(const handler::request& req, http::status status, std::string_view what) const {
    return reply(req, status, protocol::error_body(what));
  }

  response wrong_method(const handler::request& req, const char* allow) const {
    auto res = error(req, http::status::method_not_allowed,
                     std::string("method not allowed; use ") + allow);
    res.set(http::field::allow, allow);
    return res;
  }

  // The metadata and configuration routes (metadata.cpp).
  response server_metadata(const handler::request& req) const;
  response
  model_metadata(const handler::request& req, const served_model& s, bool all_versions) const;
  response model_config_json(const handler::request& req, const served_model& s) const;
  static json::array spec_list(const std::vector<tensor_spec>& specs, bool batched);
  static json::array config_list(const std::vector<tensor_spec>& specs);

  // Triton's statistics extension: the model versions named (all of them when `name` is
  // empty, every version of `name` when `version` is 0; the route has found the model).
  response
  statistics(const handler::request& req, std::string_view name, std::int64_t version) const;

  asio::awaitable<response> infer(const handler::request& req, served_model& s);
  response failure(const handler::request& req,
                   served_model& s,
                   const std::exception_ptr& failed,
                   clock_type::time_point start) const;
  response success(const handler::request& req,
                   served_model& s,
                   const protocol::decoded_request& request,
                   const std::vector<protocol::computed_output>& outputs,
                   clock_type::time_point start,
                   clock_type::time_point decoded) const;
  static void count_failure(served_model& s, clock_type::time_point start);

  // The language models' routes: the OpenAI-compatible ones (openai.cpp), the generate
  // extension and the v2 metadata of a language model (generate.cpp).
  served_lm* find_lm(std::string_view name) {
    const auto it = lms_.find(name);
    return it == lms_.end() ? nullptr : it->second.get();
  }
  asio::awaitable<std::optional<response>> openai(const handler::request& req,
                                                  handler::response_stream& out);
  asio::awaitable<std::optional<response>> openai_generate(const handler::request& req,
                                                           served_lm& s,
                                                           bool chat,
                                                           const json::object& body,
                                                           handler::response_stream& out);
  asio::awaitable<std::optional<response>> lm_route(const handler::request& req,
                                                    served_lm& s,
                                                    std::string_view action,
                                                    handler::response_stream& out);
  // Runs `f` on the handler's worker threads, off the event loop (tokenizing a long prompt, or
  // rendering a chat, takes milliseconds); resumes on the caller's executor with its result,
  // or rethrows what it threw. The caller waits for `f` to end, even when cancelled.
  template <class F>
  asio::awaitable<std::invoke_result_t<F&>> off_loop(F f) {
    co_return co_await asio::co_spawn(
        workers_.get_executor(),
        [&f]() -> asio::awaitable<std::invoke_result_t<F&>> { co_return f(); },
        asio::use_awaitable);
  }

  // A response in OpenAI's error shape.
  response openai_error(const handler::request& req,
                        int status,
                        std::string_view message,
                        std::string_view param = {}) const;

  asio::any_io_executor executor_;
  const model_repository& repo_;
  handler_options options_;
  std::atomic<bool> ready_{true};
  // Built at construction, read-only after: no lock.
  std::map<std::pair<std::string, std::int64_t>, std::unique_ptr<served_model>> served_;
  std::map<std::string, std::unique_ptr<served_lm>, std::less<>> lms_;
  // The language models' tokenization (off_loop); destroyed first, joining its threads.
  asio::thread_pool workers_{2};
};

}  // namespace detail
}  // namespace cotensor::serving
