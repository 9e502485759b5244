#pragma once

// What the chapter's example programs share: their command line and how they time a run.

#include "cotensor/cotensor.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

/// Helpers for the programs of examples/chapter (the d2l.ai chapter "Asynchronous Computation").
namespace chapter {

/// A program's command-line options, as `parse` returns them.
struct options {
  /// `--device NAME`: where the program's tensors live. Only `cpu` is available.
  cotensor::device device = cotensor::device::cpu();
  /// `--repeat N`: how many timed runs each figure is the median of; 0 in a program that takes
  /// no `--repeat`.
  int repeat = 0;
  /// `--trace PATH`: where to save the trace of one more run; empty for none.
  std::string trace;
};

namespace detail {

/// Prints `<program>: <message>` and the usage line to stderr, and exits with status 2.
[[noreturn]] inline void usage_error(const char* usage, const std::string& message) {
  const std::string_view line = usage;
  const std::string_view program = line.substr(0, line.find(' '));
  std::fprintf(stderr, "%.*s: %s\nusage: %s\n", static_cast<int>(program.size()), program.data(),
               message.c_str(), usage);
  std::exit(2);
}

}  // namespace detail

/// Parses the command line of a chapter program: `--device cpu`, `--repeat N` if
/// `default_repeat` > 0 (its value when absent; N must be a positive integer), and
/// `--trace PATH` if `accepts_trace`. `usage` is the usage line after "usage: ", beginning with
/// the program's name, e.g. "03_barriers_and_blockers [--device cpu] [--repeat N]".
///
/// `--help` or `-h` prints the usage line to stdout and exits with status 0. Anything else (an
/// unknown argument, a missing value, a device other than `cpu`, a bad N) prints
/// `<program>: <why>` and the usage line to stderr and exits with status 2.
inline options
parse(int argc, char** argv, const char* usage, int default_repeat, bool accepts_trace) {
  options opts;
  opts.repeat = default_repeat;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf("usage: %s\n", usage);
      std::exit(0);
    }
    if (arg != "--device" && !(arg == "--repeat" && default_repeat > 0) &&
        !(arg == "--trace" && accepts_trace)) {
      detail::usage_error(usage, "unknown argument '" + std::string(arg) + "'");
    }
    if (i + 1 == argc) {
      detail::usage_error(usage, std::string(arg) + " needs a value");
    }
    const std::string_view value = argv[++i];
    if (arg == "--device") {
      if (value != "cpu") {
        detail::usage_error(usage, "device '" + std::string(value) +
                                       "' is not available: this build has only 'cpu'");
      }
      opts.device = cotensor::device::cpu();
    } else if (arg == "--trace") {
      opts.trace = value;
    } else {
      const auto [end, ec] =
          std::from_chars(value.data(), value.data() + value.size(), opts.repeat);
      if (ec != std::errc{} || end != value.data() + value.size() || opts.repeat < 1) {
        detail::usage_error(usage,
                            "--repeat needs a positive integer, got '" + std::string(value) + "'");
      }
    }
  }
  return opts;
}

/// The median of `values`, which must not be empty: the middle value, or the mean of the two
/// middle ones when there is an even number of them (rounded toward zero for an integral `T`).
template <class T>
T median(std::vector<T> values) {
  std::ranges::sort(values);
  const auto mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

/// Runs `f` once to warm up (thread start, page faults), then `repeat` times, and returns the
/// median of the seconds that `f` returns: each run times itself, so it chooses what is timed.
///
/// After every run, the warm-up included, it calls `cotensor::wait_all()` outside `f`'s timing:
/// nothing a run leaves running overlaps the next, and a run that does not wait for its work
/// (one that only enqueues) is timed without it.
template <class F>
double median_seconds(int repeat, F f) {
  static_cast<void>(f());
  cotensor::wait_all();
  std::vector<double> runs;
  for (int i = 0; i < repeat; ++i) {
    runs.push_back(f());
    cotensor::wait_all();
  }
  return median(std::move(runs));
}

}  // namespace chapter
