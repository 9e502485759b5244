// The CPU's reductions over the middle axis of [outer, extent, inner], for every dtype:
// sum (and so mean), max, min, argmax, argmin. Sums accumulate in int64 (bool, integers,
// wrapping), float (float16, bfloat16) or double (float32, float64), in fixed chunks, so the
// result does not depend on the number of threads.

#include "cpu/kernels.hpp"
#include "cpu/vector_clones.hpp"
#include "kernels/element.hpp"

#include <boost/container/small_vector.hpp>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

namespace cotensor::detail::cpu {
namespace {

template <class T>
using sum_acc_t = std::
    conditional_t<is_half_v<T>, float, std::conditional_t<is_float_v<T>, double, std::int64_t>>;
template <class T>
using sum_out_t = std::conditional_t<is_float_v<T>, T, std::int64_t>;

template <class A>
A accumulate(A acc, A x) {
  if constexpr (std::is_integral_v<A>) {
    return wrap_add(acc, x);
  } else {
    return acc + x;
  }
}

// The sum of in[0, n) in `lanes` partial sums, element i into lane i % lanes, the lanes added
// in order at the end: a fixed order (so the same bits whatever the threads) that the compiler
// vectorises, where one running sum waits on each addition's latency.
template <class A, class T>
A lane_sum(const T* in, std::int64_t n) {
  constexpr std::int64_t lanes = 16;
  A acc[lanes] = {};
  std::int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    for (std::int64_t l = 0; l < lanes; ++l) {
      acc[l] = accumulate(acc[l], static_cast<A>(load(in[i + l])));
    }
  }
  for (std::int64_t l = 0; i < n; ++i, ++l) {
    acc[l] = accumulate(acc[l], static_cast<A>(load(in[i])));
  }
  A total{};
  for (const A a : acc) {
    total = accumulate(total, a);
  }
  return total;
}

// float32 and float64, the sums of the long rows, once per vector width.
COTENSOR_VECTOR_CLONES double lane_sum_of(const float* in, std::int64_t n) {
  return lane_sum<double>(in, n);
}
COTENSOR_VECTOR_CLONES double lane_sum_of(const double* in, std::int64_t n) {
  return lane_sum<double>(in, n);
}
template <class T>
sum_acc_t<T> lane_sum_of(const T* in, std::int64_t n) {
  return lane_sum<sum_acc_t<T>>(in, n);
}

template <class T>
void sum_typed(const T* in,
               std::int64_t outer,
               std::int64_t extent,
               std::int64_t inner,
               double scale,
               sum_out_t<T>* out) {
  using A = sum_acc_t<T>;
  auto finish = [&](A acc) -> sum_out_t<T> {
    if constexpr (std::is_integral_v<A>) {
      return acc;
    } else if constexpr (is_half_v<T>) {
      return T(static_cast<float>(static_cast<double>(acc) * scale));
    } else {
      return static_cast<T>(static_cast<double>(acc) * scale);
    }
  };
  if (outer == 1 && inner == 1) {
    // One long row: partial sums over fixed chunks, in parallel, added in order.
    constexpr std::int64_t chunk = 1 << 14;
    const std::int64_t chunks = (extent + chunk - 1) / chunk;
    boost::container::small_vector<A, 256> partial(static_cast<std::size_t>(chunks), A{});
    parallel_chunks(chunks, 1, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t c = lo; c < hi; ++c) {
        const std::int64_t begin = c * chunk;
        partial[static_cast<std::size_t>(c)] =
            lane_sum_of(in + begin, std::min(extent, begin + chunk) - begin);
      }
    });
    A total{};
    for (A p : partial) {
      total = accumulate(total, p);
    }
    out[0] = finish(total);
    return;
  }
  parallel_chunks(
      outer,
      std::max<std::int64_t>(1, elementwise_grain / std::max<std::int64_t>(extent * inner, 1)),
      [&](std::int64_t lo, std::int64_t hi) {
        boost::container::small_vector<A, 64> acc(static_cast<std::size_t>(inner));
        for (std::int64_t o = lo; o < hi; ++o) {
          std::fill(acc.begin(), acc.end(), A{});
          const T* base = in + o * extent * inner;
          for (std::int64_t a = 0; a < extent; ++a) {
            for (std::int64_t i = 0; i < inner; ++i) {
              auto& slot = acc[static_cast<std::size_t>(i)];
              slot = accumulate(slot, static_cast<A>(load(base[a * inner + i])));
            }
          }
          for (std::int64_t i = 0; i < inner; ++i) {
            out[o * inner + i] = finish(acc[static_cast<std::size_t>(i)]);
          }
        }
      });
}

