#pragma once

// The listener's HTTP counters (listener.cpp, connection.cpp) and their Prometheus text, and
// the histogram of durations they and the language models' counters (lm_state.hpp) keep.

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cotensor::serving::detail {

// A Prometheus histogram of durations in seconds over fixed upper bounds (`+Inf` after the
// last). `observe` may be called from any thread.
class duration_histogram {
public:
  // `bounds` ascending, and outliving the histogram (a static array).
  explicit duration_histogram(std::span<const double> bounds)
      : bounds_(bounds), buckets_(bounds.size() + 1) {}
  void observe(std::chrono::steady_clock::duration d);
  // The `_bucket`, `_sum` and `_count` lines of `name`, each with `labels` (`model="m"`, or
  // none) before the bucket's `le`.
  void write(std::ostream& os, std::string_view name, std::string_view labels = {}) const;

private:
  std::span<const double> bounds_;
  std::vector<std::atomic<std::uint64_t>> buckets_;
  std::atomic<std::uint64_t> sum_us_{0};
};

// Counters of a listener's responses and connections. Every member may be updated from any
// thread.
struct http_metrics {
  static constexpr std::array<double, 13> bounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                    0.1,    0.25,  0.5,    1.0,   2.5,  5.0};
  static constexpr std::array<int, 11> codes = {200, 400, 404, 405, 408, 411,
                                                413, 431, 499, 500, 503};
  std::array<std::atomic<std::uint64_t>, codes.size()> by_code{};
  duration_histogram latency{bounds};        // of `.../infer` requests, read to response ready
  std::atomic<std::int64_t> in_flight{0};    // requests being answered by routes or handler
  std::atomic<std::int64_t> connections{0};  // accepted and not yet closed

  // One response of status `code` (statuses outside `codes` are not counted).
  void count(int code);
  // The Prometheus text (format 0.0.4) of the counters.
  std::string text() const;
};

}  // namespace cotensor::serving::detail
