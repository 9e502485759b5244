// The CPU's elementwise kernels for every dtype: fill, cast, binary ops (same shape, with a
// scalar, broadcasting), unary ops and where. Each flat loop is compiled once per x86 vector
// width (COTENSOR_VECTOR_CLONES) with every op inlined into it (COTENSOR_FLATTEN). float16 and
// bfloat16 compute in float and round once: their arithmetic in AVX2 registers (half8.hpp), the
// other ops on blocks converted to float (half_convert.hpp) through float's loops. The unary ops
// of every dtype are in elementwise_unary.cpp.

#include "cpu/half8.hpp"
#include "cpu/half_convert.hpp"
#include "cpu/kernels.hpp"
#include "cpu/vector_clones.hpp"
#include "kernels/element.hpp"

#include <boost/container/small_vector.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace cotensor::detail::cpu {
namespace {

using strides = boost::container::small_vector<std::int64_t, shape::inline_rank>;

// The strides of `s` in the index space of `out` (rank `rank`): 0 where `s` broadcasts.
strides broadcast_strides(const shape& s, std::size_t rank) {
  strides stride(rank, 0);
  std::int64_t step = 1;
  for (std::size_t d = 0; d < s.rank(); ++d) {
    const std::size_t si = s.rank() - 1 - d;
    const std::size_t oi = rank - 1 - d;
    stride[oi] = s[si] == 1 ? 0 : step;
    step *= s[si];
  }
  return stride;
}

// Calls f(row, offsets...) for every row (the innermost extent) of `out_shape`, in parallel,
// with each operand's offset of that row's first element.
template <std::size_t N, class F>
void for_broadcast_rows(const shape& out_shape, const strides (&operand)[N], F&& f) {
  const std::size_t rank = out_shape.rank();
  const std::int64_t inner = rank == 0 ? 1 : out_shape[rank - 1];
  const std::int64_t n = out_shape.numel();
  const std::int64_t rows = inner == 0 ? 0 : n / inner;
  const std::int64_t grain =
      std::max<std::int64_t>(1, elementwise_grain / std::max<std::int64_t>(inner, 1));
  parallel_chunks(rows, grain, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t row = lo; row < hi; ++row) {
      std::int64_t offset[N] = {};
      std::int64_t rest = row;
      for (std::size_t d = rank - 1; d-- > 0;) {
        const std::int64_t idx = rest % out_shape[d];
        rest /= out_shape[d];
        for (std::size_t k = 0; k < N; ++k) {
          offset[k] += idx * operand[k][d];
        }
      }
      f(row * inner, offset, inner);
    }
  });
}

COTENSOR_VECTOR_CLONES void
cast_span(dtype from, const void* in, dtype to, void* out, std::int64_t n) {
  visit_dtype(from, [&](auto f) {
    using From = typename decltype(f)::type;
    visit_dtype(to, [&](auto t) {
      using To = typename decltype(t)::type;
      const auto* src = static_cast<const From*>(in);
      auto* dst = static_cast<To*>(out);
      for (std::int64_t i = 0; i < n; ++i) {
        dst[i] = convert<To>(src[i]);
      }
    });
  });
}

template <class T>
void fill_typed(void* out, std::int64_t n, T value) {
  auto* p = static_cast<T*>(out);
  parallel_chunks(n, elementwise_grain,
                  [&](std::int64_t lo, std::int64_t hi) { std::fill(p + lo, p + hi, value); });
}

// out[i] = a[i·as] ⊗ b[i·bs] over [0, n), strides 0 or 1, for a T that computes as itself.
// Inlined into the cloned binary_span_of, so that each vector width compiles its own loops.
template <binary_op Op, class T>
[[gnu::always_inline]] inline void
binary_loop(const T* a, std::int64_t as, const T* b, std::int64_t bs, void* out, std::int64_t n) {
  auto* po = static_cast<binary_out_t<Op, T>*>(out);
  if (as == 1 && bs == 1) {
    for (std::int64_t i = 0; i < n; ++i) {
      po[i] = apply_binary<Op, T>(a[i], b[i]);
    }
  } else if (as == 1) {
    const T y = b[0];
    for (std::int64_t i = 0; i < n; ++i) {
      po[i] = apply_binary<Op, T>(a[i], y);
    }
  } else if (bs == 1) {
    const T x = a[0];
    for (std::int64_t i = 0; i < n; ++i) {
      po[i] = apply_binary<Op, T>(x, b[i]);
    }
  } else {
    const auto r = apply_binary<Op, T>(a[0], b[0]);
    std::fill(po, po + n, r);
  }
}

