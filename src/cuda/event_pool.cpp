#include "cuda/event_pool.hpp"

#include "cuda/cuda_error.hpp"

namespace cotensor::detail::cuda {

event_pool::~event_pool() {
  for (cudaEvent_t e : free_) {
    COTENSOR_CUDA_LOG(cudaEventDestroy(e));
  }
}

cudaEvent_t event_pool::acquire() {
  {
    std::lock_guard lock(mutex_);
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
  }
  cudaEvent_t e = nullptr;
  COTENSOR_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

event_state event_pool::query(void* event, std::error_code& ec) noexcept {
  const cudaError_t rc = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (rc == cudaSuccess) {
    return event_state::complete;
  }
  (void)cudaGetLastError();  // cudaErrorNotReady is recorded as the last error too
  if (rc == cudaErrorNotReady) {
    return event_state::pending;
  }
  ec = make_error_code(rc);
  return event_state::failed;
}

void event_pool::release(void* event) noexcept {
  try {
    std::lock_guard lock(mutex_);
    free_.push_back(static_cast<cudaEvent_t>(event));
  } catch (...) {
    COTENSOR_CUDA_LOG(cudaEventDestroy(static_cast<cudaEvent_t>(event)));  // out of memory
  }
}

void event_pool::bind_thread() noexcept { COTENSOR_CUDA_LOG(cudaSetDevice(device_)); }

}  // namespace cotensor::detail::cuda