// Sixteen floats or eight doubles and their lanes' masks, in GCC's and Clang's vector
// extensions: one register per clone on AVX-512, two on AVX2, four on SSE2.
using floats16 = float __attribute__((vector_size(64)));
using doubles8 = double __attribute__((vector_size(64)));
using masks16 = std::int32_t __attribute__((vector_size(64)));
using masks8 = std::int64_t __attribute__((vector_size(64)));
template <class C>
using lanes_of = std::conditional_t<std::is_same_v<C, double>, doubles8, floats16>;
template <class C>
using masks_of = std::conditional_t<std::is_same_v<C, double>, masks8, masks16>;

// v = x[0 .. lanes) in the compute type (through a reference: a vector returned by value
// would be passed in a different way in each clone).
template <class T, class V>
void load_lanes(const T* x, V& v) {
  if constexpr (std::is_same_v<T, compute_t<T>>) {  // float32, float64
    std::memcpy(&v, x, sizeof v);
  } else if constexpr (std::is_same_v<T, bfloat16_t>) {  // the upper halves of floats
    using halves16 = std::uint16_t __attribute__((vector_size(32)));
    using words16 = std::uint32_t __attribute__((vector_size(64)));
    halves16 h;
    std::memcpy(&h, x, sizeof h);
    const words16 w = __builtin_convertvector(h, words16) << 16;
    std::memcpy(&v, &w, sizeof v);
  } else {  // float16: element by element
    constexpr std::size_t lanes = sizeof(V) / sizeof(compute_t<T>);
    compute_t<T> block[lanes];
    for (std::size_t l = 0; l < lanes; ++l) {
      block[l] = load(x[l]);
    }
    std::memcpy(&v, block, sizeof v);
  }
}

// Whether any lane of a comparison's mask (16 lanes of 4 bytes or 8 of 8) is set: the halves
// folded onto each other (a few shuffles, where reading the lanes one by one took most of a
// search's time). By reference, as load_lanes gives its vector.
template <class M>
bool any_lane(const M& lanes) {
  M m = lanes;
  if constexpr (sizeof(m[0]) == 4) {
    m |= __builtin_shufflevector(m, m, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
    m |= __builtin_shufflevector(m, m, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3);
    m |= __builtin_shufflevector(m, m, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1);
    m |= __builtin_shufflevector(m, m, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0);
  } else {
    m |= __builtin_shufflevector(m, m, 4, 5, 6, 7, 0, 1, 2, 3);
    m |= __builtin_shufflevector(m, m, 2, 3, 0, 1, 2, 3, 0, 1);
    m |= __builtin_shufflevector(m, m, 1, 0, 1, 0, 1, 0, 1, 0);
  }
  return m[0] != 0;
}

// The index of a contiguous row's first largest (Max) or smallest element, or of its first NaN:
// one pass four vectors at a time, each lane keeping its extreme and whether it saw a NaN, then
// a search for the first element equal to the extreme (or the first NaN), a vector at a time.
// The same answer as comparing element by element, which waits on each comparison: argmax over
// 16 rows of 50,257 bfloat16 logits (a language model's greedy step), an op on two workers of
// AMD Zen 4, 730 -> 117 us; max 980 -> 122 us.
template <class T, bool Max>
std::int64_t first_extreme(const T* x, std::int64_t n) {
  using C = compute_t<T>;
  using V = lanes_of<C>;
  using M = masks_of<C>;
  constexpr std::int64_t lanes = sizeof(V) / sizeof(C);
  // Four vectors a step, each its own chain of comparisons.
  V best[4];
  M nan[4];
  for (int u = 0; u < 4; ++u) {
    best[u] = V{} + load(x[0]);
    nan[u] = M{};
  }
  std::int64_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    for (int u = 0; u < 4; ++u) {
      V v;
      load_lanes(x + i + u * lanes, v);
      nan[u] |= v != v;
      best[u] = (Max ? v > best[u] : v < best[u]) ? v : best[u];
    }
  }
  bool any_nan = false;
  C extreme = best[0][0];
  for (int u = 0; u < 4; ++u) {
    for (std::int64_t l = 0; l < lanes; ++l) {
      any_nan = any_nan || nan[u][l] != 0;
      extreme = (Max ? best[u][l] > extreme : best[u][l] < extreme) ? best[u][l] : extreme;
    }
  }
  for (; i < n; ++i) {
    const C v = load(x[i]);
    any_nan = any_nan || v != v;
    extreme = (Max ? v > extreme : v < extreme) ? v : extreme;
  }
  // The first element that is the answer: equal to the extreme, or NaN when there is one.
  const V target = V{} + extreme;
  std::int64_t at = 0;
  for (; at + lanes <= n; at += lanes) {
    V v;
    load_lanes(x + at, v);
    if (any_lane(any_nan ? v != v : v == target)) {
      break;
    }
  }
  const auto is_answer = [&](C v) { return any_nan ? v != v : v == extreme; };
  while (at < n && !is_answer(load(x[at]))) {
    ++at;
  }
  return at;
}

