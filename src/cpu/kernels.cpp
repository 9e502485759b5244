#include "cpu/kernels.hpp"

#include "cotensor/config.hpp"

#if COTENSOR_STD_THREADS
#include "cpu/worker_pool.hpp"
#else
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace cotensor::detail::cpu {
namespace {

template <class F>
void for_chunks(std::int64_t n, std::int64_t grain, F&& f) {
  if (n <= grain) {
    if (n > 0) {
      f(std::int64_t{0}, n);
    }
    return;
  }
#if COTENSOR_STD_THREADS
  worker_pool::parallel_for((n + grain - 1) / grain,
                            [&](std::int64_t c) { f(c * grain, std::min(n, (c + 1) * grain)); });
#else
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, n, grain),
                    [&](const tbb::blocked_range<std::int64_t>& r) { f(r.begin(), r.end()); });
#endif
}

}  // namespace

void parallel_chunks(std::int64_t n,
                     std::int64_t grain,
                     function_ref<void(std::int64_t, std::int64_t)> f) {
  for_chunks(n, grain, f);
}

int backend_concurrency() noexcept {
#if COTENSOR_STD_THREADS
  return worker_pool::concurrency();
#else
  return std::max(1, tbb::this_task_arena::max_concurrency());
#endif
}

void parallel_tiles(std::int64_t tiles, function_ref<void(std::int64_t)> f) {
  if (tiles == 1) {
    f(0);
    return;
  }
#if COTENSOR_STD_THREADS
  worker_pool::parallel_for(tiles, [f](std::int64_t t) { f(t); });
#else
  tbb::parallel_for(std::int64_t{0}, tiles, [&](std::int64_t t) { f(t); });
#endif
}

void copy_bytes(const void* in, void* out, std::size_t bytes) {
  constexpr std::int64_t grain = 1 << 17;
  for_chunks(static_cast<std::int64_t>(bytes), grain, [&](std::int64_t lo, std::int64_t hi) {
    std::memcpy(static_cast<char*>(out) + lo, static_cast<const char*>(in) + lo,
                static_cast<std::size_t>(hi - lo));
  });
}

namespace {

template <class T>
void transpose_typed(const T* in, T* out, std::int64_t rows, std::int64_t cols) {
  constexpr std::int64_t block = 32;
  const std::int64_t row_blocks = (rows + block - 1) / block;
  for_chunks(row_blocks, std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(cols, 1)),
             [&](std::int64_t lo, std::int64_t hi) {
               for (std::int64_t rb = lo; rb < hi; ++rb) {
                 const std::int64_t r_end = std::min(rows, (rb + 1) * block);
                 for (std::int64_t c0 = 0; c0 < cols; c0 += block) {
                   const std::int64_t c_end = std::min(cols, c0 + block);
                   for (std::int64_t r = rb * block; r < r_end; ++r) {
                     for (std::int64_t c = c0; c < c_end; ++c) {
                       out[c * rows + r] = in[r * cols + c];
                     }
                   }
                 }
               }
             });
}

}  // namespace

// By element size: a transpose moves bytes.
void transpose(const transpose_args& args) {
  const std::int64_t rows = args.rows;
  const std::int64_t cols = args.cols;
  switch (itemsize(args.t)) {
  case 1:
    return transpose_typed(static_cast<const std::uint8_t*>(args.in),
                           static_cast<std::uint8_t*>(args.out), rows, cols);
  case 2:
    return transpose_typed(static_cast<const std::uint16_t*>(args.in),
                           static_cast<std::uint16_t*>(args.out), rows, cols);
  case 4:
    return transpose_typed(static_cast<const std::uint32_t*>(args.in),
                           static_cast<std::uint32_t*>(args.out), rows, cols);
  default:
    return transpose_typed(static_cast<const std::uint64_t*>(args.in),
                           static_cast<std::uint64_t*>(args.out), rows, cols);
  }
}

constinit const kernel_table kernel_table_of_cpu{
    .elementwise_dtypes = all_dtypes,
    .matmul_dtypes = static_cast<dtype_set>(all_dtypes & ~dtype_bit(dtype::boolean)),
    .randn_dtypes = static_cast<dtype_set>(dtype_bit(dtype::float16) | dtype_bit(dtype::bfloat16) |
                                           dtype_bit(dtype::float32) | dtype_bit(dtype::float64)),
    .fill = fill,
    .copy = copy_bytes,
    .copy_from_host = copy_bytes,  // host memory is the CPU's
    .copy_to_host = nullptr,       // its `copy` does it
    .cast = cast,
    .binary = binary,
    .binary_same_shape = binary_same_shape,
    .binary_scalar = binary_scalar,
    .unary = unary,
    .where = where,
    .matmul = matmul,
    .packed_b_elements = packed_b_elements,
    .pack_b = pack_b,
    .matmul_packed = matmul_packed,
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
    .split_into_cache = split_into_cache,
    .randn = randn,
    .host_chunks = parallel_chunks,
};

}  // namespace cotensor::detail::cpu
