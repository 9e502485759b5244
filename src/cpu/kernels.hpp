#pragma once

// The CPU backend's kernels. Each runs on a backend thread and may split itself across the
// arena with nested oneTBB loops. Results never depend on the number of threads.

#include "cotensor/dtype.hpp"
#include "cotensor/shape.hpp"

#include "kernels/kernel_table.hpp"
#include "support/function_ref.hpp"

#include <cstddef>
#include <cstdint>

namespace cotensor::detail::cpu {

/// The CPU's kernel table (these functions).
extern const kernel_table kernel_table_of_cpu;

/// Calls `f(begin, end)` over `[0, n)` in chunks of about `grain`, in parallel when n > grain.
void parallel_chunks(std::int64_t n,
                     std::int64_t grain,
                     function_ref<void(std::int64_t, std::int64_t)> f);

/// The number of threads the backend's parallel loops may use (at least 1).
int backend_concurrency() noexcept;

/// Calls `f(t)` for every t in `[0, tiles)`, in parallel when tiles > 1.
void parallel_tiles(std::int64_t tiles, function_ref<void(std::int64_t)> f);

/// The grain of the elementwise loops, in elements.
constexpr std::int64_t elementwise_grain = 1 << 15;

// The kernel table's entries (kernel_table.hpp says what each does).
void fill(dtype t, void* out, std::int64_t n, scalar_arg value);
void copy_bytes(const void* in, void* out, std::size_t bytes);
void cast(dtype from, const void* in, dtype to, void* out, std::int64_t n);
void binary(binary_op op,
            dtype t,
            const void* a,
            const shape& a_shape,
            const void* b,
            const shape& b_shape,
            void* out,
            const shape& out_shape);
void binary_same_shape(
    binary_op op, dtype t, const void* a, const void* b, void* out, std::int64_t n);
void binary_scalar(binary_op op,
                   dtype t,
                   const void* a,
                   scalar_arg s,
                   bool scalar_left,
                   void* out,
                   std::int64_t n);
void unary(unary_op op, dtype t, const void* in, void* out, std::int64_t n);
void where(dtype t,
           const void* cond,
           const shape& cond_shape,
           const void* a,
           const shape& a_shape,
           const void* b,
           const shape& b_shape,
           void* out,
           const shape& out_shape);
void matmul(dtype t,
            const void* a,
            const void* b,
            void* c,
            std::int64_t batch,
            std::int64_t m,
            std::int64_t k,
            std::int64_t n,
            std::int64_t a_stride,
            std::int64_t b_stride);
void transpose(dtype t, const void* in, void* out, std::int64_t rows, std::int64_t cols);
void reduce(reduce_op op,
            dtype t,
            const void* in,
            std::int64_t outer,
            std::int64_t extent,
            std::int64_t inner,
            double scale,
            void* out);
void copy_rows(const void* in,
               std::size_t in_stride,
               void* out,
               std::size_t out_stride,
               std::size_t bytes,
               std::int64_t rows);
void index_select(std::size_t item,
                  const void* in,
                  std::int64_t outer,
                  std::int64_t extent,
                  std::int64_t inner,
                  const std::int64_t* index,
                  std::int64_t count,
                  void* out);
void softmax(dtype t, const void* in, void* out, std::int64_t rows, std::int64_t cols, bool log);
void layer_norm(dtype t,
                const void* in,
                const void* weight,
                const void* bias,
                void* out,
                std::int64_t rows,
                std::int64_t cols,
                double eps);
void randn(dtype t, void* out, std::int64_t n, std::uint64_t seed, std::uint64_t stream);

// float32 building blocks of the above.
/// f(in) elementwise over [0, n) on the calling thread; exp, log, tanh and sigmoid within 4 ulp
/// (libmvec, src/cpu/unary.cpp); the others are exact or rounded once from double.
void unary_span(unary_op op, const float* in, float* out, std::int64_t n);
/// c[m, n] = a[m, k] · b[k, n], row-major, SGEMM on tiles.
void sgemm(
    const float* a, const float* b, float* c, std::int64_t m, std::int64_t k, std::int64_t n);
/// The sum of `n` floats, accumulated in double in fixed chunks: deterministic.
double sum(const float* in, std::int64_t n);
/// out[o, i] = scale · Σ_a in[o, a, i] for a tensor viewed as [outer, extent, inner].
void sum_axis(const float* in,
              std::int64_t outer,
              std::int64_t extent,
              std::int64_t inner,
              double scale,
              float* out);
/// Standard normal float32 samples (kernel_table::randn).
void randn_float(float* out, std::int64_t n, std::uint64_t seed, std::uint64_t stream);

}  // namespace cotensor::detail::cpu