// The loops for every op on T, one clone per vector width. flatten inlines the op's visit
// into each clone, so its loops are the clone's own: GCC compiles an inner function that is
// not inlined for the baseline (SSE2) only, whatever the caller's target.
template <class T>
COTENSOR_VECTOR_CLONES COTENSOR_FLATTEN void binary_span_of(binary_op op,
                                                            const T* a,
                                                            std::int64_t as,
                                                            const T* b,
                                                            std::int64_t bs,
                                                            void* out,
                                                            std::int64_t n) {
  visit_binary(op, [&](auto o) {
    constexpr binary_op Op = decltype(o)::value;
    if constexpr (binary_exists<Op, T>) {
      binary_loop<Op, T>(a, as, b, bs, out, n);
    }
  });
}

#if COTENSOR_HAVE_HALF8
template <binary_op Op>
COTENSOR_HALF8_TARGET inline __m256 apply_binary8(__m256 x, __m256 y) noexcept {
  if constexpr (Op == binary_op::add) {
    return _mm256_add_ps(x, y);
  } else if constexpr (Op == binary_op::sub) {
    return _mm256_sub_ps(x, y);
  } else if constexpr (Op == binary_op::mul) {
    return _mm256_mul_ps(x, y);
  } else {
    static_assert(Op == binary_op::div);
    return _mm256_div_ps(x, y);
  }
}

// The four arithmetic ops on float16 or bfloat16, eight lanes converted in AVX2 registers
// (half8.hpp), no float block between: on cached data about 3x faster than binary_span_half's
// blocks. Operands as binary_span_half's; returns how many leading elements it wrote, a
// multiple of 8.
template <binary_op Op, class H>
COTENSOR_HALF8_TARGET std::int64_t
arith_half8(const H* a, float x, const H* b, float y, H* out, std::int64_t n) noexcept {
  const __m256 vx = _mm256_set1_ps(x);
  const __m256 vy = _mm256_set1_ps(y);
  std::int64_t i = 0;
  if (a != nullptr && b != nullptr) {
    for (; i + 8 <= n; i += 8) {
      store_half8(out + i, apply_binary8<Op>(load_half8(a + i), load_half8(b + i)));
    }
  } else if (a != nullptr) {
    for (; i + 8 <= n; i += 8) {
      store_half8(out + i, apply_binary8<Op>(load_half8(a + i), vy));
    }
  } else if (b != nullptr) {
    for (; i + 8 <= n; i += 8) {
      store_half8(out + i, apply_binary8<Op>(vx, load_half8(b + i)));
    }
  }
  return i;
}

template <class H>
std::int64_t arith_half(
    binary_op op, const H* a, float x, const H* b, float y, H* out, std::int64_t n) noexcept {
  if (!cpu_has_half8()) {
    return 0;
  }
  switch (op) {
  case binary_op::add:
    return arith_half8<binary_op::add>(a, x, b, y, out, n);
  case binary_op::sub:
    return arith_half8<binary_op::sub>(a, x, b, y, out, n);
  case binary_op::mul:
    return arith_half8<binary_op::mul>(a, x, b, y, out, n);
  case binary_op::div:
    return arith_half8<binary_op::div>(a, x, b, y, out, n);
  default:
    return 0;
  }
}
#endif

// float16 and bfloat16: the arithmetic ops in AVX2 registers where the CPU has them
// (arith_half), the rest in blocks of the operands converted to float, float's loops, and the
// result rounded once; either way as one element at a time would be.
// An operand is the halves at `a` (stride 1) or, where `a` is null, the one float `x`.
constexpr std::int64_t half_block = 512;

