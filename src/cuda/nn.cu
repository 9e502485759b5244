// The CUDA backend's row-wise kernels for the ops models are made of: softmax and log-softmax,
// layer norm and RMSNorm (one block per row, a fixed-order tree: the same bits every run) and
// the gather behind index_select. float16 and bfloat16 compute in float, as on the CPU; row sums
// accumulate in double.

#include "cuda/cuda_error.hpp"
#include "cuda/grid.cuh"
#include "cuda/typed_kernels.hpp"
#include "kernels/element.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <type_traits>

namespace cotensor::detail::cuda {
namespace {

constexpr int row_threads = 256;

unsigned row_blocks(std::int64_t rows) {
  return static_cast<unsigned>(std::clamp<std::int64_t>(rows, 1, 65535));
}

// The math type of a row: double for float64, float otherwise (as the CPU's row_t).
template <class T>
using row_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Folds `v` of every thread of the block with `f` in a fixed order; every thread gets the
// result. `scratch` holds row_threads values.
template <class V, class F>
__device__ V block_fold(V v, V* scratch, F f) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int half = row_threads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) {
      scratch[threadIdx.x] = f(scratch[threadIdx.x], scratch[threadIdx.x + half]);
    }
    __syncthreads();
  }
  const V result = scratch[0];
  __syncthreads();  // read by all before the next fold writes
  return result;
}

__device__ inline float exp_of(float x) { return expf(x); }
__device__ inline double exp_of(double x) { return ::exp(x); }

struct max_nan {
  template <class C>
  __device__ C operator()(C a, C b) const {
    return a != a ? a : (b != b ? b : (a > b ? a : b));
  }
};
struct plus {
  template <class C>
  __device__ C operator()(C a, C b) const {
    return a + b;
  }
};

template <class T>
__global__ void
softmax_kernel(const T* in, T* out, std::int64_t rows, std::int64_t cols, bool log) {
  using C = row_t<T>;
  __shared__ C c_scratch[row_threads];
  __shared__ double d_scratch[row_threads];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* x = in + r * cols;
    T* y = out + r * cols;
    C top = -std::numeric_limits<C>::infinity();
    for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      top = max_nan{}(top, static_cast<C>(x[j]));
    }
    top = block_fold(top, c_scratch, max_nan{});
    double total = 0.0;
    for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      total += static_cast<double>(exp_of(static_cast<C>(x[j]) - top));
    }
    total = block_fold(total, d_scratch, plus{});
    const double log_total = ::log(total);
    for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      C v;
      if (top != top) {
        v = top;  // a NaN in the row: all NaN, as the CPU
      } else if (log) {
        v = static_cast<C>(static_cast<double>(x[j]) - static_cast<double>(top) - log_total);
      } else {
        v = static_cast<C>(static_cast<double>(exp_of(static_cast<C>(x[j]) - top)) / total);
      }
      y[j] = T(v);
    }
  }
}

template <class T>
__global__ void layer_norm_kernel(const T* in,
                                  const T* weight,
                                  const T* bias,
                                  T* out,
                                  std::int64_t rows,
                                  std::int64_t cols,
                                  double eps) {
  __shared__ double scratch[row_threads];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* x = in + r * cols;
    T* y = out + r * cols;
    double mean = 0.0;
    for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      mean += static_cast<double>(x[j]);
    }
    mean = block_fold(mean, scratch, plus{}) / static_cast<double>(cols);
    double var = 0.0;
    for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const double d = static_cast<double>(x[j]) - mean;
      var += d * d;
    }
    var = block_fold(var, scratch, plus{}) / static_cast<double>(cols);
    const double inv = 1.0 / ::sqrt(var + eps);
    for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      double v = (static_cast<double>(x[j]) - mean) * inv;
      if (weight != nullptr) {
        v *= static_cast<double>(weight[j]);
      }
      if (bias != nullptr) {
        v += static_cast<double>(bias[j]);
      }
      y[j] = T(static_cast<row_t<T>>(v));
    }
  }
}

