// The main of cotensor_cuda_tests (and of cotensor_nccl_tests, which defines
// COTENSOR_GPU_TEST_PROGRAM): doctest's, behind a check for a GPU.
//
// Without a usable CUDA device every case would fail, so the whole executable is skipped
// instead: it prints why and returns 77, which ctest's SKIP_RETURN_CODE reports as skipped.
// COTENSOR_REQUIRE_GPU=1 (on a GPU runner, where a skip would hide a broken driver) makes the
// same situation an error: it prints why and returns 1. Asking doctest only for information
// (--list-test-cases, --help, ...) needs no GPU and runs doctest as usual.

#define DOCTEST_CONFIG_IMPLEMENT
#include <cotensor/device.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>

#ifndef COTENSOR_GPU_TEST_PROGRAM
#define COTENSOR_GPU_TEST_PROGRAM "cotensor_cuda_tests"
#endif

namespace {

// doctest's options that print something and run no test case (and `-?`, help's other name).
struct option_name {
  std::string_view full;
  std::string_view brief;
};
constexpr option_name query_options[] = {{"help", "h"},
                                         {"version", "v"},
                                         {"count", "c"},
                                         {"list-test-cases", "ltc"},
                                         {"list-test-suites", "lts"},
                                         {"list-reporters", "lr"}};

// True for a true value of a doctest boolean option ("--no-run=yes").
bool is_true(std::string_view value) {
  return value == "1" || value == "true" || value == "yes" || value == "on";
}

// True when doctest, given these arguments, would run no test case: one of them is a query
// option or `--no-run`. doctest accepts an option after any number of dashes and with or
// without its `dt-` prefix (`-ltc`, `--dt-list-test-cases`).
bool runs_no_test(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (!arg.starts_with('-')) {
      continue;
    }
    const auto dashes = arg.find_first_not_of('-');
    arg = dashes == std::string_view::npos ? std::string_view{} : arg.substr(dashes);
    if (arg.starts_with("dt-")) {
      arg.remove_prefix(3);
    }
    const auto equals = arg.find('=');
    const std::string_view name = arg.substr(0, equals);
    if (name == "no-run" || name == "nr") {
      if (equals == std::string_view::npos || is_true(arg.substr(equals + 1))) {
        return true;
      }
      continue;
    }
    if (arg == "?" || std::ranges::any_of(query_options, [arg](const option_name& o) {
          return arg == o.full || arg == o.brief;
        })) {
      return true;
    }
  }
  return false;
}

// True when the environment says a missing GPU is an error (COTENSOR_REQUIRE_GPU set, not 0).
bool gpu_required() {
  const char* value = std::getenv("COTENSOR_REQUIRE_GPU");
  return value != nullptr && *value != '\0' && std::string_view(value) != "0";
}

}  // namespace

int main(int argc, char** argv) {
  if (!runs_no_test(argc, argv) && cotensor::cuda_device_count() == 0) {
    std::string reason = cotensor::unavailable_reason(cotensor::device::cuda(0));
    if (reason.empty()) {
      reason = "cuda_device_count() is 0";
    }
    if (gpu_required()) {
      std::cerr << COTENSOR_GPU_TEST_PROGRAM ": no usable GPU: " << reason << '\n';
      return 1;
    }
    std::cout << COTENSOR_GPU_TEST_PROGRAM ": skipped: no usable GPU (" << reason << ")\n";
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
