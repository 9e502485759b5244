// cotensor_bench_load: a closed-loop load generator for servers of the Open Inference Protocol
// (KServe v2 REST), in the spirit of `perf_analyzer -i http --concurrency-range N`, whose
// wheels need glibc 2.38 and so do not run on Debian 12. N keep-alive connections each send
// infer requests of one row of random FP32 inputs, one after another, for the duration, and
// every response's status is checked. Prints one line:
//   cotensor.load: conns=N rps=... p50_ms=... p99_ms=... requests=... errors=...
//
//   cotensor_bench_load --port P --model M --width W [--concurrency N] [--seconds S]
//                       [--warmup S] [--binary] [--input NAME] [--host H]
//
// --binary sends the tensor with Triton's binary tensor data extension and asks for a binary
// output; without it, JSON both ways.

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using clock_type = std::chrono::steady_clock;

namespace {

struct options {
  std::string host = "127.0.0.1";
  unsigned short port = 0;
  std::string model;
  std::string input = "INPUT0";
  int width = 0;
  int concurrency = 1;
  double seconds = 10;
  double warmup = 1;
  bool binary = false;
};

struct totals {
  std::vector<double> latencies_ms;  // of requests that ended inside the measured interval
  std::uint64_t errors = 0;
};

http::request<http::string_body> make_request(const options& o, std::mt19937& gen) {
  std::normal_distribution<float> normal;
  std::vector<float> row(static_cast<std::size_t>(o.width));
  for (auto& x : row) {
    x = normal(gen);
  }
  http::request<http::string_body> req{http::verb::post, "/v2/models/" + o.model + "/infer", 11};
  req.set(http::field::host, o.host);
  const std::string shape = "[1," + std::to_string(o.width) + "]";
  if (o.binary) {
    const std::string header =
        R"({"inputs":[{"name":")" + o.input + R"(","datatype":"FP32","shape":)" + shape +
        R"(,"parameters":{"binary_data_size":)" + std::to_string(row.size() * 4) +
        R"(}}],"parameters":{"binary_data_output":true}})";
    req.set("Inference-Header-Content-Length", std::to_string(header.size()));
    req.set(http::field::content_type, "application/octet-stream");
    req.body() = header;
    req.body().append(reinterpret_cast<const char*>(row.data()), row.size() * 4);
  } else {
    std::string data;
    char buf[32];
    for (std::size_t i = 0; i < row.size(); ++i) {
      std::snprintf(buf, sizeof buf, "%s%.6g", i ? "," : "", double(row[i]));
      data += buf;
    }
    req.set(http::field::content_type, "application/json");
    req.body() = R"({"inputs":[{"name":")" + o.input + R"(","datatype":"FP32","shape":)" + shape +
                 R"(,"data":[)" + data + "]}]}";
  }
  req.prepare_payload();
  return req;
}

asio::awaitable<void> client(const options& o,
                             int index,
                             clock_type::time_point measure_from,
                             clock_type::time_point stop,
                             totals& t) {
  std::mt19937 gen(static_cast<unsigned>(index + 1));
  // A few different requests per connection, made before the clock starts.
  std::vector<http::request<http::string_body>> requests;
  for (int i = 0; i < 4; ++i) {
    requests.push_back(make_request(o, gen));
  }
  beast::tcp_stream stream(co_await asio::this_coro::executor);
  std::size_t next = 0;
  bool connected = false;
  beast::flat_buffer buffer;
  while (clock_type::now() < stop) {
    if (!connected) {
      auto [ec] =
          co_await stream.async_connect(tcp::endpoint(asio::ip::make_address(o.host), o.port),
                                        asio::as_tuple(asio::use_awaitable));
      if (ec) {
        ++t.errors;
        asio::steady_timer wait(stream.get_executor(), std::chrono::milliseconds(10));
        co_await wait.async_wait(asio::as_tuple(asio::use_awaitable));
        continue;
      }
      connected = true;
    }
    const auto begin = clock_type::now();
    stream.expires_after(std::chrono::seconds(30));
    auto [wec, wn] = co_await http::async_write(stream, requests[next++ % requests.size()],
                                                asio::as_tuple(asio::use_awaitable));
    http::response<http::string_body> res;
    beast::error_code rec;
    if (!wec) {
      std::tie(rec, std::ignore) =
          co_await http::async_read(stream, buffer, res, asio::as_tuple(asio::use_awaitable));
    }
    const auto end = clock_type::now();
    if (wec || rec || res.result() != http::status::ok) {
      if (begin >= measure_from) {
        ++t.errors;
      }
      if (wec || rec || !res.keep_alive()) {
        beast::error_code ignored;
        stream.socket().close(ignored);
        connected = false;
      }
      continue;
    }
    if (begin >= measure_from && end <= stop) {
      t.latencies_ms.push_back(std::chrono::duration<double, std::milli>(end - begin).count());
    }
  }
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
}

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) {
    return NAN;
  }
  const auto k = static_cast<std::size_t>(std::min<double>(v.size() - 1, p / 100.0 * v.size()));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << flag << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (flag == "--host") {
      o.host = value();
    } else if (flag == "--port") {
      o.port = static_cast<unsigned short>(std::stoi(value()));
    } else if (flag == "--model") {
      o.model = value();
    } else if (flag == "--input") {
      o.input = value();
    } else if (flag == "--width") {
      o.width = std::stoi(value());
    } else if (flag == "--concurrency") {
      o.concurrency = std::max(1, std::stoi(value()));
    } else if (flag == "--seconds") {
      o.seconds = std::stod(value());
    } else if (flag == "--warmup") {
      o.warmup = std::stod(value());
    } else if (flag == "--binary") {
      o.binary = true;
    } else {
      std::cerr << "usage: cotensor_bench_load --port P --model M --width W [--concurrency N]\n"
                   "         [--seconds S] [--warmup S] [--binary] [--input NAME] [--host H]\n";
      return 2;
    }
  }
  if (o.port == 0 || o.model.empty() || o.width <= 0) {
    std::cerr << "cotensor_bench_load: --port, --model and --width are required\n";
    return 2;
  }
  asio::io_context io(1);
  const auto start = clock_type::now();
  const auto measure_from = start + std::chrono::duration_cast<clock_type::duration>(
                                        std::chrono::duration<double>(o.warmup));
  const auto stop = measure_from + std::chrono::duration_cast<clock_type::duration>(
                                       std::chrono::duration<double>(o.seconds));
  totals t;
  for (int i = 0; i < o.concurrency; ++i) {
    asio::co_spawn(io, client(o, i, measure_from, stop, t), asio::detached);
  }
  io.run();
  const auto n = t.latencies_ms.size();
  std::printf("cotensor.load: conns=%d rps=%.1f p50_ms=%.3f p99_ms=%.3f requests=%zu errors=%llu\n",
              o.concurrency, double(n) / o.seconds, percentile(t.latencies_ms, 50),
              percentile(t.latencies_ms, 99), n, static_cast<unsigned long long>(t.errors));
  return t.errors == 0 && n > 0 ? 0 : 1;
}
