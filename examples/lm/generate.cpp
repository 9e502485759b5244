// Generates text from a Hugging Face model folder, printing each piece as its token comes: the
// program is one coroutine awaiting the sequence's next token (cotensor::lm).
//
//   generate MODEL_DIR "prompt" [--max-tokens N] [--temperature T] [--seed S]
//            [--dtype float32|bfloat16|float16]
//
// Greedy with --temperature 0; the sequence ends at the model's end-of-sequence id, after N
// tokens (default 32), or at its context. The last line on stderr gives the prompt's and the
// generation's tokens and speeds.

#include <cotensor/cotensor.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

namespace asio = boost::asio;
namespace lm = cotensor::lm;

namespace {

struct options {
  std::string dir;
  std::string prompt;
  lm::sampling_params sampling{.temperature = 0.0F, .max_tokens = 32};
  cotensor::dtype dtype = cotensor::dtype::float32;
};

options parse(int argc, char** argv) {
  if (argc < 3) {
    throw std::invalid_argument(
        "usage: generate MODEL_DIR \"prompt\" [--max-tokens N] [--temperature T] [--seed S] "
        "[--dtype float32|bfloat16|float16]");
  }
  options o{.dir = argv[1], .prompt = argv[2]};
  for (int i = 3; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      throw std::invalid_argument(flag + " needs a value");
    }
    const std::string value = argv[i + 1];
    if (flag == "--max-tokens") {
      o.sampling.max_tokens = std::stoi(value);
    } else if (flag == "--temperature") {
      o.sampling.temperature = std::stof(value);
    } else if (flag == "--seed") {
      o.sampling.seed = std::stoull(value);
    } else if (flag == "--dtype") {
      o.dtype =
          value == "float32"    ? cotensor::dtype::float32
          : value == "bfloat16" ? cotensor::dtype::bfloat16
          : value == "float16"
              ? cotensor::dtype::float16
              : throw std::invalid_argument("--dtype " + value + ": float32, bfloat16 or float16");
    } else {
      throw std::invalid_argument("unknown option " + flag);
    }
  }
  return o;
}

// Prints the sequence's text as it comes, then the figures.
asio::awaitable<void> stream(const lm::model& m, lm::sequence seq) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  clock::time_point first;
  lm::text_stream text(m.tokenizer());
  int tokens = 0;
  while (auto id = co_await seq.async_next(asio::use_awaitable)) {
    if (tokens++ == 0) {
      first = clock::now();
    }
    std::cout << text.push(*id) << std::flush;
  }
  std::cout << text.finish() << '\n';
  const auto end = clock::now();
  const auto seconds = [](auto d) { return std::chrono::duration<double>(d).count(); };
  std::fprintf(
      stderr,
      "[%zu prompt tokens, %d generated (%s); first token after %.1f ms, then %.1f tokens/s]\n",
      seq.prompt_size(), tokens, seq.finish_reason() == lm::finish_reason::stop ? "stop" : "length",
      tokens > 0 ? seconds(first - start) * 1e3 : 0.0,
      tokens > 1 ? (tokens - 1) / seconds(end - first) : 0.0);
}

}  // namespace

int main(int argc, char** argv) try {
  const options o = parse(argc, argv);
  const lm::model m = lm::model::load(o.dir, {.dtype = o.dtype});
  lm::generator g(m);
  asio::io_context io;
  asio::co_spawn(io, stream(m, g.submit(m.tokenizer().encode(o.prompt), o.sampling)),
                 [](std::exception_ptr e) {
                   if (e) {
                     std::rethrow_exception(e);
                   }
                 });
  io.run();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "generate: %s\n", e.what());
  return 1;
}
