#include "cpu/gemm_dispatch.hpp"

#include "support/environment.hpp"
#include "support/function_ref.hpp"

#include <initializer_list>
#include <stdexcept>
#include <string>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define COTENSOR_HAVE_CPUID 1
#else
#define COTENSOR_HAVE_CPUID 0
#endif

namespace cotensor::detail::cpu {

#if COTENSOR_HAVE_CPUID
namespace {

// CPUID's four registers for `leaf` and `subleaf`, all zero past the CPU's highest leaf.
struct cpuid_words {
  unsigned eax = 0;
  unsigned ebx = 0;
  unsigned ecx = 0;
  unsigned edx = 0;
};

cpuid_words cpuid(unsigned leaf, unsigned subleaf) noexcept {
  cpuid_words w;
  if (__get_cpuid_count(leaf, subleaf, &w.eax, &w.ebx, &w.ecx, &w.edx) == 0) {
    return {};
  }
  return w;
}

}  // namespace
#endif

std::string_view to_string(gemm_kernel k) noexcept {
  switch (k) {
  case gemm_kernel::avx512:
    return "avx512";
  case gemm_kernel::openblas:
    return "openblas";
  case gemm_kernel::amx_bf16:
    return "amx_bf16";
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
  // CPUID leaf 7, sub-leaf 1, EAX bit 5: AVX512_BF16.
  static const bool has = cpu_has_avx512() && (cpuid(7, 1).eax & (1U << 5)) != 0;
  return has;
#else
  return false;
#endif
}

bool cpu_has_avx512_fp16() noexcept {
#if COTENSOR_HAVE_CPUID
  // CPUID leaf 7, sub-leaf 0, EDX bit 23: AVX512_FP16.
  static const bool has = cpu_has_avx512() && (cpuid(7, 0).edx & (1U << 23)) != 0;
  return has;
#else
  return false;
#endif
}

bool cpu_has_amx_bf16() noexcept {
#if COTENSOR_HAVE_CPUID && defined(__linux__) && defined(SYS_arch_prctl)
  static const bool has = [] {
    // CPUID leaf 7, sub-leaf 0, EDX bit 22: AMX-BF16; bit 24: AMX-TILE.
    const unsigned edx = cpuid(7, 0).edx;
    if (!cpu_has_avx512_bf16() || (edx & (1U << 22)) == 0 || (edx & (1U << 24)) == 0) {
      return false;
    }
    constexpr long arch_req_xcomp_perm = 0x1023;
    constexpr long xfeature_xtiledata = 18;
    return syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0;
  }();
  return has;
#else
  return false;
#endif
}

namespace {

// A kernel that COTENSOR_GEMM_* may name: whether this CPU runs it (asked only when it is
// named: asking for AMX requests the tiles' state for the whole process), and its
// instructions for the error when it does not.
struct named_kernel {
  gemm_kernel kernel;
  bool (*runs)() noexcept;
  const char* instructions;
};

bool always() noexcept { return true; }

// The kernel `variable` names among `kernels` ("auto" or unset: `automatic()`).
gemm_kernel kernel_from_environment(const char* variable,
                                    std::initializer_list<named_kernel> kernels,
                                    function_ref<gemm_kernel()> automatic) {
  const auto value = environment_variable(variable);
  if (!value || value->empty() || *value == "auto") {
    return automatic();
  }
  std::string names = "auto";
  for (const named_kernel& k : kernels) {
    if (*value == to_string(k.kernel)) {
      if (!k.runs()) {
        throw std::runtime_error(std::string("cotensor: ") + variable + "=" + *value +
                                 ", but this CPU has no " + k.instructions);
      }
      return k.kernel;
    }
    names += (&k == kernels.end() - 1 ? " or " : ", ") + std::string(to_string(k.kernel));
  }
  bad_environment_variable(variable, *value, names);
}

// Whether CPUID names Intel as the vendor (asked once).
bool cpu_is_intel() noexcept {
#if COTENSOR_HAVE_CPUID
  // "GenuineIntel" in EBX, EDX, ECX of leaf 0.
  static const bool intel = [] {
    const cpuid_words w = cpuid(0, 0);
    return w.ebx == 0x756E6547U && w.edx == 0x49656E69U && w.ecx == 0x6C65746EU;
  }();
  return intel;
#else
  return false;
#endif
}

}  // namespace

gemm_kernel f32_gemm_kernel_for_this_call(std::int64_t rows) {
  // Measured side by side (docs/performance.md#cotensors-own-gemm): on AMD Zen 4 and Zen 5
  // cotensor's kernel for every shape; on Intel Sapphire Rapids OpenBLAS's SkylakeX kernels on
  // tiles beat it past a decode step's rows (285-318 against 248-270 GFLOP/s at 1000² to
  // 4000²), and cotensor's row path keeps the products of few rows: so OpenBLAS past them on
  // the Intel CPUs with AVX-512 FP16, Sapphire Rapids's generation on. Without it (Ice Lake
  // measured, Skylake-X to Tiger Lake not) cotensor's kernel for every shape, so a row's bits
  // never depend on the rows around it; on Ice Lake against OpenBLAS 1.07-1.18x at 1000²,
  // 0.99-1.12x at 2000², 0.91-1.02x at 4000² (medians of three sets of alternated runs).
  // OpenBLAS where the CPU lacks AVX-512.
  return kernel_from_environment(
      "COTENSOR_GEMM_F32",
      {{gemm_kernel::avx512, cpu_has_avx512, "AVX-512"}, {gemm_kernel::openblas, always, ""}},
      [rows] {
        return !cpu_has_avx512() ||
                       (cpu_is_intel() && cpu_has_avx512_fp16() && rows > f32_rows_on_own_kernel)
                   ? gemm_kernel::openblas
                   : gemm_kernel::avx512;
      });
}

gemm_kernel bf16_gemm_kernel_for_this_call(std::int64_t rows) {
  // Measured side by side (docs/performance.md): AMX's tiles where the CPU has them;
  // vdpbf16ps on AMD Zen 4 and Zen 5 (as fast as the float32 multiply-adds on twice the
  // products). On Intel CPUs without AMX (Emerald Rapids with the tiles hidden by its
  // hypervisor) one vdpbf16ps retires every other cycle, half the rate of the FMAs: there the
  // pairs split into floats on the FMAs up to bf16_rows_on_own_kernel rows and for B laid out
  // beforehand, and past them the converting path (float32 SGEMM, on OpenBLAS on Emerald
  // Rapids, faster there than the vdpbf16ps kernel: 218 against 152 GFLOP/s at 256 x 1000 x
  // 1000). An AVX-512 CPU without AVX-512 BF16 (Ice Lake) takes the same two
  // paths.
  return kernel_from_environment(
      "COTENSOR_GEMM_BF16",
      {{gemm_kernel::amx_bf16, cpu_has_amx_bf16,
        "AMX-BF16 (or Linux refused the tiles' state: arch_prctl ARCH_REQ_XCOMP_PERM)"},
       {gemm_kernel::avx512_bf16, cpu_has_avx512_bf16, "AVX-512 BF16"},
       {gemm_kernel::avx512, cpu_has_avx512, "AVX-512"},
       {gemm_kernel::convert, always, ""}},
      [rows] {
        if (cpu_has_amx_bf16()) {
          return gemm_kernel::amx_bf16;
        }
        if (cpu_has_avx512_bf16() && !cpu_is_intel()) {
          return gemm_kernel::avx512_bf16;
        }
        return cpu_has_avx512() && rows <= bf16_rows_on_own_kernel ? gemm_kernel::avx512
                                                                   : gemm_kernel::convert;
      });
}

}  // namespace cotensor::detail::cpu
