// The CPU's unary kernel for every dtype: float32 through the vectorised loops of unary.cpp,
// float64 and the integers elementwise here, float16 and bfloat16 on blocks converted to float;
// and SwiGLU's gate (silu_and_mul), a unary op on one half of a row times the other half.
// Compiled as elementwise.cpp is (-O3, no fused multiply-add: the halves' bits).

#include "cpu/half_convert.hpp"
#include "cpu/kernels.hpp"
#include "kernels/element.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace cotensor::detail::cpu {
namespace {

// Unary math on float16/bfloat16 through float: blocks converted to float on the stack, the
// float kernel (libmvec's vector exp, log, tanh), and one rounding back.
template <class T>
void unary_half_span(unary_op op, const T* in, T* out, std::int64_t n) {
  constexpr std::int64_t block = 512;
  float buffer[block];
  for (std::int64_t lo = 0; lo < n; lo += block) {
    const std::int64_t m = std::min(block, n - lo);
    to_float_span(in + lo, buffer, m);
    if (op == unary_op::gelu_tanh) {
      gelu_tanh_half_span(buffer, buffer, m);  // in float: a half keeps fewer bits
    } else {
      unary_span(op, buffer, buffer, m);
    }
    from_float_span(buffer, out + lo, m);
  }
}

// x·Φ(x) as x·erfc(−x/√2)/2, and the tanh form x·(1 + tanh u)/2 as x / (1 + e^(−2u)): 1 + erf
// and 1 + tanh cancel for x ≪ 0, where these keep full relative accuracy.
double gelu_erf(double x) { return 0.5 * x * std::erfc(x * -0.70710678118654752440); }
double gelu_tanh(double x) {
  constexpr double k = 0.79788456080286535588;  // √(2/π)
  return x / (1.0 + std::exp(-2.0 * k * (x + 0.044715 * x * x * x)));
}

void unary_double_span(unary_op op, const double* in, double* out, std::int64_t n) {
  auto each = [&](auto f) {
    for (std::int64_t i = 0; i < n; ++i) {
      out[i] = f(in[i]);
    }
  };
  switch (op) {
  case unary_op::neg:
    return each([](double x) { return -x; });
  case unary_op::relu:
    return each([](double x) { return x > 0.0 ? x : (x != x ? x : 0.0); });
  case unary_op::exp:
    return each([](double x) { return std::exp(x); });
  case unary_op::log:
    return each([](double x) { return std::log(x); });
  case unary_op::sqrt:
    return each([](double x) { return std::sqrt(x); });
  case unary_op::tanh:
    return each([](double x) { return std::tanh(x); });
  case unary_op::sigmoid:
    return each([](double x) {
      const double e = std::exp(-std::fabs(x));
      return x < 0.0 ? e / (1.0 + e) : 1.0 / (1.0 + e);
    });
  case unary_op::abs:
    return each([](double x) { return std::fabs(x); });
  case unary_op::gelu_erf:
    return each(gelu_erf);
  case unary_op::gelu_tanh:
    return each(gelu_tanh);
  case unary_op::logical_not:
    break;
  }
  return each([](double x) { return x == 0.0 ? 1.0 : 0.0; });
}

template <class T>
void unary_int_span(unary_op op, const T* in, T* out, std::int64_t n) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
  case unary_op::neg:
    for (std::int64_t i = 0; i < n; ++i) {
      out[i] = static_cast<T>(U{0} - static_cast<U>(in[i]));
    }
    return;
  case unary_op::abs:
    for (std::int64_t i = 0; i < n; ++i) {
      out[i] = in[i] < 0 ? static_cast<T>(U{0} - static_cast<U>(in[i])) : in[i];
    }
    return;
  default:  // relu: the frontend sends integers only these three
    for (std::int64_t i = 0; i < n; ++i) {
      out[i] = in[i] > 0 ? in[i] : T{0};
    }
    return;
  }
}

