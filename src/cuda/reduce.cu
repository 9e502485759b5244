// sum over a whole tensor through CUB's device-wide reduction, accumulated in double.

#include "cuda/cuda_error.hpp"
#include "cuda/kernels.hpp"

#include <cub/device/device_reduce.cuh>
#include <cuda/std/functional>

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
