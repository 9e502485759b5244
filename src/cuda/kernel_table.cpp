// The CUDA device's kernel table: each entry enqueues its work on the stream of the launch in
// progress on this thread (device_context.hpp) and returns; the engine ends the op when the
// stream has done it. Host↔device copies go through pinned staging blocks on the copy
// streams, ordered after the compute stream's work by an event.

#include "cuda/blas.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/cuda_error.hpp"
#include "cuda/device_context.hpp"
#include "cuda/kernels.hpp"
#include "cuda/typed_kernels.hpp"

#include <cstring>
#include <initializer_list>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>

namespace cotensor::detail::cuda {
namespace {

void fill(dtype t, void* out, std::int64_t n, scalar_arg value) {
  launch_fill(launch_here().stream, t, out, n, value);
}

void cast(dtype from, const void* in, dtype to, void* out, std::int64_t n) {
  launch& l = launch_here();
  if (from == to) {
    if (n > 0) {
      COTENSOR_CUDA_CHECK(cudaMemcpyAsync(out, in, static_cast<std::size_t>(n) * itemsize(to),
                                          cudaMemcpyDeviceToDevice, l.stream));
    }
    return;
  }
  launch_cast(l.stream, from, in, to, out, n);
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

// The output's extents and each operand's strides in its index space (0 where broadcast).
elementwise_layout layout_for(std::initializer_list<const shape*> operands, const shape& out) {
  const std::size_t rank = out.rank();
  if (rank > static_cast<std::size_t>(elementwise_layout::max_rank)) {
    throw std::invalid_argument("cotensor: broadcasting over more than " +
                                std::to_string(elementwise_layout::max_rank) +
                                " dimensions on a GPU (got " + std::to_string(rank) + ")");
  }
  elementwise_layout l;
  l.rank = static_cast<int>(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    l.extent[d] = out[d];
  }
  int k = 0;
  for (const shape* s : operands) {
    std::int64_t step = 1;
    for (std::size_t d = 0; d < s->rank(); ++d) {
      const std::size_t si = s->rank() - 1 - d;
      const std::size_t oi = rank - 1 - d;
      l.stride[k][oi] = (*s)[si] == 1 ? 0 : step;
      step *= (*s)[si];
    }
    ++k;
  }
  return l;
}

void binary(binary_op op,
            dtype t,
            const void* a,
            const shape& a_shape,
            const void* b,
            const shape& b_shape,
            void* out,
            const shape& out_shape) {
  launch& l = launch_here();
  const std::int64_t n = out_shape.numel();
  if (a_shape == b_shape) {
    launch_binary(l.stream, op, t, a, b, out, nullptr, n);
    return;
  }
  const elementwise_layout layout = layout_for({&a_shape, &b_shape}, out_shape);
  launch_binary(l.stream, op, t, a, b, out, &layout, n);
}

void binary_same_shape(
    binary_op op, dtype t, const void* a, const void* b, void* out, std::int64_t n) {
  launch_binary(launch_here().stream, op, t, a, b, out, nullptr, n);
}

void binary_scalar(binary_op op,
                   dtype t,
                   const void* a,
                   scalar_arg s,
                   bool scalar_left,
                   void* out,
                   std::int64_t n) {
  launch_binary_scalar(launch_here().stream, op, t, a, s, scalar_left, out, n);
}

void unary(unary_op op, dtype t, const void* in, void* out, std::int64_t n) {
  launch_unary(launch_here().stream, op, t, in, out, n);
}

void where(dtype t,
           const void* cond,
           const shape& cond_shape,
           const void* a,
           const shape& a_shape,
           const void* b,
           const shape& b_shape,
           void* out,
           const shape& out_shape) {
  launch_where(launch_here().stream, t, cond, a, b, out,
               layout_for({&cond_shape, &a_shape, &b_shape}, out_shape), out_shape.numel());
}

int blas_int(std::int64_t v) {
  if (v > std::numeric_limits<int>::max()) {
    throw std::invalid_argument("cotensor::matmul: a dimension over 2^31 - 1 on a GPU");
  }
  return static_cast<int>(v);
}

// One product c = a · b of `t` through cuBLAS. Row-major c = a · b is column-major
// cᵀ = bᵀ · aᵀ: the operands swapped, nothing transposed.
void gemm(dtype t, const void* a, const void* b, void* c, int m, int k, int n) {
  launch& l = launch_here();
  const blas_api& api = cublas();
  cublasHandle_t h = l.device->blas();
  switch (t) {
  case dtype::float32: {
    const float one = 1.0F;
    const float zero = 0.0F;
    COTENSOR_CUBLAS_CHECK(api.sgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one,
                                    static_cast<const float*>(b), n, static_cast<const float*>(a),
                                    k, &zero, static_cast<float*>(c), n));
    return;
  }
  case dtype::float64: {
    const double one = 1.0;
    const double zero = 0.0;
    COTENSOR_CUBLAS_CHECK(api.dgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one,
                                    static_cast<const double*>(b), n, static_cast<const double*>(a),
                                    k, &zero, static_cast<double*>(c), n));
    return;
  }
  default: {
    // float16 and bfloat16: products accumulated in float32, rounded once into c.
    const cudaDataType_t type = t == dtype::float16 ? CUDA_R_16F : CUDA_R_16BF;
    const float one = 1.0F;
    const float zero = 0.0F;
    COTENSOR_CUBLAS_CHECK(api.gemm_ex(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b, type, n, a,
                                      type, k, &zero, c, type, n, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT));
    return;
  }
  }
}

void matmul(dtype t,
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
    launch_fill(l.stream, t, pc, batch * m * n, scalar_arg{});
    return;
  }
  const std::size_t item = itemsize(t);
  for (std::int64_t i = 0; i < batch; ++i) {
    gemm(t, static_cast<const char*>(pa) + static_cast<std::size_t>(i * a_stride) * item,
         static_cast<const char*>(pb) + static_cast<std::size_t>(i * b_stride) * item,
         static_cast<char*>(pc) + static_cast<std::size_t>(i * m * n) * item, blas_int(m),
         blas_int(k), blas_int(n));
  }
}

