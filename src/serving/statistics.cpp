// Triton's statistics extension (/v2/models[/{m}[/versions/{v}]]/stats): what the handler
// counts of each model version, as JSON.

#include "serving/handler_state.hpp"

#include <string>

namespace cotensor::serving::detail {

model_totals totals_of(const served_model& s) {
  const batcher_stats b = s.batch ? s.batch->stats() : batcher_stats{};
  return {s.counters.executions + b.batches,
          s.counters.compute_ns + static_cast<std::uint64_t>(b.compute_time.count()),
          static_cast<std::uint64_t>(b.queue_time.count())};
}

handler::response handler_state::statistics(const handler::request& req,
                                            std::string_view name,
                                            std::int64_t version) const {
  const auto duration = [](std::uint64_t count, std::uint64_t nanoseconds) {
    return json::object{{"count", count}, {"ns", nanoseconds}};
  };
  json::array stats;
  for (const auto& [key, s] : served_) {
    if ((!name.empty() && s->name != name) || (version != 0 && s->version != version)) {
      continue;
    }
    const auto& c = s->counters;
    const model_totals t = totals_of(*s);
    const std::uint64_t ok = c.success;
    json::object inference{{"success", duration(ok, c.request_ns)},
                           {"fail", duration(c.failure, c.fail_ns)},
                           {"queue", duration(ok, t.queue_ns)},
                           {"compute_input", duration(ok, c.input_ns)},
                           {"compute_infer", duration(ok, t.compute_ns)},
                           {"compute_output", duration(ok, c.output_ns)},
                           {"cache_hit", duration(0, 0)},
                           {"cache_miss", duration(0, 0)}};
    stats.push_back(json::object{{"name", s->name},
                                 {"version", std::to_string(s->version)},
                                 {"last_inference", c.last_inference_ms.load()},
                                 {"inference_count", c.inferences.load()},
                                 {"execution_count", t.executions},
                                 {"inference_stats", std::move(inference)},
                                 {"batch_stats", json::array{}}});
  }
  return reply(req, http::status::ok, json::serialize(json::object{{"model_stats", stats}}));
}

}  // namespace cotensor::serving::detail
