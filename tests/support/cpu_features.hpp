#pragma once

// What the tests ask of the CPU they run on: whether cotensor's own GEMM kernels can run here
// (the library asks the same of CPUID in src/cpu/gemm_dispatch.cpp), and which vector level
// GCC's clone resolvers see (tests/isa_test.cpp). False on other architectures.

namespace cotensor::test {

#if defined(__x86_64__) && defined(__GNUC__)
#define COTENSOR_TEST_CPU_SUPPORTS(feature) __builtin_cpu_supports(feature)
#else
#define COTENSOR_TEST_CPU_SUPPORTS(feature) false
#endif

/// SSE4.2, AVX, AVX2 and AVX-512 F: the levels of the vector clones.
inline bool cpu_has_sse42() { return COTENSOR_TEST_CPU_SUPPORTS("sse4.2"); }
inline bool cpu_has_avx() { return COTENSOR_TEST_CPU_SUPPORTS("avx"); }
inline bool cpu_has_avx2() { return COTENSOR_TEST_CPU_SUPPORTS("avx2"); }
inline bool cpu_has_avx512f() { return COTENSOR_TEST_CPU_SUPPORTS("avx512f"); }

/// AVX-512 F and BW: cotensor's float32 GEMM kernel.
inline bool cpu_has_avx512() { return cpu_has_avx512f() && COTENSOR_TEST_CPU_SUPPORTS("avx512bw"); }

/// And AVX-512 BF16: its bfloat16 kernel.
inline bool cpu_has_avx512_bf16() {
  return cpu_has_avx512() && COTENSOR_TEST_CPU_SUPPORTS("avx512bf16");
}

}  // namespace cotensor::test

#undef COTENSOR_TEST_CPU_SUPPORTS
