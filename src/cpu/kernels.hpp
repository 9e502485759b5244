#pragma once

// The CPU backend's kernels. Each runs on a backend thread and may split itself across the
// arena with nested oneTBB loops. Results never depend on the number of threads.

#include "cotensor/shape.hpp"

#include "function_ref.hpp"
#include "kernel_table.hpp"

#include <cstdint>

namespace cotensor::detail::cpu {

/// Once per backend: switches OpenBLAS's own threading off (oneTBB schedules the GEMM tiles).
void init_blas();

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

void fill(float* out, std::int64_t n, float value);
void copy(const float* in, float* out, std::int64_t n);
/// out = a ⊗ b with NumPy broadcasting; `out_shape` is the broadcast shape. `out` may alias `a`
/// when `a_shape == out_shape`, or `b` when `b_shape == out_shape`.
void binary(binary_op op,
            const float* a,
            const shape& a_shape,
            const float* b,
            const shape& b_shape,
            float* out,
            const shape& out_shape);
/// out = a ⊗ b elementwise over `n` elements of equal shape; `out` may alias `a` or `b`.
void binary_same_shape(binary_op op, const float* a, const float* b, float* out, std::int64_t n);
/// out = a ⊗ s (or s ⊗ a when `scalar_left`), elementwise; `out` may alias `a`.
void binary_scalar(
    binary_op op, const float* a, float s, bool scalar_left, float* out, std::int64_t n);
/// out = f(in) elementwise, in parallel for large `n`; `out` may alias `in`. exp, log, tanh and
/// sigmoid are within 4 ulp (libmvec, src/cpu/unary.cpp); the others are exact.
void unary(unary_op op, const float* in, float* out, std::int64_t n);
/// unary() over [0, n) on the calling thread.
void unary_span(unary_op op, const float* in, float* out, std::int64_t n);

/// c[m, n] = a[m, k] · b[k, n], row-major.
void matmul(
    const float* a, const float* b, float* c, std::int64_t m, std::int64_t k, std::int64_t n);
/// out[cols, rows] = in[rows, cols]ᵀ.
void transpose(const float* in, float* out, std::int64_t rows, std::int64_t cols);
/// The sum of `n` floats, accumulated in double in fixed chunks: deterministic.
double sum(const float* in, std::int64_t n);
/// out[o, i] = scale · Σ_a in[o, a, i] for a tensor viewed as [outer, extent, inner].
void sum_axis(const float* in,
              std::int64_t outer,
              std::int64_t extent,
              std::int64_t inner,
              double scale,
              float* out);
/// Standard normal samples: element i from Philox-4x32-10 block i/4 of stream `stream` under
/// key `seed`, through Box-Muller.
void randn(float* out, std::int64_t n, std::uint64_t seed, std::uint64_t stream);

}  // namespace cotensor::detail::cpu
