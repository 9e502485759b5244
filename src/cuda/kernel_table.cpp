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
#include <utility>

namespace cotensor::detail::cuda {

cudaStream_t launch_stream() { return launch_here().stream; }

namespace {

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

// Starts a staged copy of `bytes` on this thread's launch: a block of the device's staging pool,
// freed by the launch once the copy has landed (a download's bytes then go to `host_out`, null
// for an upload), and the launch's stream set to the device's upload or download stream,
// ordered after the compute stream (the device memory came from there, cudaMallocAsync, and was
// written there). Null for an empty copy.
staged* start_staged(std::size_t bytes, void* host_out) {
  launch& l = launch_here();
  if (bytes == 0) {
    return nullptr;
  }
  device_context& d = *l.device;
  auto* s = new staged{&d, d.staging().acquire(bytes), host_out, bytes};
  keep_until_done(l, s);  // from here on, freed by the launch whatever happens
  const cudaStream_t stream = host_out == nullptr ? d.upload() : d.download();
  d.order_after_compute(stream);
  l.stream = stream;
  return s;
}

void copy_from_host(const void* host, void* out, std::size_t bytes) {
  if (staged* s = start_staged(bytes, nullptr)) {
    std::memcpy(s->block.data, host, bytes);
    COTENSOR_CUDA_CHECK(
        cudaMemcpyAsync(out, s->block.data, bytes, cudaMemcpyHostToDevice, launch_stream()));
  }
}

void copy_to_host(const void* in, void* host, std::size_t bytes) {
  if (staged* s = start_staged(bytes, host)) {
    COTENSOR_CUDA_CHECK(
        cudaMemcpyAsync(s->block.data, in, bytes, cudaMemcpyDeviceToHost, launch_stream()));
  }
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

void binary(const binary_args& args) {
  const binary_same_shape_args same{.op = args.op,
                                    .t = args.t,
                                    .a = args.a,
                                    .b = args.b,
                                    .out = args.out,
                                    .n = args.out_shape.numel()};
  if (args.a_shape == args.b_shape) {
    binary_same_shape(same);
    return;
  }
  launch_binary(same, layout_for({&args.a_shape, &args.b_shape}, args.out_shape));
}

void where(const where_args& args) {
  launch_where(args, layout_for({&args.cond_shape, &args.a_shape, &args.b_shape}, args.out_shape));
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

void matmul(const matmul_args& args) {
  const std::int64_t batch = args.batch;
  const std::int64_t m = args.m;
  const std::int64_t k = args.k;
  const std::int64_t n = args.n;
  if (m == 0 || n == 0 || batch == 0) {
    return;
  }
  if (k == 0) {
    fill({.t = args.t, .out = args.c, .n = batch * m * n, .value = {}});
    return;
  }
  const std::size_t item = itemsize(args.t);
  for (std::int64_t i = 0; i < batch; ++i) {
    gemm(args.t,
         static_cast<const char*>(args.a) + static_cast<std::size_t>(i * args.a_stride) * item,
         static_cast<const char*>(args.b) + static_cast<std::size_t>(i * args.b_stride) * item,
         static_cast<char*>(args.c) + static_cast<std::size_t>(i * m * n) * item, blas_int(m),
         blas_int(k), blas_int(n));
  }
}

void sum_all(const float* in, std::int64_t n, double scale, float* out) {
  launch& l = launch_here();
  if (n == 0) {
    fill({.t = dtype::float32, .out = out, .n = 1, .value = {}});
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
void reduce(const reduce_args& args) {
  const std::int64_t outer = args.outer;
  const std::int64_t extent = args.extent;
  const std::int64_t inner = args.inner;
  if (args.op == reduce_op::sum && args.t == dtype::float32) {
    const auto* in = static_cast<const float*>(args.in);
    auto* out = static_cast<float*>(args.out);
    if (outer == 1 && inner == 1) {
      sum_all(in, extent, args.scale, out);
      return;
    }
    launch_sum_axis(launch_stream(), in, outer, extent, inner, args.scale, out);
    return;
  }
  if (extent == 0 && args.op == reduce_op::sum) {
    const dtype t = args.t;
    fill({.t = t == dtype::boolean || t == dtype::int32 ? dtype::int64 : t,
          .out = args.out,
          .n = outer * inner,
          .value = {}});
    return;
  }
  launch_reduce(args);
}

void copy_rows(const copy_rows_args& args) {
  if (args.rows == 0 || args.bytes == 0) {
    return;
  }
  COTENSOR_CUDA_CHECK(cudaMemcpy2DAsync(args.out, args.out_stride, args.in, args.in_stride,
                                        args.bytes, static_cast<std::size_t>(args.rows),
                                        cudaMemcpyDeviceToDevice, launch_stream()));
}

// A check of indices that live on the device (index_select's, scatter_rows', paged_attention's):
// the kernels raise a flag, copied into a pinned block and read when the stream has run; a
// raised flag fails the op with std::out_of_range(message).
struct range_check {
  device_context* device;
  staging_pool::block block;
  std::string message;

  static std::exception_ptr finish(void* arg, bool ok) noexcept {
    auto* c = static_cast<range_check*>(arg);
    int bad = 0;
    if (ok) {
      std::memcpy(&bad, c->block.data, sizeof bad);
    }
    std::string message = std::move(c->message);
    c->device->staging().release(c->block);
    delete c;
    if (bad == 0) {
      return nullptr;
    }
    try {
      return std::make_exception_ptr(std::out_of_range(message));
    } catch (...) {
      return std::current_exception();  // std::string's allocation failed
    }
  }
};

// Runs `kernels(flag)` on this thread's launch, `flag` a zeroed int in device memory that they
// raise for an index out of range; the op then fails with std::out_of_range(message).
template <class Kernels>
void with_range_check(std::string message, Kernels kernels) {
  launch& l = launch_here();
  device_context& d = *l.device;
  auto* c = new range_check{&d, d.staging().acquire(sizeof(int)), std::move(message)};
  l.after = {&range_check::finish, c};  // from here on, freed by the launch whatever happens
  int* flag = nullptr;
  COTENSOR_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&flag), sizeof(int), l.stream));
  try {
    COTENSOR_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), l.stream));
    kernels(flag);
    COTENSOR_CUDA_CHECK(
        cudaMemcpyAsync(c->block.data, flag, sizeof(int), cudaMemcpyDeviceToHost, l.stream));
  } catch (...) {
    COTENSOR_CUDA_LOG(cudaFreeAsync(flag, l.stream));
    throw;
  }
  COTENSOR_CUDA_CHECK(cudaFreeAsync(flag, l.stream));
}

