// The handler's Prometheus text (GET /metrics): Triton's metric names for each model version,
// then the batchers' queue depths and batch sizes.

#include "serving/handler_state.hpp"

#include <iterator>
#include <sstream>
#include <string>

namespace cotensor::serving::detail {

std::string handler_state::metrics() const {
  struct family {
    const char* name;
    const char* help;
  };
  static constexpr family families[] = {
      {"nv_inference_request_success", "Number of successful inference requests, all batch sizes"},
      {"nv_inference_request_failure", "Number of failed inference requests, all batch sizes"},
      {"nv_inference_count", "Number of inferences performed (a batch of n counts n)"},
      {"nv_inference_exec_count", "Number of model executions performed (a batch counts once)"},
      {"nv_inference_request_duration_us",
       "Cumulative inference request duration in microseconds (successful requests)"},
      {"nv_inference_queue_duration_us", "Cumulative inference queuing duration in microseconds"},
      {"nv_inference_compute_infer_duration_us",
       "Cumulative compute inference duration in microseconds"},
  };
  std::ostringstream os;
  for (std::size_t f = 0; f < std::size(families); ++f) {
    os << "# HELP " << families[f].name << " " << families[f].help << "\n# TYPE "
       << families[f].name << " counter\n";
    for (const auto& [key, s] : served_) {
      const auto& c = s->counters;
      std::uint64_t value = 0;
      const model_totals t = totals_of(*s);
      switch (f) {
      case 0:
        value = c.success;
        break;
      case 1:
        value = c.failure;
        break;
      case 2:
        value = c.inferences;
        break;
      case 3:
        value = t.executions;
        break;
      case 4:
        value = c.request_ns / 1000;
        break;
      case 5:
        value = t.queue_ns / 1000;
        break;
      default:
        value = t.compute_ns / 1000;
        break;
      }
      os << families[f].name << "{model=\"" << s->name << "\",version=\"" << s->version << "\"} "
         << value << "\n";
    }
  }
  os << "# HELP cotensor_batch_queue_rows Rows waiting for a batch.\n"
     << "# TYPE cotensor_batch_queue_rows gauge\n";
  for (const auto& [key, s] : served_) {
    if (s->batch) {
      os << "cotensor_batch_queue_rows{model=\"" << s->name << "\",version=\"" << s->version
         << "\"} " << s->batch->stats().queue_rows << "\n";
    }
  }
  os << "# HELP cotensor_batch_size Rows per batch.\n# TYPE cotensor_batch_size histogram\n";
  for (const auto& [key, s] : served_) {
    if (!s->batch) {
      continue;
    }
    const auto b = s->batch->stats();
    const std::string labels =
        "model=\"" + s->name + "\",version=\"" + std::to_string(s->version) + "\"";
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i < b.batch_rows_log2.size(); ++i) {
      cumulative += b.batch_rows_log2[i];
      os << "cotensor_batch_size_bucket{" << labels << ",le=\"" << (std::uint64_t{1} << i) << "\"} "
         << cumulative << "\n";
    }
    os << "cotensor_batch_size_bucket{" << labels << ",le=\"+Inf\"} " << cumulative << "\n"
       << "cotensor_batch_size_sum{" << labels << "} " << b.rows << "\n"
       << "cotensor_batch_size_count{" << labels << "} " << b.batches << "\n";
  }
  std::vector<const served_lm*> lms;
  for (const auto& [name, s] : lms_) {
    lms.push_back(s.get());
  }
  os << lm_metrics(lms);
  return os.str();
}

}  // namespace cotensor::serving::detail
