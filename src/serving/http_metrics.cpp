// The listener's HTTP counters as Prometheus text.

#include "serving/http_metrics.hpp"

#include <sstream>

namespace cotensor::serving::detail {

void http_metrics::count(int code) {
  for (std::size_t i = 0; i < codes.size(); ++i) {
    if (codes[i] == code) {
      ++by_code[i];
      return;
    }
  }
}

void http_metrics::observe(std::chrono::steady_clock::duration d) {
  const double s = std::chrono::duration<double>(d).count();
  std::size_t i = 0;
  while (i < bounds.size() && s > bounds[i]) {
    ++i;
  }
  ++latency[i];
  latency_us_sum +=
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
}

std::string http_metrics::text() const {
  std::ostringstream os;
  os << "# HELP cotensor_http_requests_total HTTP responses by status code.\n"
     << "# TYPE cotensor_http_requests_total counter\n";
  for (std::size_t i = 0; i < codes.size(); ++i) {
    os << "cotensor_http_requests_total{code=\"" << codes[i] << "\"} " << by_code[i].load() << "\n";
  }
  os << "# HELP cotensor_infer_latency_seconds Time from request read to response ready.\n"
     << "# TYPE cotensor_infer_latency_seconds histogram\n";
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i <= bounds.size(); ++i) {
    cumulative += latency[i].load();
    os << "cotensor_infer_latency_seconds_bucket{le=\"";
    if (i < bounds.size()) {
      os << bounds[i];
    } else {
      os << "+Inf";
    }
    os << "\"} " << cumulative << "\n";
  }
  os << "cotensor_infer_latency_seconds_sum " << double(latency_us_sum.load()) / 1e6
     << "\ncotensor_infer_latency_seconds_count " << cumulative << "\n";
  os << "# TYPE cotensor_requests_in_flight gauge\ncotensor_requests_in_flight " << in_flight.load()
     << "\n";
  os << "# TYPE cotensor_open_connections gauge\ncotensor_open_connections " << connections.load()
     << "\n";
  return os.str();
}

}  // namespace cotensor::serving::detail
