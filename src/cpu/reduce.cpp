// The CPU's reductions over the middle axis of [outer, extent, inner], for every dtype:
// sum (and so mean), max, min, argmax, argmin. Sums accumulate in int64 (bool, integers,
// wrapping), float (float16, bfloat16) or double (float32, float64), in fixed chunks, so the
// result does not depend on the number of threads.

#include "cpu/kernels.hpp"
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
        const std::int64_t end = std::min(extent, (c + 1) * chunk);
        A acc{};
        for (std::int64_t i = c * chunk; i < end; ++i) {
          acc = accumulate(acc, static_cast<A>(load(in[i])));
        }
        partial[static_cast<std::size_t>(c)] = acc;
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
  if (args.t == dtype::float32 && args.op == reduce_op::sum) {  // the common case, as it always was
    const auto* f = static_cast<const float*>(args.in);
    if (outer == 1 && inner == 1) {
      static_cast<float*>(out)[0] = static_cast<float>(sum(f, extent) * scale);
    } else {
      sum_axis(f, outer, extent, inner, scale, static_cast<float*>(out));
    }
    return;
  }
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
