// The CUDA backend's elementwise kernels for every dtype: fill, cast, binary ops (same shape,
// with a scalar, broadcasting), unary ops, where, and SwiGLU's gate (silu_and_mul). The element
// functions are the CPU's (src/kernels/element.hpp, constexpr): float16 and bfloat16 compute in
// float and round once with the same conversion, so wherever an operation is exact the GPU writes
// the CPU's bits. Built without fast math or fused multiply-add (see CMakeLists.txt).

#include "cuda/cuda_error.hpp"
#include "cuda/grid.cuh"
#include "cuda/typed_kernels.hpp"
#include "kernels/element.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace cotensor::detail::cuda {
namespace {

// Offsets of output element i in each operand: Strides operands of layout `l`.
template <int N>
__device__ inline void
operand_offsets(const elementwise_layout& l, std::int64_t i, std::int64_t (&offset)[N]) {
  std::int64_t rest = i;
  for (int k = 0; k < N; ++k) {
    offset[k] = 0;
  }
  for (int d = l.rank - 1; d >= 0; --d) {
    const std::int64_t idx = rest % l.extent[d];
    rest /= l.extent[d];
    for (int k = 0; k < N; ++k) {
      offset[k] += idx * l.stride[k][d];
    }
  }
}

template <class T>
__global__ void fill_kernel(T* out, std::int64_t n, T value) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    out[i] = value;
  }
}

template <class From, class To>
__global__ void cast_kernel(const From* in, To* out, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    out[i] = convert<To>(in[i]);
  }
}

template <binary_op Op, class T>
__device__ inline void
put(binary_out_t<Op, T>* out, std::int64_t i, compute_t<T> x, compute_t<T> y) {
  const auto r = apply_binary<Op, compute_t<T>>(x, y);
  if constexpr (writes_bool(Op)) {
    out[i] = r;
  } else {
    out[i] = store<T>(r);
  }
}

template <binary_op Op, class T>
__global__ void
same_shape_kernel(const T* a, const T* b, binary_out_t<Op, T>* out, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    put<Op, T>(out, i, load(a[i]), load(b[i]));
  }
}

template <binary_op Op, class T>
__global__ void
scalar_kernel(const T* a, compute_t<T> s, bool left, binary_out_t<Op, T>* out, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    if (left) {
      put<Op, T>(out, i, s, load(a[i]));
    } else {
      put<Op, T>(out, i, load(a[i]), s);
    }
  }
}

template <binary_op Op, class T>
__global__ void broadcast_kernel(
    const T* a, const T* b, binary_out_t<Op, T>* out, elementwise_layout layout, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    std::int64_t offset[2];
    operand_offsets<2>(layout, i, offset);
    put<Op, T>(out, i, load(a[offset[0]]), load(b[offset[1]]));
  }
}

template <class T>
__global__ void where_kernel(
    const bool* cond, const T* a, const T* b, T* out, elementwise_layout layout, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    std::int64_t offset[3];
    operand_offsets<3>(layout, i, offset);
    out[i] = cond[offset[0]] ? a[offset[1]] : b[offset[2]];
  }
}

