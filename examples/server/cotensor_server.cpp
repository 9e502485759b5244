// cotensor_server: an HTTP/1.1 inference service for a small MLP on Boost.Beast, with dynamic
// batching (cotensor::batcher). Every connection is an asio::awaitable coroutine; a request
// enqueues tensor work and co_awaits it, so the event loop never blocks on the backend.
//
//   POST /v1/infer   {"inputs": [[f, ...], ...]}  ->  {"outputs": [[f, ...], ...]}
//   GET  /healthz    {"status": "ok"}
//   GET  /metrics    Prometheus text: requests, batch sizes, queue depth, latency histogram
//
// Prints `cotensor_server listening on ADDRESS:PORT` once it accepts connections. SIGINT or
// SIGTERM drain it: it stops accepting, finishes the requests in flight and exits 0.
// Run with --help for the flags.

#include <cotensor/cotensor.hpp>
#include <cotensor/io.hpp>

#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <boost/json/src.hpp>  // Boost.JSON header-only: in exactly one .cpp of the program

#include <array>
#include <atomic>
#include <cerrno>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <variant>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;
using clock_type = std::chrono::steady_clock;

struct config {
  std::string address = "127.0.0.1";
  unsigned short port = 8080;
  unsigned threads = 1;
  std::size_t max_batch = 64;
  std::chrono::microseconds window{1000};
  // One batch at a time: its GEMM already uses every worker, and rows arriving meanwhile make
  // the next batch bigger (at 64 connections, 1 gave 6600 req/s where 2 gave 5000).
  std::size_t max_running_batches = 1;
  bool batching = true;
  std::string device = "cpu";
  std::int64_t in = 256;
  std::int64_t hidden = 1024;
  std::int64_t out = 16;
  std::string weights;
  std::uint64_t seed = 42;
  std::size_t max_body = 1 << 20;
  std::chrono::milliseconds timeout{10000};
  std::chrono::milliseconds drain_timeout{30000};
  std::size_t max_queue_rows = 4096;
  std::size_t max_connections = 4096;
  std::chrono::microseconds debug_delay{0};  // testing: each forward pass takes this long more
};

constexpr const char* usage =
    "usage: cotensor_server [--address A] [--port N] [--threads N] [--max-batch N]\n"
    "         [--batch-window-us N] [--max-running-batches N] [--no-batching]\n"
    "         [--device cpu|cuda:N]\n"
    "         [--in N --hidden N --out N | --weights DIR (w1.npy b1.npy w2.npy b2.npy)]\n"
    "         [--seed N] [--max-body-bytes N] [--timeout-ms N] [--drain-timeout-ms N]\n"
    "         [--max-queue-rows N]\n"
    "         [--max-connections N] [--debug-delay-us N]\n";

config parse_flags(int argc, char** argv) {
  config c;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        throw std::invalid_argument(flag + " needs a value");
      }
      return argv[++i];
    };
    auto number = [&] { return std::stoll(value()); };
    if (flag == "--address") {
      c.address = value();
    } else if (flag == "--port") {
      c.port = static_cast<unsigned short>(number());
    } else if (flag == "--threads") {
      c.threads = static_cast<unsigned>(std::max(1LL, number()));
    } else if (flag == "--max-batch") {
      c.max_batch = static_cast<std::size_t>(std::max(1LL, number()));
    } else if (flag == "--max-running-batches") {
      c.max_running_batches = static_cast<std::size_t>(std::max(1LL, number()));
    } else if (flag == "--batch-window-us") {
      c.window = std::chrono::microseconds(number());
    } else if (flag == "--no-batching") {
      c.batching = false;
    } else if (flag == "--device") {
      c.device = value();
    } else if (flag == "--in") {
      c.in = number();
    } else if (flag == "--hidden") {
      c.hidden = number();
    } else if (flag == "--out") {
      c.out = number();
    } else if (flag == "--weights") {
      c.weights = value();
    } else if (flag == "--seed") {
      c.seed = static_cast<std::uint64_t>(number());
    } else if (flag == "--max-body-bytes") {
      c.max_body = static_cast<std::size_t>(number());
    } else if (flag == "--timeout-ms") {
      c.timeout = std::chrono::milliseconds(number());
    } else if (flag == "--drain-timeout-ms") {
      c.drain_timeout = std::chrono::milliseconds(number());
    } else if (flag == "--max-queue-rows") {
      c.max_queue_rows = static_cast<std::size_t>(number());
    } else if (flag == "--debug-delay-us") {
      c.debug_delay = std::chrono::microseconds(number());
    } else if (flag == "--max-connections") {
      c.max_connections = static_cast<std::size_t>(number());
    } else {
      throw std::invalid_argument("unknown flag " + flag);
    }
  }
  if (c.in <= 0 || c.hidden <= 0 || c.out <= 0) {
    throw std::invalid_argument("--in, --hidden and --out must be positive");
  }
  c.max_queue_rows = std::max(c.max_queue_rows, c.max_batch);
  return c;
}

