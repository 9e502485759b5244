#pragma once

// The Open Inference Protocol (KServe's "v2", as Triton speaks it over HTTP/REST) for a user's
// own Boost.Beast server: a model registry, a loader for Triton-style model repositories of
// feed-forward networks in safetensors files, a request handler, and the listener that accepts
// connections and serves them with it. Target `cotensor::serving` (built when Boost.Beast is
// found).
//
//   cotensor::serving::model_repository models;
//   models.load_repository("models");                   // DIR/<name>/config.json, DIR/<name>/<v>/
//   cotensor::serving::handler v2(io.get_executor(), models);
//   cotensor::serving::listener http(io.get_executor(), v2, {.port = 8000});
//   asio::co_spawn(io, http.run(), asio::detached);     // serves until http.drain() or stop()
//
// or, in a connection loop of your own: `if (v2.matches(req.target())) co_await v2.handle(req)`.
//
// Routes (`handler::matches`): `GET /v2/health/live`, `GET /v2/health/ready`, `GET /v2`,
// `GET /v2/models/{m}[/versions/{v}]`, `GET .../ready`, `GET .../config`, `POST .../infer`
// (JSON tensors and the binary tensor data extension), `GET /v2/models[/{m}[/versions/{v}]]/stats`
// (Triton's statistics extension) and `GET /metrics` (Triton's metric names). Errors are
// `{"error": "..."}` with 400 (a bad request) or 404 (no such model, version or route), 405 for
// a wrong method, 503 while overloaded or shut down, 500 when a model fails.
//
// Language models (docs/server.md#language-models): `GET /v1/models`, `POST /v1/completions`,
// `POST /v1/chat/completions` (OpenAI's shapes, errors as `{"error": {"message", "type",
// "param", "code"}}`, `"stream": true` as server-sent events ending with `data: [DONE]`) and
// `POST /v2/models/{m}/generate` and `/generate_stream` (the Triton/KServe generate extension).

#include "cotensor/asio.hpp"
#include "cotensor/device.hpp"
#include "cotensor/dtype.hpp"
#include "cotensor/lm.hpp"
#include "cotensor/tensor.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#if defined(COTENSOR_SERVING_BUILDING)
#define COTENSOR_SERVING_API __attribute__((visibility("default")))
#else
#define COTENSOR_SERVING_API
#endif

