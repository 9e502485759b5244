// The elementwise, layout and random kernels of the CUDA backend (launched from kernel_table.cpp
// on the op's stream). Built without fast math: exp, log, tanh within CUDA's 2 ulp, sqrt and
// division correctly rounded, no fused multiply-add (randn's bits are the CPU's).

#include "cuda/cuda_error.hpp"
#include "cuda/kernels.hpp"
#include "philox_normal.hpp"

#include <algorithm>
#include <stdexcept>

namespace cotensor::detail::cuda {
namespace {

constexpr int threads = 256;

// Enough blocks for `n` threads' work with grid-stride loops, at most 2^16 blocks (every SM of
// an H100 busy many times over).
unsigned blocks_for(std::int64_t n) {
  const std::int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<std::int64_t>(b, 1, 65536));
}

void check_launch(const char* kernel) {
  if (const cudaError_t rc = cudaGetLastError(); rc != cudaSuccess) {
    throw_cuda_error(rc, kernel, __FILE__, __LINE__);
  }
}

__device__ inline std::int64_t first_index() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline std::int64_t grid_stride() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}

template <binary_op Op>
__device__ inline float apply(float a, float b) {
  if constexpr (Op == binary_op::add) {
    return a + b;
  } else if constexpr (Op == binary_op::sub) {
    return a - b;
  } else if constexpr (Op == binary_op::mul) {
    return a * b;
  } else {
    return a / b;
  }
}

template <unary_op Op>
__device__ inline float apply(float x) {
  if constexpr (Op == unary_op::neg) {
    return -x;
  } else if constexpr (Op == unary_op::relu) {
    return x > 0.0F ? x : 0.0F;
  } else if constexpr (Op == unary_op::exp) {
    return expf(x);
  } else if constexpr (Op == unary_op::log) {
    return logf(x);
  } else if constexpr (Op == unary_op::sqrt) {
    return sqrtf(x);
  } else if constexpr (Op == unary_op::tanh) {
    return tanhf(x);
  } else {
    // As the CPU: 1 / (1 + e^-|x|), or e^x / (1 + e^x) for negative x.
    const float e = expf(-fabsf(x));
    return x < 0.0F ? e / (1.0F + e) : 1.0F / (1.0F + e);
  }
}

__global__ void fill_kernel(float* out, std::int64_t n, float value) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    out[i] = value;
  }
}

template <binary_op Op>
__global__ void
binary_kernel(const float* a, const float* b, float* out, broadcast_layout layout, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    std::int64_t rest = i;
    std::int64_t ai = 0;
    std::int64_t bi = 0;
    for (int d = layout.rank - 1; d >= 0; --d) {
      const std::int64_t idx = rest % layout.extent[d];
      rest /= layout.extent[d];
      ai += idx * layout.a_stride[d];
      bi += idx * layout.b_stride[d];
    }
    out[i] = apply<Op>(a[ai], b[bi]);
  }
}

template <binary_op Op>
__global__ void same_shape_kernel(const float* a, const float* b, float* out, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    out[i] = apply<Op>(a[i], b[i]);
  }
}

template <binary_op Op>
__global__ void scalar_kernel(const float* a, float s, bool left, float* out, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    out[i] = left ? apply<Op>(s, a[i]) : apply<Op>(a[i], s);
  }
}

template <unary_op Op>
__global__ void unary_kernel(const float* in, float* out, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    out[i] = apply<Op>(in[i]);
  }
}

// 32 × 32 tiles through shared memory (one column of padding against bank conflicts): reads
// and writes both coalesced.
constexpr int tile = 32;
constexpr int tile_rows = 8;

