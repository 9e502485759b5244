// The CPU's kernels for the ops models are made of: softmax and log-softmax, layer norm, and
// the copies behind concat, slice and index_select. Row by row, rows in parallel; float16 and
// bfloat16 compute in float, float32 accumulates in double where a row is summed.

#include "cpu/half_convert.hpp"
#include "cpu/kernels.hpp"
#include "cpu/row_sums.hpp"
#include "cpu/vector_clones.hpp"
#include "kernels/element.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace cotensor::detail::cpu {
namespace {

template <class T>
using row_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class T>
void softmax_typed(const T* in, T* out, std::int64_t rows, std::int64_t cols, bool log) {
  using C = row_t<T>;
  parallel_chunks(rows, std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(cols, 1)),
                  [&](std::int64_t lo, std::int64_t hi) {
                    std::vector<C> row(static_cast<std::size_t>(cols));
                    for (std::int64_t r = lo; r < hi; ++r) {
                      const T* x = in + r * cols;
                      C top = -std::numeric_limits<C>::infinity();
                      bool nan = false;
                      for (std::int64_t j = 0; j < cols; ++j) {
                        const C v = static_cast<C>(x[j]);
                        nan = nan || v != v;
                        top = std::max(top, v);
                      }
                      double total = 0.0;
                      for (std::int64_t j = 0; j < cols; ++j) {
                        const C e = std::exp(static_cast<C>(x[j]) - top);
                        row[static_cast<std::size_t>(j)] = e;
                        total += e;
                      }
                      T* y = out + r * cols;
                      const double log_total = std::log(total);
                      for (std::int64_t j = 0; j < cols; ++j) {
                        C v;
                        if (nan) {
                          v = std::numeric_limits<C>::quiet_NaN();
                        } else if (log) {
                          v = static_cast<C>(static_cast<double>(x[j]) - static_cast<double>(top) -
                                             log_total);
                        } else {
                          v = static_cast<C>(row[static_cast<std::size_t>(j)] / total);
                        }
                        y[j] = T(v);
                      }
                    }
                  });
}

// Rows lo .. hi - 1 of a layer norm: each row's mean and variance as row_sum adds them, then
// ((x - mean) * inv) * weight + bias, each in double and rounded once to float (to T).
// row_sum's order over the floats of a row of halves, converted a block at a time: term j into
// lane j % 8 (the blocks hold whole lanes), the lanes added pairwise.
template <class T, class Term>
double half_row_sum(const T* x, std::int64_t n, float* xf, std::int64_t block, Term term) {
  double lane[8] = {};
  for (std::int64_t j0 = 0; j0 < n; j0 += block) {
    const std::int64_t m = std::min(block, n - j0);
    to_float_span(x + j0, xf, m);
    std::int64_t j = 0;
    for (; j + 8 <= m; j += 8) {
      for (std::int64_t l = 0; l < 8; ++l) {
        lane[l] += term(static_cast<double>(xf[j + l]));
      }
    }
    for (std::int64_t l = 0; j < m; ++j, ++l) {
      lane[l] += term(static_cast<double>(xf[j]));
    }
  }
  return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

template <class T>
inline void layer_norm_rows(const layer_norm_args& a, std::int64_t lo, std::int64_t hi) {
  const auto* weight = static_cast<const T*>(a.weight);
  const auto* bias = static_cast<const T*>(a.bias);
  const std::int64_t cols = a.cols;
  for (std::int64_t r = lo; r < hi; ++r) {
    const T* x = static_cast<const T*>(a.in) + r * cols;
    T* y = static_cast<T*>(a.out) + r * cols;
    if constexpr (is_half_v<T>) {
      if (weight != nullptr && bias != nullptr) {
        // Halves through float blocks (half_convert's vectorised conversions), the same
        // arithmetic in double in loops of 16, which -O2's cost model vectorises.
        constexpr std::int64_t block = 256;
        float xf[block];
        float wf[block];
        float bf[block];
        const double mean = half_row_sum(x, cols, xf, block, [](double v) { return v; }) /
                            static_cast<double>(cols);
        const double var = half_row_sum(x, cols, xf, block,
                                        [mean](double v) {
                                          const double d = v - mean;
                                          return d * d;
                                        }) /
                           static_cast<double>(cols);
        const double inv = 1.0 / std::sqrt(var + a.eps);
        for (std::int64_t j0 = 0; j0 < cols; j0 += block) {
          const std::int64_t m = std::min(block, cols - j0);
          to_float_span(x + j0, xf, m);
          to_float_span(weight + j0, wf, m);
          to_float_span(bias + j0, bf, m);
          const auto one = [&](std::int64_t j) {
            xf[j] = static_cast<float>((static_cast<double>(xf[j]) - mean) * inv *
                                           static_cast<double>(wf[j]) +
                                       static_cast<double>(bf[j]));
          };
          std::int64_t j = 0;
          for (; j + 16 <= m; j += 16) {
            for (std::int64_t l = 0; l < 16; ++l) {
              one(j + l);
            }
          }
          for (; j < m; ++j) {
            one(j);
          }
          from_float_span(xf, y + j0, m);
        }
        continue;
      }
    }
    const double mean = row_sum(cols, [x](std::int64_t j) { return static_cast<double>(x[j]); }) /
                        static_cast<double>(cols);
    const double var = row_sum(cols,
                               [x, mean](std::int64_t j) {
                                 const double d = static_cast<double>(x[j]) - mean;
                                 return d * d;
                               }) /
                       static_cast<double>(cols);
    const double inv = 1.0 / std::sqrt(var + a.eps);
    if (weight != nullptr && bias != nullptr) {  // a loop without branches, that vectorises
      for (std::int64_t j = 0; j < cols; ++j) {
        const double v = (static_cast<double>(x[j]) - mean) * inv * static_cast<double>(weight[j]) +
                         static_cast<double>(bias[j]);
        y[j] = T(static_cast<row_t<T>>(v));
      }
      continue;
    }
    for (std::int64_t j = 0; j < cols; ++j) {
      double v = (static_cast<double>(x[j]) - mean) * inv;
      if (weight != nullptr) {
        v *= static_cast<double>(weight[j]);
      }
      if (bias != nullptr) {
        v += static_cast<double>(bias[j]);
      }
      y[j] = T(static_cast<row_t<T>>(v));
    }
  }
}

// One clone per vector width (vector_clones.hpp): the same operations in every one, compiled
// without contraction into fused multiply-adds, so the same bits. GPT-2 small's [2048, 768]
// bfloat16 layer norm on AMD Zen 4: 3.0 ms in SSE2 alone, 1.0 ms in these clones.
COTENSOR_VECTOR_CLONES COTENSOR_FLATTEN void
layer_norm_span(const layer_norm_args& a, std::int64_t lo, std::int64_t hi, float /*tag*/) {
  layer_norm_rows<float>(a, lo, hi);
}
COTENSOR_VECTOR_CLONES COTENSOR_FLATTEN void
layer_norm_span(const layer_norm_args& a, std::int64_t lo, std::int64_t hi, double /*tag*/) {
  layer_norm_rows<double>(a, lo, hi);
}
COTENSOR_VECTOR_CLONES COTENSOR_FLATTEN void
layer_norm_span(const layer_norm_args& a, std::int64_t lo, std::int64_t hi, bfloat16_t /*tag*/) {
  layer_norm_rows<bfloat16_t>(a, lo, hi);
}
COTENSOR_VECTOR_CLONES COTENSOR_FLATTEN void
layer_norm_span(const layer_norm_args& a, std::int64_t lo, std::int64_t hi, float16_t /*tag*/) {
  layer_norm_rows<float16_t>(a, lo, hi);
}

}  // namespace

