#pragma once

// Which GEMM kernel a matmul runs: cotensor's own for AMX (cpu/gemm_amx.hpp) and AVX-512
// (cpu/gemm_avx512.hpp), OpenBLAS on tiles, or the converting path for halves (cpu/gemm.cpp),
// by the CPU's instructions or as forced by COTENSOR_GEMM_F32 and COTENSOR_GEMM_BF16.

#include <cstdint>
#include <string_view>

namespace cotensor::detail::cpu {

/// The GEMM kernels the dispatcher can pick, as the environment names them.
enum class gemm_kernel : std::uint8_t {
  avx512,       ///< float32: cotensor's own (COTENSOR_GEMM_F32=avx512)
  openblas,     ///< float32: OpenBLAS SGEMM on tiles (COTENSOR_GEMM_F32=openblas)
  amx_bf16,     ///< bfloat16: cotensor's own, AMX tiles (COTENSOR_GEMM_BF16=amx_bf16)
  avx512_bf16,  ///< bfloat16: cotensor's own, vdpbf16ps (COTENSOR_GEMM_BF16=avx512_bf16)
  convert,  ///< bfloat16: to float32, the float32 GEMM, rounded once (COTENSOR_GEMM_BF16=convert)
};

/// "avx512", "openblas", "amx_bf16", "avx512_bf16" or "convert".
std::string_view to_string(gemm_kernel k) noexcept;

/// Whether this CPU and OS run AVX-512 F and BW (asked once).
bool cpu_has_avx512() noexcept;
/// Whether they also run AVX-512 BF16 (asked once).
bool cpu_has_avx512_bf16() noexcept;
/// Whether they also run AVX-512 FP16 (asked once): Intel's CPUs from Sapphire Rapids on.
bool cpu_has_avx512_fp16() noexcept;
/// Whether they also run AMX-BF16 and the kernel lets this process use the tiles: asked once,
/// the first call requesting the permission (Linux 5.16 and later: arch_prctl
/// ARCH_REQ_XCOMP_PERM for XTILEDATA, 8 KiB more state a thread, for every thread of the
/// process); false where it is refused.
bool cpu_has_amx_bf16() noexcept;

/// Rows up to which "auto" keeps a float32 product on cotensor's kernel on every CPU with
/// AVX-512 (its row path: a decode step's products, whose B it reads in place or laid out).
inline constexpr std::int64_t f32_rows_on_own_kernel = 64;

/// The kernel a float32 GEMM of `rows` rows runs (0: a product laid out for, whatever its rows:
/// B packed once): COTENSOR_GEMM_F32 when set ("avx512", "openblas" or "auto"), else the one
/// measured faster where the CPU has both; on Intel CPUs with AVX-512 FP16 (Sapphire Rapids and
/// Emerald Rapids) OpenBLAS past f32_rows_on_own_kernel rows, so that a row's bits there depend
/// on whether the product had more (forced, either kernel gives a row the same bits whatever
/// the rows around it). Read at each call, so that tests can force each path. Throws
/// std::invalid_argument on any other value, and std::runtime_error when a kernel is forced on a
/// CPU without its instructions.
gemm_kernel f32_gemm_kernel_for_this_call(std::int64_t rows = 0);
/// Rows past which "auto" sends an unpacked bfloat16 product to the converting path (float32
/// SGEMM) on an AVX-512 CPU without AMX that is Intel's or lacks AVX-512 BF16.
inline constexpr std::int64_t bf16_rows_on_own_kernel = 64;

/// The same for bfloat16 and COTENSOR_GEMM_BF16: "amx_bf16" (AMX tiles), "avx512_bf16"
/// (vdpbf16ps), "avx512" (pairs split into floats on vfmadd231ps: the converting path's bits on
/// cotensor's float32 kernel), "convert" (operands converted, SGEMM, one rounding) or "auto":
/// AMX where the CPU and its kernel allow it, else vdpbf16ps on AMD, else on AVX-512 "avx512"
/// up to bf16_rows_on_own_kernel rows and for a product laid out for (0 rows), else "convert".
gemm_kernel bf16_gemm_kernel_for_this_call(std::int64_t rows = 0);

}  // namespace cotensor::detail::cpu
