#pragma once

// The CUDA kernels, launched on a stream. Declared in plain C++ (this header compiles with the
// host compiler, without nvcc) and defined in kernels.cu and reduce.cu. Each launch checks the
// launch and throws std::system_error in `cuda_category()` if it failed.

#include "kernels/kernel_table.hpp"

#include <cstddef>
#include <cstdint>
#include <cuda_runtime_api.h>

namespace cotensor::detail::cuda {

void launch_sum_axis(cudaStream_t stream,
                     const float* in,
                     std::int64_t outer,
                     std::int64_t extent,
                     std::int64_t inner,
                     double scale,
                     float* out);
void launch_randn(cudaStream_t stream,
                  float* out,
                  std::int64_t n,
                  std::uint64_t seed,
                  std::uint64_t philox_stream);

/// The scratch bytes `launch_sum` needs for `n` floats.
std::size_t sum_scratch_bytes(std::int64_t n);
/// out[0] = (Σ in[i]) / divisor, accumulated in double by CUB's device reduction.
void launch_sum(cudaStream_t stream,
                const float* in,
                std::int64_t n,
                double divisor,
                float* out,
                void* scratch,
                std::size_t scratch_bytes);

}  // namespace cotensor::detail::cuda
