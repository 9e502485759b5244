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

// Today's GPU kernels take float32 alone (elementwise_dtypes below): the frontend refuses other
// dtypes at the call, so the casts here are to the one type that can arrive.
const float* f32(const void* p) { return static_cast<const float*>(p); }
float* f32(void* p) { return static_cast<float*>(p); }

void fill(dtype, void* out, std::int64_t n, scalar_arg value) {
  launch_fill(launch_here().stream, f32(out), n, static_cast<float>(value.f));
}

void cast(dtype, const void* in, dtype, void* out, std::int64_t n) {
  // float32 to float32: a copy on the stream.
  launch& l = launch_here();
  if (n > 0) {
    COTENSOR_CUDA_CHECK(cudaMemcpyAsync(out, in, static_cast<std::size_t>(n) * sizeof(float),
                                        cudaMemcpyDeviceToDevice, l.stream));
  }
}

// Same device, or from another device (after its writer: order_after_writers_elsewhere), as a
// peer copy: memory from a device's pool is not mapped for its peers, so the driver must stage
// it when peer access is off, which cudaMemcpyPeerAsync does.
void copy(const void* in, void* out, std::size_t bytes) {
  launch& l = launch_here();
  if (bytes == 0) {
    return;
  }
  cudaPointerAttributes from{};
  COTENSOR_CUDA_CHECK(cudaPointerGetAttributes(&from, in));
  const int to = l.device->index();
  if (from.device == to) {
    COTENSOR_CUDA_CHECK(cudaMemcpyAsync(out, in, bytes, cudaMemcpyDeviceToDevice, l.stream));
    return;
  }
  COTENSOR_CUDA_CHECK(cudaMemcpyPeerAsync(out, to, in, from.device, bytes, l.stream));
}

