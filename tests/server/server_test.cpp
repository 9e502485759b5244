// Starts the real cotensor_server on 127.0.0.1 (port 0: the OS picks) and talks HTTP to it with
// a Boost.Beast client.

#include <cotensor/io.hpp>
#include <cotensor/ops.hpp>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <boost/json/src.hpp>  // Boost.JSON header-only: in exactly one .cpp of the program
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <poll.h>
#include <random>
#include <spawn.h>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

// The cotensor_server binary, started with `args` on 127.0.0.1 and port 0; killed if the test
// did not stop it.
class server_process {
public:
  explicit server_process(std::vector<std::string> args) {
    args.insert(args.begin(), COTENSOR_SERVER_PATH);
    args.insert(args.end(), {"--address", "127.0.0.1", "--port", "0"});
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    std::vector<char*> argv;
    for (auto& a : args) {
      argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    REQUIRE(::posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ) == 0);
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    out_ = fds[0];
    // Read "cotensor_server listening on 127.0.0.1:PORT ..." within 60 s.
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, 100) > 0) {
        char buf[256];
        const auto n = ::read(out_, buf, sizeof buf);
        if (n <= 0) {
          break;
        }
        line.append(buf, static_cast<std::size_t>(n));
      }
    }
    const auto at = line.find("127.0.0.1:");
    REQUIRE_MESSAGE(at != std::string::npos, "server did not start: " << line);
    port_ = static_cast<unsigned short>(std::stoi(line.substr(at + 10)));
  }
  server_process(const server_process&) = delete;
  server_process& operator=(const server_process&) = delete;
  ~server_process() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
    ::close(out_);
  }

  unsigned short port() const { return port_; }

  // Sends `sig` and waits (at most `limit`) for the exit; returns the exit status, or -1.
  int stop(int sig, std::chrono::seconds limit = 30s) {
    ::kill(pid_, sig);
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(20ms);
    }
    return -1;
  }

private:
  pid_t pid_ = -1;
  int out_ = -1;
  unsigned short port_ = 0;
};

using response = http::response<http::string_body>;

// One request on a fresh connection, with a 30 s limit.
response request(unsigned short port,
                 http::verb method,
                 const std::string& target,
                 const std::string& body = {}) {
  asio::io_context io;
  beast::tcp_stream stream(io);
  stream.expires_after(30s);
  stream.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  http::request<http::string_body> req{method, target, 11};
  req.set(http::field::host, "127.0.0.1");
  if (method == http::verb::post) {
    req.set(http::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
  }
  http::write(stream, req);
  beast::flat_buffer buffer;
  response res;
  http::read(stream, buffer, res);
  return res;
}

response infer(unsigned short port, const std::string& body, const std::string& model = "mlp") {
  return request(port, http::verb::post, "/v2/models/" + model + "/infer", body);
}

// Raw bytes on a fresh connection; the response read within 30 s (empty if none came).
std::string raw(unsigned short port, const std::string& bytes, bool half_close = false) {
  asio::io_context io;
  beast::tcp_stream stream(io);
  stream.expires_after(30s);
  stream.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  if (!bytes.empty()) {
    asio::write(stream, asio::buffer(bytes));
  }
  if (half_close) {
    stream.socket().shutdown(tcp::socket::shutdown_send);
  }
  std::string out;
  beast::error_code ec;
  char buf[4096];
  for (;;) {
    const auto n = stream.read_some(asio::buffer(buf), ec);
    out.append(buf, n);
    if (ec) {
      break;
    }
  }
  return out;
}

std::string status_line(const std::string& raw_response) {
  return raw_response.substr(0, raw_response.find("\r\n"));
}

bool is_json_error(const std::string& body) {
  boost::system::error_code ec;
  auto v = json::parse(body, ec);
  return !ec && v.is_object() && v.as_object().contains("error") &&
         v.as_object().at("error").is_string();
}

// A small MLP written as .npy files, and its reference forward pass in double precision.
struct weights {
  std::int64_t in = 8, hidden = 16, out = 4;
  std::vector<float> w1, b1, w2, b2;
  std::string dir;

  weights() {
    std::mt19937 gen(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    auto fill = [&](std::size_t n) {
      std::vector<float> v(n);
      for (auto& x : v) {
        x = u(gen);
      }
      return v;
    };
    w1 = fill(std::size_t(in * hidden));
    b1 = fill(std::size_t(hidden));
    w2 = fill(std::size_t(hidden * out));
    b2 = fill(std::size_t(out));
    // A model repository holding the MLP as PyTorch's nn.Sequential(Linear, ReLU, Linear)
    // stores it: weights [out, in].
    dir = (std::filesystem::temp_directory_path() /
           ("cotensor_server_test_" + std::to_string(::getpid())))
              .string();
    // A directory left by an earlier process with the same pid (one that was killed) must not
    // make this one fail.
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir + "/mlp/1");
    cotensor::save_safetensors(
        dir + "/mlp/1/model.safetensors",
        {{"0.weight", cotensor::transpose(cotensor::from_vector(w1, {in, hidden}))},
         {"0.bias", cotensor::from_vector(b1, {hidden})},
         {"2.weight", cotensor::transpose(cotensor::from_vector(w2, {hidden, out}))},
         {"2.bias", cotensor::from_vector(b2, {out})}},
        {});
    std::ofstream(dir + "/mlp/config.json") << config("mlp", 64);
    // "mlp1": the same, in batches of one row (a queue of one row is then possible).
    std::filesystem::create_directories(dir + "/mlp1/1");
    std::filesystem::copy_file(dir + "/mlp/1/model.safetensors", dir + "/mlp1/1/model.safetensors");
    std::ofstream(dir + "/mlp1/config.json") << config("mlp1", 1);
  }
  weights(const weights&) = delete;
  weights& operator=(const weights&) = delete;
  ~weights() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }

  static std::string config(const std::string& name, int max_batch_size) {
    return R"({"name": ")" + name + R"(", "max_batch_size": )" + std::to_string(max_batch_size) +
           R"(,
  "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [8]}],
  "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
  "dynamic_batching": {"max_queue_delay_microseconds": 1000},
  "layers": [{"op": "linear", "weight": "0.weight", "bias": "0.bias"}, {"op": "relu"},
             {"op": "linear", "weight": "2.weight", "bias": "2.bias"}]})";
  }

  std::vector<double> forward(const std::vector<float>& x) const {
    std::vector<double> h(static_cast<std::size_t>(hidden)), y(static_cast<std::size_t>(out));
    for (std::int64_t j = 0; j < hidden; ++j) {
      double s = b1[std::size_t(j)];
      for (std::int64_t i = 0; i < in; ++i) {
        s += double(x[std::size_t(i)]) * w1[std::size_t(i * hidden + j)];
      }
      h[std::size_t(j)] = std::max(s, 0.0);
    }
    for (std::int64_t j = 0; j < out; ++j) {
      double s = b2[std::size_t(j)];
      for (std::int64_t i = 0; i < hidden; ++i) {
        s += h[std::size_t(i)] * w2[std::size_t(i * out + j)];
      }
      y[std::size_t(j)] = s;
    }
    return y;
  }

  std::vector<float> row(int seed) const {
    std::vector<float> r(static_cast<std::size_t>(in));
    for (std::size_t i = 0; i < r.size(); ++i) {
      r[i] = float(std::sin(seed * 0.37 + double(i)));
    }
    return r;
  }
};

