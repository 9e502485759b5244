// The chapter's GPU figures, measured on cotensor's CUDA backend, with the names that the peer
// script's GPU mode prints (`python3 shared/peers/chapter.py --device cuda`, `torch.gpu.<name>`),
// so that the two can be put side by side. One line each, `cotensor.gpu.<name>: <value>`:
//
//   matmul_loop               s        10 x (randn 1000 x 1000 + matmul(a, a)), then wait_all
//   matmul_loop_enqueue_only  s        the same loop, not waited for (the issuing alone)
//   increment_10000           s        10,000 x `x + 1` on a (1, 2) tensor, then wait_all
//   increment_10000_sync      s        the same, wait_all after each op
//   numpy_conversion          s        matmul(a, a).to_vector() for a 1000 x 1000 `a`
//   scalar_conversion         s        matmul(a, a).sum().item() for the same `a`
//   sgemm_<n>_tflops          TFLOP/s  2 n^3 / the time of one n x n FP32 matmul and wait_all
//                                      (n = 4096, 8192; TF32 off)
//   h2d_gbps, d2h_gbps        GB/s     256 MiB / the time of `to(cuda(0))` / `to(cpu())` and
//                                      wait_all (cotensor allocates the destination; PyTorch
//                                      copies into a buffer allocated beforehand, pinned)
//   launch_us                 µs       issuing one `x += 1` on a 1-element tensor, not waited
//                                      for (batches of 500, each waited for off the clock)
//   resume_us_p50 / _p99      µs       issue of `y = x + 1` on a 1-element tensor to the
//                                      resumption of a coroutine `co_await`ing y.ready() on an
//                                      io_context, kernel included (2,000 samples)
//
// Every figure but launch_us and resume_us_* mirrors chapter.py's gpu_main: one warm-up run, then
// the median of --repeat runs (default 5), wait_all() standing for torch.cuda.synchronize(). The
// runtime is the default one (COTENSOR_* environment variables apply); TF32 is off unless
// COTENSOR_ALLOW_TF32=1. Without a usable CUDA device it says why on stderr and exits with 77.
//
// Usage: cotensor_bench_gpu [--repeat N] [--quick] [--probe]
//   --quick  one run per figure, no 8192 GEMM, 200 resume samples (the smoke test)
//   --probe  only print the `#` line and exit: 0 with a usable GPU, else 77

#include "cotensor/cotensor.hpp"

#include "../common.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace asio = boost::asio;
using cotensor_bench::clock_type;
using cotensor_bench::median_seconds;
using cotensor_bench::print;
using cotensor_bench::seconds_since;

const cotensor::device gpu = cotensor::device::cuda(0);

struct options {
  int repeat = 5;
  bool quick = false;
  bool probe = false;
};

options parse_options(int argc, char** argv) {
  constexpr const char* usage = "usage: cotensor_bench_gpu [--repeat N] [--quick] [--probe]\n";
  options opts;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--quick") {
      opts.quick = true;
    } else if (arg == "--probe") {
      opts.probe = true;
    } else if (arg == "--repeat" && i + 1 < argc) {
      const std::string_view value = argv[++i];
      const auto [end, ec] =
          std::from_chars(value.data(), value.data() + value.size(), opts.repeat);
      if (ec != std::errc{} || end != value.data() + value.size() || opts.repeat < 1) {
        std::fprintf(stderr,
                     "cotensor_bench_gpu: --repeat needs a positive integer, got '%.*s'\n%s",
                     static_cast<int>(value.size()), value.data(), usage);
        std::exit(2);
      }
    } else if (arg == "--help" || arg == "-h") {
      std::printf("%s", usage);
      std::exit(0);
    } else {
      std::fprintf(stderr, "cotensor_bench_gpu: unknown or incomplete argument '%.*s'\n%s",
                   static_cast<int>(arg.size()), arg.data(), usage);
      std::exit(2);
    }
  }
  if (opts.quick) {
    opts.repeat = 1;
  }
  return opts;
}

// The GPU's name and the driver's CUDA version, asked of the driver's libcuda.so.1 through
// dlopen so that this program needs no CUDA header; empty strings if any call fails. CUDA's
// runtime, inside libcotensor, loads the same library, so the handle is never closed.
struct gpu_info {
  std::string name;
  std::string driver_cuda;
};

