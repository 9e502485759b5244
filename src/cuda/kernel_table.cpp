// The CUDA device's kernel table: each entry enqueues its work on the stream of the launch in
// progress on this thread (device_context.hpp) and returns; the engine ends the op when the
// stream has done it. Host↔device copies go through pinned staging blocks on the copy
// streams, ordered after the compute stream's work by an event.

#include "cuda/blas.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/cuda_error.hpp"
#include "cuda/device_context.hpp"
#include "cuda/kernels.hpp"

#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

namespace cotensor::detail::cuda {
namespace {

std::size_t bytes_of(std::int64_t n) { return static_cast<std::size_t>(n) * sizeof(float); }

void fill(float* out, std::int64_t n, float value) {
  launch_fill(launch_here().stream, out, n, value);
}

// Same device, or from another device (after its writer: order_after_writers_elsewhere), as a
// peer copy: memory from a device's pool is not mapped for its peers, so the driver must stage
// it when peer access is off, which cudaMemcpyPeerAsync does.
void copy(const float* in, float* out, std::int64_t n) {
  launch& l = launch_here();
  if (n == 0) {
    return;
  }
  cudaPointerAttributes from{};
  COTENSOR_CUDA_CHECK(cudaPointerGetAttributes(&from, in));
  const int to = l.device->index();
  if (from.device == to) {
    COTENSOR_CUDA_CHECK(cudaMemcpyAsync(out, in, bytes_of(n), cudaMemcpyDeviceToDevice, l.stream));
    return;
  }
  COTENSOR_CUDA_CHECK(cudaMemcpyPeerAsync(out, to, in, from.device, bytes_of(n), l.stream));
}

// A staged copy's block and, for a download, where its bytes go when the copy has landed.
struct staged {
  device_context* device;
  staging_pool::block block;
  float* host_out;  // null for an upload
  std::size_t bytes;

