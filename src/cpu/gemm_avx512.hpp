#pragma once

// cotensor's own GEMMs for AVX-512 (cpu/gemm_dispatch.hpp picks them or the library paths).
//
// - float32: vfmadd231ps, a 6 x 64 register tile; against OpenBLAS SGEMM on tiles.
// - bfloat16 with float32 accumulation: vdpbf16ps (AVX-512 BF16), the same tile over pairs
//   along k; against the converting path (operands to float32, SGEMM, result rounded once).
// - bfloat16 on float32 multiply-adds (any AVX-512): the same tile over the same pairs, each
//   split into its two floats by a shift and a mask and added by two vfmadd231ps, for CPUs whose
//   vdpbf16ps runs at half their FMAs' rate, or that have none.
//
// All three run one driver (GotoBLAS's loops): B packed once per GEMM into panels of 64 columns,
// by the workers that first reach each column tile, and shared; A read in place (a last panel of
// fewer rows packed); tiles of up to 96 rows x 256 columns of C taken from a shared cursor by
// the backend's workers, smaller as the work left shrinks so that the workers end together; k
// walked in blocks of 384 steps (a last one of up to 128 more joined to the one before) with the
// float32 partial sums of a tile in a worker's scratch, the last block's sums rounded straight
// into C.
// The blocks and their order along k do not depend on the number of workers, so results are
// bit-identical whatever the thread count. Up to 64 rows (a decode step's products), B is read in
// place, never packed: a worker runs every group of 6 rows over its tile of columns, the tile's
// part of B in its L2 cache after the first group; products of at most 8192
// multiply-adds run so on the calling thread. Every path computes an element of C with the same
// instructions in the same k order, so a row's result does not depend on the other rows (batch
// invariance, which the language models' continuous batching relies on). Scratch comes from the
// pooled host allocator, never the global heap.
//
// vdpbf16ps treats denormal inputs as zero and rounds each of its two additions to nearest
// even: products of bfloat16 are exact in float32, so an element of C is the float32 sum of
// pair sums in k order, rounded once to bfloat16 as bfloat16_t(float) rounds.

#include "cotensor/dtype.hpp"

#include <cstdint>

namespace cotensor::detail::cpu {

/// c[m, n] = a[m, k] · b[k, n], row-major float32, in parallel on the backend's workers.
/// Requires cpu_has_avx512().
void sgemm_avx512(
    const float* a, const float* b, float* c, std::int64_t m, std::int64_t k, std::int64_t n);

/// c[m, n] = a[m, k] · b[k, n], row-major bfloat16, accumulated in float32 by vdpbf16ps and
/// rounded once; in parallel on the backend's workers. Requires cpu_has_avx512_bf16().
void bf16_gemm_avx512(const bfloat16_t* a,
                      const bfloat16_t* b,
                      bfloat16_t* c,
                      std::int64_t m,
                      std::int64_t k,
                      std::int64_t n);

/// c[m, n] = a[m, k] · b[k, n], row-major bfloat16, each pair of bfloat16 along k split into
/// floats and added by vfmadd231ps in k order: the float32 kernel's sums of the converted
/// operands, rounded once, so the bits of converting both to float32, sgemm_avx512 and rounding
/// (but for the sign of a sum of exactly zero from underflowing products when k is odd); in
/// parallel on the backend's workers. Requires cpu_has_avx512().
void bf16_gemm_avx512_fma(const bfloat16_t* a,
                          const bfloat16_t* b,
                          bfloat16_t* c,
                          std::int64_t m,
                          std::int64_t k,
                          std::int64_t n);

/// B [k, n] (float32 or bfloat16) laid out once for
/// gemm_packed_avx512, as the GEMMs above pack it for each call: panels of 64 columns, zero
/// padded; the number of elements of B's dtype it takes (0 for an empty B). Weights multiplied
/// at every decode step are packed once so: each worker then reads its columns of B as long
/// contiguous runs, where B in place is a strip of a few hundred bytes per row.
std::int64_t packed_b_elements_avx512(dtype t, std::int64_t k, std::int64_t n);
/// packed[0, packed_b_elements_avx512(t, k, n)) = B [k, n] laid out so, in parallel.
void pack_b_avx512(dtype t, const void* b, void* packed, std::int64_t k, std::int64_t n);
/// c[m, n] = a[m, k] · B for B packed by pack_b_avx512: the same bits as sgemm_avx512 and
/// bf16_gemm_avx512 on B, whatever m (the tiled path for every m, its column tiles narrower for
/// few rows; 2 to 32 rows, A's rows in place, in groups of 4 over blocks of B), in parallel on the
/// backend's workers. A `bias` [n] of t (k > 0) is added to each row as the tiles are stored: the
/// bits of the product plus the bias by operator+.
void gemm_packed_avx512(dtype t,
                        const void* a,
                        const void* packed,
                        void* c,
                        std::int64_t m,
                        std::int64_t k,
                        std::int64_t n,
                        const void* bias = nullptr);
/// The same for bfloat16 B packed by pack_b_avx512, on float32 multiply-adds: the bits of
/// bf16_gemm_avx512_fma on B. Requires cpu_has_avx512().
void gemm_packed_bf16_avx512_fma(const bfloat16_t* a,
                                 const void* packed,
                                 bfloat16_t* c,
                                 std::int64_t m,
                                 std::int64_t k,
                                 std::int64_t n,
                                 const bfloat16_t* bias = nullptr);

/// c[m, n] = a[m, k] · b[k, n], row-major float16, for few rows (a decode step): B's halves
/// converted to float32 as they are read, the float32 kernel's sums, rounded once; the same bits
/// as converting the operands and running sgemm_avx512. Returns false, doing nothing, for more
/// than 64 rows (convert and multiply then). Requires cpu_has_avx512().
bool f16_gemm_rows_avx512(const float16_t* a,
                          const float16_t* b,
                          float16_t* c,
                          std::int64_t m,
                          std::int64_t k,
                          std::int64_t n);

}  // namespace cotensor::detail::cpu
