#pragma once

// The CUDA kernels for every dtype: elementwise (elementwise.cu), reductions (reduce.cu), the
// row-wise ops of models (nn.cu), the language models' (attention.cu) and the rest (kernels.cu).
// Declared in plain C++ (this header compiles with the host compiler) like kernels.hpp. Each
// enqueues its work on the stream of the launch in progress on this thread (`launch_stream()`),
// checks the launch and throws std::system_error in `cuda_category()` if it failed.

#include "kernels/kernel_table.hpp"

#include <cstdint>
#include <cuda_runtime_api.h>

namespace cotensor::detail::cuda {

/// The stream of the launch in progress on this thread (`launch_here().stream`,
/// device_context.hpp, which the .cu files do not include).
cudaStream_t launch_stream();

// The kernel table's entries that are one launch, defined in the .cu files against their
// argument structs (kernel_table.hpp says what each does). The others are in kernel_table.cpp,
// over the helpers below.
void fill(const fill_args& args);
void cast(const cast_args& args);
void binary_same_shape(const binary_same_shape_args& args);
void binary_scalar(const binary_scalar_args& args);
void unary(const unary_args& args);
void transpose(const transpose_args& args);
void softmax(const softmax_args& args);
void layer_norm(const layer_norm_args& args);
void rms_norm(const rms_norm_args& args);
void rope(const rope_args& args);
void silu_and_mul(const silu_and_mul_args& args);
void randn(const randn_args& args);

/// An output's extents and up to three operands' strides in its index space (0 where
/// broadcast), for broadcasting binary ops (two operands) and `where` (three).
struct elementwise_layout {
  static constexpr int max_rank = gpu_max_broadcast_rank;
  int rank = 0;
  std::int64_t extent[max_rank] = {};
  std::int64_t stride[3][max_rank] = {};
};

/// `args` with `a` and `b` broadcast to the output by `layout` (`args.n` its elements).
void launch_binary(const binary_same_shape_args& args, const elementwise_layout& layout);
/// kernel_table::where, its operands broadcast by `layout`.
void launch_where(const where_args& args, const elementwise_layout& layout);
/// kernel_table::reduce by the generic kernel; sums accumulate in double (float32, float64),
/// float (float16, bfloat16) or int64, in a fixed order.
void launch_reduce(const reduce_args& args);
/// kernel_table::index_select, except that an index outside [0, extent) writes zeros and sets
/// `*bad_index` (device memory) to 1, which the caller checks after the stream has run.
void launch_index_select(const index_select_args& args, int* bad_index);
/// kernel_table::scatter_rows, except that an index outside [0, out_rows) sets `*bad_index`
/// (device memory, zero before) and then nothing is written.
void launch_scatter_rows(const scatter_rows_args& args, int* bad_index);
/// kernel_table::paged_attention, except that a row whose sequence, context or blocks are out
/// of range writes zeros and sets `*bad_index` (device memory). Throws std::invalid_argument
/// for a head_dim over `gpu_max_attention_head_dim`.
void launch_paged_attention(const paged_attention_args& args, int* bad_index);

/// The largest head_dim `launch_paged_attention` takes: a block holds a query row and its
/// accumulators, in float, in shared memory.
inline constexpr std::int64_t gpu_max_attention_head_dim = 4096;

}  // namespace cotensor::detail::cuda