template <class H>
void binary_span_half(
    binary_op op, const H* a, float x, const H* b, float y, void* out, std::int64_t n) {
  float fa[half_block];
  float fb[half_block];
  float fo[half_block];
  const std::int64_t as = a != nullptr ? 1 : 0;
  const std::int64_t bs = b != nullptr ? 1 : 0;
  std::int64_t done = 0;
#if COTENSOR_HAVE_HALF8
  done = arith_half(op, a, x, b, y, static_cast<H*>(out), n);
#endif
  for (std::int64_t lo = done; lo < n; lo += half_block) {
    const std::int64_t m = std::min(half_block, n - lo);
    const float* pa = &x;
    const float* pb = &y;
    if (a != nullptr) {
      to_float_span(a + lo, fa, m);
      pa = fa;
    }
    if (b != nullptr) {
      to_float_span(b + lo, fb, m);
      pb = fb;
    }
    if (writes_bool(op)) {
      binary_span_of<float>(op, pa, as, pb, bs, static_cast<bool*>(out) + lo, m);
    } else {
      binary_span_of<float>(op, pa, as, pb, bs, fo, m);
      from_float_span(fo, static_cast<H*>(out) + lo, m);
    }
  }
}

// out[i] = a[i] ⊗ b[i] (or a[i·as] ⊗ b[i·bs] with strides 0 or 1) over [0, n).
void binary_span_typed(binary_op op,
                       dtype t,
                       const void* a,
                       std::int64_t as,
                       const void* b,
                       std::int64_t bs,
                       void* out,
                       std::int64_t n) {
  visit_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto* pa = static_cast<const T*>(a);
    const auto* pb = static_cast<const T*>(b);
    if constexpr (is_half_v<T>) {
      binary_span_half(op, as == 1 ? pa : nullptr, as == 1 ? 0.0F : static_cast<float>(pa[0]),
                       bs == 1 ? pb : nullptr, bs == 1 ? 0.0F : static_cast<float>(pb[0]), out, n);
    } else {
      binary_span_of<T>(op, pa, as, pb, bs, out, n);
    }
  });
}

// out[i] = a[i] ⊗ s, or s ⊗ a[i], over [0, n): the loops with a stride-0 operand. The scalar
// comes in the compute type (for the halves a float that the frontend already rounded to them).
void scalar_span_typed(binary_op op,
                       dtype t,
                       const void* a,
                       scalar_arg s,
                       bool scalar_left,
                       void* out,
                       std::int64_t n) {
  visit_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto* pa = static_cast<const T*>(a);
    const compute_t<T> c = scalar_as<compute_t<T>>(s);
    if constexpr (is_half_v<T>) {
      if (scalar_left) {
        binary_span_half<T>(op, nullptr, c, pa, 0.0F, out, n);
      } else {
        binary_span_half<T>(op, pa, 0.0F, nullptr, c, out, n);
      }
    } else if (scalar_left) {
      binary_span_of<T>(op, &c, 0, pa, 1, out, n);
    } else {
      binary_span_of<T>(op, pa, 1, &c, 0, out, n);
    }
  });
}

std::size_t out_itemsize(binary_op op, dtype t) { return writes_bool(op) ? 1 : itemsize(t); }

template <class T>
const T* at(const void* p, std::int64_t i) {
  return static_cast<const T*>(p) + i;
}

}  // namespace

void fill(const fill_args& args) {
  visit_dtype(args.t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    fill_typed<T>(args.out, args.n, store<T>(scalar_as<compute_t<T>>(args.value)));
  });
}

