#pragma once

// What the GEMM tests ask of the CPU they run on: whether cotensor's own kernels can run here
// (the library asks the same of CPUID in src/cpu/gemm_dispatch.cpp).

namespace cotensor::test {

/// AVX-512 F and BW: cotensor's float32 GEMM kernel.
inline bool cpu_has_avx512() {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
#else
  return false;
#endif
}

/// And AVX-512 BF16: its bfloat16 kernel.
inline bool cpu_has_avx512_bf16() {
#if defined(__x86_64__) && defined(__GNUC__)
  return cpu_has_avx512() && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

}  // namespace cotensor::test