gpu_info query_gpu_info() {
  gpu_info info;
  void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (lib == nullptr) {
    return info;
  }
  // The driver API's signatures, CUresult and CUdevice being int: cuInit, cuDeviceGet,
  // cuDeviceGetName, cuDriverGetVersion.
  using init_fn = int (*)(unsigned);
  using device_get_fn = int (*)(int*, int);
  using device_name_fn = int (*)(char*, int, int);
  using driver_version_fn = int (*)(int*);
  const auto init = reinterpret_cast<init_fn>(dlsym(lib, "cuInit"));
  const auto device_get = reinterpret_cast<device_get_fn>(dlsym(lib, "cuDeviceGet"));
  const auto device_name = reinterpret_cast<device_name_fn>(dlsym(lib, "cuDeviceGetName"));
  const auto driver_version = reinterpret_cast<driver_version_fn>(dlsym(lib, "cuDriverGetVersion"));
  if (init == nullptr || init(0) != 0) {
    return info;
  }
  int device = 0;
  std::array<char, 256> name{};
  if (device_get != nullptr && device_name != nullptr && device_get(&device, gpu.index) == 0 &&
      device_name(name.data(), static_cast<int>(name.size()), device) == 0) {
    info.name = name.data();
  }
  int version = 0;
  if (driver_version != nullptr && driver_version(&version) == 0) {
    info.driver_cuda = std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
  }
  return info;
}

// torch.cuda.synchronize(): every op issued so far has ended.
void synchronize() { cotensor::wait_all(); }

// chapter.py's `timed(synced(fn), r)`: fn, then a sync, inside the timer.
template <class F>
double synced(int repeat, F fn) {
  return median_seconds(repeat, [&] {
    const auto start = clock_type::now();
    fn();
    synchronize();
    return seconds_since(start);
  });
}

// chapter.py's `timed(fn, r)`: fn alone inside the timer.
template <class F>
double unsynced(int repeat, F fn) {
  return median_seconds(repeat, [&] {
    const auto start = clock_type::now();
    fn();
    return seconds_since(start);
  });
}

// "Asynchrony via Backend": the loop on the GPU.
void matmul_loop() {
  for (int i = 0; i < 10; ++i) {
    const auto a = cotensor::randn({1000, 1000}, gpu);
    const auto b = cotensor::matmul(a, a);
  }
}

double sgemm_tflops(int repeat, std::int64_t size) {
  const auto m = cotensor::randn({size, size}, gpu);
  synchronize();
  const double s = synced(repeat, [&] { static_cast<void>(cotensor::matmul(m, m)); });
  const auto flops =
      2.0 * static_cast<double>(size) * static_cast<double>(size) * static_cast<double>(size);
  return flops / s / 1e12;
}

constexpr std::int64_t copy_bytes = std::int64_t{256} << 20;

double h2d_gbps(int repeat) {
  const auto host = cotensor::full({copy_bytes / 4}, 1.0F);
  synchronize();
  const double s = synced(repeat, [&] { static_cast<void>(host.to(gpu)); });
  return static_cast<double>(copy_bytes) / s / 1e9;
}

double d2h_gbps(int repeat) {
  const auto dev = cotensor::full({copy_bytes / 4}, 1.0F, gpu);
  synchronize();
  const double s = synced(repeat, [&] { static_cast<void>(dev.to(cotensor::device::cpu())); });
  return static_cast<double>(copy_bytes) / s / 1e9;
}

// Microseconds to issue one `x += 1` on a 1-element GPU tensor. Batches of 500 stay under the
// default in-flight bound (1024), so that issuing never waits for room and the figure is the
// frontend's cost, not the GPU's; each batch is waited for off the clock.
double launch_us(int repeat) {
  constexpr int batch = 500;
  constexpr int batches = 20;
  auto x = cotensor::zeros({1}, gpu);
  synchronize();
  const double s = median_seconds(repeat, [&] {
    double issuing = 0;
    for (int b = 0; b < batches; ++b) {
      const auto start = clock_type::now();
      for (int i = 0; i < batch; ++i) {
        x += 1.0F;
      }
      issuing += seconds_since(start);
      synchronize();
    }
    return issuing;
  });
  return s / (batch * batches) * 1e6;
}

double percentile(std::vector<double> v, double p) {
  std::ranges::sort(v);
  const auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[i];
}

