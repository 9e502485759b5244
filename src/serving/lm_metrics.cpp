// The language models' Prometheus text: latency histograms, token counters and the
// generators' figures (docs/server.md lists them beside vLLM's names).

#include "serving/lm_state.hpp"

#include <sstream>

namespace cotensor::serving::detail {

namespace {

// `v` as a Prometheus label value: backslash, quote and newline escaped.
std::string label(std::string_view v) {
  std::string out;
  for (const char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
    }
    out += c == '\n' ? std::string_view("\\n") : std::string_view(&c, 1);
  }
  return out;
}

}  // namespace

std::string lm_metrics(const std::vector<const served_lm*>& models) {
  if (models.empty()) {
    return {};
  }
  std::string out;
  const auto header = [&](std::string_view name, std::string_view type, std::string_view help) {
    out.append("# HELP ").append(name).append(" ").append(help).append("\n# TYPE ");
    out.append(name).append(" ").append(type).append("\n");
  };
  const auto line = [&](std::string_view name, const served_lm& s, auto value,
                        std::string_view extra = {}) {
    std::ostringstream os;
    os << name << "{model=\"" << label(s.lm->name) << "\"" << extra << "} " << value << "\n";
    out += os.str();
  };
  struct histogram_family {
    const char* name;
    const char* help;
    const duration_histogram lm_counters::*member;
  };
  static constexpr histogram_family histograms[] = {
      {"cotensor_lm_time_to_first_token_seconds", "Time from a request read to its first token.",
       &lm_counters::time_to_first_token},
      {"cotensor_lm_inter_token_latency_seconds", "Time between two tokens of a request.",
       &lm_counters::inter_token},
      {"cotensor_lm_e2e_request_latency_seconds", "Time from a request read to its last token.",
       &lm_counters::e2e},
  };
  for (const auto& h : histograms) {
    header(h.name, "histogram", h.help);
    for (const auto* s : models) {
      std::ostringstream os;
      (s->counters.*h.member).write(os, h.name, "model=\"" + label(s->lm->name) + "\"");
      out += os.str();
    }
  }
  header("cotensor_lm_prompt_tokens_total", "counter", "Prompt tokens of the requests admitted.");
  for (const auto* s : models) {
    line("cotensor_lm_prompt_tokens_total", *s, s->counters.prompt_tokens.load());
  }
  header("cotensor_lm_generation_tokens_total", "counter", "Tokens generated for requests.");
  for (const auto* s : models) {
    line("cotensor_lm_generation_tokens_total", *s, s->counters.generation_tokens.load());
  }
  header("cotensor_lm_request_success_total", "counter",
         "Requests that ran to their end, by finish reason.");
  for (const auto* s : models) {
    line("cotensor_lm_request_success_total", *s, s->counters.finished_stop.load(),
         ",finished_reason=\"stop\"");
    line("cotensor_lm_request_success_total", *s, s->counters.finished_length.load(),
         ",finished_reason=\"length\"");
  }
  header("cotensor_lm_request_aborted_total", "counter",
         "Requests that ended early: their client left, or a step failed.");
  for (const auto* s : models) {
    line("cotensor_lm_request_aborted_total", *s, s->counters.aborted.load());
  }
  // The generators' figures, read once per model.
  std::vector<lm::generator_stats> stats;
  for (const auto* s : models) {
    stats.push_back(s->gen.stats());
  }
  const auto gauge = [&](std::string_view name, std::string_view type, std::string_view help,
                         auto value_of) {
    header(name, type, help);
    for (std::size_t i = 0; i < models.size(); ++i) {
      line(name, *models[i], value_of(stats[i]));
    }
  };
  gauge("cotensor_lm_num_requests_running", "gauge", "Sequences generating.",
        [](const lm::generator_stats& g) { return g.running; });
  gauge("cotensor_lm_num_requests_waiting", "gauge", "Sequences waiting for cache room.",
        [](const lm::generator_stats& g) { return g.waiting; });
  gauge("cotensor_lm_kv_cache_usage_perc", "gauge", "Fraction of the KV-cache blocks in use.",
        [](const lm::generator_stats& g) {
          return g.kv_blocks_total == 0 ? 0.0 : double(g.kv_blocks_used) / g.kv_blocks_total;
        });
  gauge("cotensor_lm_prefix_cache_hits_total", "counter",
        "Prompt tokens taken from cached blocks instead of computed.",
        [](const lm::generator_stats& g) { return g.prefix_cache_hits; });
  gauge("cotensor_lm_prompt_tokens_computed_total", "counter",
        "Prompt tokens run through the model.",
        [](const lm::generator_stats& g) { return g.prompt_tokens_computed; });
  gauge("cotensor_lm_steps_total", "counter", "Forward passes of the generator.",
        [](const lm::generator_stats& g) { return g.steps; });
  return out;
}

}  // namespace cotensor::serving::detail
