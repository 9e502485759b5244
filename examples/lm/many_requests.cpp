// Many requests at once on one generator: each is a coroutine that submits its prompt and
// awaits its tokens, as a server's request handlers would; one scheduler batches every
// request's next token into one forward pass. Each prints its time to first token and its
// tokens/s; the last line gives the aggregate and the generator's figures.
//
//   many_requests MODEL_DIR [--requests N] [--max-tokens M] [--dtype float32|bfloat16|float16]

#include <cotensor/cotensor.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace lm = cotensor::lm;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds(clock_type::duration d) { return std::chrono::duration<double>(d).count(); }

// One request: arrives after `delay`, generates, reports.
asio::awaitable<void> request(lm::generator& g,
                              const lm::model& m,
                              int n,
                              std::string prompt,
                              int max_tokens,
                              std::chrono::milliseconds delay) {
  asio::steady_timer timer(co_await asio::this_coro::executor, delay);
  co_await timer.async_wait(asio::use_awaitable);
  const auto start = clock_type::now();
  lm::sequence seq = g.submit(m.tokenizer().encode(prompt), {.temperature = 0.8F,
                                                             .seed = static_cast<std::uint64_t>(n),
                                                             .max_tokens = max_tokens,
                                                             .ignore_eos = true});
  clock_type::time_point first;
  int tokens = 0;
  while (co_await seq.async_next(asio::use_awaitable)) {
    if (tokens++ == 0) {
      first = clock_type::now();
    }
  }
  const auto end = clock_type::now();
  std::printf("request %2d: %3zu prompt tokens, first token after %7.1f ms, %3d tokens at %7.1f "
              "tokens/s\n",
              n, seq.prompt_size(), seconds(first - start) * 1e3, tokens,
              tokens > 1 ? (tokens - 1) / seconds(end - first) : 0.0);
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 2) {
    throw std::invalid_argument(
        "usage: many_requests MODEL_DIR [--requests N] [--max-tokens M] [--dtype D]");
  }
  int requests = 16;
  int max_tokens = 32;
  cotensor::dtype dtype = cotensor::dtype::float32;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--requests") {
      requests = std::stoi(value);
    } else if (flag == "--max-tokens") {
      max_tokens = std::stoi(value);
    } else if (flag == "--dtype") {
      dtype = value == "bfloat16"  ? cotensor::dtype::bfloat16
              : value == "float16" ? cotensor::dtype::float16
                                   : cotensor::dtype::float32;
    } else {
      throw std::invalid_argument("unknown option " + flag);
    }
  }
  const lm::model m = lm::model::load(argv[1], {.dtype = dtype});
  lm::generator g(m);
  asio::io_context io;
  const std::vector<std::string> prompts{
      "The frontend only enqueues work and returns;",
      "A dependency engine tracks reads and writes per buffer", "Hello",
      "Each request is a coroutine awaiting its next token, while one scheduler batches them"};
  const auto start = clock_type::now();
  for (int n = 0; n < requests; ++n) {
    // Requests arrive over time: later ones join the batch while earlier ones generate.
    asio::co_spawn(io,
                   request(g, m, n, prompts[static_cast<std::size_t>(n) % prompts.size()],
                           max_tokens, std::chrono::milliseconds(5 * n)),
                   [](std::exception_ptr e) {
                     if (e) {
                       std::rethrow_exception(e);
                     }
                   });
  }
  io.run();
  const auto st = g.stats();
  std::printf("%d requests: %llu tokens in %.2f s (%.1f tokens/s in all), %llu steps, "
              "%llu prompt tokens computed, %llu from the prefix cache\n",
              requests, static_cast<unsigned long long>(st.tokens_generated),
              seconds(clock_type::now() - start),
              static_cast<double>(st.tokens_generated) / seconds(clock_type::now() - start),
              static_cast<unsigned long long>(st.steps),
              static_cast<unsigned long long>(st.prompt_tokens_computed),
              static_cast<unsigned long long>(st.prefix_cache_hits));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "many_requests: %s\n", e.what());
  return 1;
}