namespace cotensor::serving {

/// One input or output of a model.
struct tensor_spec {
  std::string name;                                     ///< as requests name it
  cotensor::dtype datatype = cotensor::dtype::float32;  ///< its elements' dtype
  /// The shape of one item: without the batch dimension when the model batches
  /// (`max_batch_size > 0`), the whole shape otherwise. Every extent is positive.
  std::vector<std::int64_t> dims;
};

/// Triton's `dynamic_batching` section.
struct dynamic_batching_config {
  /// How long the first request of a batch waits for others.
  std::chrono::microseconds max_queue_delay{0};
  /// Informational (reported by `/config`); batches run at up to `max_batch_size` rows.
  std::vector<std::int64_t> preferred_batch_size;
};

/// A model's configuration, as Triton's `config.pbtxt` has it (the JSON of `GET .../config`).
struct model_config {
  std::string name;  ///< the model's name in URLs (`/v2/models/<name>`)
  /// 0: the model does not batch and `dims` are whole shapes. Otherwise requests carry a leading
  /// batch dimension of 1 to `max_batch_size`.
  std::int64_t max_batch_size = 0;
  std::vector<tensor_spec> inputs;   ///< what an inference request carries
  std::vector<tensor_spec> outputs;  ///< what an inference returns
  /// Present: requests are gathered into batches (`cotensor::batcher`); absent: each runs alone.
  std::optional<dynamic_batching_config> dynamic_batching;
};

/// What the server runs. Implement it to serve a model of your own; `load_model` makes the
/// feed-forward models of a model repository.
class COTENSOR_SERVING_API model {
public:
  virtual ~model();
  /// The configuration; the same object for the model's lifetime.
  virtual const model_config& config() const noexcept = 0;
  /// Issues the ops of one forward pass and returns one tensor per configured output, in the
  /// order of `config().outputs`. `inputs` holds one tensor per configured input, in order, of
  /// the configured dtypes, on `placement()`, each with the batch dimension first when the
  /// model batches. Called on an executor thread with no lock held: it must only issue ops
  /// (never wait). An exception fails the requests of this pass with 500.
  virtual std::vector<tensor> forward(const std::vector<tensor>& inputs) const = 0;
  /// Where `forward` wants its inputs.
  virtual cotensor::device placement() const noexcept;
};

/// Thrown by `load_model` and `model_repository::load_repository` for a model folder that is
/// missing, malformed or whose tensors disagree with its configuration: `what()` names the file
/// and the field.
class COTENSOR_SERVING_API model_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Loads version `version` of the model in `folder` (`folder/config.json`,
/// `folder/<version>/model.safetensors`) onto `placement`: Triton's configuration as JSON plus
/// a `"layers"` list — `linear` (weight `[out, in]` as `torch.nn.Linear` stores it, optional
/// bias), `relu`, `gelu` (`"approximate": "none"|"tanh"`), `tanh`, `sigmoid`, `softmax` (last
/// axis), `layer_norm` (last axis, weight and bias, `eps`) and `embedding` (INT64 ids) — each
/// naming its tensors by their safetensors names (a `torch.nn.Sequential`'s `state_dict` keys).
/// No layers: the output is the input. See docs/server.md for the format.
///
/// Blocks until the weights are read and a trial pass over a batch of zeros has checked that
/// the layers turn the configured input into the configured output: call it at start-up, not
/// on an event-loop thread. Errors: `model_error` naming the file and the field.
COTENSOR_SERVING_API std::shared_ptr<model>
load_model(const std::filesystem::path& folder, std::int64_t version, cotensor::device placement);

/// How a language model of a repository is served: its scheduler's limits
/// (`DIR/<name>/cotensor.json` sets them, see docs/server.md).
struct language_model_options {
  lm::generator_options generator{};  ///< running and waiting sequences, cache bytes, budget
  /// `max_tokens` of a request that gives none; 0: OpenAI's defaults (16 for completions and the
  /// generate extension, the rest of the context for chat). A sequence holds cache blocks for
  /// its prompt and `max_tokens` from its admission on, so a smaller default admits more at once.
  std::size_t default_max_tokens = 0;
};

/// A language model of a repository, served by the OpenAI-compatible routes (`/v1/...`) and the
/// generate extension (`/v2/models/<name>/generate[_stream]`).
struct language_model {
  std::string name;                ///< its name in URLs and in requests' `model` field
  lm::model model;                 ///< the loaded model (its tokenizer and chat template)
  language_model_options options;  ///< how it is served
};

/// The models a handler serves, by name and version. Fill it before handing it to a handler;
/// after that it is read-only. Thread safety: `const` members from any thread; the others from
/// one thread, not concurrently with a handler's use.
class COTENSOR_SERVING_API model_repository {
public:
  /// A model folder that did not load, and why.
  struct failure {
    std::string model;   ///< the folder's name
    std::string reason;  ///< why it did not load, in words
  };

  /// Adds `m` as `version` (positive) of the model `m->config().name`. Throws
  /// `std::invalid_argument` for a duplicate, a non-positive version or a configuration that
  /// cannot be served (no inputs or outputs, a duplicate tensor name, a non-positive extent).
  void add(std::shared_ptr<const model> m, std::int64_t version = 1);

  /// Loads every model folder of `dir` as Triton lays a repository out: `dir/<name>/config.json`
  /// and one folder per version (a positive integer) holding `model.safetensors`; every version
  /// is served, the highest is the default. A folder holding a Hugging Face model instead (its
  /// `config.json` names `architectures`) is loaded as a language model (`lm::model::load`), with
  /// the dtype, device and scheduler limits of its optional `cotensor.json` (unknown keys are
  /// refused, naming them). A folder that fails is left out and reported; the
  /// others still load. Throws `model_error` when `dir` is not a readable directory. Blocks (see
  /// `load_model`).
  std::vector<failure> load_repository(const std::filesystem::path& dir,
                                       cotensor::device placement = cotensor::device::cpu());

  /// The model `name` at `version` (0: the highest), or null.
  std::shared_ptr<const model> find(std::string_view name, std::int64_t version = 0) const;
  /// The versions of `name`, ascending (empty when there is no such model).
  std::vector<std::int64_t> versions(std::string_view name) const;
  /// The names of the models, sorted (the language models are listed apart, by
  /// `language_model_names`).
  std::vector<std::string> names() const;

  /// Adds the language model `m` as `name`. Throws `std::invalid_argument` for an empty name or
  /// one already taken (by a model or a language model).
  void add_language_model(std::string name, lm::model m, language_model_options options = {});
  /// The language model `name`, or null.
  const language_model* find_language_model(std::string_view name) const;
  /// The names of the language models, sorted.
  std::vector<std::string> language_model_names() const;

private:
  std::map<std::string, std::map<std::int64_t, std::shared_ptr<const model>>, std::less<>> models_;
  std::map<std::string, std::shared_ptr<const language_model>, std::less<>> language_models_;
};

/// How a handler serves.
struct handler_options {
  /// Gather requests into batches for the models whose configuration asks for it. Off: every
  /// request runs alone.
  bool dynamic_batching = true;
  /// The most rows (batch entries) of one model waiting for a batch; beyond it requests get 503.
  std::size_t max_queue_rows = 4096;
  /// The most batches of one model running at once.
  std::size_t max_running_batches = 1;
  /// Reported by `GET /v2`.
  std::string server_name = "cotensor";
};

namespace detail {
class handler_state;
}

/// Serves the v2 REST routes of the models in a repository.
///
/// Completion: `handle` is an `asio::awaitable` that completes on the calling coroutine's
/// executor with the response (it never throws for a bad request: that is a 4xx response).
/// It never blocks its thread: an inference issues ops and suspends until they complete.
/// Cancellation: cancelling the awaiting coroutine (e.g. `handle(req) || watch(socket)` when the
/// client disconnects) cancels the request's wait; its rows leave the batch queue if they are
/// still there. Thread safety: every member may be called from any thread, concurrently.
/// Destroy the handler before its executor's execution context; the repository must outlive it.
class COTENSOR_SERVING_API handler {
public:
  /// An HTTP request as Beast reads it.
  using request = boost::beast::http::request<boost::beast::http::string_body>;
  /// An HTTP response as Beast writes it.
  using response = boost::beast::http::response<boost::beast::http::string_body>;

  /// Batch timers and completions run on `executor`.
  handler(asio::any_io_executor executor,
          const model_repository& models,
          handler_options options = {});
  handler(const handler&) = delete;
  handler& operator=(const handler&) = delete;
  ~handler();

  /// Whether `target` (a request target, query included) is one of this handler's routes:
  /// `/v2` and below, `/v1` and below (the OpenAI-compatible routes), and `/metrics`.
  static bool matches(std::string_view target) noexcept;

  /// Answers `req`. The response has the request's HTTP version, `Content-Type` and, for
  /// binary outputs, `Inference-Header-Content-Length`; `keep_alive` and `Content-Length` are
  /// the caller's to set (`prepare_payload`).
  asio::awaitable<response> handle(const request& req);

  /// Where a streamed response goes: the server-sent events of `/generate_stream` and of the
  /// OpenAI routes' `"stream": true`. The listener's writes to its socket; implement it for a
  /// connection loop of your own.
  class response_stream {
  public:
    virtual ~response_stream() = default;
    /// Sends the response's head (its status and headers; the body follows in pieces). Returns
    /// false when the client is gone: the handler then stops.
    virtual asio::awaitable<bool> begin(response head) = 0;
    /// Sends one piece of the body. Returns false when the client is gone or stopped reading.
    virtual asio::awaitable<bool> write(std::string_view piece) = 0;
  };

  /// Answers `req` as `handle(req)` does, but a streamed answer goes to `out` piece by piece as
  /// it is made, and the result is then empty (`out` has had `begin` and every piece; the caller
  /// ends the body). Otherwise the result is the response, and `out` was not used.
  /// Cancellation: cancelling the awaiting coroutine (the client gone) cancels the request's
  /// generation, whose cache blocks are freed at the generator's next step.
  asio::awaitable<std::optional<response>> handle(const request& req, response_stream& out);

  /// Triton's metrics for every model and version, as Prometheus text (what `GET /metrics`
  /// returns), followed by the batchers' own.
  std::string metrics() const;

  /// Readiness (`/v2/health/ready`) off, batch queues closed: later inferences get 503, queued
  /// rows run at once. Idempotent.
  void shutdown();

private:
  std::shared_ptr<detail::handler_state> state_;
};

/// Where a listener listens, and the limits of its connections.
struct listener_options {
  std::string address = "127.0.0.1";  ///< the address to bind (`0.0.0.0`: every IPv4 interface)
  unsigned short port = 8000;         ///< the port to bind (0: a free one, see `local_endpoint`)
  std::size_t max_body_bytes = 64 << 20;    ///< a larger request body gets 413
  std::size_t max_header_bytes = 16 << 10;  ///< larger request headers get 431
  /// The most time to read one request: from the connection's start (its first request) or
  /// from the request's first byte (later ones) to its last. Past it: 408, and the connection
  /// closes.
  std::chrono::milliseconds read_timeout{10000};
  /// The most time a keep-alive connection waits for its next request; past it the connection
  /// closes without a response.
  std::chrono::milliseconds idle_timeout{10000};
  /// The most time to write one response; past it the connection closes.
  std::chrono::milliseconds write_timeout{10000};
  /// The kernel's send buffer (`SO_SNDBUF`) of a connection while it streams a response: how
  /// far a stream runs ahead of a client that stops reading before its writes wait (and
  /// `write_timeout` counts the client gone), where Linux grows the buffer to megabytes
  /// otherwise; a language model's sequence pauses once its tokens wait for that write. After
  /// the stream the buffer gets back the size it had (fixed from then on: Linux no longer
  /// grows a buffer once it is set). 0 leaves the buffer to the system.
  std::size_t stream_send_buffer_bytes = 64 << 10;
  /// The most open connections; one more is answered 503 with `Retry-After: 1` and closed.
  std::size_t max_connections = 4096;
  /// How long `drain` waits for the requests in flight before it closes their connections.
  std::chrono::milliseconds drain_timeout{30000};
};

namespace detail {
class listener_state;
}

/// Accepts HTTP/1.1 connections and answers their requests with an application's routes and
/// a `handler`: one coroutine per connection, keep-alive, the limits of `listener_options`, a
/// watch that cancels a request's work when its client disconnects, and a graceful drain.
///
/// A request goes to the application's `routes` first (when given); if they decline, `GET
/// /metrics` is answered with `handler::metrics()` followed by the listener's own counters
/// (`metrics()`), what `handler::matches` claims goes to `handler::handle`, and anything else
/// is a 404 `{"error": ...}`. The listener sets each response's `keep_alive` and
/// `Content-Length`. Malformed requests get 400, 408, 413 or 431 and the connection closes.
///
/// The listener installs no signal handlers: call `drain` (e.g. from an `asio::signal_set`).
/// Thread safety: every member may be called from any thread, concurrently; the connections
/// run on strands of the executor, so it may be run by several threads. The handler must
/// outlive the listener.
class COTENSOR_SERVING_API listener {
public:
  /// An application's own routes: an answer for the requests it serves, `std::nullopt` for the
  /// others (they go on to the handler). Run on the connection's strand, under the same
  /// disconnect watch as the handler: a client that leaves cancels the awaiting coroutine. An
  /// exception (other than that cancellation) is answered 500 with its `what()`.
  using routes =
      std::function<asio::awaitable<std::optional<handler::response>>(const handler::request&)>;

  /// Binds and listens on `options.address:options.port` (connections queue until `run`).
  /// Throws `std::system_error` when the address cannot be bound. Connections run on strands
  /// of `executor`; `v2` answers what `routes` decline.
  listener(asio::any_io_executor executor,
           handler& v2,
           listener_options options = {},
           routes app_routes = {});
  listener(const listener&) = delete;
  listener& operator=(const listener&) = delete;
  /// Stops serving, as `stop` does. Destroy the listener after `run` has completed and before
  /// its executor's execution context.
  ~listener();

  /// The bound address and port (the port the OS picked when `options.port` is 0).
  asio::ip::tcp::endpoint local_endpoint() const;

  /// Serves: accepts connections and answers their requests until `drain` or `stop` has been
  /// called and every connection has closed. Call it once.
  ///
  /// Completion: an `asio::awaitable` that resumes on the awaiting coroutine's executor with an
  /// empty `std::error_code`, or `std::errc::timed_out` when a drain outlasted
  /// `drain_timeout` and the connections left were closed. Errors: a failed accept (a reset
  /// before accepting, no file descriptors left) is retried, not reported.
  /// Cancellation: not cancellable; `stop()` ends it. Thread safety: as the class.
  asio::awaitable<std::error_code> run();

  /// Begins a graceful drain: stops accepting, closes idle keep-alive connections, lets the
  /// requests in flight finish (their connections then close) and, after `drain_timeout`,
  /// closes the connections left, cancelling their requests. `run` completes once they have
  /// all closed. Does not wait; idempotent; may be called before `run`. The handler keeps
  /// serving its batches: call `handler::shutdown` after `run` completes.
  void drain();

  /// Stops at once: stops accepting and closes every connection, cancelling the requests in
  /// flight (their clients get no response). Does not wait; `run` completes once the
  /// connections' coroutines have ended.
  void stop();

  /// The listener's counters as Prometheus text: `cotensor_http_requests_total{code}`
  /// (responses by status; 499 for a client that left first), `cotensor_infer_latency_seconds`
  /// (a histogram of `.../infer` requests, read to response ready),
  /// `cotensor_requests_in_flight` and `cotensor_open_connections`.
  std::string metrics() const;

private:
  std::shared_ptr<detail::listener_state> state_;
};

}  // namespace cotensor::serving