void cast(const cast_args& args) {
  const dtype from = args.from;
  const dtype to = args.to;
  const std::size_t fi = itemsize(from);
  const std::size_t ti = itemsize(to);
  parallel_chunks(args.n, elementwise_grain, [&](std::int64_t lo, std::int64_t hi) {
    const void* src = offset_bytes(args.in, lo, fi);
    void* dst = offset_bytes(args.out, lo, ti);
    const std::int64_t m = hi - lo;
    // float32 to and from the halves: the span conversions (AVX2, F16C), the same bits.
    if (from == dtype::float16 && to == dtype::float32) {
      to_float_span(static_cast<const float16_t*>(src), static_cast<float*>(dst), m);
    } else if (from == dtype::bfloat16 && to == dtype::float32) {
      to_float_span(static_cast<const bfloat16_t*>(src), static_cast<float*>(dst), m);
    } else if (from == dtype::float32 && to == dtype::float16) {
      from_float_span(static_cast<const float*>(src), static_cast<float16_t*>(dst), m);
    } else if (from == dtype::float32 && to == dtype::bfloat16) {
      from_float_span(static_cast<const float*>(src), static_cast<bfloat16_t*>(dst), m);
    } else {
      cast_span(from, src, to, dst, m);
    }
  });
}

void binary_same_shape(const binary_same_shape_args& args) {
  const std::size_t item = itemsize(args.t);
  const std::size_t oitem = out_itemsize(args.op, args.t);
  parallel_chunks(args.n, elementwise_grain, [&](std::int64_t lo, std::int64_t hi) {
    binary_span_typed(args.op, args.t, offset_bytes(args.a, lo, item), 1,
                      offset_bytes(args.b, lo, item), 1, offset_bytes(args.out, lo, oitem),
                      hi - lo);
  });
}

void binary_scalar(const binary_scalar_args& args) {
  const std::size_t item = itemsize(args.t);
  const std::size_t oitem = out_itemsize(args.op, args.t);
  parallel_chunks(args.n, elementwise_grain, [&](std::int64_t lo, std::int64_t hi) {
    scalar_span_typed(args.op, args.t, offset_bytes(args.a, lo, item), args.s, args.scalar_left,
                      offset_bytes(args.out, lo, oitem), hi - lo);
  });
}

void binary(const binary_args& args) {
  const binary_op op = args.op;
  const dtype t = args.t;
  const shape& out_shape = args.out_shape;
  if (args.a_shape == args.b_shape) {
    binary_same_shape(
        {.op = op, .t = t, .a = args.a, .b = args.b, .out = args.out, .n = out_shape.numel()});
    return;
  }
  const std::size_t item = itemsize(t);
  const std::size_t oitem = out_itemsize(op, t);
  const std::size_t rank = out_shape.rank();
  const strides operand[2] = {broadcast_strides(args.a_shape, rank),
                              broadcast_strides(args.b_shape, rank)};
  const std::int64_t as = operand[0][rank - 1];
  const std::int64_t bs = operand[1][rank - 1];
  for_broadcast_rows(out_shape, operand,
                     [&](std::int64_t first, const std::int64_t* offset, std::int64_t inner) {
                       binary_span_typed(op, t, offset_bytes(args.a, offset[0], item), as,
                                         offset_bytes(args.b, offset[1], item), bs,
                                         offset_bytes(args.out, first, oitem), inner);
                     });
}

void where(const where_args& args) {
  const std::size_t rank = args.out_shape.rank();
  if (rank == 0) {
    const std::size_t item = itemsize(args.t);
    std::memcpy(args.out, *static_cast<const bool*>(args.cond) ? args.a : args.b, item);
    return;
  }
  const strides operand[3] = {broadcast_strides(args.cond_shape, rank),
                              broadcast_strides(args.a_shape, rank),
                              broadcast_strides(args.b_shape, rank)};
  visit_dtype(args.t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const std::int64_t cs = operand[0][rank - 1];
    const std::int64_t as = operand[1][rank - 1];
    const std::int64_t bs = operand[2][rank - 1];
    for_broadcast_rows(args.out_shape, operand,
                       [&](std::int64_t first, const std::int64_t* off, std::int64_t inner) {
                         const bool* c = at<bool>(args.cond, off[0]);
                         const T* pa = at<T>(args.a, off[1]);
                         const T* pb = at<T>(args.b, off[2]);
                         T* po = static_cast<T*>(args.out) + first;
                         for (std::int64_t i = 0; i < inner; ++i) {
                           po[i] = c[i * cs] ? pa[i * as] : pb[i * bs];
                         }
                       });
  });
}

}  // namespace cotensor::detail::cpu
