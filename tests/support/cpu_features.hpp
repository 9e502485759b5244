#pragma once

// What the tests ask of the CPU they run on: whether cotensor's own GEMM kernels can run here
// (the library asks the same of CPUID and the kernel in src/cpu/gemm_dispatch.cpp), and which
// vector level GCC's clone resolvers see (tests/isa_test.cpp). False on other architectures.

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

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

/// Whether CPUID names Intel as the vendor ("GenuineIntel"): the float32 GEMM's `auto` choice
/// depends on it.
inline bool cpu_is_intel() {
#if defined(__x86_64__) && defined(__GNUC__)
  unsigned eax = 0;
  unsigned ebx = 0;
  unsigned ecx = 0;
  unsigned edx = 0;
  return __get_cpuid(0, &eax, &ebx, &ecx, &edx) != 0 && ebx == 0x756E6547U && edx == 0x49656E69U &&
         ecx == 0x6C65746EU;
#else
  return false;
#endif
}

/// And AVX-512 FP16 (CPUID leaf 7, EDX bit 23): on Intel, the float32 GEMM's `auto` choice
/// depends on it (Sapphire Rapids's generation on).
inline bool cpu_has_avx512_fp16() {
#if defined(__x86_64__) && defined(__GNUC__)
  unsigned eax = 0;
  unsigned ebx = 0;
  unsigned ecx = 0;
  unsigned edx = 0;
  return cpu_has_avx512() && __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 &&
         (edx & (1U << 23)) != 0;
#else
  return false;
#endif
}

/// And AMX-BF16 (CPUID leaf 7, EDX bits 22 and 24), with the kernel's permission for the
/// tiles' state, asked of it here as the library asks: its AMX kernel.
inline bool cpu_has_amx_bf16() {
#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__) && defined(SYS_arch_prctl)
  static const bool has = [] {
    unsigned eax = 0;
    unsigned ebx = 0;
    unsigned ecx = 0;
    unsigned edx = 0;
    return cpu_has_avx512_bf16() && __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 &&
           (edx & (1U << 22)) != 0 && (edx & (1U << 24)) != 0 &&
           syscall(SYS_arch_prctl, 0x1023, 18) == 0;  // ARCH_REQ_XCOMP_PERM, XTILEDATA
  }();
  return has;
#else
  return false;
#endif
}

}  // namespace cotensor::test

#undef COTENSOR_TEST_CPU_SUPPORTS