  static std::exception_ptr finish(void* arg, bool ok) noexcept {
    auto* s = static_cast<staged*>(arg);
    if (ok && s->host_out != nullptr) {
      std::memcpy(s->host_out, s->block.data, s->bytes);
    }
    s->device->staging().release(s->block);
    delete s;
    return nullptr;
  }
};

// Hands `s` to the launch: run by the poller when the copy's event completes.
void keep_until_done(launch& l, staged* s) noexcept { l.after = {&staged::finish, s}; }

void copy_from_host(const float* host, float* out, std::int64_t n) {
  launch& l = launch_here();
  if (n == 0) {
    return;
  }
  device_context& d = *l.device;
  const std::size_t bytes = bytes_of(n);
  auto* s = new staged{&d, d.staging().acquire(bytes), nullptr, bytes};
  keep_until_done(l, s);  // from here on, freed by the launch whatever happens
  std::memcpy(s->block.data, host, bytes);
  // The destination's memory came from the compute stream (cudaMallocAsync): order after it.
  d.order_after_compute(d.upload());
  l.stream = d.upload();
  COTENSOR_CUDA_CHECK(cudaMemcpyAsync(out, s->block.data, bytes, cudaMemcpyHostToDevice, l.stream));
}

void copy_to_host(const float* in, float* host, std::int64_t n) {
  launch& l = launch_here();
  if (n == 0) {
    return;
  }
  device_context& d = *l.device;
  const std::size_t bytes = bytes_of(n);
  auto* s = new staged{&d, d.staging().acquire(bytes), host, bytes};
  keep_until_done(l, s);
  d.order_after_compute(d.download());  // after the writes to `in` on the compute stream
  l.stream = d.download();
  COTENSOR_CUDA_CHECK(cudaMemcpyAsync(s->block.data, in, bytes, cudaMemcpyDeviceToHost, l.stream));
}

broadcast_layout layout_for(const shape& a, const shape& b, const shape& out) {
  const std::size_t rank = out.rank();
  if (rank > static_cast<std::size_t>(max_rank)) {
    throw std::invalid_argument("cotensor: broadcasting over more than " +
                                std::to_string(max_rank) + " dimensions on a GPU (got " +
                                std::to_string(rank) + ")");
  }
  broadcast_layout l;
  l.rank = static_cast<int>(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    l.extent[d] = out[d];
  }
  auto strides = [&](const shape& s, std::int64_t* stride) {
    std::int64_t step = 1;
    for (std::size_t d = 0; d < s.rank(); ++d) {
      const std::size_t si = s.rank() - 1 - d;
      const std::size_t oi = rank - 1 - d;
      stride[oi] = s[si] == 1 ? 0 : step;
      step *= s[si];
    }
  };
  strides(a, l.a_stride);
  strides(b, l.b_stride);
  return l;
}

void binary(binary_op op,
            const float* a,
            const shape& a_shape,
            const float* b,
            const shape& b_shape,
            float* out,
            const shape& out_shape) {
  launch& l = launch_here();
  const std::int64_t n = out_shape.numel();
  if (a_shape == b_shape) {
    launch_binary_same_shape(l.stream, op, a, b, out, n);
    return;
  }
  launch_binary(l.stream, op, a, b, out, layout_for(a_shape, b_shape, out_shape), n);
}

void binary_same_shape(binary_op op, const float* a, const float* b, float* out, std::int64_t n) {
  launch_binary_same_shape(launch_here().stream, op, a, b, out, n);
}

void binary_scalar(
    binary_op op, const float* a, float s, bool scalar_left, float* out, std::int64_t n) {
  launch_binary_scalar(launch_here().stream, op, a, s, scalar_left, out, n);
}

void unary(unary_op op, const float* in, float* out, std::int64_t n) {
  launch_unary(launch_here().stream, op, in, out, n);
}

int blas_int(std::int64_t v) {
  if (v > std::numeric_limits<int>::max()) {
    throw std::invalid_argument("cotensor::matmul: a dimension over 2^31 - 1 on a GPU");
  }
  return static_cast<int>(v);
}

// Row-major c = a · b is column-major cᵀ = bᵀ · aᵀ: the operands swapped, nothing transposed.
void matmul(
    const float* a, const float* b, float* c, std::int64_t m, std::int64_t k, std::int64_t n) {
  launch& l = launch_here();
  if (m == 0 || n == 0) {
    return;
  }
  if (k == 0) {
    launch_fill(l.stream, c, m * n, 0.0F);
    return;
  }
  const float one = 1.0F;
  const float zero = 0.0F;
  COTENSOR_CUBLAS_CHECK(cublas().sgemm(l.device->blas(), CUBLAS_OP_N, CUBLAS_OP_N, blas_int(n),
                                       blas_int(m), blas_int(k), &one, b, blas_int(n), a,
                                       blas_int(k), &zero, c, blas_int(n)));
}

void transpose(const float* in, float* out, std::int64_t rows, std::int64_t cols) {
  launch_transpose(launch_here().stream, in, out, rows, cols);
}

void sum(const float* in, std::int64_t n, double divisor, float* out) {
  launch& l = launch_here();
  if (n == 0) {
    launch_fill(l.stream, out, 1, static_cast<float>(0.0 / divisor));
    return;
  }
  const std::size_t bytes = sum_scratch_bytes(n);
  void* scratch = nullptr;
  COTENSOR_CUDA_CHECK(cudaMallocAsync(&scratch, bytes, l.stream));
  try {
    launch_sum(l.stream, in, n, divisor, out, scratch, bytes);
  } catch (...) {
    COTENSOR_CUDA_LOG(cudaFreeAsync(scratch, l.stream));
    throw;
  }
  COTENSOR_CUDA_CHECK(cudaFreeAsync(scratch, l.stream));  // stream-ordered: after the sum
}

void sum_axis(const float* in,
              std::int64_t outer,
              std::int64_t extent,
              std::int64_t inner,
              double scale,
              float* out) {
  launch_sum_axis(launch_here().stream, in, outer, extent, inner, scale, out);
}

void randn(float* out, std::int64_t n, std::uint64_t seed, std::uint64_t stream) {
  launch_randn(launch_here().stream, out, n, seed, stream);
}

}  // namespace

const kernel_table kernel_table_of_cuda = {
    .fill = fill,
    .copy = copy,
    .copy_from_host = copy_from_host,
    .copy_to_host = copy_to_host,
    .binary = binary,
    .binary_same_shape = binary_same_shape,
    .binary_scalar = binary_scalar,
    .unary = unary,
    .matmul = matmul,
    .transpose = transpose,
    .sum = sum,
    .sum_axis = sum_axis,
    .randn = randn,
    .host_chunks = nullptr,  // the host cannot touch device memory: `map` refuses
};

}  // namespace cotensor::detail::cuda
