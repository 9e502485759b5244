#pragma once

// The server's end-to-end tests' client (tests/server/server_*_test.cpp): the real
// cotensor_server started on 127.0.0.1 (port 0: the OS picks), HTTP requests to it with a
// Boost.Beast client, and the model it serves with its reference outputs. Boost.JSON is
// header-only here: exactly one .cpp of the program includes <boost/json/src.hpp>.

#include <cotensor/io.hpp>
#include <cotensor/ops.hpp>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
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

namespace server_test {

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
inline response request(unsigned short port,
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

inline response
infer(unsigned short port, const std::string& body, const std::string& model = "mlp") {
  return request(port, http::verb::post, "/v2/models/" + model + "/infer", body);
}

// Raw bytes on a fresh connection; the response read within 30 s (empty if none came).
inline std::string raw(unsigned short port, const std::string& bytes, bool half_close = false) {
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

inline std::string status_line(const std::string& raw_response) {
  return raw_response.substr(0, raw_response.find("\r\n"));
}

inline bool is_json_error(const std::string& body) {
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

inline const weights& model() {
  static const weights w;
  return w;
}

// A v2 infer request for `rows` as JSON tensor data.
inline std::string body_of(const std::vector<std::vector<float>>& rows) {
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
inline bool outputs_match(const response& res, const std::vector<std::vector<float>>& rows) {
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

inline bool serves(unsigned short port) {
  const std::vector<std::vector<float>> rows{model().row(1)};
  return outputs_match(infer(port, body_of(rows)), rows);
}

// The value of the metric line starting with `name ` (or -1).
inline double metric(unsigned short port, const std::string& name) {
  const auto text = request(port, http::verb::get, "/metrics").body();
  const auto at = text.find("\n" + name + " ");
  if (at == std::string::npos) {
    return -1;
  }
  return std::stod(text.substr(at + name.size() + 2));
}

inline std::vector<std::string> base_args(bool batching) {
  std::vector<std::string> a{"--model-repository", model().dir, "--threads", "2",
                             "--timeout-ms",       "1000"};
  if (!batching) {
    a.push_back("--no-batching");
  }
  return a;
}

}  // namespace server_test