void index_select(const index_select_args& args) {
  if (args.outer * args.count * args.inner == 0) {
    return;
  }
  with_range_check("cotensor::index_select: an index out of range [0, " +
                       std::to_string(args.extent) + ")",
                   [&](int* flag) { launch_index_select(args, flag); });
}

// Nothing is written when an index is out of range: the kernels check them all first.
void scatter_rows(const scatter_rows_args& args) {
  if (args.rows == 0 || args.row_bytes == 0) {
    return;
  }
  with_range_check("cotensor::scatter_rows: an index outside [0, " + std::to_string(args.out_rows) +
                       "); nothing written",
                   [&](int* flag) { launch_scatter_rows(args, flag); });
}

void paged_attention(const paged_attention_args& args) {
  if (args.tokens * args.heads * args.head_dim == 0) {
    return;
  }
  with_range_check("cotensor::paged_attention: a row names a sequence outside [0, " +
                       std::to_string(args.sequences) + "), a context outside [1, " +
                       std::to_string(args.table_width * args.block_size) +
                       "] or a block outside [0, " + std::to_string(args.blocks) + ")",
                   [&](int* flag) { launch_paged_attention(args, flag); });
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
    .packed_b_elements = nullptr,  // cuBLAS reads B as it is
    .pack_b = nullptr,
    .matmul_packed = nullptr,
    .transpose = transpose,
    .reduce = reduce,
    .copy_rows = copy_rows,
    .index_select = index_select,
    .softmax = softmax,
    .layer_norm = layer_norm,
    .rms_norm = rms_norm,
    .rope = rope,
    .silu_and_mul = silu_and_mul,
    .scatter_rows = scatter_rows,
    .paged_attention = paged_attention,
    .split_into_cache = nullptr,  // slices, rotary_embedding and scatter_rows instead
    .randn = randn,
    .host_chunks = nullptr,  // the host cannot touch device memory: `map` refuses
};

}  // namespace cotensor::detail::cuda
