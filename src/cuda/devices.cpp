#include "cuda/devices.hpp"

#include <atomic>
#include <cuda_runtime_api.h>
#include <new>
#include <pthread.h>

namespace cotensor::detail::cuda {
namespace {

struct device_count_answer {
  int count = 0;
  std::string error;  // empty when CUDA answered
};

// Set in a child forked after CUDA was initialised: CUDA cannot be used there (its driver
// state belongs to the parent), so every CUDA device is refused with this reason.
std::atomic<bool> forked_after_init{false};

// Asked once: CUDA initialises lazily, here, the first time a CUDA device is named. Without a
// driver cudaGetDeviceCount returns an error and leaves the count unwritten, so it starts at 0;
// the error it sets as the last error is cleared.
const device_count_answer& devices() {
  static const device_count_answer answer = [] {
    pthread_atfork(nullptr, nullptr, [] { forked_after_init.store(true); });
    device_count_answer d;
    const cudaError_t rc = cudaGetDeviceCount(&d.count);
    if (rc != cudaSuccess) {
      d.count = 0;
      d.error = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(rc) + " (" +
                cudaGetErrorString(rc) + ")";
      (void)cudaGetLastError();
    }
    return d;
  }();
  return answer;
}

}  // namespace

int device_count() noexcept {
  try {
    const int count = devices().count;
    return forked_after_init.load() ? 0 : count;
  } catch (const std::bad_alloc&) {
    return 0;
  }
}

bool usable(int index) noexcept { return index >= 0 && index < device_count(); }

std::string unavailable_reason(int index) {
  const device_count_answer& d = devices();
  if (forked_after_init.load()) {
    return "CUDA cannot be used in a child process forked after it was initialised (use "
           "posix_spawn or exec, or fork before the first CUDA device is named)";
  }
  if (!d.error.empty()) {
    return d.error;
  }
  if (index < 0 || index >= d.count) {
    return "this machine has " + std::to_string(d.count) + " CUDA device" +
           (d.count == 1 ? "" : "s");
  }
  return {};
}

}  // namespace cotensor::detail::cuda
