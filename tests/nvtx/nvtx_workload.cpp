// The program that nvtx_test.cpp runs under the NVTX recorder, as `nsys profile` would run it:
// <iterations> times a = randn({256, 256}), b = randn({256, 256}), c = matmul(a, b), d = c + a,
// then wait_all(), on a runtime of its own with 2 workers. Each op touches 256 KiB or
// more, over the 128 KiB up to which a ready op runs at its call on the issuing thread
// (runtime_options::inline_small_ops), so every op runs on a backend worker. Prints the
// runtime's counts: `issued <n> completed <n>`.
//
// Usage: cotensor_nvtx_workload <iterations>

#include "cotensor/cotensor.hpp"

#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2 || std::atoi(argv[1]) <= 0) {
    std::fprintf(stderr, "usage: cotensor_nvtx_workload <iterations>\n");
    return 2;
  }
  const int iterations = std::atoi(argv[1]);
  cotensor::runtime_options options;  // not from_environment(): the test fixes the engine
  options.worker_threads = 2;
  cotensor::runtime_stats stats;
  {
    cotensor::runtime rt(options);
    const cotensor::shape square{256, 256};
    std::vector<cotensor::tensor> results;
    for (int i = 0; i < iterations; ++i) {
      auto a = cotensor::randn(square);
      auto b = cotensor::randn(square);
      auto c = cotensor::matmul(a, b);
      results.push_back(c + a);
    }
    cotensor::wait_all();  // every op has ended, and is counted: a wait on `d` may return sooner
    stats = rt.stats();
  }
  std::printf("issued %llu completed %llu\n", static_cast<unsigned long long>(stats.issued),
              static_cast<unsigned long long>(stats.completed));
  return 0;
}