// Microseconds from issuing `y = x + 1` on a 1-element GPU tensor to the resumption of the
// coroutine that awaits y, on a one-thread io_context: the frontend, the kernel, the completion
// noticed and posted to the io_context, the coroutine resumed.
std::vector<double> resume_us(int samples) {
  constexpr int warm_up = 100;
  const auto x = cotensor::ones({1}, gpu);
  synchronize();
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(samples));
  asio::io_context io;
  std::exception_ptr failure;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        for (int i = 0; i < warm_up + samples; ++i) {
          const auto start = clock_type::now();
          const auto y = x + 1.0F;
          co_await y.ready();
          const auto end = clock_type::now();
          if (i >= warm_up) {
            us.push_back(std::chrono::duration<double, std::micro>(end - start).count());
          }
        }
      },
      [&](std::exception_ptr e) { failure = e; });
  io.run();
  if (failure) {
    std::rethrow_exception(failure);
  }
  return us;
}

// Prints every figure; false if one failed. A figure that fails (a kernel's error, a missing
// op) is reported on stderr with its name, and the next one runs: one GPU session yields every
// figure that works.
bool run_figures(const options& opts) {
  bool ok = true;
  const auto attempt = [&](const char* what, const auto& body) {
    try {
      body();
    } catch (const std::exception& e) {
      ok = false;
      std::fprintf(stderr, "cotensor_bench_gpu: %s: %s\n", what, e.what());
      std::fflush(stderr);
    }
  };
  const auto figure = [&](const char* name, const auto& measure) {
    attempt(name, [&] { print(name, measure()); });
  };
  const int r = opts.repeat;

  // Warm-up for GPU computation, as the chapter does.
  attempt("warm-up", [] {
    static_cast<void>(
        cotensor::matmul(cotensor::randn({100, 100}, gpu), cotensor::randn({100, 100}, gpu)));
    synchronize();
  });

  figure("gpu.matmul_loop", [&] { return synced(r, matmul_loop); });
  figure("gpu.matmul_loop_enqueue_only", [&] { return unsynced(r, matmul_loop); });

  const auto x = cotensor::ones({1, 2}, gpu);
  figure("gpu.increment_10000", [&] {
    return synced(r, [&] {
      for (int i = 0; i < 10'000; ++i) {
        static_cast<void>(x + 1.0F);
      }
    });
  });
  figure("gpu.increment_10000_sync", [&] {
    return unsynced(r, [&] {
      for (int i = 0; i < 10'000; ++i) {
        static_cast<void>(x + 1.0F);
        synchronize();
      }
    });
  });

  const auto a = cotensor::randn({1000, 1000}, gpu);
  figure("gpu.numpy_conversion", [&] {
    return unsynced(r, [&] { static_cast<void>(cotensor::matmul(a, a).to_vector()); });
  });
  figure("gpu.scalar_conversion", [&] {
    return unsynced(r, [&] { static_cast<void>(cotensor::matmul(a, a).sum().item()); });
  });

  figure("gpu.sgemm_4096_tflops", [&] { return sgemm_tflops(r, 4096); });
  if (!opts.quick) {
    figure("gpu.sgemm_8192_tflops", [&] { return sgemm_tflops(r, 8192); });
  }

  figure("gpu.h2d_gbps", [&] { return h2d_gbps(r); });
  figure("gpu.d2h_gbps", [&] { return d2h_gbps(r); });

  figure("gpu.launch_us", [&] { return launch_us(r); });
  attempt("gpu.resume_us", [&] {
    const auto us = resume_us(opts.quick ? 200 : 2000);
    print("gpu.resume_us_p50", percentile(us, 0.50));
    print("gpu.resume_us_p99", percentile(us, 0.99));
  });
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const auto opts = parse_options(argc, argv);
  if (cotensor::cuda_device_count() == 0) {
    std::fprintf(stderr, "cotensor_bench_gpu: no usable CUDA device: %s\n",
                 cotensor::unavailable_reason(gpu).c_str());
    return 77;
  }
  const auto info = query_gpu_info();
  std::printf("# cotensor %d.%d.%d, %s, %d CUDA device%s, driver CUDA %s, TF32 %s, median of %d "
              "after 1 warm-up\n",
              COTENSOR_VERSION_MAJOR, COTENSOR_VERSION_MINOR, COTENSOR_VERSION_PATCH,
              info.name.empty() ? "GPU name unknown" : info.name.c_str(),
              cotensor::cuda_device_count(), cotensor::cuda_device_count() == 1 ? "" : "s",
              info.driver_cuda.empty() ? "unknown" : info.driver_cuda.c_str(),
              cotensor::runtime::current().options().allow_tf32 ? "on" : "off", opts.repeat);
  std::fflush(stdout);
  if (opts.probe) {
    return 0;
  }
  try {
    return run_figures(opts) ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cotensor_bench_gpu: %s\n", e.what());
    return 1;
  }
}
