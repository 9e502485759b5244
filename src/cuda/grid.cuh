#pragma once

// Launch helpers shared by the CUDA backend's .cu files: the block size, the grid for a
// grid-stride loop over `n` elements, and the check after a launch.

#include "cuda/cuda_error.hpp"

#include <algorithm>
#include <cstdint>

namespace cotensor::detail::cuda {

/// Threads per block of the elementwise kernels.
inline constexpr int threads = 256;

/// Enough blocks for `n` threads' work with grid-stride loops, at most 2^16 blocks (every SM of
/// an H100 busy many times over).
inline unsigned blocks_for(std::int64_t n) {
  const std::int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<std::int64_t>(b, 1, 65536));
}

/// Throws std::system_error in `cuda_category()` if the last launch (`kernel`) failed.
inline void check_launch(const char* kernel) {
  if (const cudaError_t rc = cudaGetLastError(); rc != cudaSuccess) {
    throw_cuda_error(rc, kernel, __FILE__, __LINE__);
  }
}

/// This thread's first element and the stride of a grid-stride loop.
__device__ inline std::int64_t first_index() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline std::int64_t grid_stride() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}

}  // namespace cotensor::detail::cuda
