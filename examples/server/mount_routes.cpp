// mount_routes: the Open Inference Protocol's routes mounted beside an application's own.
// `cotensor::serving::listener` serves the connections; the application's routes answer first
// (here GET /hello), and what they decline goes to `cotensor::serving::handler` (/v2/...,
// /metrics) or is a 404.
//
//   mount_routes [--model-repository DIR] [--port N]   serve until SIGINT/SIGTERM
//   mount_routes --self-test                            serve on a free port, ask it a few
//                                                       questions as a client, exit 0 if right
//
// Prints `mount_routes listening on 127.0.0.1:PORT` once it accepts connections.

#include <cotensor/cotensor.hpp>
#include <cotensor/serving.hpp>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <iostream>
#include <optional>
#include <string>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

// The application's own routes: GET /hello; the rest is cotensor's.
asio::awaitable<std::optional<http::response<http::string_body>>>
app_routes(const http::request<http::string_body>& req) {
  if (req.target() != "/hello") {
    co_return std::nullopt;
  }
  http::response<http::string_body> res{http::status::ok, req.version()};
  res.set(http::field::content_type, "text/plain");
  res.body() = "hello from the application\n";
  co_return res;
}

// A client's view: GET or POST `target`, the response.
asio::awaitable<http::response<http::string_body>>
ask(unsigned short port, http::verb method, std::string target, std::string body = {}) {
  beast::tcp_stream stream(co_await asio::this_coro::executor);
  stream.expires_after(std::chrono::seconds(30));
  co_await stream.async_connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port),
                                asio::use_awaitable);
  http::request<http::string_body> req{method, target, 11};
  req.set(http::field::host, "127.0.0.1");
  req.body() = std::move(body);
  req.prepare_payload();
  co_await http::async_write(stream, req, asio::use_awaitable);
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  co_await http::async_read(stream, buffer, res, asio::use_awaitable);
  co_return res;
}

// Asks the server a few questions; true when every answer is right.
asio::awaitable<bool> self_test(unsigned short port) {
  bool ok = true;
  auto expect = [&](bool good, const std::string& what) {
    std::cout << (good ? "ok   " : "FAIL ") << what << std::endl;
    ok = ok && good;
  };
  auto hello = co_await ask(port, http::verb::get, "/hello");
  expect(hello.result() == http::status::ok && hello.body().starts_with("hello"),
         "GET /hello is the application's");
  auto ready = co_await ask(port, http::verb::get, "/v2/health/ready");
  expect(ready.result() == http::status::ok, "GET /v2/health/ready is cotensor's");
  std::string data = "[";
  for (int i = 0; i < 16; ++i) {
    data += (i ? "," : "") + std::to_string(i % 5);
  }
  data += "]";
  auto infer = co_await ask(
      port, http::verb::post, "/v2/models/mlp/infer",
      R"({"id": "q1", "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": )" +
          data + "}]}");
  expect(infer.result() == http::status::ok &&
             infer.body().find(R"("id":"q1")") != std::string::npos &&
             infer.body().find(R"("shape":[1,4])") != std::string::npos,
         "POST /v2/models/mlp/infer answers: " + infer.body().substr(0, 120));
  auto missing = co_await ask(port, http::verb::get, "/elsewhere");
  expect(missing.result() == http::status::not_found, "GET /elsewhere is a 404");
  co_return ok;
}

}  // namespace

int main(int argc, char** argv) {
  std::string repository = COTENSOR_EXAMPLE_MODELS;
  unsigned short port = 8000;
  bool test = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--self-test") {
      test = true;
      port = 0;
    } else if (flag == "--model-repository" && i + 1 < argc) {
      repository = argv[++i];
    } else if (flag == "--port" && i + 1 < argc) {
      port = static_cast<unsigned short>(std::stoi(argv[++i]));
    } else {
      std::cerr << "usage: mount_routes [--model-repository DIR] [--port N] [--self-test]\n";
      return 2;
    }
  }
  try {
    cotensor::runtime rt;
    cotensor::serving::model_repository models;
    for (const auto& f : models.load_repository(repository)) {
      std::cerr << "mount_routes: model '" << f.model << "' not loaded: " << f.reason << "\n";
    }
    asio::io_context io;
    cotensor::serving::handler v2(io.get_executor(), models);
    cotensor::serving::listener http_listener(io.get_executor(), v2, {.port = port}, app_routes);
    port = http_listener.local_endpoint().port();
    std::cout << "mount_routes listening on 127.0.0.1:" << port << std::endl;

    int status = 0;
    asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](beast::error_code ec, int) {
      if (!ec) {
        http_listener.drain();
      }
    });
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          co_await http_listener.run();  // until drained
          signals.cancel();
          v2.shutdown();
        },
        asio::detached);
    if (test) {
      asio::co_spawn(io, self_test(port), [&](std::exception_ptr e, bool ok) {
        if (e) {
          std::cout << "FAIL the client's exchange threw\n";
        }
        status = (!e && ok) ? 0 : 1;
        http_listener.drain();
      });
    }
    io.run();
    return status;
  } catch (const std::exception& e) {
    std::cerr << "mount_routes: " << e.what() << "\n";
    return 1;
  }
}
