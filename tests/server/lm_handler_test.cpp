// The language models in the library's handler, without a socket: the repository's language
// models (add, load with cotensor.json, refusals), `handler::handle(req)` keeping a stream
// whole, and `handle(req, stream)` handing the pieces over as they come, with a stream whose
// client leaves cancelling the generation.

#include <cotensor/serving.hpp>

#include <boost/asio.hpp>
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace serving = cotensor::serving;
namespace lm = cotensor::lm;
namespace asio = boost::asio;
namespace http = boost::beast::http;

namespace {

const std::filesystem::path lm_data = std::filesystem::path(COTENSOR_TEST_DATA_DIR) / "lm";

// A POST of `body` to `target`.
serving::handler::request post(std::string target, std::string body) {
  serving::handler::request req{http::verb::post, target, 11};
  req.set(http::field::content_type, "application/json");
  req.body() = std::move(body);
  req.prepare_payload();
  return req;
}

// Runs `work` on an io_context of its own to its end and returns what it gave.
template <class T>
T run(asio::awaitable<T> work) {
  asio::io_context io;
  std::optional<T> out;
  asio::co_spawn(io, std::move(work), [&](std::exception_ptr e, T v) {
    if (e) {
      std::rethrow_exception(e);
    }
    out = std::move(v);
  });
  io.run();
  return std::move(*out);
}

// The value of the Prometheus line `name{model="gpt2"` + `labels`...}, or -1.
double metric(const std::string& text, const std::string& name, const std::string& labels = {}) {
  const std::string key = name + "{model=\"gpt2\"" + labels;
  const auto at = text.find(key);
  if (at == std::string::npos) {
    return -1;
  }
  const auto end = text.find('\n', at);
  const auto space = text.rfind(' ', end);
  return std::stod(text.substr(space + 1, end - space - 1));
}

// Takes the head and `accept` pieces, then reports the client gone.
class leaving_stream final : public serving::handler::response_stream {
public:
  explicit leaving_stream(int accept) : accept_(accept) {}
  asio::awaitable<bool> begin(serving::handler::response head) override {
    head_ = std::move(head);
    co_return true;
  }
  asio::awaitable<bool> write(std::string_view piece) override {
    pieces.emplace_back(piece);
    co_return static_cast<int>(pieces.size()) < accept_;
  }
  std::vector<std::string> pieces;
  serving::handler::response head_;

private:
  int accept_;
};

const std::string completion =
    R"({"model":"gpt2","prompt":"Hello","max_tokens":40,"temperature":0,"ignore_eos":true)";

}  // namespace

TEST_CASE("lm handler: a completion whole, and its stream kept whole by handle(req)") {
  serving::model_repository models;
  models.add_language_model("gpt2", lm::model::load(lm_data / "gpt2-tiny"));
  asio::io_context io;
  serving::handler v2(io.get_executor(), models);
  const auto whole = run(v2.handle(post("/v1/completions", completion + "}")));
  CHECK(whole.result() == http::status::ok);
  CHECK(whole.body().find(R"("object":"text_completion")") != std::string::npos);
  CHECK(whole.body().find(R"("completion_tokens":40)") != std::string::npos);

  const auto streamed = run(v2.handle(post("/v1/completions", completion + R"(,"stream":true})")));
  CHECK(streamed.result() == http::status::ok);
  CHECK(streamed[http::field::content_type] == "text/event-stream");
  CHECK_FALSE(streamed.chunked());
  CHECK(streamed.body().starts_with("data: {"));
  CHECK(streamed.body().ends_with("data: [DONE]\n\n"));
  // One event per token that brings text, the last with finish_reason "length".
  CHECK(streamed.body().find(R"("finish_reason":"length")") != std::string::npos);
}