// Unary math in the compute type: float for float16/bfloat16/float32, double for float64.
template <unary_op Op, class C>
__device__ inline C unary_math(C x) {
  constexpr bool dbl = std::is_same_v<C, double>;
  if constexpr (Op == unary_op::neg) {
    if constexpr (std::is_integral_v<C>) {
      return wrap_sub(C{0}, x);
    } else {
      return -x;
    }
  } else if constexpr (Op == unary_op::abs) {
    if constexpr (std::is_integral_v<C>) {
      return x < 0 ? wrap_sub(C{0}, x) : x;
    } else {
      return dbl ? fabs(x) : fabsf(x);
    }
  } else if constexpr (Op == unary_op::relu) {
    return x > C{0} || is_nan(x) ? x : C{0};
  } else if constexpr (Op == unary_op::logical_not) {
    return x == C{0} ? C{1} : C{0};
  } else if constexpr (std::is_integral_v<C>) {
    return x;  // transcendental ops never reach integers (the frontend casts first)
  } else if constexpr (Op == unary_op::exp) {
    return dbl ? ::exp(x) : expf(x);
  } else if constexpr (Op == unary_op::log) {
    return dbl ? ::log(x) : logf(x);
  } else if constexpr (Op == unary_op::sqrt) {
    return dbl ? ::sqrt(x) : sqrtf(x);
  } else if constexpr (Op == unary_op::tanh) {
    return dbl ? ::tanh(x) : tanhf(x);
  } else if constexpr (Op == unary_op::sigmoid) {
    // As the CPU: 1 / (1 + e^-|x|), or e^x / (1 + e^x) for negative x.
    const C e = dbl ? ::exp(-fabs(x)) : expf(-fabsf(x));
    return x < C{0} ? e / (C{1} + e) : C{1} / (C{1} + e);
  } else if constexpr (Op == unary_op::gelu_erf) {
    // x·Φ(x) = x·erfc(−x/√2)/2, in double and rounded once, as the CPU (no cancellation for
    // large negative x).
    const double d = x;
    return static_cast<C>(0.5 * d * ::erfc(d * -0.70710678118654752440));
  } else {
    static_assert(Op == unary_op::gelu_tanh);
    // x·(1 + tanh u)/2 = x / (1 + e^(−2u)), in double and rounded once, as the CPU.
    const double d = x;
    const double k = 0.79788456080286535588;  // √(2/π)
    return static_cast<C>(d / (1.0 + ::exp(-2.0 * k * (d + 0.044715 * d * d * d))));
  }
}

template <unary_op Op, class T>
__global__ void unary_kernel(const T* in, T* out, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    out[i] = store<T>(unary_math<Op, compute_t<T>>(load(in[i])));
  }
}

// silu(g)·u = g·σ(g)·u for output element i of [rows, cols], g and u from the halves of its
// input row, in the compute type and rounded once, as the CPU.
template <class T>
__global__ void silu_and_mul_kernel(const T* in, T* out, std::int64_t cols, std::int64_t n) {
  using C = compute_t<T>;
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const std::int64_t r = i / cols;
    const std::int64_t j = i % cols;
    const C g = load(in[r * 2 * cols + j]);
    const C u = load(in[r * 2 * cols + cols + j]);
    out[i] = store<T>(g * unary_math<unary_op::sigmoid, C>(g) * u);
  }
}

// The unary ops each dtype takes (the frontend casts or refuses the rest): the kernels
// instantiated.
template <unary_op Op, class T>
constexpr bool unary_exists = std::is_same_v<T, bool>
                                  ? Op == unary_op::logical_not
                                  : (is_float_v<T> || Op == unary_op::neg || Op == unary_op::abs ||
                                     Op == unary_op::relu) &&
                                        Op != unary_op::logical_not;

}  // namespace

void fill(const fill_args& args) {
  const std::int64_t n = args.n;
  if (n == 0) {
    return;
  }
  visit_dtype(args.t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    fill_kernel<T><<<blocks_for(n), threads, 0, launch_stream()>>>(
        static_cast<T*>(args.out), n, store<T>(scalar_as<compute_t<T>>(args.value)));
  });
  check_launch("fill_kernel");
}

void cast(const cast_args& args) {
  const std::int64_t n = args.n;
  if (n == 0) {
    return;
  }
  cudaStream_t stream = launch_stream();
  if (args.from == args.to) {
    COTENSOR_CUDA_CHECK(cudaMemcpyAsync(args.out, args.in,
                                        static_cast<std::size_t>(n) * itemsize(args.to),
                                        cudaMemcpyDeviceToDevice, stream));
    return;
  }
  visit_dtype(args.from, [&](auto f) {
    using From = typename decltype(f)::type;
    visit_dtype(args.to, [&](auto tt) {
      using To = typename decltype(tt)::type;
      cast_kernel<From, To><<<blocks_for(n), threads, 0, stream>>>(
          static_cast<const From*>(args.in), static_cast<To*>(args.out), n);
    });
  });
  check_launch("cast_kernel");
}

