// Starts the real cotensor_server on 127.0.0.1 (port 0: the OS picks) and talks HTTP to it with
// a Boost.Beast client.

#include "server_client.hpp"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <boost/json/src.hpp>  // Boost.JSON header-only: in exactly one .cpp of the program
#include <doctest/doctest.h>

#include <algorithm>
#include <csignal>
#include <string>
#include <vector>

// The server's API: inference with and without batching, health, metrics, statistics, and
// bad inputs answered with 4xx JSON errors.

using namespace server_test;

TEST_SUITE("server") {
  TEST_CASE("infer returns the CPU reference outputs with and without batching" *
            doctest::timeout(120)) {
    for (bool batching : {true, false}) {
      CAPTURE(batching);
      server_process srv(base_args(batching));
      const std::vector<std::vector<float>> rows{model().row(1), model().row(2), model().row(3)};
      CHECK(outputs_match(infer(srv.port(), body_of(rows)), rows));
      // Integers are numbers too.
      std::vector<std::vector<float>> ints{std::vector<float>(std::size_t(model().in), 2.0f)};
      std::string body = R"({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 8],
                                          "data": [2, 2, 2, 2, 2, 2, 2, 2]}]})";
      CHECK(outputs_match(infer(srv.port(), body), ints));
      CHECK(srv.stop(SIGTERM) == 0);
    }
  }

  TEST_CASE("health answers ready and metrics is Prometheus text" * doctest::timeout(120)) {
    server_process srv(base_args(true));
    auto h = request(srv.port(), http::verb::get, "/v2/health/ready");
    CHECK(h.result() == http::status::ok);
    CHECK(h.body() == R"({"ready":true})");
    CHECK(serves(srv.port()));
    auto m = request(srv.port(), http::verb::get, "/metrics");
    CHECK(m.result() == http::status::ok);
    CHECK(m[http::field::content_type].starts_with("text/plain"));
    const auto& t = m.body();
    CHECK(t.find("cotensor_http_requests_total{code=\"200\"} 2") != std::string::npos);
    CHECK(t.find("cotensor_infer_latency_seconds_bucket{le=\"+Inf\"} 1") != std::string::npos);
    const std::string labels = R"({model="mlp",version="1"})";
    CHECK(t.find("cotensor_batch_size_count" + labels + " 1") != std::string::npos);
    CHECK(t.find("cotensor_batch_queue_rows" + labels + " 0") != std::string::npos);
    CHECK(t.find("nv_inference_request_success" + labels + " 1") != std::string::npos);
    CHECK(t.find("nv_inference_count" + labels + " 1") != std::string::npos);
    CHECK(t.find("nv_inference_exec_count" + labels + " 1") != std::string::npos);
    CHECK(srv.stop(SIGINT) == 0);
  }

  TEST_CASE("the statistics extension counts requests, failures and their times" *
            doctest::timeout(120)) {
    server_process srv(base_args(true));
    const auto port = srv.port();
    const std::vector<std::vector<float>> rows{model().row(1), model().row(2), model().row(3)};
    CHECK(outputs_match(infer(port, body_of(rows)), rows));
    const std::string short_row = R"({"inputs": [{"name": "INPUT0", "datatype": "FP32",
                                      "shape": [1, 7], "data": [1, 2, 3, 4, 5, 6, 7]}]})";
    CHECK(infer(port, short_row).result() == http::status::bad_request);

    const auto meta = json::parse(request(port, http::verb::get, "/v2").body()).as_object();
    const auto& extensions = meta.at("extensions").as_array();
    CHECK(std::find(extensions.begin(), extensions.end(), json::value("statistics")) !=
          extensions.end());

    auto res = request(port, http::verb::get, "/v2/models/mlp/stats");
    REQUIRE(res.result() == http::status::ok);
    const auto stats = json::parse(res.body()).as_object().at("model_stats").as_array();
    REQUIRE(stats.size() == 1);
    const auto& m = stats.at(0).as_object();
    CHECK(m.at("name") == "mlp");
    CHECK(m.at("version") == "1");
    CHECK(m.at("inference_count").to_number<std::int64_t>() == 3);                // rows
    CHECK(m.at("execution_count").to_number<std::int64_t>() == 1);                // one batch
    CHECK(m.at("last_inference").to_number<std::int64_t>() > 1'700'000'000'000);  // ms, 2023+
    CHECK(m.at("batch_stats").as_array().empty());
    const auto& inference = m.at("inference_stats").as_object();
    const auto count = [&](const char* k) {
      return inference.at(k).as_object().at("count").to_number<std::int64_t>();
    };
    const auto nanoseconds = [&](const char* k) {
      return inference.at(k).as_object().at("ns").to_number<std::int64_t>();
    };
    CHECK(count("success") == 1);
    CHECK(count("fail") == 1);
    CHECK(nanoseconds("fail") > 0);
    for (const char* k : {"success", "queue", "compute_input", "compute_infer", "compute_output"}) {
      CAPTURE(k);
      CHECK(count(k) == 1);
      CHECK(nanoseconds(k) >= 0);
    }
    CHECK(nanoseconds("compute_infer") > 0);
    CHECK(nanoseconds("success") >= nanoseconds("compute_infer"));
    CHECK(count("cache_hit") == 0);

    // Every model without a name; a model no one serves is a 404; only GET.
    res = request(port, http::verb::get, "/v2/models/stats");
    REQUIRE(res.result() == http::status::ok);
    CHECK(json::parse(res.body()).as_object().at("model_stats").as_array().size() == 2);
    CHECK(request(port, http::verb::get, "/v2/models/mlp/versions/1/stats").result() ==
          http::status::ok);
    res = request(port, http::verb::get, "/v2/models/nope/stats");
    CHECK(res.result() == http::status::not_found);
    CHECK(is_json_error(res.body()));
    CHECK(request(port, http::verb::post, "/v2/models/mlp/stats", "{}").result() ==
          http::status::method_not_allowed);
    CHECK(srv.stop(SIGTERM) == 0);
  }

  TEST_CASE("every bad input gets a 4xx JSON error and the server keeps serving" *
            doctest::timeout(300)) {
    auto args = base_args(true);
    args.insert(args.end(), {"--max-body-bytes", "4096"});
    server_process srv(args);
    const auto port = srv.port();
    auto body = [](const std::string& shape, const std::string& data) {
      return R"({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": )" + shape +
             R"(, "data": )" + data + "}]}";
    };
    const std::string row7 = "[1, 2, 3, 4, 5, 6, 7]";
    const std::string row8 = "[1, 2, 3, 4, 5, 6, 7, 8]";
    struct bad_case {
      const char* name;
      std::string body;
      http::status status;
    };
    // More cases, over the Python clients' view of the protocol: tests/server/bad_requests_test.py.
    const std::vector<bad_case> cases{
        {"malformed JSON", R"({"inputs": [{"name": )", http::status::bad_request},
        {"not JSON at all", "hello", http::status::bad_request},
        {"empty body", "", http::status::bad_request},
        {"no inputs key", R"({"x": 1})", http::status::bad_request},
        {"inputs not an array", R"({"inputs": 3})", http::status::bad_request},
        {"no inputs", R"({"inputs": []})", http::status::bad_request},
        {"wrong row width", body("[1, 7]", row7), http::status::bad_request},
        {"data shorter than the shape", body("[2, 8]", row8), http::status::bad_request},
        {"a string in the data", body("[1, 8]", R"([1, 2, 3, "4", 5, 6, 7, 8])"),
         http::status::bad_request},
        {"NaN literal", body("[1, 8]", "[NaN, 2, 3, 4, 5, 6, 7, 8]"), http::status::bad_request},
        {"deep nesting", std::string(1000, '[') + std::string(1000, ']'),
         http::status::bad_request},
        {"huge body", body("[1, 8]", std::string(8192, ' ') + row8),
         http::status::payload_too_large},
    };
    SUBCASE("bad bodies") {
      for (const auto& c : cases) {
        CAPTURE(c.name);
        auto res = infer(port, c.body);
        CHECK(res.result() == c.status);
        CHECK(is_json_error(res.body()));
        CHECK(serves(port));
      }
    }
    SUBCASE("wrong method and unknown path") {
      auto res = request(port, http::verb::get, "/v2/models/mlp/infer");
      CHECK(res.result() == http::status::method_not_allowed);
      CHECK(is_json_error(res.body()));
      res = request(port, http::verb::get, "/nope");
      CHECK(res.result() == http::status::not_found);
      CHECK(is_json_error(res.body()));
      CHECK(serves(port));
    }
    SUBCASE("malformed HTTP") {
      const auto r = raw(port, "THIS IS NOT HTTP\r\n\r\n");
      CHECK(status_line(r) == "HTTP/1.1 400 Bad Request");
      CHECK(r.find("{\"error\"") != std::string::npos);
      CHECK(serves(port));
    }
    SUBCASE("a slow client that stops mid-header gets 408") {
      const auto r = raw(port, "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\n");
      CHECK(status_line(r) == "HTTP/1.1 408 Request Timeout");
      CHECK(r.find("{\"error\"") != std::string::npos);
      CHECK(serves(port));
    }
    SUBCASE("a client that stops mid-body gets 408") {
      const auto r =
          raw(port, "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
                    "\r\n{\"inputs\": [[1,");
      CHECK(status_line(r) == "HTTP/1.1 408 Request Timeout");
      CHECK(serves(port));
    }
    SUBCASE("a half-open client that sends nothing gets 408") {
      const auto r = raw(port, "");
      CHECK(status_line(r) == "HTTP/1.1 408 Request Timeout");
      CHECK(r.find("{\"error\"") != std::string::npos);
      CHECK(serves(port));
    }
    SUBCASE("a body shorter than its Content-Length, then half-closed, is not served") {
      const auto r = raw(
          port, "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{}",
          true);
      CHECK(r.find("200 OK") == std::string::npos);
      CHECK(serves(port));
    }
    CHECK(srv.stop(SIGTERM) == 0);
  }
}
