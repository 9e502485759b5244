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

void duration_histogram::observe(std::chrono::steady_clock::duration d) {
  const double s = std::chrono::duration<double>(d).count();
  std::size_t i = 0;
  while (i < bounds_.size() && s > bounds_[i]) {
    ++i;
  }
  ++buckets_[i];
  sum_us_ +=
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
}

void duration_histogram::write(std::ostream& os,
                               std::string_view name,
                               std::string_view labels) const {
  const std::string prefix = labels.empty() ? std::string() : std::string(labels) + ",";
  const std::string own = labels.empty() ? std::string() : "{" + std::string(labels) + "}";
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += buckets_[i].load();
    os << name << "_bucket{" << prefix << "le=\"";
    if (i < bounds_.size()) {
      os << bounds_[i];
    } else {
      os << "+Inf";
    }
    os << "\"} " << cumulative << "\n";
  }
  os << name << "_sum" << own << " " << double(sum_us_.load()) / 1e6 << "\n"
     << name << "_count" << own << " " << cumulative << "\n";
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
  latency.write(os, "cotensor_infer_latency_seconds");
  os << "# TYPE cotensor_requests_in_flight gauge\ncotensor_requests_in_flight " << in_flight.load()
     << "\n";
  os << "# TYPE cotensor_open_connections gauge\ncotensor_open_connections " << connections.load()
     << "\n";
  return os.str();
}

}  // namespace cotensor::serving::detail