cotensor::device parse_device(const std::string& s) {
  if (s == "cpu") {
    return cotensor::device::cpu();
  }
  if (s.rfind("cuda", 0) == 0) {
    const int index = s.size() > 5 ? std::stoi(s.substr(5)) : 0;
    return cotensor::device::cuda(index);
  }
  throw std::invalid_argument("unknown device " + s);
}

// y = relu(x W1 + b1) W2 + b2.
struct mlp {
  cotensor::tensor w1, b1, w2, b2;
  std::int64_t in = 0, out = 0;
  std::chrono::microseconds delay{0};

  cotensor::tensor forward(const cotensor::tensor& x) const {
    auto y = cotensor::matmul(cotensor::relu(cotensor::matmul(x, w1) + b1), w2) + b2;
    if (delay.count() > 0) {
      // For tests of overload, disconnects and draining: a pass that takes `delay` longer.
      auto slow = cotensor::map(cotensor::zeros({1}), [d = delay](float v) {
        std::this_thread::sleep_for(d);
        return v;
      });
      y = y + slow;
    }
    return y;
  }
};

mlp make_model(config& c, cotensor::device d) {
  mlp m;
  if (!c.weights.empty()) {
    // Read by the backend; a bad file throws cotensor::io_error here, a truncated one at the
    // when_all below. Weights of another dtype are converted: the model computes in float32.
    auto load = [&](const char* name, std::size_t rank) {
      cotensor::tensor t = cotensor::load_npy(c.weights + "/" + name, d);
      if (t.rank() != rank) {
        throw std::runtime_error(std::string(name) + ": wrong rank");
      }
      if (t.dtype() != cotensor::dtype::float32) {
        t = t.astype(cotensor::dtype::float32);
      }
      std::vector<std::int64_t> extents(rank);
      for (std::size_t i = 0; i < rank; ++i) {
        extents[i] = t.shape()[i];
      }
      return std::pair{t, extents};
    };
    auto [w1, s1] = load("w1.npy", 2);
    auto [b1, sb1] = load("b1.npy", 1);
    auto [w2, s2] = load("w2.npy", 2);
    auto [b2, sb2] = load("b2.npy", 1);
    if (s1[1] != sb1[0] || s1[1] != s2[0] || s2[1] != sb2[0]) {
      throw std::runtime_error("weights: shapes do not chain (w1 [in,h], b1 [h], w2 [h,out], "
                               "b2 [out])");
    }
    c.in = s1[0];
    c.hidden = s1[1];
    c.out = s2[1];
    m = {w1, b1, w2, b2};
  } else {
    cotensor::manual_seed(c.seed);
    m.w1 = cotensor::randn({c.in, c.hidden}, d) * (1.0f / std::sqrt(float(c.in)));
    m.b1 = cotensor::randn({c.hidden}, d) * 0.1f;
    m.w2 = cotensor::randn({c.hidden, c.out}, d) * (1.0f / std::sqrt(float(c.hidden)));
    m.b2 = cotensor::randn({c.out}, d) * 0.1f;
  }
  m.in = c.in;
  m.out = c.out;
  m.delay = c.debug_delay;
  cotensor::when_all(m.w1, m.b1, m.w2, m.b2)(asio::use_future).get();
  return m;
}

