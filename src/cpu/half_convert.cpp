// float16 and bfloat16 spans in AVX2 registers where the CPU has AVX2 and F16C (cpu/half8.hpp:
// eight lanes at a time), else the branch-free software conversions of dtype.hpp, cloned per
// vector width.

#include "cpu/half_convert.hpp"

#include "cpu/half8.hpp"
#include "cpu/vector_clones.hpp"

#if COTENSOR_HAVE_HALF8
#include <cpuid.h>
#endif

namespace cotensor::detail::cpu {

#if COTENSOR_HAVE_HALF8
// "avx2" includes the OS's saving of the ymm registers; clang 14's __builtin_cpu_supports knows
// no "f16c", so that bit comes from CPUID leaf 1 itself.
bool cpu_has_half8() noexcept {
  static const bool has = [] {
    __builtin_cpu_init();
    unsigned eax = 0;
    unsigned ebx = 0;
    unsigned ecx = 0;
    unsigned edx = 0;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 &&
           (ecx & bit_F16C) != 0;
  }();
  return has;
}
#endif

namespace {

#if COTENSOR_HAVE_HALF8
// Both directions convert eight lanes at a time and return how many elements they did.
template <class H>
COTENSOR_HALF8_TARGET std::int64_t half8_span(const H* in, float* out, std::int64_t n) noexcept {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, load_half8(in + i));
  }
  return i;
}

template <class H>
COTENSOR_HALF8_TARGET std::int64_t half8_span(const float* in, H* out, std::int64_t n) noexcept {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    store_half8(out + i, _mm256_loadu_ps(in + i));
  }
  return i;
}
#endif

// out[i] = Out(in[i]) by the software conversions of dtype.hpp (float16_t's and bfloat16_t's
// own), cloned per vector width.
template <class In, class Out>
COTENSOR_VECTOR_CLONES void soft_span(const In* in, Out* out, std::int64_t n) noexcept {
  for (std::int64_t i = 0; i < n; ++i) {
    out[i] = static_cast<Out>(in[i]);
  }
}

// `in` converted into `out`: by half8_span where the CPU has AVX2 and F16C, the rest (all of it
// elsewhere) by soft_span.
template <class In, class Out>
void convert_span(const In* in, Out* out, std::int64_t n) noexcept {
  std::int64_t done = 0;
#if COTENSOR_HAVE_HALF8
  if (cpu_has_half8()) {
    done = half8_span(in, out, n);
  }
#endif
  soft_span(in + done, out + done, n - done);
}

}  // namespace

void to_float_span(const float16_t* in, float* out, std::int64_t n) noexcept {
  convert_span(in, out, n);
}

void from_float_span(const float* in, float16_t* out, std::int64_t n) noexcept {
  convert_span(in, out, n);
}

void to_float_span(const bfloat16_t* in, float* out, std::int64_t n) noexcept {
  convert_span(in, out, n);
}

void from_float_span(const float* in, bfloat16_t* out, std::int64_t n) noexcept {
  convert_span(in, out, n);
}

}  // namespace cotensor::detail::cpu
