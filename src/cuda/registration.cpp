// What libcotensor_cuda hands the composition root (src/backends.cpp), which loads it with the
// first question about a CUDA device: the one symbol it looks up.

#include "cuda/cuda_backend.hpp"
#include "cuda/devices.hpp"
#include "engine/backend.hpp"

#include <string>

/// The CUDA backend's registration: its backend, memory, kernels and device queries.
extern "C" __attribute__((visibility("default"))) const cotensor::detail::device_registration*
cotensor_cuda_registration() noexcept {
  namespace cuda = cotensor::detail::cuda;
  static constexpr cotensor::detail::device_registration registration{
      .make_backend = cuda::make_backend,
      .await_fence = cuda::await_fence,
      .allocator = &cuda::device_memory,
      .kernels = &cuda::kernel_table_of_cuda,
      .device_count = cuda::device_count,
      .usable = cuda::usable,
      .unavailable_reason = cuda::unavailable_reason,
  };
  return &registration;
}