// Counters for /metrics.
struct metrics {
  static constexpr std::array<double, 13> bounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                    0.1,    0.25,  0.5,    1.0,   2.5,  5.0};
  static constexpr std::array<int, 11> codes = {200, 400, 404, 405, 408, 411,
                                                413, 431, 499, 500, 503};
  std::array<std::atomic<std::uint64_t>, codes.size()> by_code{};
  std::array<std::atomic<std::uint64_t>, bounds.size() + 1> latency{};
  std::atomic<std::uint64_t> latency_us_sum{0};
  std::atomic<std::int64_t> in_flight{0};
  std::atomic<std::int64_t> connections{0};

  void count(int code) {
    for (std::size_t i = 0; i < codes.size(); ++i) {
      if (codes[i] == code) {
        ++by_code[i];
        return;
      }
    }
  }
  void observe(clock_type::duration d) {
    const double s = std::chrono::duration<double>(d).count();
    std::size_t i = 0;
    while (i < bounds.size() && s > bounds[i]) {
      ++i;
    }
    ++latency[i];
    latency_us_sum += static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(d).count());
  }
};

// One accepted connection, as the drain sees it. Fields are touched only on the strand.
struct connection {
  explicit connection(tcp::socket s) : socket(std::move(s)) {}
  tcp::socket socket;
  bool busy = false;  // between reading a request and finishing its response
};

using response = http::response<http::string_body>;

class server {
public:
  server(asio::io_context& io, config cfg, mlp model)
      : io_(io), cfg_(std::move(cfg)), model_(std::move(model)), strand_(asio::make_strand(io)),
        acceptor_(strand_), signals_(strand_, SIGINT, SIGTERM), drain_timer_(strand_) {
    if (cfg_.batching) {
      batcher_.emplace(
          io.get_executor(), static_cast<std::size_t>(model_.in),
          static_cast<std::size_t>(model_.out),
          [this](const cotensor::tensor& x) { return model_.forward(x); },
          cotensor::batcher_options{.max_batch_rows = cfg_.max_batch,
                                    .window = cfg_.window,
                                    .max_queue_rows = cfg_.max_queue_rows,
                                    .max_running_batches = cfg_.max_running_batches,
                                    .start_when_idle = true});
    }
    tcp::endpoint ep(asio::ip::make_address(cfg_.address), cfg_.port);
    acceptor_.open(ep.protocol());
    acceptor_.set_option(asio::socket_base::reuse_address(true));
    acceptor_.bind(ep);
    acceptor_.listen(asio::socket_base::max_listen_connections);
  }

  unsigned short port() const { return acceptor_.local_endpoint().port(); }

  void start() {
    asio::co_spawn(strand_, accept_loop(), asio::detached);
    signals_.async_wait([this](boost::system::error_code ec, int) {
      if (!ec) {
        drain();
      }
    });
  }

  bool drain_timed_out() const { return drain_timed_out_; }

  void shutdown_batcher() {
    if (batcher_) {
      batcher_->shutdown();
    }
  }

private:
  // Stops accepting; closes idle connections; busy ones close after their response.
  void drain() {
    std::cerr << "cotensor_server: draining\n";
    draining_ = true;
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    std::lock_guard lock(mutex_);
    for (const auto& c : connections_) {
      asio::post(c->socket.get_executor(), [c] {
        if (!c->busy) {
          boost::system::error_code ec;
          c->socket.cancel(ec);
        }
      });
    }
    drain_timer_.expires_after(cfg_.drain_timeout);
    drain_timer_.async_wait([this](boost::system::error_code ec) {
      if (!ec) {
        std::cerr << "cotensor_server: drain timed out\n";
        drain_timed_out_ = true;
        io_.stop();
      }
    });
    if (connections_.empty()) {
      drain_timer_.cancel();
    }
  }

  asio::awaitable<void> accept_loop() {
    while (acceptor_.is_open()) {
      auto [ec, socket] = co_await acceptor_.async_accept(asio::make_strand(io_),
                                                          asio::as_tuple(asio::use_awaitable));
      if (ec) {
        if (!acceptor_.is_open()) {
          break;
        }
        continue;  // a transient failure (EMFILE, a reset before accept): keep serving
      }
      auto c = std::make_shared<connection>(std::move(socket));
      {
        std::lock_guard lock(mutex_);
        connections_.insert(c);
      }
      ++metrics_.connections;
      auto ex = c->socket.get_executor();
      asio::co_spawn(ex, session(c), [this, c](std::exception_ptr) {
        --metrics_.connections;
        std::lock_guard lock(mutex_);
        connections_.erase(c);
        if (draining_ && connections_.empty()) {
          asio::post(strand_, [this] { drain_timer_.cancel(); });
        }
      });
    }
  }

