// Picking one token from a row of GPT-2's 50,257 logits on the generator's thread, as every
// sampled row of a step does between two steps while the workers wait: greedy, temperature
// alone, top-k, top-p (the nucleus) and both, the log-probabilities of the token with its 5
// likeliest, and the bias and penalties' adjustment of the row. The row is a normal's draw (sd 3, a
// peaked distribution as a model's logits; top-p also over a flat one, sd 0.3); prints the median
// microseconds of each, over 201 tokens.
//
//   cotensor_bench_lm_sampling [--repeat N] [--quick]   (--quick: one run)

#include "../common.hpp"
#include "lm/sampler.hpp"

#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <vector>

int main(int argc, char** argv) try {
  namespace lm = cotensor::lm;
  const auto opts = cotensor_bench::parse_options("cotensor_bench_lm_sampling", argc, argv);
  std::vector<float> row(50257);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0F, 3.0F);
  for (float& x : row) {
    x = normal(rng);
  }
  const int tokens = 201;
  volatile std::int32_t sink = 0;
  const auto time = [&](const std::string& name, auto pick) {
    const double seconds = cotensor_bench::median_seconds(opts.repeat, [&] {
      const auto start = cotensor_bench::clock_type::now();
      for (int n = 0; n < tokens; ++n) {
        sink = pick(static_cast<std::uint64_t>(n));
      }
      return cotensor_bench::seconds_since(start) / tokens;
    });
    cotensor_bench::print(("sample_" + name + "_us").c_str(), seconds * 1e6);
  };
  const struct {
    const char* name;
    lm::sampling_params p;
  } cases[] = {{"greedy", {.temperature = 0.0F}},
               {"t1", {.temperature = 1.0F}},
               {"t08_topk50", {.temperature = 0.8F, .top_k = 50}},
               {"t08_topp095", {.temperature = 0.8F, .top_p = 0.95F}},
               {"t07_topk40_topp09", {.temperature = 0.7F, .top_k = 40, .top_p = 0.9F}}};
  for (const auto& c : cases) {
    time(c.name, [&](std::uint64_t n) { return lm::sample(row, c.p, 7, n); });
  }
  // A flat distribution (sd 0.3, as a model with random weights gives): top-p keeps most of
  // the vocabulary.
  std::vector<float> flat(row.size());
  std::normal_distribution<float> narrow(0.0F, 0.3F);
  for (float& x : flat) {
    x = narrow(rng);
  }
  time("t08_topp095_flat", [&](std::uint64_t n) {
    return lm::sample(flat, {.temperature = 0.8F, .top_p = 0.95F}, 7, n);
  });
  time("logprobs5", [&](std::uint64_t n) {
    return lm::logprobs_of(row, static_cast<std::int32_t>(n), 5).top[0].id;
  });
  // The bias and the penalties as the scheduler applies them: a copy of the row adjusted for a
  // sequence of a 1,024-id prompt and 256 generated ids, then (t1_penalties) the pick.
  std::vector<std::int32_t> ids(1024 + 256);
  std::uniform_int_distribution<std::int32_t> any_id(0, static_cast<std::int32_t>(row.size()) - 1);
  for (std::int32_t& id : ids) {
    id = any_id(rng);
  }
  const std::span<const std::int32_t> prompt = std::span(ids).first(1024);
  const std::span<const std::int32_t> generated = std::span(ids).subspan(1024);
  const lm::sampling_params penalized{.temperature = 1.0F,
                                      .presence_penalty = 0.5F,
                                      .frequency_penalty = 0.5F,
                                      .repetition_penalty = 1.1F,
                                      .logit_bias = {{50256, -100.0F}}};
  std::vector<float> adjusted;
  time("penalties_adjust", [&](std::uint64_t) {
    adjusted.assign(row.begin(), row.end());
    lm::adjust_logits(adjusted, penalized, prompt, generated);
    return static_cast<std::int32_t>(adjusted[0]);
  });
  time("t1_penalties", [&](std::uint64_t n) {
    adjusted.assign(row.begin(), row.end());
    lm::adjust_logits(adjusted, penalized, prompt, generated);
    return lm::sample(adjusted, penalized, 7, n);
  });
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "cotensor_bench_lm_sampling: %s\n", e.what());
  return 1;
}
