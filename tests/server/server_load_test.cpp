// Starts the real cotensor_server on 127.0.0.1 (port 0: the OS picks) and talks HTTP to it with
// a Boost.Beast client.

#include "server_client.hpp"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

// The server under load: overload answered with 503, clients that disconnect, many concurrent
// clients, and SIGTERM draining in-flight requests.

using namespace server_test;

TEST_SUITE("server") {
  TEST_CASE("overload answers 503 with Retry-After and the server recovers" *
            doctest::timeout(120)) {
    for (bool batching : {true, false}) {
      CAPTURE(batching);
      auto args = base_args(batching);
      args.insert(args.end(), {"--max-queue-rows", "1", "--debug-delay-us", "1500000"});
      server_process srv(args);
      constexpr int n = 8;
      std::vector<response> res(n);
      std::vector<std::thread> clients;
      const auto body = body_of({model().row(4)});
      for (int i = 0; i < n; ++i) {
        clients.emplace_back([&, i] { res[std::size_t(i)] = infer(srv.port(), body, "mlp1"); });
      }
      for (auto& t : clients) {
        t.join();
      }
      int ok = 0, busy = 0;
      for (const auto& r : res) {
        if (r.result() == http::status::ok) {
          ++ok;
        } else if (r.result() == http::status::service_unavailable) {
          ++busy;
          CHECK(r[http::field::retry_after] == "1");
          CHECK(is_json_error(r.body()));
        }
      }
      CHECK(ok + busy == n);
      CHECK(ok >= 1);
      CHECK(busy >= 1);  // at most 2 rows fit (1 batch running, 1 queued) with batching
      CHECK(serves(srv.port()));
      CHECK(srv.stop(SIGTERM) == 0);
    }
  }

  TEST_CASE("a client that disconnects cancels its wait and others are served" *
            doctest::timeout(120)) {
    auto args = base_args(true);
    args.insert(args.end(), {"--debug-delay-us", "1000000"});
    server_process srv(args);
    const auto port = srv.port();
    {
      asio::io_context io;
      tcp::socket s(io);
      s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
      const std::string body = body_of({model().row(5)});
      const std::string req = "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n" + body;
      asio::write(s, asio::buffer(req));
      std::this_thread::sleep_for(100ms);
      s.close();
    }
    double cancelled = 0;
    for (int i = 0; i < 200 && cancelled < 1; ++i) {
      cancelled = metric(port, "cotensor_http_requests_total{code=\"499\"}");
      std::this_thread::sleep_for(50ms);
    }
    CHECK(cancelled == 1);
    CHECK(serves(port));
    CHECK(srv.stop(SIGTERM) == 0);
  }

  TEST_CASE("256 concurrent clients all get their own correct outputs" * doctest::timeout(180)) {
    server_process srv(base_args(true));
    constexpr int n = 256;
    std::atomic<int> good{0};
    asio::io_context io;
    for (int i = 0; i < n; ++i) {
      asio::co_spawn(
          io,
          [&, i]() -> asio::awaitable<void> {
            beast::tcp_stream stream(co_await asio::this_coro::executor);
            stream.expires_after(120s);
            co_await stream.async_connect(
                tcp::endpoint(asio::ip::make_address("127.0.0.1"), srv.port()),
                asio::use_awaitable);
            for (int k = 0; k < 2; ++k) {  // two requests on one keep-alive connection
              const std::vector<std::vector<float>> rows{model().row(i * 2 + k)};
              http::request<http::string_body> req{http::verb::post, "/v2/models/mlp/infer", 11};
              req.set(http::field::host, "127.0.0.1");
              req.body() = body_of(rows);
              req.prepare_payload();
              co_await http::async_write(stream, req, asio::use_awaitable);
              beast::flat_buffer buffer;
              response res;
              co_await http::async_read(stream, buffer, res, asio::use_awaitable);
              if (outputs_match(res, rows)) {
                ++good;
              }
            }
          },
          asio::detached);
    }
    io.run_for(150s);
    CHECK(good == 2 * n);
    // Batching happened: fewer forward passes than requests.
    CHECK(metric(srv.port(), R"(nv_inference_exec_count{model="mlp",version="1"})") < 2 * n);
    CHECK(srv.stop(SIGTERM) == 0);
  }

  TEST_CASE("SIGTERM drains: in-flight requests finish, then the server exits 0" *
            doctest::timeout(120)) {
    for (bool batching : {true, false}) {
      CAPTURE(batching);
      auto args = base_args(batching);
      args.insert(args.end(), {"--debug-delay-us", "2000000"});
      server_process srv(args);
      const auto port = srv.port();
      // An idle keep-alive connection must not hold the drain up.
      asio::io_context io;
      tcp::socket idle(io);
      idle.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
      constexpr int n = 4;
      std::vector<response> res(n);
      std::vector<std::string> failures(n);
      std::vector<std::thread> clients;
      const std::vector<std::vector<float>> rows{model().row(9)};
      for (int i = 0; i < n; ++i) {
        clients.emplace_back([&, i] {
          try {
            res[std::size_t(i)] = infer(port, body_of(rows));
          } catch (const std::exception& e) {
            failures[std::size_t(i)] = e.what();
          }
        });
      }
      // Every request must be in flight before the signal (a loaded machine may take a while
      // to connect four clients; the bound only keeps a broken server from hanging the test).
      double in_flight = 0;
      for (int i = 0; i < 3000 && in_flight < n; ++i) {
        in_flight = metric(port, "cotensor_requests_in_flight");
        std::this_thread::sleep_for(10ms);
      }
      CHECK(in_flight == n);  // not REQUIRE: the client threads must still be joined
      CHECK(srv.stop(SIGTERM) == 0);
      for (auto& t : clients) {
        t.join();
      }
      for (std::size_t i = 0; i < res.size(); ++i) {
        CAPTURE(i);
        CHECK(failures[i].empty());
        CHECK(outputs_match(res[i], rows));
      }
      // The listener is gone.
      boost::system::error_code ec;
      tcp::socket late(io);
      late.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), ec);
      CHECK(ec);
    }
  }
}
