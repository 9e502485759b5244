// cotensor_server: the Open Inference Protocol (KServe v2 / Triton over HTTP/1.1) for the
// models of a Triton-style model repository, on Boost.Beast. The protocol, the models and the
// batching are cotensor::serving's (<cotensor/serving.hpp>); this program owns the sockets:
// accepting, timeouts, limits, draining, and noticing clients that leave.
//
//   GET  /v2/health/live, /v2/health/ready, /v2, /v2/models/M[/versions/V][/ready|/config]
//   POST /v2/models/M[/versions/V]/infer    JSON tensors or Triton's binary tensor data
//   GET  /metrics                           Prometheus text: Triton's metric names, then ours
//
// Every connection is an asio::awaitable coroutine; a request enqueues tensor work and
// co_awaits it, so the event loop never blocks on the backend. Prints `cotensor_server
// listening on ADDRESS:PORT` once it accepts connections. SIGINT or SIGTERM drain it: it stops
// accepting, finishes the requests in flight and exits 0. Run with --help for the flags.

#include <cotensor/cotensor.hpp>
#include <cotensor/serving.hpp>

#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

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
using tcp = asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;
using clock_type = std::chrono::steady_clock;

struct config {
  std::string address = "127.0.0.1";
  unsigned short port = 8000;
  unsigned threads = 1;
  std::string model_repository = COTENSOR_EXAMPLE_MODELS;
  bool batching = true;
  std::size_t max_running_batches = 1;
  std::string device = "cpu";
  std::size_t max_body = 64 << 20;
  std::chrono::milliseconds timeout{10000};
  std::chrono::milliseconds drain_timeout{30000};
  std::size_t max_queue_rows = 4096;
  std::size_t max_connections = 4096;
  std::chrono::microseconds debug_delay{0};  // testing: each forward pass takes this long more
};

constexpr const char* usage =
    "usage: cotensor_server [--model-repository DIR] [--address A] [--port N] [--threads N]\n"
    "         [--no-batching] [--max-running-batches N] [--device cpu|cuda:N]\n"
    "         [--max-body-bytes N] [--timeout-ms N] [--drain-timeout-ms N]\n"
    "         [--max-queue-rows N] [--max-connections N] [--debug-delay-us N]\n"
    "  --model-repository DIR  Triton's layout: DIR/<model>/config.json and\n"
    "                          DIR/<model>/<version>/model.safetensors (default: the example\n"
    "                          models, " COTENSOR_EXAMPLE_MODELS ")\n";

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
    auto number = [&] {
      const std::string v = value();
      std::size_t used = 0;
      const long long n = std::stoll(v, &used);
      if (used != v.size() || n < 0) {
        throw std::invalid_argument(flag + " needs a non-negative integer, not '" + v + "'");
      }
      return n;
    };
    if (flag == "--model-repository") {
      c.model_repository = value();
    } else if (flag == "--address") {
      c.address = value();
    } else if (flag == "--port") {
      c.port = static_cast<unsigned short>(number());
    } else if (flag == "--threads") {
      c.threads = static_cast<unsigned>(std::max(1LL, number()));
    } else if (flag == "--max-running-batches") {
      c.max_running_batches = static_cast<std::size_t>(std::max(1LL, number()));
    } else if (flag == "--no-batching") {
      c.batching = false;
    } else if (flag == "--device") {
      c.device = value();
    } else if (flag == "--max-body-bytes") {
      c.max_body = static_cast<std::size_t>(number());
    } else if (flag == "--timeout-ms") {
      c.timeout = std::chrono::milliseconds(number());
    } else if (flag == "--drain-timeout-ms") {
      c.drain_timeout = std::chrono::milliseconds(number());
    } else if (flag == "--max-queue-rows") {
      c.max_queue_rows = static_cast<std::size_t>(std::max(1LL, number()));
    } else if (flag == "--debug-delay-us") {
      c.debug_delay = std::chrono::microseconds(number());
    } else if (flag == "--max-connections") {
      c.max_connections = static_cast<std::size_t>(number());
    } else {
      throw std::invalid_argument("unknown flag " + flag);
    }
  }
  return c;
}

// `s` with the characters JSON strings escape escaped.
std::string json_escaped(std::string_view s) {
  std::string out;
  for (const char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(ch));
      out += buf;
    } else {
      out += ch;
    }
  }
  return out;
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

// For tests of overload, disconnects and draining: a model whose every pass takes `delay`
// longer (an op that sleeps on a backend worker), around a model of the repository.
class delayed_model final : public cotensor::serving::model {
public:
  delayed_model(std::shared_ptr<const model> inner, std::chrono::microseconds delay)
      : inner_(std::move(inner)), delay_(delay) {}
  const cotensor::serving::model_config& config() const noexcept override {
    return inner_->config();
  }
  cotensor::device placement() const noexcept override { return inner_->placement(); }
  std::vector<cotensor::tensor>
  forward(const std::vector<cotensor::tensor>& inputs) const override {
    auto outputs = inner_->forward(inputs);
    auto slow = cotensor::map(cotensor::zeros({1}), [d = delay_](float v) {
      std::this_thread::sleep_for(d);
      return v;
    });
    // Adding zero after the sleep: the output now waits for it.
    outputs.front() = outputs.front() + slow.astype(outputs.front().dtype());
    return outputs;
  }

private:
  std::shared_ptr<const model> inner_;
  std::chrono::microseconds delay_;
};

