#include "cuda/devices.hpp"

#include "cotensor/config.hpp"

#if COTENSOR_HAVE_CUDA_RUNTIME
#include <cuda_runtime_api.h>
#endif

namespace cotensor::detail::cuda {
namespace {

#if COTENSOR_HAVE_CUDA_RUNTIME
struct device_count {
  int count = 0;
  std::string error;  // empty when CUDA answered
};

// Asked once: CUDA initialises lazily, here, the first time a CUDA device is named. Without a
// driver cudaGetDeviceCount returns an error and leaves the count unwritten, so it starts at 0;
// the error it sets as the last error is cleared.
const device_count& devices() {
  static const device_count answer = [] {
    device_count d;
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
#endif

}  // namespace

std::string unavailable_reason([[maybe_unused]] int index) {
#if COTENSOR_HAVE_CUDA_RUNTIME
  const device_count& d = devices();
  if (!d.error.empty()) {
    return d.error;
  }
  if (index < 0 || index >= d.count) {
    return "this machine has " + std::to_string(d.count) + " CUDA device" +
           (d.count == 1 ? "" : "s");
  }
  return "this build cannot run ops on a GPU yet (its CUDA backend is not complete)";
#else
  return "this build has no CUDA backend";
#endif
}

}  // namespace cotensor::detail::cuda
