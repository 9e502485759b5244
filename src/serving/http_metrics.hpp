#pragma once

// The listener's HTTP counters (listener.cpp, connection.cpp) and their Prometheus text.

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace cotensor::serving::detail {

// Counters of a listener's responses and connections. Every member may be updated from any
// thread.
struct http_metrics {
  static constexpr std::array<double, 13> bounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                    0.1,    0.25,  0.5,    1.0,   2.5,  5.0};
  static constexpr std::array<int, 11> codes = {200, 400, 404, 405, 408, 411,
                                                413, 431, 499, 500, 503};
  std::array<std::atomic<std::uint64_t>, codes.size()> by_code{};
  std::array<std::atomic<std::uint64_t>, bounds.size() + 1> latency{};
  std::atomic<std::uint64_t> latency_us_sum{0};
  std::atomic<std::int64_t> in_flight{0};    // requests being answered by routes or handler
  std::atomic<std::int64_t> connections{0};  // accepted and not yet closed

  // One response of status `code` (statuses outside `codes` are not counted).
  void count(int code);
  // The latency of one inference, from its request read to its response ready.
  void observe(std::chrono::steady_clock::duration d);
  // The Prometheus text (format 0.0.4) of the counters.
  std::string text() const;
};

}  // namespace cotensor::serving::detail
