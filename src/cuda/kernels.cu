// The layout and random kernels of the CUDA backend, and the float32 sums of kernel_table.cpp,
// launched on the op's stream. Built without fast math: exp, log, tanh within CUDA's 2 ulp,
// sqrt and division correctly rounded, no fused multiply-add (randn's bits are the CPU's).

#include "cuda/cuda_error.hpp"
#include "cuda/grid.cuh"
#include "cuda/kernels.hpp"
#include "cuda/typed_kernels.hpp"
#include "kernels/philox_normal.hpp"

#include <algorithm>
#include <stdexcept>
#include <type_traits>

namespace cotensor::detail::cuda {
namespace {

// 32 × 32 tiles through shared memory (one column of padding against bank conflicts): reads
// and writes both coalesced.
constexpr int tile = 32;
constexpr int tile_rows = 8;

template <class T>
__global__ void transpose_kernel(const T* in, T* out, std::int64_t rows, std::int64_t cols) {
  __shared__ T block[tile][tile + 1];
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

// One thread per output element: the sum over the axis in double, in index order, as the CPU's
// (the same bits). Long rows go to sum_rows_kernel, whose order differs: there the results agree
// with the CPU's within one rounding, not bit for bit.
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

// Sums along the last axis (inner = 1) of rows of at least 4 x 256 elements, fewer than 65,536
// of them: one block per row, its threads striding along the row in double, then a tree in
// shared memory (a fixed order: the same bits every run, not the CPU's index order).
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

// float16/bfloat16: the float32 samples rounded (the same conversion as the CPU's);
// float64: Box-Muller in double on 53-bit uniforms, a pair per Philox block.
template <class T>
__global__ void randn_typed_kernel(
    T* out, std::int64_t n, std::uint32_t k0, std::uint32_t k1, std::uint64_t stream) {
  const std::int64_t per_block = std::is_same_v<T, double> ? 2 : 4;
  const std::int64_t blocks = (n + per_block - 1) / per_block;
  for (std::int64_t b = first_index(); b < blocks; b += grid_stride()) {
    const auto counter = static_cast<std::uint64_t>(b);
    const philox::block x = philox::generate(
        {static_cast<std::uint32_t>(counter), static_cast<std::uint32_t>(counter >> 32),
         static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32)},
        k0, k1);
    const std::int64_t base = b * per_block;
    if constexpr (std::is_same_v<T, double>) {
      const auto u53 = [](std::uint32_t hi32, std::uint32_t lo32) {
        const std::uint64_t bits = (static_cast<std::uint64_t>(hi32) << 21) | (lo32 >> 11);
        return (static_cast<double>(bits) + 0.5) * 0x1p-53;
      };
      const double r = ::sqrt(-2.0 * ::log(u53(x.x0, x.x1)));
      const double theta = 6.283185307179586477 * u53(x.x2, x.x3);
      out[base] = r * ::cos(theta);
      if (base + 1 < n) {
        out[base + 1] = r * ::sin(theta);
      }
    } else {
      const philox::pair p = philox::box_muller(x.x0, x.x1);
      const philox::pair q = philox::box_muller(x.x2, x.x3);
      const float z[4] = {p.x, p.y, q.x, q.y};
      for (int j = 0; j < 4 && base + j < n; ++j) {
        out[base + j] = T(z[j]);
      }
    }
  }
}

}  // namespace

// By element size: a transpose moves bytes.
void transpose(const transpose_args& args) {
  const std::int64_t rows = args.rows;
  const std::int64_t cols = args.cols;
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
  cudaStream_t stream = launch_stream();
  auto run = [&](auto* typed) {
    using T = std::remove_pointer_t<decltype(typed)>;
    transpose_kernel<T><<<grid, block, 0, stream>>>(static_cast<const T*>(args.in),
                                                    static_cast<T*>(args.out), rows, cols);
  };
  switch (itemsize(args.t)) {
  case 1:
    run(static_cast<std::uint8_t*>(nullptr));
    break;
  case 2:
    run(static_cast<std::uint16_t*>(nullptr));
    break;
  case 4:
    run(static_cast<std::uint32_t*>(nullptr));
    break;
  default:
    run(static_cast<std::uint64_t*>(nullptr));
    break;
  }
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

// float16/bfloat16 are the float32 samples rounded, float64 the CPU's own 53-bit draw
// (Box-Muller in double: CUDA's log, sin and cos, so not always the CPU's last bit).
void randn(const randn_args& args) {
  const std::int64_t n = args.n;
  if (n == 0) {
    return;
  }
  cudaStream_t stream = launch_stream();
  void* out = args.out;
  const std::uint64_t seed = args.seed;
  const std::uint64_t philox_stream = args.stream;
  const auto k0 = static_cast<std::uint32_t>(seed);
  const auto k1 = static_cast<std::uint32_t>(seed >> 32);
  switch (args.t) {
  case dtype::float16:
    randn_typed_kernel<float16_t><<<blocks_for((n + 3) / 4), threads, 0, stream>>>(
        static_cast<float16_t*>(out), n, k0, k1, philox_stream);
    break;
  case dtype::bfloat16:
    randn_typed_kernel<bfloat16_t><<<blocks_for((n + 3) / 4), threads, 0, stream>>>(
        static_cast<bfloat16_t*>(out), n, k0, k1, philox_stream);
    break;
  case dtype::float64:
    randn_typed_kernel<double><<<blocks_for((n + 1) / 2), threads, 0, stream>>>(
        static_cast<double*>(out), n, k0, k1, philox_stream);
    break;
  default:
    launch_randn(stream, static_cast<float*>(out), n, seed, philox_stream);
    return;
  }
  check_launch("randn_typed_kernel");
}

}  // namespace cotensor::detail::cuda
