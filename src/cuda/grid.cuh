#pragma once

// Launch helpers shared by the CUDA backend's .cu files: the block size, the grid for a
// grid-stride loop over `n` elements, the check after a launch and the dispatch of a float op.

#include "cuda/cuda_error.hpp"
#include "kernels/element.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>

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

/// Calls `f(type_tag<T>{})` with the C++ type of the float dtype `t`; throws
/// std::invalid_argument for another (the frontend lets none through).
template <class F>
void with_float(dtype t, F&& f) {
  visit_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_float_v<T>) {
      f(tag);
    } else {
      throw std::invalid_argument("cotensor: a float op on a non-float dtype");
    }
  });
}

/// This thread's first element and the stride of a grid-stride loop.
__device__ inline std::int64_t first_index() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline std::int64_t grid_stride() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}

}  // namespace cotensor::detail::cuda