void transpose(dtype t, const void* in, void* out, std::int64_t rows, std::int64_t cols) {
  launch_transpose_bytes(launch_here().stream, itemsize(t), in, out, rows, cols);
}

void sum_all(const float* in, std::int64_t n, double scale, float* out) {
  launch& l = launch_here();
  if (n == 0) {
    launch_fill(l.stream, dtype::float32, out, 1, scalar_arg{});
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

// float32 sums take the tuned paths (CUB over a whole tensor, coalesced axis sums); every
// other reduction the generic kernel of reduce.cu.
void reduce(reduce_op op,
            dtype t,
            const void* in,
            std::int64_t outer,
            std::int64_t extent,
            std::int64_t inner,
            double scale,
            void* out) {
  launch& l = launch_here();
  if (op == reduce_op::sum && t == dtype::float32) {
    if (outer == 1 && inner == 1) {
      sum_all(static_cast<const float*>(in), extent, scale, static_cast<float*>(out));
      return;
    }
    launch_sum_axis(l.stream, static_cast<const float*>(in), outer, extent, inner, scale,
                    static_cast<float*>(out));
    return;
  }
  if (extent == 0 && op == reduce_op::sum) {
    launch_fill(l.stream, t == dtype::boolean || t == dtype::int32 ? dtype::int64 : t, out,
                outer * inner, scalar_arg{});
    return;
  }
  launch_reduce(l.stream, op, t, in, outer, extent, inner, scale, out);
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

// index_select's check of its indices, which live on the device: the kernel raises a flag,
// copied into a pinned block and read when the stream has run.
struct index_check {
  device_context* device;
  staging_pool::block block;
  std::int64_t extent;

  static std::exception_ptr finish(void* arg, bool ok) noexcept {
    auto* c = static_cast<index_check*>(arg);
    int bad = 0;
    if (ok) {
      std::memcpy(&bad, c->block.data, sizeof bad);
    }
    const std::int64_t extent = c->extent;
    c->device->staging().release(c->block);
    delete c;
    if (bad == 0) {
      return nullptr;
    }
    try {
      return std::make_exception_ptr(std::out_of_range(
          "cotensor::index_select: an index out of range [0, " + std::to_string(extent) + ")"));
    } catch (...) {
      return std::current_exception();  // std::string's allocation failed
    }
  }
};

void index_select(std::size_t item,
                  const void* in,
                  std::int64_t outer,
                  std::int64_t extent,
                  std::int64_t inner,
                  const std::int64_t* index,
                  std::int64_t count,
                  void* out) {
  launch& l = launch_here();
  if (outer * count * inner == 0) {
    return;
  }
  device_context& d = *l.device;
  auto* c = new index_check{&d, d.staging().acquire(sizeof(int)), extent};
  l.after = {&index_check::finish, c};  // from here on, freed by the launch whatever happens
  int* flag = nullptr;
  COTENSOR_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&flag), sizeof(int), l.stream));
  try {
    COTENSOR_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), l.stream));
    launch_index_select(l.stream, item, in, outer, extent, inner, index, count, out, flag);
    COTENSOR_CUDA_CHECK(
        cudaMemcpyAsync(c->block.data, flag, sizeof(int), cudaMemcpyDeviceToHost, l.stream));
  } catch (...) {
    COTENSOR_CUDA_LOG(cudaFreeAsync(flag, l.stream));
    throw;
  }
  COTENSOR_CUDA_CHECK(cudaFreeAsync(flag, l.stream));
}

void softmax(dtype t, const void* in, void* out, std::int64_t rows, std::int64_t cols, bool log) {
  launch_softmax(launch_here().stream, t, in, out, rows, cols, log);
}

void layer_norm(dtype t,
                const void* in,
                const void* weight,
                const void* bias,
                void* out,
                std::int64_t rows,
                std::int64_t cols,
                double eps) {
  launch_layer_norm(launch_here().stream, t, in, weight, bias, out, rows, cols, eps);
}

void randn(dtype t, void* out, std::int64_t n, std::uint64_t seed, std::uint64_t stream) {
  launch_randn_typed(launch_here().stream, t, out, n, seed, stream);
}

}  // namespace

const kernel_table kernel_table_of_cuda = {
    .elementwise_dtypes = all_dtypes,
    .matmul_dtypes = dtype_bit(dtype::float16) | dtype_bit(dtype::bfloat16) |
                     dtype_bit(dtype::float32) | dtype_bit(dtype::float64),
    .randn_dtypes = dtype_bit(dtype::float16) | dtype_bit(dtype::bfloat16) |
                    dtype_bit(dtype::float32) | dtype_bit(dtype::float64),
    .fill = fill,
    .copy = copy,
    .copy_from_host = copy_from_host,
    .copy_to_host = copy_to_host,
    .cast = cast,
    .binary = binary,
    .binary_same_shape = binary_same_shape,
    .binary_scalar = binary_scalar,
    .unary = unary,
    .where = where,
    .matmul = matmul,
    .transpose = transpose,
    .reduce = reduce,
    .copy_rows = copy_rows,
    .index_select = index_select,
    .softmax = softmax,
    .layer_norm = layer_norm,
    .randn = randn,
    .host_chunks = nullptr,  // the host cannot touch device memory: `map` refuses
};

}  // namespace cotensor::detail::cuda
