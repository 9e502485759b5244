// The CPU's reductions over the middle axis of [outer, extent, inner], for every dtype:
// sum (and so mean), max, min, argmax, argmin. Sums accumulate in int64 (bool, integers,
// wrapping), float (float16, bfloat16) or double (float32, float64), in fixed chunks, so the
// result does not depend on the number of threads.

#include "cpu/kernels.hpp"
#include "cpu/vector_clones.hpp"
#include "kernels/element.hpp"

#include <boost/container/small_vector.hpp>

#include <algorithm>
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

// max/min (Arg false) or argmax/argmin (Arg true): the first extreme, or the first NaN.
template <class T, bool Max, bool Arg>
void extreme_typed(
    const T* in, std::int64_t outer, std::int64_t extent, std::int64_t inner, void* out) {
  using C = compute_t<T>;
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
