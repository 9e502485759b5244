#include "cpu/gemm_dispatch.hpp"

#include "support/environment.hpp"

#include <stdexcept>
#include <string>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define COTENSOR_HAVE_CPUID 1
#else
#define COTENSOR_HAVE_CPUID 0
#endif

namespace cotensor::detail::cpu {

std::string_view to_string(gemm_kernel k) noexcept {
  switch (k) {
  case gemm_kernel::avx512:
    return "avx512";
  case gemm_kernel::openblas:
    return "openblas";
  case gemm_kernel::avx512_bf16:
    return "avx512_bf16";
  case gemm_kernel::convert:
    return "convert";
  }
  return "unknown";
}

bool cpu_has_avx512() noexcept {
#if COTENSOR_HAVE_CPUID
  // __builtin_cpu_supports("avx512f") also checks that the OS saves the zmm registers.
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  }();
  return has;
#else
  return false;
#endif
}

bool cpu_has_avx512_bf16() noexcept {
#if COTENSOR_HAVE_CPUID
  static const bool has = [] {
    unsigned eax = 0;
    unsigned ebx = 0;
    unsigned ecx = 0;
    unsigned edx = 0;
    // CPUID leaf 7, sub-leaf 1, EAX bit 5: AVX512_BF16.
    return cpu_has_avx512() && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 &&
           (eax & (1U << 5)) != 0;
  }();
  return has;
#else
  return false;
#endif
}

namespace {

// The kernel named by `variable` (`native` or `fallback`, "auto" or unset: `automatic`).
gemm_kernel kernel_from_environment(const char* variable,
                                    gemm_kernel native,
                                    bool cpu_has_native,
                                    const char* instructions,
                                    gemm_kernel fallback,
                                    gemm_kernel automatic) {
  const auto value = environment_variable(variable);
  if (!value || value->empty() || *value == "auto") {
    return automatic;
  }
  if (*value == to_string(fallback)) {
    return fallback;
  }
  if (*value == to_string(native)) {
    if (!cpu_has_native) {
      throw std::runtime_error(std::string("cotensor: ") + variable + "=" + *value +
                               ", but this CPU has no " + instructions);
    }
    return native;
  }
  bad_environment_variable(variable, *value,
                           "auto, " + std::string(to_string(native)) + " or " +
                               std::string(to_string(fallback)));
}

}  // namespace

gemm_kernel f32_gemm_kernel_for_this_call() {
  // Measured side by side (docs/performance.md#cotensors-own-gemm): on AMD Zen 4 cotensor's
  // kernel; OpenBLAS where the CPU lacks AVX-512.
  const gemm_kernel automatic = cpu_has_avx512() ? gemm_kernel::avx512 : gemm_kernel::openblas;
  return kernel_from_environment("COTENSOR_GEMM_F32", gemm_kernel::avx512, cpu_has_avx512(),
                                 "AVX-512", gemm_kernel::openblas, automatic);
}

gemm_kernel bf16_gemm_kernel_for_this_call() {
  const gemm_kernel automatic =
      cpu_has_avx512_bf16() ? gemm_kernel::avx512_bf16 : gemm_kernel::convert;
  return kernel_from_environment("COTENSOR_GEMM_BF16", gemm_kernel::avx512_bf16,
                                 cpu_has_avx512_bf16(), "AVX-512 BF16", gemm_kernel::convert,
                                 automatic);
}

}  // namespace cotensor::detail::cpu