  // Starts a watchdog that cancels the socket's operations after the timeout; returns the timer
  // (cancel it when the operation is done) and sets `*fired` when it fires.
  std::shared_ptr<asio::steady_timer> deadline(connection& c, std::shared_ptr<bool> fired) {
    auto t = std::make_shared<asio::steady_timer>(c.socket.get_executor(), cfg_.timeout);
    t->async_wait([&c, fired](boost::system::error_code ec) {
      if (!ec) {
        *fired = true;
        boost::system::error_code ignored;
        c.socket.cancel(ignored);
      }
    });
    return t;
  }

  asio::awaitable<bool> write(connection& c, response& res) {
    auto fired = std::make_shared<bool>(false);
    auto t = deadline(c, fired);
    res.prepare_payload();
    auto [ec, n] = co_await http::async_write(c.socket, res, asio::as_tuple(asio::use_awaitable));
    t->cancel();
    co_return !ec;
  }

  asio::awaitable<void> session(std::shared_ptr<connection> cp) {
    connection& c = *cp;
    beast::flat_buffer buffer;
    if (metrics_.connections.load() > static_cast<std::int64_t>(cfg_.max_connections)) {
      auto res =
          error_response(http::status::service_unavailable, "too many connections", 11, false);
      res.set(http::field::retry_after, "1");
      co_await write(c, res);
      co_return;
    }
    for (;;) {
      c.busy = false;
      if (draining_) {
        break;
      }
      http::request_parser<http::string_body> parser;
      parser.body_limit(cfg_.max_body);
      parser.header_limit(16 * 1024);
      auto fired = std::make_shared<bool>(false);
      auto t = deadline(c, fired);
      auto [ec, n] =
          co_await http::async_read(c.socket, buffer, parser, asio::as_tuple(asio::use_awaitable));
      t->cancel();
      c.busy = true;
      if (ec == http::error::end_of_stream || ec == asio::error::connection_reset ||
          ec == asio::error::eof) {
        break;
      }
      if (ec == asio::error::operation_aborted && *fired) {
        auto res = error_response(http::status::request_timeout, "request timed out", 11, false);
        metrics_.count(408);
        co_await write(c, res);
        break;
      }
      if (ec == asio::error::operation_aborted) {
        break;  // drained while idle
      }
      if (ec) {
        auto status = http::status::bad_request;
        std::string what = "malformed HTTP request: " + ec.message();
        if (ec == http::error::body_limit) {
          status = http::status::payload_too_large;
          what = "body exceeds " + std::to_string(cfg_.max_body) + " bytes";
        } else if (ec == http::error::header_limit) {
          status = http::status::request_header_fields_too_large;
          what = "headers too large";
        }
        auto res = error_response(status, what, 11, false);
        metrics_.count(static_cast<int>(status));
        co_await write(c, res);
        break;
      }
      const auto start = clock_type::now();
      auto req = parser.release();
      response res = co_await handle(c, req);
      if (res.result_int() == 499) {
        metrics_.count(499);
        break;  // the client went away
      }
      metrics_.count(static_cast<int>(res.result_int()));
      if (req.target() == "/v1/infer") {
        metrics_.observe(clock_type::now() - start);
      }
      const bool keep = req.keep_alive() && !draining_;
      res.keep_alive(keep);
      if (!co_await write(c, res) || !keep) {
        break;
      }
    }
    boost::system::error_code ignored;
    c.socket.shutdown(tcp::socket::shutdown_send, ignored);
    c.socket.close(ignored);
  }

  response
  error_response(http::status status, const std::string& what, unsigned version, bool keep_alive) {
    response res{status, version};
    res.set(http::field::content_type, "application/json");
    res.set(http::field::server, "cotensor_server");
    res.body() = json::serialize(json::object{{"error", what}});
    res.keep_alive(keep_alive);
    return res;
  }

  response json_ok(std::string body, unsigned version, const char* type = "application/json") {
    response res{http::status::ok, version};
    res.set(http::field::content_type, type);
    res.set(http::field::server, "cotensor_server");
    res.body() = std::move(body);
    return res;
  }

