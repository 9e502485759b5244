#pragma once

// The kernels the frontend issues, picked by device from tables the backends fill (MXNet's
// FCompute<cpu> / FCompute<gpu>): the frontend names no backend. Every pointer is a device's
// implementation, called on one of that device's backend threads with its buffers' memory.

#include "cotensor/device.hpp"
#include "cotensor/shape.hpp"

#include "function_ref.hpp"

#include <cstdint>

namespace cotensor::detail {

enum class binary_op : std::uint8_t { add, sub, mul, div };

/// The most dimensions a broadcasting `binary` takes on a GPU (the frontend checks it at the
/// call; the CPU has no limit).
constexpr int gpu_max_broadcast_rank = 8;
enum class unary_op : std::uint8_t { neg, relu, exp, log, sqrt, tanh, sigmoid };

/// One device type's kernels. Results never depend on the number of threads.
struct kernel_table {
  /// out[i] = value.
  void (*fill)(float* out, std::int64_t n, float value);
  /// out[i] = in[i], both on this device.
  void (*copy)(const float* in, float* out, std::int64_t n);
  /// out[i] = host[i], from host memory.
  void (*copy_from_host)(const float* host, float* out, std::int64_t n);
  /// host[i] = in[i], into host memory; null for the CPU (its `copy` does it).
  void (*copy_to_host)(const float* in, float* host, std::int64_t n);
  /// out = a ⊗ b with NumPy broadcasting; `out_shape` is the broadcast shape. `out` may alias
  /// `a` when `a_shape == out_shape`, or `b` when `b_shape == out_shape`.
  void (*binary)(binary_op op,
                 const float* a,
                 const shape& a_shape,
                 const float* b,
                 const shape& b_shape,
                 float* out,
                 const shape& out_shape);
  /// out = a ⊗ b elementwise over `n` elements of equal shape; `out` may alias `a` or `b`.
  void (*binary_same_shape)(
      binary_op op, const float* a, const float* b, float* out, std::int64_t n);
  /// out = a ⊗ s (or s ⊗ a when `scalar_left`), elementwise; `out` may alias `a`.
  void (*binary_scalar)(
      binary_op op, const float* a, float s, bool scalar_left, float* out, std::int64_t n);
  /// out = f(in) elementwise; `out` may alias `in`. exp, log, tanh and sigmoid within 4 ulp.
  void (*unary)(unary_op op, const float* in, float* out, std::int64_t n);
  /// c[m, n] = a[m, k] · b[k, n], row-major, FP32.
  void (*matmul)(
      const float* a, const float* b, float* c, std::int64_t m, std::int64_t k, std::int64_t n);
  /// out[cols, rows] = in[rows, cols]ᵀ.
  void (*transpose)(const float* in, float* out, std::int64_t rows, std::int64_t cols);
  /// out[0] = (Σ in[i]) / divisor, accumulated in double in fixed chunks: deterministic.
  void (*sum)(const float* in, std::int64_t n, double divisor, float* out);
  /// out[o, i] = scale · Σ_a in[o, a, i] for a tensor viewed as [outer, extent, inner].
  void (*sum_axis)(const float* in,
                   std::int64_t outer,
                   std::int64_t extent,
                   std::int64_t inner,
                   double scale,
                   float* out);
  /// Standard normal samples: element i from Philox-4x32-10 block i/4 of stream `stream` under
  /// key `seed`, through Box-Muller: the same bits on every device.
  void (*randn)(float* out, std::int64_t n, std::uint64_t seed, std::uint64_t stream);
  /// Calls `f(begin, end)` over `[0, n)` in chunks of about `grain`, in parallel, on host
  /// threads that may touch the device's memory (`map`'s user functions); null for a device
  /// whose memory the host cannot touch.
  void (*host_chunks)(std::int64_t n,
                      std::int64_t grain,
                      function_ref<void(std::int64_t, std::int64_t)> f);
};

/// The CPU's table, always there: the common case costs one load. Registered, as every other
/// device's, in src/backends.cpp.
extern const kernel_table* const cpu_kernel_table;
/// The kernels of `d`'s device type, for any device. Throws std::system_error
/// (errc::device_unavailable) if this build has none.
const kernel_table& device_kernels(device d);
/// The kernels of `d`'s device type; as `device_kernels`.
inline const kernel_table& kernels_for(device d) {
  return d.is_cpu() ? *cpu_kernel_table : device_kernels(d);
}

}  // namespace cotensor::detail
