#pragma once

// The CUDA kernels for every dtype, launched on a stream: elementwise (elementwise.cu),
// reductions (reduce.cu) and the row-wise ops of models (nn.cu). Declared in plain C++ (this
// header compiles with the host compiler) like kernels.hpp. Each launch checks the launch and
// throws std::system_error in `cuda_category()` if it failed.

#include "kernels/kernel_table.hpp"

#include <cstddef>
#include <cstdint>
#include <cuda_runtime_api.h>

namespace cotensor::detail::cuda {

/// An output's extents and up to three operands' strides in its index space (0 where
/// broadcast), for broadcasting binary ops (two operands) and `where` (three).
struct elementwise_layout {
  static constexpr int max_rank = gpu_max_broadcast_rank;
  int rank = 0;
  std::int64_t extent[max_rank] = {};
  std::int64_t stride[3][max_rank] = {};
};

void launch_fill(cudaStream_t stream, dtype t, void* out, std::int64_t n, scalar_arg value);
void launch_cast(
    cudaStream_t stream, dtype from, const void* in, dtype to, void* out, std::int64_t n);
/// out = a ⊗ b; `layout` null for operands of the output's shape.
void launch_binary(cudaStream_t stream,
                   binary_op op,
                   dtype t,
                   const void* a,
                   const void* b,
                   void* out,
                   const elementwise_layout* layout,
                   std::int64_t n);
void launch_binary_scalar(cudaStream_t stream,
                          binary_op op,
                          dtype t,
                          const void* a,
                          scalar_arg s,
                          bool scalar_left,
                          void* out,
                          std::int64_t n);
void launch_unary(
    cudaStream_t stream, unary_op op, dtype t, const void* in, void* out, std::int64_t n);
void launch_where(cudaStream_t stream,
                  dtype t,
                  const void* cond,
                  const void* a,
                  const void* b,
                  void* out,
                  const elementwise_layout& layout,
                  std::int64_t n);

/// `op` over the middle axis of [outer, extent, inner], as kernel_table::reduce; sums
/// accumulate in double (float32, float64), float (float16, bfloat16) or int64, in a fixed
/// order.
void launch_reduce(cudaStream_t stream,
                   reduce_op op,
                   dtype t,
                   const void* in,
                   std::int64_t outer,
                   std::int64_t extent,
                   std::int64_t inner,
                   double scale,
                   void* out);

void launch_softmax(cudaStream_t stream,
                    dtype t,
                    const void* in,
                    void* out,
                    std::int64_t rows,
                    std::int64_t cols,
                    bool log);
void launch_layer_norm(cudaStream_t stream,
                       dtype t,
                       const void* in,
                       const void* weight,
                       const void* bias,
                       void* out,
                       std::int64_t rows,
                       std::int64_t cols,
                       double eps);
/// As kernel_table::index_select; an index outside [0, extent) writes zeros and sets
/// `*bad_index` (device memory) to 1, which the caller checks after the stream has run.
void launch_index_select(cudaStream_t stream,
                         std::size_t item,
                         const void* in,
                         std::int64_t outer,
                         std::int64_t extent,
                         std::int64_t inner,
                         const std::int64_t* index,
                         std::int64_t count,
                         void* out,
                         int* bad_index);
/// Standard normal samples of a float dtype: float16/bfloat16 are the float32 samples rounded,
/// float64 the CPU's own 53-bit draw (Box-Muller in double: CUDA's log, sin and cos, so not
/// always the CPU's last bit).
void launch_randn_typed(cudaStream_t stream,
                        dtype t,
                        void* out,
                        std::int64_t n,
                        std::uint64_t seed,
                        std::uint64_t philox_stream);
/// out[cols, rows] = in[rows, cols]ᵀ, for elements of `item` bytes (1, 2, 4 or 8).
void launch_transpose_bytes(cudaStream_t stream,
                            std::size_t item,
                            const void* in,
                            void* out,
                            std::int64_t rows,
                            std::int64_t cols);

}  // namespace cotensor::detail::cuda