const weights& model() {
  static const weights w;
  return w;
}

// A v2 infer request for `rows` as JSON tensor data.
std::string body_of(const std::vector<std::vector<float>>& rows) {
  json::array data;
  for (const auto& r : rows) {
    for (float v : r) {
      data.emplace_back(double(v));
    }
  }
  json::object input{{"name", "INPUT0"},
                     {"datatype", "FP32"},
                     {"shape", json::array{rows.size(), model().in}},
                     {"data", std::move(data)}};
  return json::serialize(json::object{{"inputs", json::array{std::move(input)}}});
}

// True when `res` is a 200 whose output matches the reference for `rows` (tolerance 1e-4).
bool outputs_match(const response& res, const std::vector<std::vector<float>>& rows) {
  if (res.result() != http::status::ok) {
    return false;
  }
  boost::system::error_code ec;
  auto v = json::parse(res.body(), ec);
  if (ec || !v.is_object() || !v.as_object().contains("outputs")) {
    return false;
  }
  const auto& output = v.as_object().at("outputs").as_array().at(0).as_object();
  const auto& shape = output.at("shape").as_array();
  const auto& data = output.at("data").as_array();
  const auto width = static_cast<std::size_t>(model().out);
  if (shape.size() != 2 || shape[0].to_number<std::size_t>() != rows.size() ||
      shape[1].to_number<std::size_t>() != width || data.size() != rows.size() * width) {
    return false;
  }
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const auto ref = model().forward(rows[r]);
    for (std::size_t j = 0; j < ref.size(); ++j) {
      if (std::fabs(data[r * width + j].to_number<double>() - ref[j]) >
          1e-4 * (1 + std::fabs(ref[j]))) {
        return false;
      }
    }
  }
  return true;
}

bool serves(unsigned short port) {
  const std::vector<std::vector<float>> rows{model().row(1)};
  return outputs_match(infer(port, body_of(rows)), rows);
}

// The value of the metric line starting with `name ` (or -1).
double metric(unsigned short port, const std::string& name) {
  const auto text = request(port, http::verb::get, "/metrics").body();
  const auto at = text.find("\n" + name + " ");
  if (at == std::string::npos) {
    return -1;
  }
  return std::stod(text.substr(at + name.size() + 2));
}

std::vector<std::string> base_args(bool batching) {
  std::vector<std::string> a{"--model-repository", model().dir, "--threads", "2",
                             "--timeout-ms",       "1000"};
  if (!batching) {
    a.push_back("--no-batching");
  }
  return a;
}

}  // namespace

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