TEST_CASE("lm handler: a stream goes out piece by piece, and a client gone cancels it") {
  serving::model_repository models;
  models.add_language_model("gpt2", lm::model::load(lm_data / "gpt2-tiny"));
  asio::io_context io;
  serving::handler v2(io.get_executor(), models);
  const auto req = post("/v1/completions", completion + R"(,"stream":true})");

  leaving_stream all(1000);
  CHECK_FALSE(run(v2.handle(req, all)).has_value());
  CHECK(all.head_.result() == http::status::ok);
  REQUIRE(all.pieces.size() >= 3);
  CHECK(all.pieces.back() == "data: [DONE]\n\n");

  leaving_stream two(2);
  CHECK_FALSE(run(v2.handle(req, two)).has_value());
  CHECK(two.pieces.size() == 2);  // nothing written after the client left
  // The sequence was cancelled: counted as aborted, nothing left running or holding blocks.
  const auto text = v2.metrics();
  CHECK(metric(text, "cotensor_lm_request_aborted_total") == 1);
  CHECK(metric(text, "cotensor_lm_request_success_total", R"(,finished_reason="length")") == 1);
  CHECK(metric(text, "cotensor_lm_generation_tokens_total") < 80);
  for (int i = 0; i < 500 && metric(v2.metrics(), "cotensor_lm_kv_cache_usage_perc") != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(metric(v2.metrics(), "cotensor_lm_kv_cache_usage_perc") == 0);
  CHECK(metric(v2.metrics(), "cotensor_lm_num_requests_running") == 0);
}

TEST_CASE("lm repository: language models beside the others, cotensor.json read strictly") {
  const auto dir = std::filesystem::temp_directory_path() / "cotensor-lm-repository-test";
  std::filesystem::remove_all(dir);
  const auto copy_model = [&](const std::string& name, const std::string& settings) {
    std::filesystem::create_directories(dir / name);
    for (const auto& f : std::filesystem::directory_iterator(lm_data / "gpt2-tiny")) {
      std::filesystem::create_symlink(f.path(), dir / name / f.path().filename());
    }
    if (!settings.empty()) {
      std::ofstream(dir / name / "cotensor.json") << settings;
    }
  };
  copy_model("plain", "");
  copy_model("bf16", R"({"dtype": "bfloat16", "max_running": 3, "kv_cache_bytes": 1000000})");
  copy_model("on_cpu", R"({"device": "cpu"})");
  copy_model("unknown_key", R"({"dtype": "float32", "max_runing": 3})");
  copy_model("bad_dtype", R"({"dtype": "int8"})");
  copy_model("bad_count", R"({"max_running": 0})");
  copy_model("bad_device", R"({"device": "tpu"})");
  copy_model("short", R"({"context_length": 40})");
  copy_model("too_long", R"({"context_length": 65})");  // gpt2-tiny has 64 positions
  // A Triton-layout model (config.json, 1/model.safetensors) beside the language models.
  std::filesystem::create_directory_symlink(
      std::filesystem::path(COTENSOR_EXAMPLE_MODELS_DIR) / "mlp", dir / "mlp");

  serving::model_repository models;
  const auto failures = models.load_repository(dir);
  CHECK(models.names() == std::vector<std::string>{"mlp"});
  CHECK(models.language_model_names() ==
        std::vector<std::string>{"bf16", "on_cpu", "plain", "short"});
  REQUIRE(failures.size() == 5);
  CHECK(failures[0].model == "bad_count");
  CHECK(failures[0].reason.find("max_running") != std::string::npos);
  CHECK(failures[1].model == "bad_device");
  CHECK(failures[1].reason.find("device: 'tpu'") != std::string::npos);
  CHECK(failures[2].model == "bad_dtype");
  CHECK(failures[2].reason.find("dtype") != std::string::npos);
  CHECK(failures[3].model == "too_long");
  CHECK(failures[3].reason.find("context_length 65 is past the model's 64") != std::string::npos);
  CHECK(failures[4].model == "unknown_key");
  CHECK(failures[4].reason.find("max_runing") != std::string::npos);
  CHECK(models.find_language_model("short")->options.generator.context_length == 40);
  const auto* bf16 = models.find_language_model("bf16");
  REQUIRE(bf16 != nullptr);
  CHECK(bf16->options.generator.max_running == 3);
  CHECK(bf16->options.generator.kv_cache_bytes == 1000000);
  CHECK(models.find_language_model("nope") == nullptr);
  CHECK_THROWS_AS(models.add_language_model("plain", bf16->model), std::invalid_argument);
  CHECK_THROWS_AS(models.add_language_model("", bf16->model), std::invalid_argument);
  std::filesystem::remove_all(dir);
}
