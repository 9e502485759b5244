// float32's sum over a whole tensor through CUB's device-wide reduction, accumulated in double;
// then every dtype's reductions over one axis.

#include "cuda/cuda_error.hpp"
#include "cuda/grid.cuh"
#include "cuda/kernels.hpp"
#include "cuda/typed_kernels.hpp"
#include "kernels/element.hpp"

#include <algorithm>
#include <cub/device/device_reduce.cuh>
#include <cuda/std/functional>
#include <type_traits>

namespace cotensor::detail::cuda {
namespace {

struct to_double {
  __host__ __device__ double operator()(float x) const { return static_cast<double>(x); }
};

// The double sum is written at the front of the scratch; CUB's temporary storage follows it.
constexpr std::size_t result_bytes = 256;

__global__ void finish_sum(const double* total, double divisor, float* out) {
  out[0] = static_cast<float>(*total / divisor);
}

std::size_t cub_bytes(std::int64_t n) {
  std::size_t bytes = 0;
  COTENSOR_CUDA_CHECK(cub::DeviceReduce::TransformReduce(
      nullptr, bytes, static_cast<const float*>(nullptr), static_cast<double*>(nullptr), n,
      ::cuda::std::plus<double>{}, to_double{}, 0.0));
  return bytes;
}

}  // namespace

std::size_t sum_scratch_bytes(std::int64_t n) { return result_bytes + cub_bytes(n); }

void launch_sum(cudaStream_t stream,
                const float* in,
                std::int64_t n,
                double divisor,
                float* out,
                void* scratch,
                std::size_t scratch_bytes) {
  auto* total = static_cast<double*>(scratch);
  std::size_t bytes = scratch_bytes - result_bytes;
  COTENSOR_CUDA_CHECK(cub::DeviceReduce::TransformReduce(
      static_cast<char*>(scratch) + result_bytes, bytes, in, total, n, ::cuda::std::plus<double>{},
      to_double{}, 0.0, stream));
  finish_sum<<<1, 1, 0, stream>>>(total, divisor, out);
  if (const cudaError_t rc = cudaGetLastError(); rc != cudaSuccess) {
    throw_cuda_error(rc, "finish_sum", __FILE__, __LINE__);
  }
}

}  // namespace cotensor::detail::cuda

// Reductions of every dtype over [outer, extent, inner] (sum, max, min, argmax, argmin).
namespace cotensor::detail::cuda {
namespace {

constexpr int reduce_threads = 256;

template <class T>
using sum_acc_t = std::
    conditional_t<is_half_v<T>, float, std::conditional_t<is_float_v<T>, double, std::int64_t>>;
template <class T>
using sum_out_t = std::conditional_t<is_float_v<T>, T, std::int64_t>;

// A running extreme: its value (compute type) and the first index where it was seen. NaN wins
// and stays (the first NaN); among equal values the smaller index wins: the order of the tree
// does not change the answer.
template <class C>
struct extreme {
  C value;
  std::int64_t index;
};

template <bool Max, class C>
__device__ inline extreme<C> pick(extreme<C> a, extreme<C> b) {
  const bool a_nan = is_nan(a.value);
  const bool b_nan = is_nan(b.value);
  if (a_nan || b_nan) {
    if (a_nan && b_nan) {
      return a.index <= b.index ? a : b;
    }
    return a_nan ? a : b;
  }
  if (a.value == b.value) {
    return a.index <= b.index ? a : b;
  }
  return (Max ? a.value > b.value : a.value < b.value) ? a : b;
}

template <class A>
__device__ inline A add(A x, A y) {
  if constexpr (std::is_integral_v<A>) {
    return wrap_add(x, y);
  } else {
    return x + y;
  }
}

// One block per output element: threads stride along the axis, then a tree in shared memory
// in a fixed order (the same bits every run).
template <reduce_op Op, class T>
__global__ void reduce_kernel(const T* in,
                              std::int64_t outer,
                              std::int64_t extent,
                              std::int64_t inner,
                              double scale,
                              void* out) {
  using C = compute_t<T>;
  using A = sum_acc_t<T>;
  constexpr bool is_sum = Op == reduce_op::sum;
  constexpr bool is_max = Op == reduce_op::max || Op == reduce_op::argmax;
  __shared__ A sums[reduce_threads];
  __shared__ extreme<C> best[reduce_threads];
  for (std::int64_t r = blockIdx.x; r < outer * inner; r += gridDim.x) {
    const T* p = in + (r / inner) * extent * inner + r % inner;
    if constexpr (is_sum) {
      A acc{};
      for (std::int64_t a = threadIdx.x; a < extent; a += blockDim.x) {
        acc = add(acc, static_cast<A>(load(p[a * inner])));
      }
      sums[threadIdx.x] = acc;
    } else {
      extreme<C> e{load(p[0]), 0};
      for (std::int64_t a = threadIdx.x; a < extent; a += blockDim.x) {
        e = pick<is_max>(e, extreme<C>{load(p[a * inner]), a});
      }
      best[threadIdx.x] = e;
    }
    __syncthreads();
    for (int half = reduce_threads / 2; half > 0; half /= 2) {
      if (static_cast<int>(threadIdx.x) < half) {
        if constexpr (is_sum) {
          sums[threadIdx.x] = add(sums[threadIdx.x], sums[threadIdx.x + half]);
        } else {
          best[threadIdx.x] = pick<is_max>(best[threadIdx.x], best[threadIdx.x + half]);
        }
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      if constexpr (is_sum) {
        if constexpr (std::is_integral_v<A>) {
          static_cast<std::int64_t*>(out)[r] = sums[0];
        } else {
          static_cast<sum_out_t<T>*>(out)[r] =
              sum_out_t<T>(static_cast<compute_t<T>>(static_cast<double>(sums[0]) * scale));
        }
      } else if constexpr (Op == reduce_op::argmax || Op == reduce_op::argmin) {
        static_cast<std::int64_t*>(out)[r] = best[0].index;
      } else {
        static_cast<T*>(out)[r] = p[best[0].index * inner];
      }
    }
    __syncthreads();  // the shared arrays are read before the next output overwrites them
  }
}

}  // namespace

void launch_reduce(const reduce_args& args) {
  const std::int64_t outer = args.outer;
  const std::int64_t extent = args.extent;
  const std::int64_t inner = args.inner;
  const double scale = args.scale;
  void* out = args.out;
  const std::int64_t outputs = outer * inner;
  if (outputs == 0) {
    return;
  }
  cudaStream_t stream = launch_stream();
  const auto blocks = static_cast<unsigned>(std::min<std::int64_t>(outputs, 65535));
  visit_dtype(args.t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto* p = static_cast<const T*>(args.in);
    visit_reduce(args.op, [&](auto o) {
      reduce_kernel<decltype(o)::value, T>
          <<<blocks, reduce_threads, 0, stream>>>(p, outer, extent, inner, scale, out);
    });
  });
  check_launch("reduce_kernel");
}

}  // namespace cotensor::detail::cuda
