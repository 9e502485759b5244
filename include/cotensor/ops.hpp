#pragma once

#include "cotensor/device.hpp"
#include "cotensor/dtype.hpp"
#include "cotensor/scalar.hpp"
#include "cotensor/shape.hpp"
#include "cotensor/tensor.hpp"

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

// Every function here returns at once with a tensor whose value the backend computes later.
// Arguments are validated at the call: a bad shape, size or device throws
// std::invalid_argument (device: std::system_error, errc::device_unavailable) and enqueues
// nothing. Thread safety: any thread.

namespace cotensor {

/// A float32 tensor of shape `s` filled with 0.
tensor zeros(shape s, device d = device::cpu());
/// A float32 tensor of shape `s` filled with 1.
tensor ones(shape s, device d = device::cpu());
/// A float32 tensor of shape `s` filled with `value`.
tensor full(shape s, float value, device d = device::cpu());
/// A tensor of dtype `t` and shape `s` filled with 0.
tensor zeros(shape s, dtype t, device d = device::cpu());
/// A tensor of dtype `t` and shape `s` filled with 1.
tensor ones(shape s, dtype t, device d = device::cpu());
/// A tensor of dtype `t` and shape `s` filled with `value` converted as `astype` converts
/// (integers exactly up to 2^53).
tensor full(shape s, double value, dtype t, device d = device::cpu());
/// The integers 0, 1, ..., n − 1 as a tensor of shape `[n]` and dtype `t`; `n >= 0`.
tensor arange(std::int64_t n, dtype t = dtype::int64, device d = device::cpu());

/// A float32 tensor of shape `s` holding `values` in row-major order; `values.size()` must
/// equal `s.numel()`. (A braced list, `from_vector({1, 2, 3}, {3})`, makes float32.)
tensor from_vector(std::vector<float> values, shape s, device d = device::cpu());

namespace detail {
tensor from_host(const void* values, std::size_t count, dtype t, shape s, device d);
}  // namespace detail

/// A tensor of shape `s` and dtype `dtype_of<T>` holding `values` in row-major order, for the
/// seven element types (`std::vector<bool>` included); `values.size()` must equal
/// `s.numel()`. The values are copied at the call.
template <element_type T>
tensor from_vector(std::vector<T> values, shape s, device d = device::cpu()) {
  if constexpr (std::is_same_v<T, bool>) {
    const std::vector<std::uint8_t> bytes(values.begin(), values.end());  // unpack the bits
    return detail::from_host(bytes.data(), bytes.size(), dtype::boolean, std::move(s), d);
  } else {
    return detail::from_host(values.data(), values.size(), dtype_of<T>, std::move(s), d);
  }
}

/// Elementwise arithmetic. Tensor operands broadcast as in NumPy: trailing extents must be
/// equal or 1 (so a row vector `[n]` or `[1, n]` broadcasts over an `[m, n]` matrix). The
/// result's dtype is `promote_types` of the operands'; a C++ scalar is weak (it keeps the
/// tensor's dtype when of the same kind: `float16 * 2.5` is float16, `int32 + 2` int32, and is
/// converted to that dtype first, as `astype` converts, as NumPy and PyTorch do: `float16 *
/// 0.1` multiplies by float16(0.1); a float scalar on an integer or bool tensor gives float32;
/// an integer scalar that does not fit an integer tensor's dtype throws). Integers wrap on
/// overflow. `/` is true division:
/// integers and bool divide as float32. On bool, `+` is logical or, `*` logical and, `-`
/// throws. float16 and bfloat16 compute in float32 and round once.
tensor operator+(const tensor& a, const tensor& b);
tensor operator-(const tensor& a, const tensor& b);
tensor operator*(const tensor& a, const tensor& b);
tensor operator/(const tensor& a, const tensor& b);

tensor operator+(const tensor& a, scalar b);
tensor operator-(const tensor& a, scalar b);
tensor operator*(const tensor& a, scalar b);
tensor operator/(const tensor& a, scalar b);
tensor operator+(scalar a, const tensor& b);
tensor operator-(scalar a, const tensor& b);
tensor operator*(scalar a, const tensor& b);
tensor operator/(scalar a, const tensor& b);

/// Elementwise comparisons, giving bool tensors; the operands promote as in arithmetic (a
/// scalar weakly). NaN compares unequal to everything, itself included.
tensor operator==(const tensor& a, const tensor& b);
tensor operator!=(const tensor& a, const tensor& b);
tensor operator<(const tensor& a, const tensor& b);
tensor operator<=(const tensor& a, const tensor& b);
tensor operator>(const tensor& a, const tensor& b);
tensor operator>=(const tensor& a, const tensor& b);
tensor operator==(const tensor& a, scalar b);
tensor operator!=(const tensor& a, scalar b);
tensor operator<(const tensor& a, scalar b);
tensor operator<=(const tensor& a, scalar b);
tensor operator>(const tensor& a, scalar b);
tensor operator>=(const tensor& a, scalar b);

/// Elementwise logical ops, giving bool tensors: each operand is taken as `x != 0`.
tensor logical_and(const tensor& a, const tensor& b);
tensor logical_or(const tensor& a, const tensor& b);
tensor logical_not(const tensor& a);
/// `logical_and`, `logical_or` and `logical_not` of bool tensors (std::invalid_argument for
/// another dtype, as PyTorch's bitwise ops refuse floats).
tensor operator&(const tensor& a, const tensor& b);
tensor operator|(const tensor& a, const tensor& b);
tensor operator!(const tensor& a);

/// `cond ? a : b` elementwise, all three broadcast together; `cond` must be bool; the result's
/// dtype is `promote_types(a, b)`.
tensor where(const tensor& cond, const tensor& a, const tensor& b);
/// The elementwise maximum and minimum, promoted as arithmetic; NaN propagates; on bool they
/// are logical or and and.
tensor maximum(const tensor& a, const tensor& b);
tensor minimum(const tensor& a, const tensor& b);
/// Elementwise |x| (integers wrap: |INT_MIN| is INT_MIN).
tensor abs(const tensor& x);
/// Elementwise min(max(x, lo), hi), keeping x's dtype (the bounds are weak scalars); NaN
/// stays NaN.
tensor clamp(const tensor& x, double lo, double hi);

/// Elementwise negation (integers wrap; bool throws).
tensor operator-(const tensor& a);

/// The shape of `a ⊗ b` under broadcasting; throws std::invalid_argument if there is none.
shape broadcast_shape(const shape& a, const shape& b);

/// Matrix product of `[m, k]` and `[k, n]`, giving `[m, n]`; batched over leading dimensions:
/// `[b..., m, k] x [k, n]` and `[b..., m, k] x [b..., k, n]` give `[b..., m, n]`. Both
/// operands must have one dtype. float32 is SGEMM, float64 DGEMM (OpenBLAS on oneTBB tiles,
/// cuBLAS); float16 and bfloat16 accumulate in float32 and round once; int32 and int64 are
/// exact (wrapping) on the CPU. A dtype the device lacks throws std::invalid_argument.
tensor matmul(const tensor& a, const tensor& b);
/// The transpose of a 2-D tensor (a new buffer).
tensor transpose(const tensor& a);
/// The same buffer seen with shape `s`, which must have as many elements. In-place ops through
/// either handle are seen by both.
tensor reshape(const tensor& a, shape s);
/// `x`'s tensors joined along `axis` (every other extent equal, one dtype, one device).
tensor concat(const std::vector<tensor>& xs, int axis = 0);
/// Elements `[start, stop)` of dimension `axis`, a copy. Negative `start`/`stop` count from
/// the end; both are clamped to the extent, as Python slices are.
tensor slice(const tensor& x, int axis, std::int64_t start, std::int64_t stop);
/// The entries of dimension `axis` at `index` (an int64 tensor of rank 1), in that order: an
/// embedding lookup. An index outside [0, extent) fails the op with std::out_of_range.
tensor index_select(const tensor& x, int axis, const tensor& index);

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

/// The Gaussian error linear unit x·Φ(x), exactly (erf) or by the tanh approximation; float
/// dtypes (integers compute as float32).
tensor gelu(const tensor& x, bool tanh_approximation = false);
/// Softmax over the last axis, computed stably (the row's maximum subtracted first); float
/// dtypes, float16/bfloat16 computed in float32.
tensor softmax(const tensor& x);
/// The logarithm of `softmax`, computed stably as x − max − log Σ e^(x − max).
tensor log_softmax(const tensor& x);
/// (x − mean) / √(var + eps) · weight + bias over the last axis; `weight` and `bias` have the
/// last axis's extent (either may be an empty tensor for none); float dtypes.
tensor layer_norm(const tensor& x, const tensor& weight, const tensor& bias, double eps = 1e-5);
/// x / √(mean(x²) + eps) · weight over the last axis (RMSNorm, as Llama's); `weight` has the
/// last axis's extent and x's dtype; float dtypes (the mean in double).
tensor rms_norm(const tensor& x, const tensor& weight, double eps = 1e-6);

// The ops of transformer language models (<cotensor/lm.hpp> is made of them), on the CPU and
// CUDA (the CUDA kernels are compiled and tested against the CPU, not yet run on a GPU).

/// Rotary position embedding of `x` [rows, heads · head_dim] (rotating halves, as Hugging
/// Face's Llama): row r's heads are rotated by angles positions[r] · theta^(−2i / head_dim),
/// computed in float and rounded once. `positions` is int64 [rows]; `head_dim` even.
tensor rotary_embedding(const tensor& x,
                        const tensor& positions,
                        std::int64_t head_dim,
                        double theta = 10000.0);
/// SwiGLU's gate, as Llama's and Qwen's MLPs apply it to their gate and up projections made in
/// one product: `x` [..., 2n] gives [..., n] with silu(x[..., j]) · x[..., n + j], silu(g) =
/// g · sigmoid(g) (sigmoid as `sigmoid` computes it). float16 and bfloat16 compute in float and
/// round once (the three ops apart round three times); float32 gives the bits of
/// `g * sigmoid(g) * u` with g and u the halves. Float dtypes; an odd last extent throws
/// std::invalid_argument.
tensor silu_and_mul(const tensor& x);
/// Writes row r of `rows` (its first axis) into row index[r] of `dst` seen as rows of the same
/// size, in place: the ops issued before it that read `dst` see the old rows, those after it
/// the new (a key/value cache's writes). `index` is int64 [rows]; an index outside `dst` fails
/// the op with std::out_of_range, writing nothing.
void scatter_rows(const tensor& dst, const tensor& index, const tensor& rows);
/// Causal attention over a paged key/value cache: `q` [tokens, heads · head_dim]; `k_cache`
/// and `v_cache` [blocks, block_size, kv_heads, head_dim]; query row r belongs to the sequence
/// at row sequence[r] of `block_tables` [sequences, width] and sees that sequence's keys
/// 0 .. context[r] − 1, key j at slot j % block_size of block block_tables[s, j / block_size].
/// Head h uses key/value head h / (heads / kv_heads). Returns softmax(q·kᵀ · scale)·v per row
/// and head, [tokens, heads · head_dim], in float with a running maximum (no [tokens, keys]
/// matrix) and keys in order, so that a row's result does not depend on the other rows. Index
/// tensors are int64; an out-of-range sequence, block or context fails the op with
/// std::out_of_range.
tensor paged_attention(const tensor& q,
                       const tensor& k_cache,
                       const tensor& v_cache,
                       const tensor& block_tables,
                       const tensor& sequence,
                       const tensor& context,
                       double scale);

/// The sum of all elements, as a rank-0 tensor: int64 for bool and integer tensors (wrapping),
/// the tensor's dtype for floats (float16/bfloat16 accumulate in float32).
tensor sum(const tensor& x);
/// The sum over dimension `axis`, which is removed from the shape unless `keepdims`.
tensor sum(const tensor& x, int axis, bool keepdims = false);
/// The mean of all elements, as a rank-0 tensor. `x` must not be empty. Integers and bool give
/// float32.
tensor mean(const tensor& x);
/// The mean over dimension `axis`, which is removed from the shape unless `keepdims`.
tensor mean(const tensor& x, int axis, bool keepdims = false);
/// The largest element (NaN if any is NaN), as a rank-0 tensor of x's dtype; not empty.
tensor max(const tensor& x);
/// The largest element over `axis`, as `sum`.
tensor max(const tensor& x, int axis, bool keepdims = false);
/// The smallest element, as `max`.
tensor min(const tensor& x);
/// The smallest element over `axis`, as `sum`.
tensor min(const tensor& x, int axis, bool keepdims = false);
/// The flat index of the first largest element (of the first NaN if any), int64, rank 0.
tensor argmax(const tensor& x);
/// The index along `axis` of the first largest element, int64.
tensor argmax(const tensor& x, int axis, bool keepdims = false);
/// As `argmax`, for the smallest.
tensor argmin(const tensor& x);
/// As `argmax`, for the smallest.
tensor argmin(const tensor& x, int axis, bool keepdims = false);

namespace detail {

/// An elementwise kernel over a contiguous chunk: `out[i] = f(in[i])` for `i < n`. The engine
/// calls it on backend threads, on several disjoint chunks at once.
using unary_kernel = std::function<void(const float* in, float* out, std::int64_t n)>;

/// Issues `name(x)` running `kernel` elementwise; validates eagerly, returns at once.
tensor map_op(const tensor& x, unary_kernel kernel);

}  // namespace detail

/// Applies the user function `f` (float -> float) to every element of a float32 tensor, on the
/// backend (std::invalid_argument for another dtype: `astype` first).
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
