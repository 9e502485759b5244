#pragma once

// What every cotensor benchmark shares: the clock, the median of repeated runs, the
// `cotensor.<name>: <value>` output line and the `--repeat N` / `--quick` command line.

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace cotensor_bench {

using clock_type = std::chrono::steady_clock;

inline double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

/// The median of `runs` (the mean of the middle two for an even count); `runs` is not empty.
inline double median(std::vector<double> runs) {
  std::ranges::sort(runs);
  const auto mid = runs.size() / 2;
  return runs.size() % 2 == 1 ? runs[mid] : (runs[mid - 1] + runs[mid]) / 2;
}

/// Runs `f` once to warm up, then `repeat` times, and returns the median of the seconds `f`
/// reports (`f` times what it means to measure and leaves nothing running).
template <class F>
double median_seconds(int repeat, F f) {
  f();
  std::vector<double> runs;
  runs.reserve(static_cast<std::size_t>(repeat));
  for (int i = 0; i < repeat; ++i) {
    runs.push_back(f());
  }
  return median(std::move(runs));
}

/// Prints one figure as `cotensor.<name>: <value>` and flushes, so a slow run shows progress.
inline void print(const char* name, double value) {
  std::printf("cotensor.%s: %.6f\n", name, value);
  std::fflush(stdout);
}

struct options {
  int repeat = 5;      ///< timed runs per figure, after one warm-up run
  bool quick = false;  ///< smoke size: one run (and whatever else a benchmark skips)
};

/// Parses `[--repeat N] [--quick]`; `--quick` means one run whatever `--repeat` says. Prints
/// usage and exits with status 2 on anything else.
inline options parse_options(const char* program, int argc, char** argv) {
  options opts;
  auto fail = [program](const std::string& message) {
    std::fprintf(stderr, "%s: %s\nusage: %s [--repeat N] [--quick]\n", program, message.c_str(),
                 program);
    std::exit(2);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--quick") {
      opts.quick = true;
    } else if (arg == "--repeat" && i + 1 < argc) {
      const std::string_view value = argv[++i];
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), opts.repeat);
      if (ec != std::errc{} || end != value.data() + value.size() || opts.repeat < 1) {
        fail("--repeat needs a positive integer, got '" + std::string(value) + "'");
      }
    } else if (arg == "--help" || arg == "-h") {
      std::printf("usage: %s [--repeat N] [--quick]\n", program);
      std::exit(0);
    } else {
      fail("unknown or incomplete argument '" + std::string(arg) + "'");
    }
  }
  if (opts.quick) {
    opts.repeat = 1;
  }
  return opts;
}

}  // namespace cotensor_bench