__global__ void
transpose_kernel(const float* in, float* out, std::int64_t rows, std::int64_t cols) {
  __shared__ float block[tile][tile + 1];
  const std::int64_t c0 = static_cast<std::int64_t>(blockIdx.x) * tile;
  // Rows of tiles in a grid-stride loop: the grid's y extent is at most 65535. Every thread of
  // a block takes the same trips, so the barriers are uniform.
  for (std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * tile; r0 < rows;
       r0 += static_cast<std::int64_t>(gridDim.y) * tile) {
    for (int j = threadIdx.y; j < tile; j += tile_rows) {
      const std::int64_t r = r0 + j;
      const std::int64_t c = c0 + threadIdx.x;
      if (r < rows && c < cols) {
        block[j][threadIdx.x] = in[r * cols + c];
      }
    }
    __syncthreads();
    for (int j = threadIdx.y; j < tile; j += tile_rows) {
      const std::int64_t c = c0 + j;  // out's row
      const std::int64_t r = r0 + threadIdx.x;
      if (c < cols && r < rows) {
        out[c * rows + r] = block[threadIdx.x][j];
      }
    }
    __syncthreads();  // the tile is read before the next trip overwrites it
  }
}

// One thread per output element: the sum over the axis in double, in index order (the same
// order as the CPU's, so the results agree to the last rounding to float).
__global__ void sum_axis_kernel(const float* in,
                                std::int64_t outer,
                                std::int64_t extent,
                                std::int64_t inner,
                                double scale,
                                float* out) {
  const std::int64_t n = outer * inner;
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const std::int64_t o = i / inner;
    const std::int64_t k = i % inner;
    const float* p = in + o * extent * inner + k;
    double acc = 0.0;
    for (std::int64_t a = 0; a < extent; ++a) {
      acc += static_cast<double>(p[a * inner]);
    }
    out[i] = static_cast<float>(acc * scale);
  }
}

// Sums along the last axis (inner = 1) of few long rows: one block per row, its threads
// striding along the row in double, then a tree in shared memory (a fixed order: the same
// bits every run).
__global__ void
sum_rows_kernel(const float* in, std::int64_t rows, std::int64_t extent, double scale, float* out) {
  __shared__ double partial[threads];
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* p = in + row * extent;
    double acc = 0.0;
    for (std::int64_t a = threadIdx.x; a < extent; a += blockDim.x) {
      acc += static_cast<double>(p[a]);
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int half = threads / 2; half > 0; half /= 2) {
      if (static_cast<int>(threadIdx.x) < half) {
        partial[threadIdx.x] += partial[threadIdx.x + half];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      out[row] = static_cast<float>(partial[0] * scale);
    }
    __syncthreads();  // partial[0] read before the next row overwrites it
  }
}

// One thread per Philox block: element e comes from block e / 4, as on the CPU.
__global__ void
randn_kernel(float* out, std::int64_t n, std::uint32_t k0, std::uint32_t k1, std::uint64_t stream) {
  const std::int64_t blocks = (n + 3) / 4;
  for (std::int64_t b = first_index(); b < blocks; b += grid_stride()) {
    const auto counter = static_cast<std::uint64_t>(b);
    const philox::block x = philox::generate(
        {static_cast<std::uint32_t>(counter), static_cast<std::uint32_t>(counter >> 32),
         static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32)},
        k0, k1);
    const philox::pair p = philox::box_muller(x.x0, x.x1);
    const philox::pair q = philox::box_muller(x.x2, x.x3);
    const float z[4] = {p.x, p.y, q.x, q.y};
    const std::int64_t base = b * 4;
    for (int j = 0; j < 4 && base + j < n; ++j) {
      out[base + j] = z[j];
    }
  }
}

template <class F>
void with_binary(binary_op op, F&& f) {
  switch (op) {
  case binary_op::add:
    return f.template operator()<binary_op::add>();
  case binary_op::sub:
    return f.template operator()<binary_op::sub>();
  case binary_op::mul:
    return f.template operator()<binary_op::mul>();
  case binary_op::div:
    return f.template operator()<binary_op::div>();
  default:
    break;
  }
  throw std::invalid_argument("cotensor: this elementwise op is not implemented on a GPU yet");
}

template <class F>
void with_unary(unary_op op, F&& f) {
  switch (op) {
  case unary_op::neg:
    return f.template operator()<unary_op::neg>();
  case unary_op::relu:
    return f.template operator()<unary_op::relu>();
  case unary_op::exp:
    return f.template operator()<unary_op::exp>();
  case unary_op::log:
    return f.template operator()<unary_op::log>();
  case unary_op::sqrt:
    return f.template operator()<unary_op::sqrt>();
  case unary_op::tanh:
    return f.template operator()<unary_op::tanh>();
  case unary_op::sigmoid:
    return f.template operator()<unary_op::sigmoid>();
  default:
    break;
  }
  throw std::invalid_argument("cotensor: this elementwise op is not implemented on a GPU yet");
}

}  // namespace

