#pragma once

// cotensor's bfloat16 GEMM on AMX tiles (cpu/gemm_dispatch.hpp picks it where the CPU has
// AMX-BF16 and the kernel lets the process use the tiles).
//
// c = a · b for row-major bfloat16, accumulated in float32 by tdpbf16ps and rounded once, as
// bfloat16_t(float) rounds. A block of 32 rows x 32 columns of C is four tiles of 16 x 16 float32
// sums; each tdpbf16ps adds 16 rows of A times 32 steps of k (16 pairs) times 16 columns of B.
// A is read in place in blocks of 32 rows, 32 k a chunk (a last chunk past k, a last block of
// fewer rows and the few rows of a decode step packed, zero padded past m and k); B is in the
// AVX-512 kernels' panels of 64 columns (gemm_avx512.hpp), whose rows are the pairs that
// tdpbf16ps reads, zero padded to a whole number of tiles.
//
// Every element of C is the sum over k's chunks of 32 in order from the first, each chunk one
// tdpbf16ps, whatever m, the blocking, the path (B packed here, laid out beforehand or packed
// panel by panel for few rows) and the number of workers: results are bit-identical whatever the
// thread count, and a row's bits never depend on the rows around it (batch invariance). They are
// not the AVX-512 BF16 kernel's bits: tdpbf16ps adds a chunk's 32 products in its own order and
// precision, within float32 accumulation's bound (docs/dtypes.md). tdpbf16ps treats denormal
// inputs and results as zero.

#include "cotensor/dtype.hpp"

#include <cstdint>

namespace cotensor::detail::cpu {

/// c[m, n] = a[m, k] · b[k, n], row-major bfloat16, in parallel on the backend's workers.
/// Requires cpu_has_amx_bf16().
void bf16_gemm_amx(const bfloat16_t* a,
                   const bfloat16_t* b,
                   bfloat16_t* c,
                   std::int64_t m,
                   std::int64_t k,
                   std::int64_t n);

/// c[m, n] = a[m, k] · B for bfloat16 B [k, n] laid out by pack_b_avx512, plus `bias` [n] (when
/// set, k > 0) on each row as operator+ adds it to the rounded product; the bits of
/// bf16_gemm_amx on B. In parallel on the backend's workers. Requires cpu_has_amx_bf16().
void gemm_packed_amx(const bfloat16_t* a,
                     const void* packed,
                     bfloat16_t* c,
                     std::int64_t m,
                     std::int64_t k,
                     std::int64_t n,
                     const bfloat16_t* bias = nullptr);

}  // namespace cotensor::detail::cpu