namespace {

// Same-shape operands (`layout` null) or broadcast ones.
void binary_launch(const binary_same_shape_args& args, const elementwise_layout* layout) {
  const std::int64_t n = args.n;
  if (n == 0) {
    return;
  }
  cudaStream_t stream = launch_stream();
  visit_dtype(args.t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_binary(args.op, [&](auto o) {
      constexpr binary_op Op = decltype(o)::value;
      if constexpr (binary_exists<Op, T>) {
        using Out = binary_out_t<Op, T>;
        const auto* pa = static_cast<const T*>(args.a);
        const auto* pb = static_cast<const T*>(args.b);
        auto* po = static_cast<Out*>(args.out);
        if (layout == nullptr) {
          same_shape_kernel<Op, T><<<blocks_for(n), threads, 0, stream>>>(pa, pb, po, n);
        } else {
          broadcast_kernel<Op, T><<<blocks_for(n), threads, 0, stream>>>(pa, pb, po, *layout, n);
        }
      } else {
        throw std::invalid_argument("cotensor: an elementwise op on a dtype it does not take");
      }
    });
  });
  check_launch("binary_kernel");
}

}  // namespace

void binary_same_shape(const binary_same_shape_args& args) { binary_launch(args, nullptr); }

void launch_binary(const binary_same_shape_args& args, const elementwise_layout& layout) {
  binary_launch(args, &layout);
}

void binary_scalar(const binary_scalar_args& args) {
  const std::int64_t n = args.n;
  if (n == 0) {
    return;
  }
  cudaStream_t stream = launch_stream();
  visit_dtype(args.t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_binary(args.op, [&](auto o) {
      constexpr binary_op Op = decltype(o)::value;
      if constexpr (binary_exists<Op, T>) {
        scalar_kernel<Op, T><<<blocks_for(n), threads, 0, stream>>>(
            static_cast<const T*>(args.a), scalar_as<compute_t<T>>(args.s), args.scalar_left,
            static_cast<binary_out_t<Op, T>*>(args.out), n);
      } else {
        throw std::invalid_argument("cotensor: an elementwise op on a dtype it does not take");
      }
    });
  });
  check_launch("scalar_kernel");
}

void unary(const unary_args& args) {
  const std::int64_t n = args.n;
  if (n == 0) {
    return;
  }
  cudaStream_t stream = launch_stream();
  visit_dtype(args.t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_unary(args.op, [&](auto o) {
      constexpr unary_op Op = decltype(o)::value;
      if constexpr (unary_exists<Op, T>) {
        unary_kernel<Op, T><<<blocks_for(n), threads, 0, stream>>>(static_cast<const T*>(args.in),
                                                                   static_cast<T*>(args.out), n);
      } else {
        throw std::invalid_argument("cotensor: a unary op on a dtype it does not take");
      }
    });
  });
  check_launch("unary_kernel");
}

void silu_and_mul(const silu_and_mul_args& args) {
  const std::int64_t n = args.rows * args.cols;
  if (n == 0) {
    return;
  }
  with_float(args.t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    silu_and_mul_kernel<T><<<blocks_for(n), threads, 0, launch_stream()>>>(
        static_cast<const T*>(args.in), static_cast<T*>(args.out), args.cols, n);
  });
  check_launch("silu_and_mul_kernel");
}

void launch_where(const where_args& args, const elementwise_layout& layout) {
  const std::int64_t n = args.out_shape.numel();
  if (n == 0) {
    return;
  }
  visit_dtype(args.t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    where_kernel<T><<<blocks_for(n), threads, 0, launch_stream()>>>(
        static_cast<const bool*>(args.cond), static_cast<const T*>(args.a),
        static_cast<const T*>(args.b), static_cast<T*>(args.out), layout, n);
  });
  check_launch("where_kernel");
}

}  // namespace cotensor::detail::cuda