void launch_fill(cudaStream_t stream, float* out, std::int64_t n, float value) {
  if (n == 0) {
    return;
  }
  fill_kernel<<<blocks_for(n), threads, 0, stream>>>(out, n, value);
  check_launch("fill_kernel");
}

void launch_binary(cudaStream_t stream,
                   binary_op op,
                   const float* a,
                   const float* b,
                   float* out,
                   const broadcast_layout& layout,
                   std::int64_t n) {
  if (n == 0) {
    return;
  }
  with_binary(op, [&]<binary_op Op>() {
    binary_kernel<Op><<<blocks_for(n), threads, 0, stream>>>(a, b, out, layout, n);
  });
  check_launch("binary_kernel");
}

void launch_binary_same_shape(
    cudaStream_t stream, binary_op op, const float* a, const float* b, float* out, std::int64_t n) {
  if (n == 0) {
    return;
  }
  with_binary(op, [&]<binary_op Op>() {
    same_shape_kernel<Op><<<blocks_for(n), threads, 0, stream>>>(a, b, out, n);
  });
  check_launch("same_shape_kernel");
}

void launch_binary_scalar(cudaStream_t stream,
                          binary_op op,
                          const float* a,
                          float s,
                          bool scalar_left,
                          float* out,
                          std::int64_t n) {
  if (n == 0) {
    return;
  }
  with_binary(op, [&]<binary_op Op>() {
    scalar_kernel<Op><<<blocks_for(n), threads, 0, stream>>>(a, s, scalar_left, out, n);
  });
  check_launch("scalar_kernel");
}

void launch_unary(cudaStream_t stream, unary_op op, const float* in, float* out, std::int64_t n) {
  if (n == 0) {
    return;
  }
  with_unary(op, [&]<unary_op Op>() {
    unary_kernel<Op><<<blocks_for(n), threads, 0, stream>>>(in, out, n);
  });
  check_launch("unary_kernel");
}

void launch_transpose(
    cudaStream_t stream, const float* in, float* out, std::int64_t rows, std::int64_t cols) {
  if (rows == 0 || cols == 0) {
    return;
  }
  const std::int64_t gx = (cols + tile - 1) / tile;
  const std::int64_t gy = std::min<std::int64_t>((rows + tile - 1) / tile, 65535);
  if (gx > std::int64_t{0x7FFFFFFF}) {
    throw std::invalid_argument("cotensor::transpose: more than 2^36 columns on a GPU");
  }
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
  const dim3 block(tile, tile_rows);
  transpose_kernel<<<grid, block, 0, stream>>>(in, out, rows, cols);
  check_launch("transpose_kernel");
}

void launch_sum_axis(cudaStream_t stream,
                     const float* in,
                     std::int64_t outer,
                     std::int64_t extent,
                     std::int64_t inner,
                     double scale,
                     float* out) {
  const std::int64_t n = outer * inner;
  if (n == 0) {
    return;
  }
  // Long rows reduced along their length: a block per row, else a thread per output element
  // (coalesced across `inner`).
  if (inner == 1 && extent >= 4 * threads && outer < 64 * 1024) {
    const auto blocks = static_cast<unsigned>(std::min<std::int64_t>(outer, 65535));
    sum_rows_kernel<<<blocks, threads, 0, stream>>>(in, outer, extent, scale, out);
    check_launch("sum_rows_kernel");
    return;
  }
  sum_axis_kernel<<<blocks_for(n), threads, 0, stream>>>(in, outer, extent, inner, scale, out);
  check_launch("sum_axis_kernel");
}

void launch_randn(cudaStream_t stream,
                  float* out,
                  std::int64_t n,
                  std::uint64_t seed,
                  std::uint64_t philox_stream) {
  if (n == 0) {
    return;
  }
  randn_kernel<<<blocks_for((n + 3) / 4), threads, 0, stream>>>(
      out, n, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
      philox_stream);
  check_launch("randn_kernel");
}

}  // namespace cotensor::detail::cuda
