#pragma once

#include "cotensor/detail/engine_fwd.hpp"
#include "cotensor/device.hpp"
#include "cotensor/shape.hpp"
#include "cotensor/tensor.hpp"

#include <concepts>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

// Every function here returns at once with a tensor whose value the backend computes later.
// Arguments are validated at the call: a bad shape, size or device throws
// std::invalid_argument (device: std::system_error, errc::device_unavailable) and enqueues
// nothing. Thread safety: any thread.

namespace cotensor {

/// A tensor of shape `s` filled with 0.
tensor zeros(shape s, device d = device::cpu());
/// A tensor of shape `s` filled with 1.
tensor ones(shape s, device d = device::cpu());
/// A tensor of shape `s` filled with `value`.
tensor full(shape s, float value, device d = device::cpu());
/// A tensor of shape `s` holding `values` in row-major order; `values.size()` must equal
/// `s.numel()`.
tensor from_vector(std::vector<float> values, shape s, device d = device::cpu());

/// Elementwise arithmetic. Tensor operands broadcast as in NumPy: trailing extents must be
/// equal or 1 (so a row vector `[n]` or `[1, n]` broadcasts over an `[m, n]` matrix).
tensor operator+(const tensor& a, const tensor& b);
tensor operator-(const tensor& a, const tensor& b);
tensor operator*(const tensor& a, const tensor& b);
tensor operator/(const tensor& a, const tensor& b);
tensor operator+(const tensor& a, float b);
tensor operator-(const tensor& a, float b);
tensor operator*(const tensor& a, float b);
tensor operator/(const tensor& a, float b);
tensor operator+(float a, const tensor& b);
tensor operator-(float a, const tensor& b);
tensor operator*(float a, const tensor& b);
tensor operator/(float a, const tensor& b);
/// Elementwise negation.
tensor operator-(const tensor& a);

/// The shape of `a ⊗ b` under broadcasting; throws std::invalid_argument if there is none.
shape broadcast_shape(const shape& a, const shape& b);

/// Matrix product of `[m, k]` and `[k, n]`, giving `[m, n]` (OpenBLAS SGEMM on oneTBB tiles).
tensor matmul(const tensor& a, const tensor& b);
/// The transpose of a 2-D tensor (a new buffer).
tensor transpose(const tensor& a);
/// The same buffer seen with shape `s`, which must have as many elements. In-place ops through
/// either handle are seen by both.
tensor reshape(const tensor& a, shape s);

/// Elementwise max(x, 0).
tensor relu(const tensor& x);
/// Elementwise e^x. exp, log, tanh and sigmoid are within 4 ulp of the exact result (glibc's
/// vector math library on x86-64; libm, within 1 ulp, elsewhere); an element's result does not
/// depend on its position or on the tensor's size, but may differ in the last bits between
/// AVX-512 and AVX2 machines. Infinities, NaN and overflow give what libm gives.
tensor exp(const tensor& x);
/// Elementwise natural logarithm.
tensor log(const tensor& x);
/// Elementwise square root.
tensor sqrt(const tensor& x);
/// Elementwise hyperbolic tangent.
tensor tanh(const tensor& x);
/// Elementwise logistic sigmoid 1 / (1 + e^-x), computed as e^x / (1 + e^x) for negative x so
/// that it reaches the denormal floats instead of 0 below -88.7.
tensor sigmoid(const tensor& x);

/// The sum of all elements, as a rank-0 tensor.
tensor sum(const tensor& x);
/// The sum over dimension `axis`, which is removed from the shape.
tensor sum(const tensor& x, int axis);
/// The mean of all elements, as a rank-0 tensor. `x` must not be empty.
tensor mean(const tensor& x);
/// The mean over dimension `axis`, which is removed from the shape.
tensor mean(const tensor& x, int axis);

/// Applies the user function `f` (float -> float) to every element, on the backend.
///
/// `f` is copied, and called concurrently from several backend threads on disjoint elements,
/// so it must be callable as const and thread-safe. It must not wait on tensors. If `f` throws,
/// the result holds that exception: waiting on it, or on anything computed from it, rethrows it.
template <class F>
requires std::is_invocable_r_v<float, const F&, float> tensor map(const tensor& x, F f) {
  return detail::map_op(x, [f = std::move(f)](const float* in, float* out, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) {
      out[i] = static_cast<float>(f(in[i]));
    }
  });
}

}  // namespace cotensor
