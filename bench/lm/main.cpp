// Language-model generation speed: prefill and decode tokens/s of one stream, and the aggregate
// tokens/s of C streams at once on one generator, each stream a coroutine awaiting its next
// token; and the machine's memory bandwidth (a STREAM-style triad), which bounds decode.
// Last, the prefix cache: a prompt's time to first token, then the same prompt's again. One JSON
// object per line, for bench/lm/run.sh beside transformers and CTranslate2.
//
//   cotensor_bench_lm MODEL_DIR [--dtype float32|bfloat16|float16] [--prompt P] [--new N]
//                     [--concurrency 1,4,16,64] [--repeat R]
//                     [--temperature T] [--top-k K] [--top-p P] [--logprobs L] [--shared S]
//   cotensor_bench_lm --triad
//   cotensor_bench_lm --quick          (the tiny test model, a few tokens: the CI smoke run)
//
// Prompts are random ids of the tokenizer (seeded), generation with `ignore_eos`, so every
// stream makes exactly N tokens: greedy, or sampled under --temperature (with --top-k and
// --top-p, each stream its own seed), with --logprobs L log-probabilities a token. With
// --shared S every stream's prompt begins with the same S ids (a system prompt), new to the
// prefix cache in each run. Figures are medians of R runs after a warm-up.

#include <cotensor/cotensor.hpp>

#include "../common.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <thread>

namespace {

namespace asio = boost::asio;
namespace lm = cotensor::lm;
using cotensor_bench::clock_type;

struct figures {
  double prefill_tok_s = 0;  // prompt tokens / time to the first token (the first stream)
  double decode_tok_s = 0;   // (N − 1) / time from the first token to the last (the first)
  double ttft_ms = 0;
  double aggregate_tok_s = 0;  // all streams' tokens / the wall time
  // Tokens after every stream's first (all prompts read: the decode phase) / that phase's time.
  double decode_aggregate_tok_s = 0;
};

// Runs `streams` sequences of `prompt` random ids (the first `shared` the same for all) and
// `new_tokens` tokens at once, sampled under `sampling` (its max_tokens, ignore_eos and seed set
// here).
figures run_once(const lm::model& m,
                 lm::generator& g,
                 lm::sampling_params sampling,
                 int streams,
                 int prompt,
                 int new_tokens,
                 std::uint32_t seed,
                 int shared = 0) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int32_t> id(
      0, static_cast<std::int32_t>(m.tokenizer().vocab_size()) - 1);
  std::vector<std::int32_t> common(static_cast<std::size_t>(std::min(shared, prompt)));
  for (auto& i : common) {
    i = id(rng);
  }
  asio::io_context io;
  std::vector<std::vector<double>> times(static_cast<std::size_t>(streams));
  const auto start = clock_type::now();
  for (int s = 0; s < streams; ++s) {
    std::vector<std::int32_t> ids(common);
    ids.resize(static_cast<std::size_t>(prompt));
    for (auto i = common.size(); i < ids.size(); ++i) {
      ids[i] = id(rng);
    }
    sampling.max_tokens = new_tokens;
    sampling.ignore_eos = true;
    sampling.seed = seed * 1000U + static_cast<std::uint32_t>(s);
    auto seq = g.submit(std::move(ids), sampling);
    asio::co_spawn(
        io,
        [&, s, seq = std::move(seq)]() mutable -> asio::awaitable<void> {
          auto& t = times[static_cast<std::size_t>(s)];
          while (co_await seq.async_next(asio::use_awaitable)) {
            t.push_back(cotensor_bench::seconds_since(start));
          }
          if (std::ssize(t) != new_tokens) {
            throw std::runtime_error("a stream ended after " + std::to_string(t.size()) +
                                     " tokens");
          }
        },
        [](std::exception_ptr e) {
          if (e) {
            std::rethrow_exception(e);
          }
        });
  }
  io.run();
  const double wall = cotensor_bench::seconds_since(start);
  figures f;
  const std::vector<double>& one = times[0];
  f.ttft_ms = one.front() * 1e3;
  f.prefill_tok_s = prompt / one.front();
  f.decode_tok_s = new_tokens > 1 ? (new_tokens - 1) / (one.back() - one.front()) : 0.0;
  f.aggregate_tok_s = static_cast<double>(streams) * new_tokens / wall;
  double all_read = 0;  // when the last stream had its first token
  double end = 0;
  for (const auto& t : times) {
    all_read = std::max(all_read, t.front());
    end = std::max(end, t.back());
  }
  std::int64_t after = 0;
  for (const auto& t : times) {
    after += std::ranges::count_if(t, [&](double x) { return x > all_read; });
  }
  f.decode_aggregate_tok_s = end > all_read ? static_cast<double>(after) / (end - all_read) : 0.0;
  return f;
}

// a[i] = b[i] + 3·c[i] over three float arrays far larger than the caches, on every core: the
// best of 5 runs, counting the bytes read and written (3 × 4 per element).
double triad_gb_s() {
  const std::size_t n = std::size_t{1} << 26;  // 256 MiB each
  std::vector<float> a(n, 0.0F);
  std::vector<float> b(n, 1.0F);
  std::vector<float> c(n, 2.0F);
  const unsigned threads = std::max(1U, std::thread::hardware_concurrency());
  double best = 1e30;
  for (int run = 0; run < 5; ++run) {
    const auto start = clock_type::now();
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const std::size_t lo = n * t / threads;
        const std::size_t hi = n * (t + 1) / threads;
        for (std::size_t i = lo; i < hi; ++i) {
          a[i] = b[i] + 3.0F * c[i];
        }
      });
    }
    for (auto& th : pool) {
      th.join();
    }
    best = std::min(best, cotensor_bench::seconds_since(start));
  }
  if (a[n / 2] != 7.0F) {
    throw std::runtime_error("triad: wrong result");
  }
  return 3.0 * 4.0 * static_cast<double>(n) / best / 1e9;
}

