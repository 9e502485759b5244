// Loading tensors from a file: how fast, and what it costs the ops that run beside it.
//
//   build/bench/cotensor_bench_io            # 16 tensors of 16 MiB (256 MiB)
//   build/bench/cotensor_bench_io --quick    # 4 tensors of 1 MiB: the smoke test, bench.io_smoke
//
// The file is written once to the temporary directory and read from the page cache: the figures
// are cotensor's path (pread into the tensors' buffers on the read threads), not a disk's.
//
//   cotensor.io.load_gbs                 load_safetensors, then every tensor waited: GB/s
//   cotensor.io.compute_alone_ms         a chain of 200 elementwise ops on 10^6 floats, waited
//   cotensor.io.compute_beside_load_ms   the same chain issued right after a load starts
//
// Each figure is the median of --repeat runs (default 5) after a warm-up run.

#include <cotensor/cotensor.hpp>
#include <cotensor/io.hpp>

#include "../common.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

namespace {

using cotensor_bench::clock_type;
using cotensor_bench::seconds_since;

double compute_chain(const cotensor::tensor& x) {
  const auto start = clock_type::now();
  cotensor::tensor y = x;
  for (int i = 0; i < 200; ++i) {
    y = y * 1.0001F + 0.5F;
  }
  y.wait();
  return seconds_since(start);
}

}  // namespace

int main(int argc, char** argv) {
  const auto opts = cotensor_bench::parse_options("cotensor_bench_io", argc, argv);
  const int count = opts.quick ? 4 : 16;
  const std::int64_t floats = opts.quick ? (std::int64_t{1} << 18) : (std::int64_t{1} << 22);
  const auto path = std::filesystem::temp_directory_path() /
                    ("cotensor_bench_io_" + std::to_string(::getpid()) + ".safetensors");
  {
    std::vector<std::pair<std::string, cotensor::tensor>> tensors;
    for (int i = 0; i < count; ++i) {
      tensors.emplace_back("t" + std::to_string(100 + i),
                           cotensor::full({floats}, static_cast<float>(i)));
    }
    cotensor::save_safetensors(path, tensors, {});
  }
  const double bytes = static_cast<double>(count) * static_cast<double>(floats) * sizeof(float);
  std::printf("# cotensor %d.%d.%d, load_safetensors of %d x %.0f MiB from the page cache\n",
              COTENSOR_VERSION_MAJOR, COTENSOR_VERSION_MINOR, COTENSOR_VERSION_PATCH, count,
              bytes / count / (1 << 20));

  const double load_s = cotensor_bench::median_seconds(opts.repeat, [&] {
    const auto start = clock_type::now();
    const auto file = cotensor::load_safetensors(path);
    for (const auto& named : file.tensors) {
      named.second.wait();
    }
    return seconds_since(start);
  });
  cotensor_bench::print("io.load_gbs", bytes / load_s / 1e9);

  const cotensor::tensor x = cotensor::ones({1 << 20});
  const double alone_s =
      cotensor_bench::median_seconds(opts.repeat, [&] { return compute_chain(x); });
  cotensor_bench::print("io.compute_alone_ms", alone_s * 1e3);
  const double beside_s = cotensor_bench::median_seconds(opts.repeat, [&] {
    const auto file = cotensor::load_safetensors(path);
    const double s = compute_chain(x);
    for (const auto& named : file.tensors) {
      named.second.wait();
    }
    return s;
  });
  cotensor_bench::print("io.compute_beside_load_ms", beside_s * 1e3);
  std::filesystem::remove(path);
  return 0;
}