// As the CPU's: the squares summed in double (here by the block's tree), the scaling in the row
// type.
template <class T>
__global__ void rms_norm_kernel(
    const T* in, const T* weight, T* out, std::int64_t rows, std::int64_t cols, double eps) {
  using C = row_t<T>;
  __shared__ double scratch[row_threads];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* x = in + r * cols;
    T* y = out + r * cols;
    double squares = 0.0;
    for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const double v = static_cast<double>(x[j]);
      squares += v * v;
    }
    squares = block_fold(squares, scratch, plus{});
    const auto inv = static_cast<C>(1.0 / ::sqrt(squares / static_cast<double>(cols) + eps));
    for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      y[j] = T(static_cast<C>(x[j]) * inv * static_cast<C>(weight[j]));
    }
  }
}

// Copies `inner` elements of `Word` per selected row; a bad index writes zeros and raises
// the flag.
template <class Word>
__global__ void index_select_kernel(const Word* in,
                                    std::int64_t outer,
                                    std::int64_t extent,
                                    std::int64_t inner,
                                    const std::int64_t* index,
                                    std::int64_t count,
                                    Word* out,
                                    int* bad_index) {
  const std::int64_t n = outer * count * inner;
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const std::int64_t e = i % inner;
    const std::int64_t row = i / inner;  // o * count + j
    const std::int64_t j = row % count;
    const std::int64_t o = row / count;
    const std::int64_t k = index[j];
    if (k < 0 || k >= extent) {
      out[i] = Word{};
      *bad_index = 1;
    } else {
      out[i] = in[(o * extent + k) * inner + e];
    }
  }
}

}  // namespace

void softmax(const softmax_args& args) {
  const std::int64_t rows = args.rows;
  if (rows == 0 || args.cols == 0) {
    return;
  }
  with_float(args.t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_kernel<T><<<row_blocks(rows), row_threads, 0, launch_stream()>>>(
        static_cast<const T*>(args.in), static_cast<T*>(args.out), rows, args.cols, args.log);
  });
  check_launch("softmax_kernel");
}

void layer_norm(const layer_norm_args& args) {
  const std::int64_t rows = args.rows;
  if (rows == 0 || args.cols == 0) {
    return;
  }
  with_float(args.t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    layer_norm_kernel<T><<<row_blocks(rows), row_threads, 0, launch_stream()>>>(
        static_cast<const T*>(args.in), static_cast<const T*>(args.weight),
        static_cast<const T*>(args.bias), static_cast<T*>(args.out), rows, args.cols, args.eps);
  });
  check_launch("layer_norm_kernel");
}

void rms_norm(const rms_norm_args& args) {
  const std::int64_t rows = args.rows;
  if (rows == 0 || args.cols == 0) {
    return;
  }
  with_float(args.t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    rms_norm_kernel<T><<<row_blocks(rows), row_threads, 0, launch_stream()>>>(
        static_cast<const T*>(args.in), static_cast<const T*>(args.weight),
        static_cast<T*>(args.out), rows, args.cols, args.eps);
  });
  check_launch("rms_norm_kernel");
}

void launch_index_select(const index_select_args& args, int* bad_index) {
  const std::int64_t n = args.outer * args.count * args.inner;
  if (n == 0) {
    return;
  }
  cudaStream_t stream = launch_stream();
  auto run = [&](auto word) {
    using W = decltype(word);
    index_select_kernel<W><<<blocks_for(n), threads, 0, stream>>>(
        static_cast<const W*>(args.in), args.outer, args.extent, args.inner, args.index, args.count,
        static_cast<W*>(args.out), bad_index);
  };
  switch (args.item) {
  case 1:
    run(std::uint8_t{});
    break;
  case 2:
    run(std::uint16_t{});
    break;
  case 4:
    run(std::uint32_t{});
    break;
  default:
    run(std::uint64_t{});
    break;
  }
  check_launch("index_select_kernel");
}

}  // namespace cotensor::detail::cuda
