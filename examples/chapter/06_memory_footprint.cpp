// Improving the memory footprint (d2l.ai, "Asynchronous Computation"): a frontend that never
// waits runs ahead of the backend, and every op it has queued holds its inputs and outputs in
// memory. Minibatch SGD for linear regression, Y = X W + noise (X: 16384 x 256, W: 256 x 16,
// minibatches of 256 rows copied from host memory with from_vector, 8 epochs), run four ways:
//
//   sync every minibatch   loss.item() after each minibatch, as the chapter recommends
//   no sync, unbounded     no wait until the end, on runtime({.max_in_flight = 0})
//   no sync, bound 1024    no wait, the default bound: issuing blocks while 1024 ops are queued
//   no sync, bound 64      no wait, a tighter bound
//
// For each it prints `<label>: <seconds> sec`, then its peak resident memory and how much of it
// the run added (VmHWM from /proc/self/status, reset before each run by writing 5 to
// /proc/self/clear_refs once the memory earlier runs freed is handed back to the system), the
// most ops it had in flight, and the final loss. The unbounded run queues nearly every
// minibatch at once, so its peak is far above the others.
// Usage: 06_memory_footprint [--device cpu]

#include "cotensor/cotensor.hpp"

#include "chapter.hpp"

#include <oneapi/tbb/scalable_allocator.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <malloc.h>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr std::int64_t rows = 16384;
constexpr std::int64_t features = 256;
constexpr std::int64_t outputs = 16;
constexpr std::int64_t batch = 256;
constexpr int epochs = 8;
constexpr float learning_rate = 0.05F;

// A field of /proc/self/status, in MiB ("VmHWM" is the peak resident set, "VmRSS" the current).
double status_mib(std::string_view field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.starts_with(field) && line[field.size()] == ':') {
      return std::stod(line.substr(field.size() + 1)) / 1024.0;  // the kernel reports kB
    }
  }
  return 0;
}

struct dataset {
  std::vector<float> x;  // rows x features, row-major, on the host
  std::vector<float> y;  // rows x outputs
};

dataset make_dataset() {
  cotensor::manual_seed(42);
  const auto x = cotensor::randn({rows, features});
  const auto w = cotensor::randn({features, outputs});
  const auto y = cotensor::matmul(x, w) + 0.01F * cotensor::randn({rows, outputs});
  return {x.to_vector(), y.to_vector()};
}

// One SGD run; `sync` waits for each minibatch's loss. Returns the final loss.
float train(const dataset& data, bool sync) {
  auto w = cotensor::zeros({features, outputs});
  cotensor::tensor loss;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (std::int64_t first = 0; first < rows; first += batch) {
      // The minibatch is a fresh copy of host rows: the queued op owns it until it has run.
      const auto xb = cotensor::from_vector(
          {data.x.begin() + first * features, data.x.begin() + (first + batch) * features},
          {batch, features});
      const auto yb = cotensor::from_vector(
          {data.y.begin() + first * outputs, data.y.begin() + (first + batch) * outputs},
          {batch, outputs});
      const auto err = cotensor::matmul(xb, w) - yb;
      loss = cotensor::mean(err * err);
      const auto grad = cotensor::matmul(cotensor::transpose(xb), err);
      w -= grad * (2 * learning_rate / batch);
      if (sync) {
        static_cast<void>(loss.item());  // the barrier: the frontend waits for this minibatch
      }
    }
  }
  return loss.item();
}

void run(const char* label, const dataset& data, bool sync, std::size_t max_in_flight) {
  // cotensor's buffers come from oneTBB's scalable allocator, which keeps freed memory for reuse:
  // give what earlier runs freed back to the system (and malloc's too), so each peak is its own.
  scalable_allocation_command(TBBMALLOC_CLEAN_ALL_BUFFERS, nullptr);
  malloc_trim(0);
  if (!(std::ofstream("/proc/self/clear_refs") << "5")) {  // resets VmHWM to the current VmRSS
    std::printf("(cannot reset the peak: VmHWM below is the process's peak so far)\n");
  }
  const double start_mib = status_mib("VmRSS");
  auto options = cotensor::runtime_options::from_environment();
  options.max_in_flight = max_in_flight;
  const cotensor::runtime rt(options);
  const auto start = std::chrono::steady_clock::now();
  const float final_loss = train(data, sync);
  cotensor::wait_all();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double peak_mib = status_mib("VmHWM");
  std::printf("%s: %.4f sec\n", label, s);
  std::printf("  peak RSS %.1f MiB (+%.1f MiB during the run), at most %zu ops in flight, "
              "final loss %.6f\n",
              peak_mib, peak_mib - start_mib, rt.stats().peak_in_flight,
              static_cast<double>(final_loss));
}

}  // namespace

int main(int argc, char** argv) {
  chapter::parse(argc, argv, "06_memory_footprint [--device cpu]", /*default_repeat=*/0,
                 /*accepts_trace=*/false, /*accepts_gpu=*/false);
  const dataset data = make_dataset();
  cotensor::wait_all();
  std::printf("%lld minibatches of %lld x %lld, host data %.1f MiB\n",
              static_cast<long long>(epochs * rows / batch), static_cast<long long>(batch),
              static_cast<long long>(features),
              static_cast<double>((data.x.size() + data.y.size()) * sizeof(float)) / (1 << 20));

  run("sync every minibatch", data, true, 1024);
  run("no sync, unbounded", data, false, 0);
  run("no sync, bound 1024", data, false, 1024);
  run("no sync, bound 64", data, false, 64);
  return 0;
}
