#pragma once

// The CPU backend's kernels. Each runs on a backend thread and may split itself across the
// arena with nested oneTBB loops. Results never depend on the number of threads.

#include "cotensor/dtype.hpp"

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

/// `p` advanced by `elements` items of `item` bytes.
inline const void* offset_bytes(const void* p, std::int64_t elements, std::size_t item) {
  return static_cast<const char*>(p) + elements * static_cast<std::int64_t>(item);
}
inline void* offset_bytes(void* p, std::int64_t elements, std::size_t item) {
  return static_cast<char*>(p) + elements * static_cast<std::int64_t>(item);
}

// The kernel table's entries, each against its argument struct (kernel_table.hpp says what
// each does).
void fill(const fill_args& args);
void copy_bytes(const void* in, void* out, std::size_t bytes);
void cast(const cast_args& args);
void binary(const binary_args& args);
void binary_same_shape(const binary_same_shape_args& args);
void binary_scalar(const binary_scalar_args& args);
void unary(const unary_args& args);
void where(const where_args& args);
void matmul(const matmul_args& args);
std::int64_t packed_b_elements(dtype t, std::int64_t k, std::int64_t n);
void pack_b(const pack_b_args& args);
void matmul_packed(const matmul_args& args);
void transpose(const transpose_args& args);
void reduce(const reduce_args& args);
void copy_rows(const copy_rows_args& args);
void index_select(const index_select_args& args);
void softmax(const softmax_args& args);
void layer_norm(const layer_norm_args& args);
void rms_norm(const rms_norm_args& args);
void rope(const rope_args& args);
void silu_and_mul(const silu_and_mul_args& args);
void scatter_rows(const scatter_rows_args& args);
void paged_attention(const paged_attention_args& args);
void split_into_cache(const split_into_cache_args& args);
void randn(const randn_args& args);

// float32 building blocks of the above.
/// f(in) elementwise over [0, n) on the calling thread; exp, log, tanh and sigmoid within 4 ulp
/// (libmvec, src/cpu/unary.cpp); the others are exact or rounded once from double.
void unary_span(unary_op op, const float* in, float* out, std::int64_t n);
/// gelu's tanh form in float for float16 and bfloat16 results, on the calling thread:
/// x·σ(t), t = 2√(2/π)·(x + 0.044715·x³), as x / (1 + e) for t ≥ 0 and x·e / (1 + e) below,
/// e = exp(−|t|) (so no overflow for x ≪ 0), on libmvec's float exp (within 4 ulp; libm's
/// without libmvec). Within a few float ulps of the double form unary_span computes for
/// float32, so its rounding to a half is that of the double form but where the float lies
/// within those ulps of a rounding point; about twice as fast.
void gelu_tanh_half_span(const float* in, float* out, std::int64_t n);
/// c[m, n] = a[m, k] · b[k, n], row-major, SGEMM on tiles.
void sgemm(
    const float* a, const float* b, float* c, std::int64_t m, std::int64_t k, std::int64_t n);
/// Standard normal float32 samples (kernel_table::randn).
void randn_float(float* out, std::int64_t n, std::uint64_t seed, std::uint64_t stream);

}  // namespace cotensor::detail::cpu