cotensor::dtype dtype_named(const std::string& n) {
  for (const auto t :
       {cotensor::dtype::float32, cotensor::dtype::bfloat16, cotensor::dtype::float16}) {
    if (cotensor::name(t) == n) {
      return t;
    }
  }
  throw std::invalid_argument("--dtype " + n + ": not float32, bfloat16 or float16");
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    out.push_back(std::stoi(item));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string dir;
  std::string dtype_name = "float32";
  int prompt = 128;
  int new_tokens = 64;
  int repeat = 3;
  int shared = 0;
  std::vector<int> concurrency{1, 4, 16, 64};
  lm::sampling_params sampling{.temperature = 0.0F};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        throw std::invalid_argument(a + " needs a value");
      }
      return argv[++i];
    };
    if (a == "--triad") {
      std::printf("{\"triad_gb_s\": %.2f}\n", triad_gb_s());
      return 0;
    } else if (a == "--quick") {
      dir = COTENSOR_BENCH_TINY_MODEL;
      prompt = 8;
      new_tokens = 8;
      repeat = 1;
      concurrency = {1, 4};
    } else if (a == "--dtype") {
      dtype_name = value();
    } else if (a == "--prompt") {
      prompt = std::stoi(value());
    } else if (a == "--new") {
      new_tokens = std::stoi(value());
    } else if (a == "--repeat") {
      repeat = std::stoi(value());
    } else if (a == "--concurrency") {
      concurrency = parse_list(value());
    } else if (a == "--temperature") {
      sampling.temperature = std::stof(value());
    } else if (a == "--top-k") {
      sampling.top_k = std::stoi(value());
    } else if (a == "--top-p") {
      sampling.top_p = std::stof(value());
    } else if (a == "--logprobs") {
      sampling.logprobs = std::stoi(value());
    } else if (a == "--shared") {
      shared = std::stoi(value());
    } else if (!a.starts_with("--") && dir.empty()) {
      dir = a;
    } else {
      throw std::invalid_argument("unknown argument " + a);
    }
  }
  if (dir.empty()) {
    throw std::invalid_argument("usage: cotensor_bench_lm MODEL_DIR [--dtype D] [--prompt P] "
                                "[--new N] [--concurrency 1,4,16,64] [--repeat R] "
                                "[--temperature T] [--top-k K] [--top-p P] [--logprobs L] "
                                "[--shared S] | "
                                "--triad | --quick");
  }
  const auto dt = dtype_named(dtype_name);
  const lm::model m = lm::model::load(dir, {.dtype = dt});
  const std::string name = std::filesystem::path(dir).filename().string();
  char sampled[160];
  std::snprintf(
      sampled, sizeof sampled,
      "\"temperature\": %g, \"top_k\": %d, \"top_p\": %g, \"logprobs\": %d, \"shared\": %d",
      static_cast<double>(sampling.temperature), sampling.top_k,
      static_cast<double>(sampling.top_p), sampling.logprobs.value_or(-1), shared);
  for (const int c : concurrency) {
    lm::generator g(m, {.max_running = static_cast<std::size_t>(c),
                        .token_budget = std::max<std::int64_t>(512, c)});
    std::vector<figures> runs;
    run_once(m, g, sampling, 1, prompt, std::min(new_tokens, 4), 99);  // warm-up
    for (int r = 0; r < repeat; ++r) {
      runs.push_back(
          run_once(m, g, sampling, c, prompt, new_tokens, static_cast<std::uint32_t>(r), shared));
    }
    const auto med = [&](double figures::*field) {
      std::vector<double> v;
      for (const figures& f : runs) {
        v.push_back(f.*field);
      }
      return cotensor_bench::median(v);
    };
    std::printf("{\"impl\": \"cotensor\", \"model\": \"%s\", \"dtype\": \"%s\", \"prompt\": %d, "
                "\"new\": %d, \"concurrency\": %d, \"prefill_tok_s\": %.2f, "
                "\"decode_tok_s\": %.2f, \"ttft_ms\": %.2f, \"aggregate_tok_s\": %.2f, "
                "\"decode_aggregate_tok_s\": %.2f, %s}\n",
                name.c_str(), dtype_name.c_str(), prompt, new_tokens, c,
                med(&figures::prefill_tok_s), med(&figures::decode_tok_s), med(&figures::ttft_ms),
                med(&figures::aggregate_tok_s), med(&figures::decode_aggregate_tok_s), sampled);
    std::fflush(stdout);
  }
  // The prefix cache: the same prompt again, its time to first token with the blocks found.
  {
    lm::generator g(m);
    std::vector<double> cold;
    std::vector<double> warm;
    for (int r = 0; r < std::max(repeat, 1); ++r) {
      const auto seed = static_cast<std::uint32_t>(1000 + r);
      cold.push_back(run_once(m, g, sampling, 1, prompt, 2, seed).ttft_ms);
      warm.push_back(run_once(m, g, sampling, 1, prompt, 2, seed).ttft_ms);
    }
    std::printf("{\"impl\": \"cotensor\", \"model\": \"%s\", \"dtype\": \"%s\", \"prompt\": %d, "
                "\"prefix_ttft_cold_ms\": %.2f, \"prefix_ttft_warm_ms\": %.2f, "
                "\"prefix_cache_hits\": %llu}\n",
                name.c_str(), dtype_name.c_str(), prompt, cotensor_bench::median(cold),
                cotensor_bench::median(warm),
                static_cast<unsigned long long>(g.stats().prefix_cache_hits));
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "cotensor_bench_lm: %s\n", e.what());
  return 1;
}
