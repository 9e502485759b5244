// cotensor_server: the Open Inference Protocol (KServe v2 / Triton over HTTP/1.1) for a
// Triton-style model repository. The protocol, models, batching and HTTP listener are
// cotensor::serving's (<cotensor/serving.hpp>); this program is flags (flags.cpp) and set-up.
//
//   GET  /v2/health/live, /v2/health/ready, /v2, /v2/models/M[/versions/V][/ready|/config]
//   POST /v2/models/M[/versions/V]/infer    JSON tensors or Triton's binary tensor data
//   GET  /metrics                           Prometheus text: Triton's metric names, then ours
//   POST /v2/models/M/generate[_stream]     language models: the generate extension
//   GET  /v1/models, POST /v1/completions, /v1/chat/completions   the OpenAI-compatible routes
//
// Prints `cotensor_server listening on ADDRESS:PORT` once it accepts connections. SIGINT or
// SIGTERM drain it: it stops accepting, finishes the requests in flight and exits 0 (1 when
// the drain timed out). Run with --help for the flags.

#include <cotensor/cotensor.hpp>
#include <cotensor/serving.hpp>

#include "flags.hpp"

#include <boost/asio.hpp>

#include <csignal>
#include <iostream>
#include <thread>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace serving = cotensor::serving;

// For tests of overload, disconnects and draining: a model whose every pass takes `delay`
// longer (an op that sleeps on a backend worker), around a model of the repository.
class delayed_model final : public serving::model {
public:
  delayed_model(std::shared_ptr<const model> inner, std::chrono::microseconds delay)
      : inner_(std::move(inner)), delay_(delay) {}
  const serving::model_config& config() const noexcept override { return inner_->config(); }
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

// The models of `--model-repository`; a folder that fails is reported and left out.
serving::model_repository load_models(const cotensor_server::flags& cfg, cotensor::device d) {
  serving::model_repository loaded;
  for (const auto& f : loaded.load_repository(cfg.model_repository, d)) {
    std::cerr << "cotensor_server: model '" << f.model << "' not loaded: " << f.reason << "\n";
  }
  if (cfg.debug_delay.count() == 0) {
    return loaded;
  }
  serving::model_repository delayed;
  for (const auto& name : loaded.language_model_names()) {
    const auto* l = loaded.find_language_model(name);
    delayed.add_language_model(name, l->model, l->options);
  }
  for (const auto& name : loaded.names()) {
    for (const auto v : loaded.versions(name)) {
      delayed.add(std::make_shared<delayed_model>(loaded.find(name, v), cfg.debug_delay), v);
    }
  }
  return delayed;
}

}  // namespace

int main(int argc, char** argv) {
  cotensor_server::flags cfg;
  try {
    cfg = cotensor_server::parse_flags(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "cotensor_server: " << e.what() << "\n" << cotensor_server::usage;
    return 2;
  }
  if (cfg.help) {
    std::cout << cotensor_server::usage;
    return 0;
  }
  try {
    auto options = cotensor::runtime_options::from_environment();
    // The server bounds its own queue; the engine's limit is only a backstop that would block
    // an event-loop thread, so keep it well above what the server admits.
    options.max_in_flight = std::max<std::size_t>(options.max_in_flight, 16 * cfg.max_queue_rows);
    cotensor::runtime rt(options);
    const serving::model_repository models =
        load_models(cfg, cotensor_server::parse_device(cfg.device));
    const std::size_t count = models.names().size() + models.language_model_names().size();
    if (count == 0) {
      std::cerr << "cotensor_server: no model loaded from " << cfg.model_repository << "\n";
      return 1;
    }
    asio::io_context io(static_cast<int>(cfg.threads));
    serving::handler v2(io.get_executor(), models,
                        {.dynamic_batching = cfg.batching,
                         .max_queue_rows = cfg.max_queue_rows,
                         .max_running_batches = cfg.max_running_batches});
    serving::listener http(io.get_executor(), v2,
                           {.address = cfg.address,
                            .port = cfg.port,
                            .max_body_bytes = cfg.max_body,
                            .read_timeout = cfg.timeout,
                            .idle_timeout = cfg.timeout,
                            .write_timeout = cfg.timeout,
                            .stream_send_buffer_bytes = cfg.stream_send_buffer_bytes,
                            .max_connections = cfg.max_connections,
                            .drain_timeout = cfg.drain_timeout});
    asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](boost::system::error_code ec, int) {
      if (!ec) {
        std::cerr << "cotensor_server: draining\n";
        v2.shutdown();  // readiness 503 from now on; the batchers' queued rows run at once
        http.drain();
      }
    });
    std::error_code served;  // std::errc::timed_out: the drain ran past --drain-timeout-ms
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          served = co_await http.run();
          signals.cancel();
        },
        asio::detached);
    std::cout << "cotensor_server listening on " << cfg.address << ":"
              << http.local_endpoint().port() << " (" << count << " model(s) from "
              << cfg.model_repository << ", batching " << (cfg.batching ? "on" : "off") << ")"
              << std::endl;
    std::vector<std::thread> threads;
    for (unsigned i = 1; i < cfg.threads; ++i) {
      threads.emplace_back([&io] { io.run(); });
    }
    io.run();
    for (auto& t : threads) {
      t.join();
    }
    if (served) {
      std::cerr << "cotensor_server: drain timed out\n";
    }
    std::cout << "cotensor_server: drained" << std::endl;
    return served ? 1 : 0;
  } catch (const std::exception& e) {
    std::cerr << "cotensor_server: " << e.what() << "\n";
    return 1;
  }
}
