// cotensor::serving::listener in this process: a handler over an empty model repository, the
// tests' own routes (a slow one, to keep a request in flight), and Beast clients on 127.0.0.1.

#include <cotensor/serving.hpp>

#include "server_client.hpp"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>

using namespace server_test;
namespace serving = cotensor::serving;

namespace {

using request_type = serving::handler::request;
using response_type = serving::handler::response;

// A KServe error body: one JSON object whose one member "error" is a string. Checked without
// Boost.JSON: this program links libcotensor_serving, whose own copy of it is private, and a
// second copy here would be an ODR violation to ASan.
bool is_error_object(const std::string& body) {
  static const std::regex error_object(R"(^\s*\{\s*"error"\s*:\s*"([^"\\]|\\.)*"\s*\}\s*$)");
  return std::regex_match(body, error_object);
}

// `limit` passes or `done()` holds, polling every 10 ms; whether it held.
template <class Done>
bool eventually(Done done, std::chrono::milliseconds limit = 5s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) {
      return false;
    }
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// A listener on 127.0.0.1, port 0, serving `routes` and a handler of no models, run by a
// thread of its own until the test ends (then stopped).
class running_listener {
public:
  explicit running_listener(serving::listener_options options = {},
                            serving::listener::routes routes = {})
      : v2_(io_.get_executor(), models_),
        http_(io_.get_executor(), v2_, loopback(std::move(options)), std::move(routes)) {
    asio::co_spawn(io_, http_.run(), [this](std::exception_ptr e, std::error_code ec) {
      result_ = ec;
      threw_ = static_cast<bool>(e);
      done_ = true;
    });
    thread_ = std::thread([this] { io_.run(); });
  }
  running_listener(const running_listener&) = delete;
  running_listener& operator=(const running_listener&) = delete;
  ~running_listener() {
    http_.stop();
    thread_.join();  // io.run() returns once run() has completed
  }

  serving::listener& get() { return http_; }
  unsigned short port() const { return http_.local_endpoint().port(); }
  tcp::endpoint endpoint() const { return {asio::ip::make_address("127.0.0.1"), port()}; }
  bool done() const { return done_; }
  std::error_code result() const { return result_; }
  bool threw() const { return threw_; }

  // The value of the listener's metric `name` (a line "NAME VALUE"), or -1.
  double metric(const std::string& name) const {
    const auto text = http_.metrics();
    const auto at = text.find("\n" + name + " ");
    return at == std::string::npos ? -1 : std::stod(text.substr(at + name.size() + 2));
  }

private:
  static serving::listener_options loopback(serving::listener_options o) {
    o.address = "127.0.0.1";
    o.port = 0;
    return o;
  }

  asio::io_context io_;
  serving::model_repository models_;
  serving::handler v2_;
  serving::listener http_;
  std::atomic<bool> done_{false};
  std::error_code result_;  // written before done_
  bool threw_ = false;      // written before done_
  std::thread thread_;
};

// Routes with GET /slow: answers "done" after `delay`, counting starts and cancellations.
struct slow_route {
  std::chrono::milliseconds delay;
  std::atomic<int> started{0};
  std::atomic<int> cancelled{0};

  serving::listener::routes routes() {
    return [this](const request_type& req) -> asio::awaitable<std::optional<response_type>> {
      if (req.target() != "/slow") {
        co_return std::nullopt;
      }
      ++started;
      asio::steady_timer t(co_await asio::this_coro::executor, delay);
      try {
        co_await t.async_wait(asio::use_awaitable);
      } catch (const boost::system::system_error&) {
        ++cancelled;
        throw;
      }
      response_type res{http::status::ok, req.version()};
      res.body() = "done";
      co_return res;
    };
  }
};

const std::string close_header = "Host: x\r\nConnection: close\r\n";

}  // namespace

TEST_SUITE("listener") {
  TEST_CASE("keep-alive serves several requests on one connection" * doctest::timeout(30)) {
    running_listener l;
    asio::io_context io;
    beast::tcp_stream stream(io);
    stream.expires_after(10s);
    stream.connect(l.endpoint());
    beast::flat_buffer buffer;
    for (int i = 0; i < 3; ++i) {
      CAPTURE(i);
      http::request<http::string_body> req{http::verb::get, "/v2/health/live", 11};
      req.set(http::field::host, "127.0.0.1");
      http::write(stream, req);
      response res;
      http::read(stream, buffer, res);
      CHECK(res.result() == http::status::ok);
      CHECK(res.keep_alive());
    }
    // Three answers, and one connection all along.
    CHECK(l.metric("cotensor_open_connections") == 1);
    CHECK(l.metric("cotensor_http_requests_total{code=\"200\"}") == 3);
    // `Connection: close` is answered, then the listener closes the connection.
    http::request<http::string_body> last{http::verb::get, "/v2/health/live", 11};
    last.set(http::field::host, "127.0.0.1");
    last.keep_alive(false);
    http::write(stream, last);
    response res;
    http::read(stream, buffer, res);
    CHECK(res.result() == http::status::ok);
    CHECK_FALSE(res.keep_alive());
    beast::error_code ec;
    http::read(stream, buffer, res, ec);
    CHECK(ec == http::error::end_of_stream);
  }

  TEST_CASE("a request over the limits gets 413 or 431 and the connection closes" *
            doctest::timeout(30)) {
    running_listener l({.max_body_bytes = 1024, .max_header_bytes = 1024});
    SUBCASE("a body over max_body_bytes") {
      const auto r = raw(l.port(), "POST /v2/models/m/infer HTTP/1.1\r\n" + close_header +
                                       "Content-Length: 4096\r\n\r\n" + std::string(4096, 'x'));
      CHECK(status_line(r) == "HTTP/1.1 413 Payload Too Large");
      CHECK(is_error_object(r.substr(r.find("\r\n\r\n") + 4)));
      // Under the limit it reaches the handler: no such model.
      const auto ok = raw(l.port(), "POST /v2/models/m/infer HTTP/1.1\r\n" + close_header +
                                        "Content-Length: 1000\r\n\r\n" + std::string(1000, 'x'));
      CHECK(status_line(ok) == "HTTP/1.1 404 Not Found");
    }
    SUBCASE("headers over max_header_bytes") {
      const auto r = raw(l.port(), "GET /v2/health/live HTTP/1.1\r\n" + close_header +
                                       "X-Big: " + std::string(2048, 'x') + "\r\n\r\n");
      CHECK(status_line(r) == "HTTP/1.1 431 Request Header Fields Too Large");
    }
  }

  TEST_CASE("read and idle timeouts close connections" * doctest::timeout(30)) {
    running_listener l({.read_timeout = 300ms, .idle_timeout = 300ms});
    SUBCASE("a client that sends nothing gets 408") {
      const auto started = std::chrono::steady_clock::now();
      const auto r = raw(l.port(), "");
      CHECK(status_line(r) == "HTTP/1.1 408 Request Timeout");
      CHECK(std::chrono::steady_clock::now() - started < 10s);
    }
    SUBCASE("an idle keep-alive connection closes without a response") {
      const auto started = std::chrono::steady_clock::now();
      const auto r = raw(l.port(), "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n");
      CHECK(status_line(r) == "HTTP/1.1 200 OK");
      CHECK(r.find("408") == std::string::npos);  // one response, then the close
      CHECK(std::chrono::steady_clock::now() - started < 10s);
    }
  }

  TEST_CASE("connections beyond max_connections get 503 until one closes" * doctest::timeout(30)) {
    running_listener l({.max_connections = 2});
    asio::io_context io;
    tcp::socket a(io), b(io);
    a.connect(l.endpoint());
    b.connect(l.endpoint());
    CHECK(eventually([&] { return l.metric("cotensor_open_connections") == 2; }));
    const std::string get = "GET /v2/health/live HTTP/1.1\r\n" + close_header + "\r\n";
    const auto refused = raw(l.port(), get);
    CHECK(status_line(refused) == "HTTP/1.1 503 Service Unavailable");
    CHECK(refused.find("Retry-After: 1") != std::string::npos);
    a.close();
    CHECK(eventually([&] { return status_line(raw(l.port(), get)) == "HTTP/1.1 200 OK"; }));
  }

  TEST_CASE("a client that disconnects mid-request cancels its work" * doctest::timeout(30)) {
    slow_route slow{20s};
    running_listener l({}, slow.routes());
    {
      asio::io_context io;
      tcp::socket s(io);
      s.connect(l.endpoint());
      asio::write(s, asio::buffer(std::string("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")));
      REQUIRE(eventually([&] { return slow.started == 1; }));
      CHECK(l.metric("cotensor_requests_in_flight") == 1);
    }  // closed
    CHECK(eventually([&] { return slow.cancelled == 1; }));
    CHECK(eventually([&] { return l.metric("cotensor_http_requests_total{code=\"499\"}") == 1; }));
    CHECK(l.metric("cotensor_requests_in_flight") == 0);
  }

  TEST_CASE("drain finishes the request in flight, closes idle connections, then run returns" *
            doctest::timeout(30)) {
    slow_route slow{300ms};
    running_listener l({}, slow.routes());
    asio::io_context io;
    tcp::socket idle(io);
    idle.connect(l.endpoint());
    response res;
    std::string failure;
    std::thread client([&] {
      try {
        res = request(l.port(), http::verb::get, "/slow");
      } catch (const std::exception& e) {
        failure = e.what();
      }
    });
    const bool started = eventually([&] { return slow.started == 1; });
    l.get().drain();
    client.join();
    REQUIRE(started);
    CHECK(failure.empty());
    CHECK(res.result() == http::status::ok);
    CHECK(res.body() == "done");
    CHECK_FALSE(res.keep_alive());
    CHECK(slow.cancelled == 0);
    REQUIRE(eventually([&] { return l.done(); }));
    CHECK_FALSE(l.result());
    CHECK_FALSE(l.threw());
    // The idle connection was closed, and nothing listens any more.
    char byte = 0;
    beast::error_code ec;
    idle.read_some(asio::buffer(&byte, 1), ec);
    CHECK(ec == asio::error::eof);
    tcp::socket late(io);
    late.connect(l.endpoint(), ec);
    CHECK(ec);
  }

  TEST_CASE("a drain past drain_timeout cancels the requests left and reports timed_out" *
            doctest::timeout(30)) {
    slow_route slow{20s};
    running_listener l({.drain_timeout = 200ms}, slow.routes());
    asio::io_context io;
    tcp::socket s(io);
    s.connect(l.endpoint());
    asio::write(s, asio::buffer(std::string("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")));
    REQUIRE(eventually([&] { return slow.started == 1; }));
    l.get().drain();
    REQUIRE(eventually([&] { return l.done(); }));
    CHECK(l.result() == std::errc::timed_out);
    CHECK(slow.cancelled == 1);
  }

  TEST_CASE("the application's routes answer before the handler's" * doctest::timeout(30)) {
    running_listener l(
        {}, [](const request_type& req) -> asio::awaitable<std::optional<response_type>> {
          if (req.target() == "/throw") {
            throw std::runtime_error("the application failed");
          }
          if (req.target() != "/v2/health/live") {
            co_return std::nullopt;
          }
          response_type res{http::status::ok, req.version()};
          res.body() = "the application's";
          co_return res;
        });
    CHECK(request(l.port(), http::verb::get, "/v2/health/live").body() == "the application's");
    // Declined: the handler's, then the listener's own.
    const auto ready = request(l.port(), http::verb::get, "/v2/health/ready");
    CHECK(ready.result() == http::status::ok);
    CHECK(ready.body() == R"({"ready":true})");
    const auto metrics = request(l.port(), http::verb::get, "/metrics");
    CHECK(metrics.result() == http::status::ok);
    CHECK(metrics.body().find("cotensor_http_requests_total{code=\"200\"} 2") != std::string::npos);
    // An exception from the routes is that request's 500; the listener serves on.
    const auto failed = request(l.port(), http::verb::get, "/throw");
    CHECK(failed.result() == http::status::internal_server_error);
    CHECK(failed.body().find("the application failed") != std::string::npos);
    const auto missing = request(l.port(), http::verb::get, "/nowhere");
    CHECK(missing.result() == http::status::not_found);
    CHECK(is_error_object(missing.body()));
  }
}