  asio::awaitable<response> handle(connection& c, const http::request<http::string_body>& req) {
    const unsigned v = req.version();
    if (req.target() == "/healthz") {
      if (req.method() != http::verb::get) {
        co_return method_not_allowed(v, "GET");
      }
      co_return json_ok(draining_ ? R"({"status":"draining"})" : R"({"status":"ok"})", v);
    }
    if (req.target() == "/metrics") {
      if (req.method() != http::verb::get) {
        co_return method_not_allowed(v, "GET");
      }
      co_return json_ok(render_metrics(), v, "text/plain; version=0.0.4");
    }
    if (req.target() == "/v1/infer") {
      if (req.method() != http::verb::post) {
        co_return method_not_allowed(v, "POST");
      }
      co_return co_await infer(c, req);
    }
    co_return error_response(http::status::not_found, "no such endpoint", v, true);
  }

  response method_not_allowed(unsigned v, const char* allow) {
    auto res = error_response(http::status::method_not_allowed, "method not allowed", v, true);
    res.set(http::field::allow, allow);
    return res;
  }

  // Parses {"inputs": [[f, ...], ...]} into row-major floats; an error message on failure.
  std::variant<std::vector<float>, std::string> parse_inputs(const std::string& body) {
    if (body.empty()) {
      return std::string("empty body");
    }
    boost::system::error_code ec;
    json::value doc = json::parse(body, ec);
    if (ec) {
      return "malformed JSON: " + ec.message();
    }
    const auto* obj = doc.if_object();
    const json::value* inputs = obj ? obj->if_contains("inputs") : nullptr;
    if (inputs == nullptr || !inputs->is_array()) {
      return std::string(R"(expected {"inputs": [[f, ...], ...]})");
    }
    const auto& rows = inputs->get_array();
    if (rows.empty()) {
      return std::string("inputs is empty");
    }
    if (rows.size() > cfg_.max_batch) {
      return "too many rows: at most " + std::to_string(cfg_.max_batch) + " per request";
    }
    std::vector<float> flat;
    flat.reserve(rows.size() * static_cast<std::size_t>(model_.in));
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const auto* row = rows[r].if_array();
      if (row == nullptr || row->size() != static_cast<std::size_t>(model_.in)) {
        return "row " + std::to_string(r) + ": expected an array of " + std::to_string(model_.in) +
               " numbers";
      }
      for (const auto& x : *row) {
        double d = 0;
        if (x.is_double()) {
          d = x.get_double();
        } else if (x.is_int64()) {
          d = static_cast<double>(x.get_int64());
        } else if (x.is_uint64()) {
          d = static_cast<double>(x.get_uint64());
        } else {
          return "row " + std::to_string(r) + ": not a number";
        }
        if (!std::isfinite(d) || std::fabs(d) > FLT_MAX) {
          return "row " + std::to_string(r) + ": value is not a finite float32";
        }
        flat.push_back(static_cast<float>(d));
      }
    }
    return flat;
  }

  struct outcome {
    std::exception_ptr error;
    std::vector<float> rows;
  };

  asio::awaitable<outcome> compute(std::vector<float> flat) {
    try {
      if (batcher_) {
        auto [e, rows] =
            co_await batcher_->async_submit(std::move(flat), asio::as_tuple(asio::use_awaitable));
        co_return outcome{e, std::move(rows)};
      }
      // No batching: this request's own ops, in its own scope.
      const auto k = static_cast<std::int64_t>(flat.size()) / model_.in;
      cotensor::scope s;
      auto y = s.run([&] {
        return model_.forward(cotensor::from_vector(std::move(flat), {k, model_.in}));
      });
      auto [e] = co_await s.async_wait(asio::as_tuple(asio::use_awaitable));
      if (e) {
        co_return outcome{e, {}};
      }
      co_return outcome{nullptr, y.to_vector()};  // computed: does not block
    } catch (...) {
      co_return outcome{std::current_exception(), {}};
    }
  }

  // Completes when the peer closes or resets the connection; otherwise runs until cancelled.
  //
  // Readiness is only a hint: the reactor can report a socket readable after the bytes that
  // made it so were already read (an edge-triggered event delivered late), so the peek must not
  // block — a blocking peek would hold this thread until the client sent again, which it never
  // does while it waits for this response — and "nothing there yet" means wait again.
  asio::awaitable<void> watch_disconnect(connection& c) {
    for (;;) {
      auto [ec] =
          co_await c.socket.async_wait(tcp::socket::wait_read, asio::as_tuple(asio::use_awaitable));
      if (ec) {
        co_return;
      }
      char byte = 0;
      const auto n = ::recv(c.socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        continue;  // nothing there after all
      }
      if (n <= 0) {
        co_return;  // closed or reset: cancel the compute
      }
      // A pipelined request is waiting: it cannot tell us about a disconnect; wait to be
      // cancelled.
      asio::steady_timer forever(c.socket.get_executor(), clock_type::duration::max());
      co_await forever.async_wait(asio::as_tuple(asio::use_awaitable));
      throw boost::system::system_error(asio::error::operation_aborted);
    }
  }

  asio::awaitable<response> infer(connection& c, const http::request<http::string_body>& req) {
    const unsigned v = req.version();
    auto parsed = parse_inputs(req.body());
    if (auto* err = std::get_if<std::string>(&parsed)) {
      co_return error_response(http::status::bad_request, *err, v, true);
    }
    auto flat = std::move(std::get<std::vector<float>>(parsed));
    const std::size_t k = flat.size() / static_cast<std::size_t>(model_.in);
    if (!batcher_) {
      // The same queue bound as the batcher's, on rows being computed.
      if (in_flight_rows_.fetch_add(k) + k > cfg_.max_queue_rows) {
        in_flight_rows_ -= k;
        auto res = error_response(http::status::service_unavailable, "overloaded", v, true);
        res.set(http::field::retry_after, "1");
        co_return res;
      }
    }
    ++metrics_.in_flight;
    auto result = co_await (compute(std::move(flat)) || watch_disconnect(c));
    --metrics_.in_flight;
    if (!batcher_) {
      in_flight_rows_ -= k;
    }
    if (result.index() == 1) {
      response gone{static_cast<http::status>(499), v};
      co_return gone;
    }
    auto& out = std::get<0>(result);
    if (out.error) {
      try {
        std::rethrow_exception(out.error);
      } catch (const std::system_error& e) {
        if (e.code() == cotensor::batcher_errc::queue_full ||
            e.code() == cotensor::batcher_errc::closed) {
          auto res = error_response(http::status::service_unavailable, e.what(), v, true);
          res.set(http::field::retry_after, "1");
          co_return res;
        }
        co_return error_response(http::status::internal_server_error, e.what(), v, true);
      } catch (const std::exception& e) {
        co_return error_response(http::status::internal_server_error, e.what(), v, true);
      } catch (...) {
        co_return error_response(http::status::internal_server_error, "unknown error", v, true);
      }
    }
    json::array outputs;
    outputs.reserve(k);
    const auto w = static_cast<std::size_t>(model_.out);
    for (std::size_t r = 0; r < k; ++r) {
      json::array row;
      row.reserve(w);
      for (std::size_t j = 0; j < w; ++j) {
        row.emplace_back(static_cast<double>(out.rows[r * w + j]));
      }
      outputs.emplace_back(std::move(row));
    }
    co_return json_ok(json::serialize(json::object{{"outputs", std::move(outputs)}}), v);
  }

  std::string render_metrics() {
    std::ostringstream os;
    os << "# HELP cotensor_http_requests_total HTTP responses by status code.\n"
       << "# TYPE cotensor_http_requests_total counter\n";
    for (std::size_t i = 0; i < metrics::codes.size(); ++i) {
      os << "cotensor_http_requests_total{code=\"" << metrics::codes[i] << "\"} "
         << metrics_.by_code[i].load() << "\n";
    }
    os << "# HELP cotensor_infer_latency_seconds Time from request read to response ready.\n"
       << "# TYPE cotensor_infer_latency_seconds histogram\n";
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i <= metrics::bounds.size(); ++i) {
      cumulative += metrics_.latency[i].load();
      os << "cotensor_infer_latency_seconds_bucket{le=\"";
      if (i < metrics::bounds.size()) {
        os << metrics::bounds[i];
      } else {
        os << "+Inf";
      }
      os << "\"} " << cumulative << "\n";
    }
    os << "cotensor_infer_latency_seconds_sum " << double(metrics_.latency_us_sum.load()) / 1e6
       << "\ncotensor_infer_latency_seconds_count " << cumulative << "\n";
    os << "# TYPE cotensor_requests_in_flight gauge\ncotensor_requests_in_flight "
       << metrics_.in_flight.load() << "\n";
    os << "# TYPE cotensor_open_connections gauge\ncotensor_open_connections "
       << metrics_.connections.load() << "\n";
    if (batcher_) {
      const auto s = batcher_->stats();
      os << "# HELP cotensor_batch_queue_rows Rows waiting for a batch.\n"
         << "# TYPE cotensor_batch_queue_rows gauge\ncotensor_batch_queue_rows " << s.queue_rows
         << "\n# TYPE cotensor_batches_total counter\ncotensor_batches_total " << s.batches
         << "\n# TYPE cotensor_batch_rows_total counter\ncotensor_batch_rows_total " << s.rows
         << "\n# TYPE cotensor_batch_rejected_total counter\ncotensor_batch_rejected_total "
         << s.rejected
         << "\n# TYPE cotensor_batch_cancelled_total counter\ncotensor_batch_cancelled_total "
         << s.cancelled << "\n";
      os << "# HELP cotensor_batch_size Rows per batch.\n# TYPE cotensor_batch_size histogram\n";
      std::uint64_t cum = 0;
      for (std::size_t i = 0; i < s.batch_rows_log2.size(); ++i) {
        cum += s.batch_rows_log2[i];
        os << "cotensor_batch_size_bucket{le=\"" << (std::uint64_t{1} << i) << "\"} " << cum
           << "\n";
      }
      os << "cotensor_batch_size_bucket{le=\"+Inf\"} " << cum << "\ncotensor_batch_size_sum "
         << s.rows << "\ncotensor_batch_size_count " << s.batches << "\n";
    } else {
      os << "# TYPE cotensor_batch_queue_rows gauge\ncotensor_batch_queue_rows "
         << in_flight_rows_.load() << "\n";
    }
    return os.str();
  }

  asio::io_context& io_;
  config cfg_;
  mlp model_;
  // The acceptor, the signals and the drain timer live on this strand.
  asio::strand<asio::io_context::executor_type> strand_;
  std::optional<cotensor::batcher> batcher_;
  tcp::acceptor acceptor_;
  asio::signal_set signals_;
  asio::steady_timer drain_timer_;
  std::atomic<bool> draining_{false};
  bool drain_timed_out_ = false;
  std::atomic<std::size_t> in_flight_rows_{0};
  metrics metrics_;
  std::mutex mutex_;
  std::set<std::shared_ptr<connection>> connections_;
};

}  // namespace