// A staged copy's block and, for a download, where its bytes go when the copy has landed.
struct staged {
  device_context* device;
  staging_pool::block block;
  void* host_out;  // null for an upload
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

void copy_from_host(const void* host, void* out, std::size_t bytes) {
  launch& l = launch_here();
  if (bytes == 0) {
    return;
  }
  device_context& d = *l.device;
  auto* s = new staged{&d, d.staging().acquire(bytes), nullptr, bytes};
  keep_until_done(l, s);  // from here on, freed by the launch whatever happens
  std::memcpy(s->block.data, host, bytes);
  // The destination's memory came from the compute stream (cudaMallocAsync): order after it.
  d.order_after_compute(d.upload());
  l.stream = d.upload();
  COTENSOR_CUDA_CHECK(cudaMemcpyAsync(out, s->block.data, bytes, cudaMemcpyHostToDevice, l.stream));
}

void copy_to_host(const void* in, void* host, std::size_t bytes) {
  launch& l = launch_here();
  if (bytes == 0) {
    return;
  }
  device_context& d = *l.device;
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
            dtype,
            const void* a,
            const shape& a_shape,
            const void* b,
            const shape& b_shape,
            void* out,
            const shape& out_shape) {
  launch& l = launch_here();
  const std::int64_t n = out_shape.numel();
  if (a_shape == b_shape) {
    launch_binary_same_shape(l.stream, op, f32(a), f32(b), f32(out), n);
    return;
  }
  launch_binary(l.stream, op, f32(a), f32(b), f32(out), layout_for(a_shape, b_shape, out_shape), n);
}

void binary_same_shape(
    binary_op op, dtype, const void* a, const void* b, void* out, std::int64_t n) {
  launch_binary_same_shape(launch_here().stream, op, f32(a), f32(b), f32(out), n);
}

void binary_scalar(
    binary_op op, dtype, const void* a, scalar_arg s, bool scalar_left, void* out, std::int64_t n) {
  launch_binary_scalar(launch_here().stream, op, f32(a), static_cast<float>(s.f), scalar_left,
                       f32(out), n);
}

void unary(unary_op op, dtype, const void* in, void* out, std::int64_t n) {
  launch_unary(launch_here().stream, op, f32(in), f32(out), n);
}

int blas_int(std::int64_t v) {
  if (v > std::numeric_limits<int>::max()) {
    throw std::invalid_argument("cotensor::matmul: a dimension over 2^31 - 1 on a GPU");
  }
  return static_cast<int>(v);
}

// Row-major c = a · b is column-major cᵀ = bᵀ · aᵀ: the operands swapped, nothing transposed.
void matmul(dtype,
            const void* pa,
            const void* pb,
            void* pc,
            std::int64_t batch,
            std::int64_t m,
            std::int64_t k,
            std::int64_t n,
            std::int64_t a_stride,
            std::int64_t b_stride) {
  launch& l = launch_here();
  if (m == 0 || n == 0 || batch == 0) {
    return;
  }
  if (k == 0) {
    launch_fill(l.stream, f32(pc), batch * m * n, 0.0F);
    return;
  }
  const float one = 1.0F;
  const float zero = 0.0F;
  for (std::int64_t i = 0; i < batch; ++i) {
    const float* a = f32(pa) + i * a_stride;
    const float* b = f32(pb) + i * b_stride;
    float* c = f32(pc) + i * m * n;
    COTENSOR_CUBLAS_CHECK(cublas().sgemm(l.device->blas(), CUBLAS_OP_N, CUBLAS_OP_N, blas_int(n),
                                         blas_int(m), blas_int(k), &one, b, blas_int(n), a,
                                         blas_int(k), &zero, c, blas_int(n)));
  }
}

void transpose(dtype, const void* in, void* out, std::int64_t rows, std::int64_t cols) {
  launch_transpose(launch_here().stream, f32(in), f32(out), rows, cols);
}

void sum_all(const float* in, std::int64_t n, double scale, float* out) {
  launch& l = launch_here();
  if (n == 0) {
    launch_fill(l.stream, out, 1, 0.0F);
    return;
  }
  const std::size_t bytes = sum_scratch_bytes(n);
  void* scratch = nullptr;
  COTENSOR_CUDA_CHECK(cudaMallocAsync(&scratch, bytes, l.stream));
  try {
    launch_sum(l.stream, in, n, 1.0 / scale, out, scratch, bytes);
  } catch (...) {
    COTENSOR_CUDA_LOG(cudaFreeAsync(scratch, l.stream));
    throw;
  }
  COTENSOR_CUDA_CHECK(cudaFreeAsync(scratch, l.stream));  // stream-ordered: after the sum
}

// Sums only, today (max, min, argmax and argmin are not yet GPU kernels).
void reduce(reduce_op op,
            dtype,
            const void* in,
            std::int64_t outer,
            std::int64_t extent,
            std::int64_t inner,
            double scale,
            void* out) {
  if (op != reduce_op::sum) {
    throw std::invalid_argument("cotensor: max, min, argmax and argmin are not implemented on a "
                                "GPU yet");
  }
  if (outer == 1 && inner == 1) {
    sum_all(f32(in), extent, scale, f32(out));
    return;
  }
  launch_sum_axis(launch_here().stream, f32(in), outer, extent, inner, scale, f32(out));
}

void copy_rows(const void* in,
               std::size_t in_stride,
               void* out,
               std::size_t out_stride,
               std::size_t bytes,
               std::int64_t rows) {
  if (rows == 0 || bytes == 0) {
    return;
  }
  COTENSOR_CUDA_CHECK(cudaMemcpy2DAsync(out, out_stride, in, in_stride, bytes,
                                        static_cast<std::size_t>(rows), cudaMemcpyDeviceToDevice,
                                        launch_here().stream));
}

void randn(dtype, void* out, std::int64_t n, std::uint64_t seed, std::uint64_t stream) {
  launch_randn(launch_here().stream, f32(out), n, seed, stream);
}

}  // namespace

const kernel_table kernel_table_of_cuda = {
    .elementwise_dtypes = dtype_bit(dtype::float32),
    .matmul_dtypes = dtype_bit(dtype::float32),
    .randn_dtypes = dtype_bit(dtype::float32),
    .fill = fill,
    .copy = copy,
    .copy_from_host = copy_from_host,
    .copy_to_host = copy_to_host,
    .cast = cast,
    .binary = binary,
    .binary_same_shape = binary_same_shape,
    .binary_scalar = binary_scalar,
    .unary = unary,
    .where = nullptr,
    .matmul = matmul,
    .transpose = transpose,
    .reduce = reduce,
    .copy_rows = copy_rows,
    .index_select = nullptr,
    .softmax = nullptr,
    .layer_norm = nullptr,
    .randn = randn,
    .host_chunks = nullptr,  // the host cannot touch device memory: `map` refuses
};

}  // namespace cotensor::detail::cuda
