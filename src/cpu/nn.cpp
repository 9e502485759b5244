// The CPU's kernels for the ops models are made of: softmax and log-softmax, layer norm, and
// the copies behind concat, slice and index_select. Row by row, rows in parallel; float16 and
// bfloat16 compute in float, float32 accumulates in double where a row is summed.

#include "cpu/kernels.hpp"
#include "cpu/row_sums.hpp"
#include "kernels/element.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
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

template <class T>
void layer_norm_typed(const T* in,
                      const T* weight,
                      const T* bias,
                      T* out,
                      std::int64_t rows,
                      std::int64_t cols,
                      double eps) {
  parallel_chunks(rows, std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(cols, 1)),
                  [&](std::int64_t lo, std::int64_t hi) {
                    for (std::int64_t r = lo; r < hi; ++r) {
                      const T* x = in + r * cols;
                      const double mean =
                          row_sum(cols, [x](std::int64_t j) { return static_cast<double>(x[j]); }) /
                          static_cast<double>(cols);
                      const double var = row_sum(cols,
                                                 [x, mean](std::int64_t j) {
                                                   const double d =
                                                       static_cast<double>(x[j]) - mean;
                                                   return d * d;
                                                 }) /
                                         static_cast<double>(cols);
                      const double inv = 1.0 / std::sqrt(var + eps);
                      T* y = out + r * cols;
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
                  });
}

}  // namespace

void softmax(const softmax_args& args) {
  visit_dtype(args.t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_float_v<T>) {
      softmax_typed(static_cast<const T*>(args.in), static_cast<T*>(args.out), args.rows, args.cols,
                    args.log);
    }
  });
}

void layer_norm(const layer_norm_args& args) {
  visit_dtype(args.t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_float_v<T>) {
      layer_norm_typed(static_cast<const T*>(args.in), static_cast<const T*>(args.weight),
                       static_cast<const T*>(args.bias), static_cast<T*>(args.out), args.rows,
                       args.cols, args.eps);
    }
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