int main(int argc, char** argv) {
  config cfg;
  try {
    for (int i = 1; i < argc; ++i) {
      if (std::string(argv[i]) == "--help") {
        std::cout << usage;
        return 0;
      }
    }
    cfg = parse_flags(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "cotensor_server: " << e.what() << "\n" << usage;
    return 2;
  }
  try {
    auto options = cotensor::runtime_options::from_environment();
    // The server bounds its own queue; the engine's limit is only a backstop that would block
    // an event-loop thread, so keep it well above what the server admits.
    options.max_in_flight = std::max<std::size_t>(options.max_in_flight, 16 * cfg.max_queue_rows);
    cotensor::runtime rt(options);
    const auto dev = parse_device(cfg.device);
    mlp model = make_model(cfg, dev);

    asio::io_context io(static_cast<int>(cfg.threads));
    server srv(io, cfg, std::move(model));
    srv.start();
    std::cout << "cotensor_server listening on " << cfg.address << ":" << srv.port() << " (in "
              << cfg.in << ", hidden " << cfg.hidden << ", out " << cfg.out << ", batching "
              << (cfg.batching ? "on" : "off") << ")" << std::endl;

    std::vector<std::thread> threads;
    for (unsigned i = 1; i < cfg.threads; ++i) {
      threads.emplace_back([&io] { io.run(); });
    }
    io.run();
    for (auto& t : threads) {
      t.join();
    }
    srv.shutdown_batcher();
    io.restart();
    io.run_for(std::chrono::seconds(1));  // let the batcher's last completions drain
    std::cout << "cotensor_server: drained" << std::endl;
    return srv.drain_timed_out() ? 1 : 0;
  } catch (const std::exception& e) {
    std::cerr << "cotensor_server: " << e.what() << "\n";
    return 1;
  }
}