// The models of `cfg.model_repository`; a folder that fails is reported and left out.
cotensor::serving::model_repository load_models(const config& cfg, cotensor::device d) {
  cotensor::serving::model_repository loaded;
  for (const auto& f : loaded.load_repository(cfg.model_repository, d)) {
    std::cerr << "cotensor_server: model '" << f.model << "' not loaded: " << f.reason << "\n";
  }
  if (cfg.debug_delay.count() == 0) {
    return loaded;
  }
  cotensor::serving::model_repository delayed;
  for (const auto& name : loaded.names()) {
    for (const auto v : loaded.versions(name)) {
      delayed.add(std::make_shared<delayed_model>(loaded.find(name, v), cfg.debug_delay), v);
    }
  }
  return delayed;
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
  server(asio::io_context& io, config cfg, const cotensor::serving::model_repository& models)
      : io_(io), cfg_(std::move(cfg)), strand_(asio::make_strand(io)),
        v2_(io.get_executor(),
            models,
            cotensor::serving::handler_options{.dynamic_batching = cfg_.batching,
                                               .max_queue_rows = cfg_.max_queue_rows,
                                               .max_running_batches = cfg_.max_running_batches}),
        acceptor_(strand_), signals_(strand_, SIGINT, SIGTERM), drain_timer_(strand_) {
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

  void shutdown_batchers() { v2_.shutdown(); }

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

  // Stops sending, then reads and drops what the peer still sends, until it closes or a second
  // has passed.
  asio::awaitable<void> linger_close(connection& c) {
    boost::system::error_code ignored;
    c.socket.shutdown(tcp::socket::shutdown_send, ignored);
    asio::steady_timer t(c.socket.get_executor(), std::chrono::seconds(1));
    t.async_wait([&c](boost::system::error_code ec) {
      if (!ec) {
        boost::system::error_code e;
        c.socket.cancel(e);
      }
    });
    std::array<char, 16384> scratch;
    for (;;) {
      auto [ec, n] = co_await c.socket.async_read_some(asio::buffer(scratch),
                                                       asio::as_tuple(asio::use_awaitable));
      if (ec) {
        break;
      }
    }
    t.cancel();
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
        // The client may still be sending the body we refused: read it away for a moment, so
        // closing does not reset the connection before the client has read the response.
        co_await linger_close(c);
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
      if (req.target().ends_with("/infer")) {
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
    res.body() = R"({"error":")" + json_escaped(what) + R"("})";
    res.keep_alive(keep_alive);
    return res;
  }

  response text_ok(std::string body, unsigned version) {
    response res{http::status::ok, version};
    res.set(http::field::content_type, "text/plain; version=0.0.4");
    res.set(http::field::server, "cotensor_server");
    res.body() = std::move(body);
    return res;
  }

  asio::awaitable<response> handle(connection& c, const http::request<http::string_body>& req) {
    const unsigned v = req.version();
    if (!cotensor::serving::handler::matches(req.target())) {
      co_return error_response(http::status::not_found, "no such route", v, true);
    }
    const std::string_view target(req.target().data(), req.target().size());
    if (target == "/metrics" && req.method() == http::verb::get) {
      co_return text_ok(render_metrics() + v2_.metrics(), v);
    }
    if (req.method() != http::verb::post) {
      co_return co_await v2_.handle(req);
    }
    // An inference: answered, or abandoned when the client leaves first (its wait cancelled,
    // its rows out of the batch queue if they were still there).
    ++metrics_.in_flight;
    auto result = co_await (v2_.handle(req) || watch_disconnect(c));
    --metrics_.in_flight;
    if (result.index() == 1) {
      co_return response{static_cast<http::status>(499), v};
    }
    co_return std::move(std::get<0>(result));
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
    return os.str();
  }

  asio::io_context& io_;
  config cfg_;
  // The acceptor, the signals and the drain timer live on this strand.
  asio::strand<asio::io_context::executor_type> strand_;
  cotensor::serving::handler v2_;
  tcp::acceptor acceptor_;
  asio::signal_set signals_;
  asio::steady_timer drain_timer_;
  std::atomic<bool> draining_{false};
  bool drain_timed_out_ = false;
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
    const cotensor::serving::model_repository models = load_models(cfg, dev);
    if (models.names().empty()) {
      std::cerr << "cotensor_server: no model loaded from " << cfg.model_repository << "\n";
      return 1;
    }

    asio::io_context io(static_cast<int>(cfg.threads));
    server srv(io, cfg, models);
    srv.start();
    std::cout << "cotensor_server listening on " << cfg.address << ":" << srv.port() << " ("
              << models.names().size() << " model(s) from " << cfg.model_repository << ", batching "
              << (cfg.batching ? "on" : "off") << ")" << std::endl;

    std::vector<std::thread> threads;
    for (unsigned i = 1; i < cfg.threads; ++i) {
      threads.emplace_back([&io] { io.run(); });
    }
    io.run();
    for (auto& t : threads) {
      t.join();
    }
    srv.shutdown_batchers();
    io.restart();
    io.run_for(std::chrono::seconds(1));  // let the batcher's last completions drain
    std::cout << "cotensor_server: drained" << std::endl;
    return srv.drain_timed_out() ? 1 : 0;
  } catch (const std::exception& e) {
    std::cerr << "cotensor_server: " << e.what() << "\n";
    return 1;
  }
}