// One clone per vector width for the floating types; integers element by element below.
#define COTENSOR_FIRST_EXTREME(T)                                                                  \
  COTENSOR_VECTOR_CLONES COTENSOR_FLATTEN std::int64_t first_largest(const T* x, std::int64_t n) { \
    return first_extreme<T, true>(x, n);                                                           \
  }                                                                                                \
  COTENSOR_VECTOR_CLONES COTENSOR_FLATTEN std::int64_t first_smallest(const T* x,                  \
                                                                      std::int64_t n) {            \
    return first_extreme<T, false>(x, n);                                                          \
  }
COTENSOR_FIRST_EXTREME(float)
COTENSOR_FIRST_EXTREME(double)
COTENSOR_FIRST_EXTREME(bfloat16_t)
COTENSOR_FIRST_EXTREME(float16_t)
#undef COTENSOR_FIRST_EXTREME

// max/min (Arg false) or argmax/argmin (Arg true): the first extreme, or the first NaN.
template <class T, bool Max, bool Arg>
void extreme_typed(
    const T* in, std::int64_t outer, std::int64_t extent, std::int64_t inner, void* out) {
  using C = compute_t<T>;
  if constexpr (is_float_v<T>) {
    if (inner == 1 && extent >= 64) {  // contiguous rows long enough for the lanes
      parallel_chunks(outer, std::max<std::int64_t>(1, elementwise_grain / extent),
                      [&](std::int64_t lo, std::int64_t hi) {
                        for (std::int64_t r = lo; r < hi; ++r) {
                          const T* row = in + r * extent;
                          const std::int64_t where =
                              Max ? first_largest(row, extent) : first_smallest(row, extent);
                          if constexpr (Arg) {
                            static_cast<std::int64_t*>(out)[r] = where;
                          } else {
                            static_cast<T*>(out)[r] = row[where];
                          }
                        }
                      });
      return;
    }
  }
  auto better = [](C x, C best) {
    if (is_nan(best)) {
      return false;
    }
    if (is_nan(x)) {
      return true;
    }
    return Max ? x > best : x < best;
  };
  parallel_chunks(outer * inner, std::max<std::int64_t>(1, elementwise_grain / extent),
                  [&](std::int64_t lo, std::int64_t hi) {
                    for (std::int64_t r = lo; r < hi; ++r) {
                      const std::int64_t o = r / inner;
                      const std::int64_t i = r % inner;
                      const T* base = in + o * extent * inner + i;
                      C best = load(base[0]);
                      std::int64_t where = 0;
                      for (std::int64_t a = 1; a < extent; ++a) {
                        const C x = load(base[a * inner]);
                        if (better(x, best)) {
                          best = x;
                          where = a;
                        }
                      }
                      if constexpr (Arg) {
                        static_cast<std::int64_t*>(out)[r] = where;
                      } else {
                        static_cast<T*>(out)[r] = base[where * inner];
                      }
                    }
                  });
}

}  // namespace

void reduce(const reduce_args& args) {
  const std::int64_t outer = args.outer;
  const std::int64_t extent = args.extent;
  const std::int64_t inner = args.inner;
  const double scale = args.scale;
  void* out = args.out;
  visit_dtype(args.t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto* p = static_cast<const T*>(args.in);
    visit_reduce(args.op, [&](auto o) {
      constexpr reduce_op Op = decltype(o)::value;
      if constexpr (Op == reduce_op::sum) {
        sum_typed<T>(p, outer, extent, inner, scale, static_cast<sum_out_t<T>*>(out));
      } else {
        constexpr bool largest = Op == reduce_op::max || Op == reduce_op::argmax;
        constexpr bool index = Op == reduce_op::argmax || Op == reduce_op::argmin;
        extreme_typed<T, largest, index>(p, outer, extent, inner, out);
      }
    });
  });
}

}  // namespace cotensor::detail::cpu
