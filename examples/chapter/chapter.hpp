#pragma once

// What the chapter's example programs share: their command line (which device, d2l's try_gpu()
// when none is named) and how they time a run.

#include "cotensor/cotensor.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

/// Helpers for the programs of examples/chapter (the d2l.ai chapter "Asynchronous Computation").
namespace chapter {

/// d2l's `try_gpu()`: GPU 0 if this build and machine can run ops on one, else the CPU.
inline cotensor::device try_gpu() {
  return cotensor::cuda_device_count() > 0 ? cotensor::device::cuda(0) : cotensor::device::cpu();
}

/// A program's command-line options, as `parse` returns them.
struct options {
  /// `--device NAME`: where the program's tensors live; `try_gpu()` when absent.
  cotensor::device device = cotensor::device::cpu();
  /// `--repeat N`: how many timed runs each figure is the median of; 0 in a program that takes
  /// no `--repeat`.
  int repeat = 0;
  /// `--trace PATH`: where to save the trace of one more run; empty for none.
  std::string trace;
};

namespace detail {

/// The program's name: the first word of `usage`.
inline std::string_view program_name(const char* usage) {
  const std::string_view line = usage;
  return line.substr(0, line.find(' '));
}

/// Prints `<program>: <message>` and the usage line to stderr, and exits with status 2.
[[noreturn]] inline void usage_error(const char* usage, const std::string& message) {
  const std::string_view program = program_name(usage);
  std::fprintf(stderr, "%.*s: %s\nusage: %s\n", static_cast<int>(program.size()), program.data(),
               message.c_str(), usage);
  std::exit(2);
}

}  // namespace detail

/// The device that `value` names: `cpu`, `cuda` (GPU 0) or `cuda:N`. A name that is none of
/// these gets `detail::usage_error` (status 2); a GPU that this build or machine cannot run ops
/// on prints `<program>: device cuda:N is not available: <cotensor::unavailable_reason>` to
/// stderr and exits with status 2.
inline cotensor::device parse_device(std::string_view value, const char* usage) {
  cotensor::device d = cotensor::device::cpu();
  bool known = value == "cpu";
  if (value == "cuda") {
    d = cotensor::device::cuda(0);
    known = true;
  } else if (value.starts_with("cuda:")) {
    const std::string_view index = value.substr(5);
    const char* const last = index.data() + index.size();
    const auto [end, ec] = std::from_chars(index.data(), last, d.index);
    d.type = cotensor::device::kind::cuda;
    known = !index.empty() && ec == std::errc{} && end == last && d.index >= 0;
  }
  if (!known) {
    detail::usage_error(usage, "unknown device '" + std::string(value) +
                                   "': expected cpu, cuda or cuda:N");
  }
  if (!cotensor::is_available(d)) {
    const std::string_view program = detail::program_name(usage);
    std::fprintf(stderr, "%.*s: device cuda:%d is not available: %s\n",
                 static_cast<int>(program.size()), program.data(), d.index,
                 cotensor::unavailable_reason(d).c_str());
    std::exit(2);
  }
  return d;
}

/// Parses the command line of a chapter program: `--device cpu|cuda|cuda:N` (see
/// `parse_device`; `try_gpu()` when absent), or only `--device cpu` unless `accepts_gpu`;
/// `--repeat N` if `default_repeat` > 0 (its value when absent; N must be a positive integer);
/// `--trace PATH` if `accepts_trace`. Each may also be written `--option=value`. `usage` is the
/// usage line after "usage: ", beginning with the program's name, e.g.
/// "03_barriers_and_blockers [--device cpu|cuda[:N]] [--repeat N]".
///
/// `--help` or `-h` prints the usage line to stdout and exits with status 0. Anything else (an
/// unknown argument, a missing value, an unknown or unavailable device, a bad N) prints
/// `<program>: <why>` (and, but for an unavailable device, the usage line) to stderr and exits
/// with status 2.
inline options parse(int argc,
                     char** argv,
                     const char* usage,
                     int default_repeat,
                     bool accepts_trace,
                     bool accepts_gpu = true) {
  options opts;
  opts.repeat = default_repeat;
  bool device_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf("usage: %s\n", usage);
      std::exit(0);
    }
    std::string_view value;
    const auto equals = arg.find('=');
    const bool inline_value = arg.starts_with("--") && equals != std::string_view::npos;
    if (inline_value) {  // --option=value
      value = arg.substr(equals + 1);
      arg = arg.substr(0, equals);
    }
    if (arg != "--device" && !(arg == "--repeat" && default_repeat > 0) &&
        !(arg == "--trace" && accepts_trace)) {
      detail::usage_error(usage, "unknown argument '" + std::string(argv[i]) + "'");
    }
    if (!inline_value) {
      if (i + 1 == argc) {
        detail::usage_error(usage, std::string(arg) + " needs a value");
      }
      value = argv[++i];
    }
    if (arg == "--device") {
      if (!accepts_gpu && value != "cpu") {
        detail::usage_error(usage, "device '" + std::string(value) +
                                       "' is not supported: this program runs on the CPU only");
      }
      opts.device = parse_device(value, usage);
      device_given = true;
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
  if (!device_given && accepts_gpu) {
    opts.device = try_gpu();
  }
  return opts;
}

/// Prints the line `device: <d>` (`cpu` or `cuda:<index>`) that opens a program's output.
inline void print_device(cotensor::device d) { std::cout << "device: " << d << '\n'; }

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
