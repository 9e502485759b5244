#pragma once

// bfloat16 GEMM with float32 accumulation on CPUs with AVX-512 BF16 (vdpbf16ps), and the choice
// between it and the converting path (operands to float32, SGEMM, result rounded once).
//
// The native kernel packs A and B once per GEMM into pairs along k (the two bfloat16 that one
// vdpbf16ps lane multiplies and adds), then runs a 12 x 32 register tile over fixed blocks of
// rows, columns and k, shared by the backend's workers. Blocks and their order along k do not
// depend on the number of workers, so results are bit-identical whatever the thread count.
// vdpbf16ps treats denormal inputs as zero and rounds each of its two additions to nearest
// even: products of bfloat16 are exact in float32, so an element of C is the float32 sum of
// pair sums in k order, then rounded once to bfloat16 as bfloat16_t(float) rounds.

#include "cotensor/dtype.hpp"

#include <cstdint>
#include <string_view>

namespace cotensor::detail::cpu {

/// The bfloat16 GEMM kernels the dispatcher can pick.
enum class bf16_gemm_kernel : std::uint8_t {
  avx512_bf16,  ///< packed pairs through vdpbf16ps (AVX-512 BF16)
  convert,      ///< operands to float32, SGEMM, result rounded once
};

/// The kernel's name, as COTENSOR_GEMM_BF16 spells it: "avx512_bf16" or "convert".
std::string_view to_string(bf16_gemm_kernel k) noexcept;

/// Whether this CPU and OS run AVX-512 F and AVX-512 BF16 (asked once).
bool cpu_has_avx512_bf16() noexcept;

/// The kernel a bfloat16 GEMM runs: COTENSOR_GEMM_BF16 when set ("avx512_bf16", "convert" or
/// "auto"), else the fastest this CPU has. Read at each call, so that tests can force each path.
/// Throws std::invalid_argument on any other value, and std::runtime_error when
/// "avx512_bf16" is forced on a CPU without it.
bf16_gemm_kernel bf16_gemm_kernel_for_this_call();

/// c[m, n] = a[m, k] · b[k, n] (row-major, bfloat16), accumulated in float32 by vdpbf16ps and
/// rounded once; in parallel on the backend's workers. Requires cpu_has_avx512_bf16().
void bf16_gemm_avx512(const bfloat16_t* a,
                      const bfloat16_t* b,
                      bfloat16_t* c,
                      std::int64_t m,
                      std::int64_t k,
                      std::int64_t n);

}  // namespace cotensor::detail::cpu