void unary_typed_span(unary_op op, dtype t, const void* in, void* out, std::int64_t n) {
  switch (t) {
  case dtype::float32:
    return unary_span(op, static_cast<const float*>(in), static_cast<float*>(out), n);
  case dtype::float64:
    return unary_double_span(op, static_cast<const double*>(in), static_cast<double*>(out), n);
  case dtype::float16:
    return unary_half_span(op, static_cast<const float16_t*>(in), static_cast<float16_t*>(out), n);
  case dtype::bfloat16:
    return unary_half_span(op, static_cast<const bfloat16_t*>(in), static_cast<bfloat16_t*>(out),
                           n);
  case dtype::int32:
    return unary_int_span(op, static_cast<const std::int32_t*>(in), static_cast<std::int32_t*>(out),
                          n);
  case dtype::int64:
    return unary_int_span(op, static_cast<const std::int64_t*>(in), static_cast<std::int64_t*>(out),
                          n);
  case dtype::boolean:
    break;
  }
  const auto* b = static_cast<const bool*>(in);
  auto* o = static_cast<bool*>(out);
  for (std::int64_t i = 0; i < n; ++i) {
    o[i] = !b[i];  // logical_not, the one unary op on bool
  }
}

// silu(g)·u = g·σ(g)·u over n elements, in float blocks (σ from unary_span, as `sigmoid`) and
// one rounding: for float32 the same bits as the three ops apart.
template <class T>
requires is_half_v<T>
void silu_and_mul_span(const T* gate, const T* up, T* out, std::int64_t n) {
  constexpr std::int64_t block = 512;
  float g[block];
  float u[block];
  float s[block];
  for (std::int64_t lo = 0; lo < n; lo += block) {
    const std::int64_t m = std::min(block, n - lo);
    to_float_span(gate + lo, g, m);
    to_float_span(up + lo, u, m);
    unary_span(unary_op::sigmoid, g, s, m);
    for (std::int64_t i = 0; i < m; ++i) {
      g[i] = g[i] * s[i] * u[i];
    }
    from_float_span(g, out + lo, m);
  }
}

// σ over n elements, as `sigmoid` computes it for the type.
void sigmoid_span(const float* in, float* out, std::int64_t n) {
  unary_span(unary_op::sigmoid, in, out, n);
}
void sigmoid_span(const double* in, double* out, std::int64_t n) {
  unary_double_span(unary_op::sigmoid, in, out, n);
}

// float32 and float64 in their own type: the same products as the three ops apart.
template <class T>
requires std::is_floating_point_v<T>
void silu_and_mul_span(const T* gate, const T* up, T* out, std::int64_t n) {
  constexpr std::int64_t block = 512;
  T s[block];
  for (std::int64_t lo = 0; lo < n; lo += block) {
    const std::int64_t m = std::min(block, n - lo);
    sigmoid_span(gate + lo, s, m);
    for (std::int64_t i = 0; i < m; ++i) {
      out[lo + i] = gate[lo + i] * s[i] * up[lo + i];
    }
  }
}

template <class T>
void silu_and_mul_typed(const silu_and_mul_args& a) {
  const auto* in = static_cast<const T*>(a.in);
  auto* out = static_cast<T*>(a.out);
  const std::int64_t cols = a.cols;
  // Chunks of the output's elements, a chunk's run within each row at a time.
  parallel_chunks(a.rows * cols, elementwise_grain / 4, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t e = lo; e < hi;) {
      const std::int64_t r = e / cols;
      const std::int64_t j = e % cols;
      const std::int64_t m = std::min(hi - e, cols - j);
      const T* row = in + r * 2 * cols;
      silu_and_mul_span(row + j, row + cols + j, out + e, m);
      e += m;
    }
  });
}

}  // namespace

void unary(const unary_args& args) {
  const std::size_t item = itemsize(args.t);
  parallel_chunks(args.n, elementwise_grain / 4, [&](std::int64_t lo, std::int64_t hi) {
    unary_typed_span(args.op, args.t, offset_bytes(args.in, lo, item),
                     offset_bytes(args.out, lo, item), hi - lo);
  });
}

void silu_and_mul(const silu_and_mul_args& args) {
  if (args.rows == 0 || args.cols == 0) {
    return;
  }
  switch (args.t) {
  case dtype::float64:
    return silu_and_mul_typed<double>(args);
  case dtype::float16:
    return silu_and_mul_typed<float16_t>(args);
  case dtype::bfloat16:
    return silu_and_mul_typed<bfloat16_t>(args);
  default:  // float32: the frontend sends float dtypes only
    return silu_and_mul_typed<float>(args);
  }
}

}  // namespace cotensor::detail::cpu
