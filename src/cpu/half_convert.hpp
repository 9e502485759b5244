#pragma once

// Spans of float16 and bfloat16 to float and back, for the kernels that compute halves in
// float: the elementwise ops convert blocks of their operands, the half GEMM its operands and
// result. The same bits as float16_t's and bfloat16_t's own conversions, element by element.

#include "cotensor/dtype.hpp"

#include <cstdint>

namespace cotensor::detail::cpu {

/// out[i] = float(in[i]) over [0, n), exactly; on the calling thread.
void to_float_span(const float16_t* in, float* out, std::int64_t n) noexcept;
/// out[i] = float(in[i]) over [0, n), exactly; on the calling thread.
void to_float_span(const bfloat16_t* in, float* out, std::int64_t n) noexcept;
/// out[i] = float16_t(in[i]) over [0, n): rounded to nearest even, NaN to the quiet NaN of its
/// sign (0x7E00 | sign), as `float16_t(float)`; on the calling thread.
void from_float_span(const float* in, float16_t* out, std::int64_t n) noexcept;
/// out[i] = bfloat16_t(in[i]) over [0, n), as `bfloat16_t(float)`; on the calling thread.
void from_float_span(const float* in, bfloat16_t* out, std::int64_t n) noexcept;

}  // namespace cotensor::detail::cpu