void softmax(const softmax_args& args) {
  visit_float(args.t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_typed(static_cast<const T*>(args.in), static_cast<T*>(args.out), args.rows, args.cols,
                  args.log);
  });
}

void layer_norm(const layer_norm_args& args) {
  visit_float(args.t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    parallel_chunks(args.rows,
                    std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(args.cols, 1)),
                    [&](std::int64_t lo, std::int64_t hi) { layer_norm_span(args, lo, hi, T{}); });
  });
}

void copy_rows(const copy_rows_args& args) {
  const std::size_t bytes = args.bytes;
  const auto grain = std::max<std::int64_t>(
      1, (1 << 17) / static_cast<std::int64_t>(std::max<std::size_t>(bytes, 1)));
  parallel_chunks(args.rows, grain, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t r = lo; r < hi; ++r) {
      std::memcpy(static_cast<char*>(args.out) + static_cast<std::size_t>(r) * args.out_stride,
                  static_cast<const char*>(args.in) + static_cast<std::size_t>(r) * args.in_stride,
                  bytes);
    }
  });
}

void index_select(const index_select_args& args) {
  const std::int64_t* index = args.index;
  const std::int64_t count = args.count;
  const std::int64_t extent = args.extent;
  for (std::int64_t j = 0; j < count; ++j) {
    if (index[j] < 0 || index[j] >= extent) {
      throw std::out_of_range("cotensor::index_select: index " + std::to_string(index[j]) +
                              " (position " + std::to_string(j) + ") out of range [0, " +
                              std::to_string(extent) + ")");
    }
  }
  const std::size_t row = args.item * static_cast<std::size_t>(args.inner);
  parallel_chunks(args.outer * count,
                  std::max<std::int64_t>(
                      1, (1 << 16) / static_cast<std::int64_t>(std::max<std::size_t>(row, 1))),
                  [&](std::int64_t lo, std::int64_t hi) {
                    for (std::int64_t r = lo; r < hi; ++r) {
                      const std::int64_t o = r / count;
                      const std::int64_t j = r % count;
                      std::memcpy(static_cast<char*>(args.out) + static_cast<std::size_t>(r) * row,
                                  static_cast<const char*>(args.in) +
                                      static_cast<std::size_t>(o * extent + index[j]) * row,
                                  row);
                    }
                  });
}

}  // namespace cotensor::detail::cpu
