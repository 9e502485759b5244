// The CPU's kernels for the language models (src/lm/): RMSNorm, rotary position embedding, the
// key/value cache's scatter and causal attention over the paged cache. Rows in parallel; each
// row's arithmetic in a fixed order whatever the batch around it, so a sequence's results do
// not depend on the others in its step (kernel_table.hpp says what each computes).

#include "cpu/kernels.hpp"
#include "kernels/element.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace cotensor::detail::cpu {
namespace {

template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class T>
void rms_norm_typed(const rms_norm_args& a) {
  const auto* in = static_cast<const T*>(a.in);
  const auto* weight = static_cast<const T*>(a.weight);
  auto* out = static_cast<T*>(a.out);
  const std::int64_t cols = a.cols;
  parallel_chunks(a.rows, std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(cols, 1)),
                  [&](std::int64_t lo, std::int64_t hi) {
                    for (std::int64_t r = lo; r < hi; ++r) {
                      const T* x = in + r * cols;
                      double squares = 0.0;
                      for (std::int64_t j = 0; j < cols; ++j) {
                        const double v = static_cast<double>(x[j]);
                        squares += v * v;
                      }
                      using C = compute_t<T>;
                      const auto inv = static_cast<C>(
                          1.0 / std::sqrt(squares / static_cast<double>(cols) + a.eps));
                      T* y = out + r * cols;
                      for (std::int64_t j = 0; j < cols; ++j) {
                        y[j] = T(static_cast<C>(x[j]) * inv * static_cast<C>(weight[j]));
                      }
                    }
                  });
}

template <class T>
void rope_typed(const rope_args& a) {
  const auto* in = static_cast<const T*>(a.in);
  auto* out = static_cast<T*>(a.out);
  const std::int64_t hd = a.head_dim;
  const std::int64_t half = hd / 2;
  const std::int64_t width = a.heads * hd;
  // Frequencies as Hugging Face computes them: theta^(−2i/hd) rounded to float.
  std::vector<float> inv(static_cast<std::size_t>(half));
  for (std::int64_t i = 0; i < half; ++i) {
    inv[static_cast<std::size_t>(i)] = static_cast<float>(
        1.0 / std::pow(a.theta, static_cast<double>(2 * i) / static_cast<double>(hd)));
  }
  parallel_chunks(a.rows, std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(width, 1)),
                  [&](std::int64_t lo, std::int64_t hi) {
                    std::vector<float> cs(static_cast<std::size_t>(2 * half));
                    for (std::int64_t r = lo; r < hi; ++r) {
                      const auto p = static_cast<float>(a.positions[r]);
                      for (std::int64_t i = 0; i < half; ++i) {
                        const float angle = p * inv[static_cast<std::size_t>(i)];
                        cs[static_cast<std::size_t>(i)] = std::cos(angle);
                        cs[static_cast<std::size_t>(half + i)] = std::sin(angle);
                      }
                      for (std::int64_t h = 0; h < a.heads; ++h) {
                        const T* x = in + r * width + h * hd;
                        T* y = out + r * width + h * hd;
                        for (std::int64_t i = 0; i < half; ++i) {
                          const float c = cs[static_cast<std::size_t>(i)];
                          const float s = cs[static_cast<std::size_t>(half + i)];
                          const auto x0 = static_cast<float>(x[i]);
                          const auto x1 = static_cast<float>(x[i + half]);
                          y[i] = T(static_cast<compute_t<T>>(x0 * c - x1 * s));
                          y[i + half] = T(static_cast<compute_t<T>>(x1 * c + x0 * s));
                        }
                      }
                    }
                  });
}

// q · k over `n` elements in float: 16 running sums (lane l takes the elements ≡ l mod 16),
// added pairwise at the end. A fixed order the compiler can vectorise (one sum in order cannot be,
// without reassociating), the same whatever the rows around.
template <class T>
float dot(const T* q, const T* k, std::int64_t n) {
  constexpr int lanes = 16;
  float sums[lanes] = {};
  std::int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    for (int l = 0; l < lanes; ++l) {
      sums[l] += static_cast<float>(q[i + l]) * static_cast<float>(k[i + l]);
    }
  }
  for (int l = 0; i + l < n; ++l) {
    sums[l] += static_cast<float>(q[i + l]) * static_cast<float>(k[i + l]);
  }
  for (int width = lanes / 2; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) {
      sums[l] += sums[l + width];
    }
  }
  return sums[0];
}

// One query row's attention for one head: a running maximum and sum over the keys in order.
template <class T>
void attend_row(const paged_attention_args& a,
                const T* q,
                const std::int64_t* table,
                std::int64_t keys,
                std::int64_t kv_head,
                float* acc,
                T* out) {
  const std::int64_t hd = a.head_dim;
  const std::int64_t row = a.kv_heads * hd;
  const auto* kc = static_cast<const T*>(a.k_cache);
  const auto* vc = static_cast<const T*>(a.v_cache);
  const auto scale = static_cast<float>(a.scale);
  float top = -std::numeric_limits<float>::infinity();
  float total = 0.0F;
  std::fill(acc, acc + hd, 0.0F);
  for (std::int64_t j = 0; j < keys; ++j) {
    const std::int64_t slot = table[j / a.block_size] * a.block_size + j % a.block_size;
    const T* k = kc + slot * row + kv_head * hd;
    const T* v = vc + slot * row + kv_head * hd;
    float score = dot(q, k, hd) * scale;
    if (score > top) {
      const float shrink = std::exp(top - score);  // 0 for the first key
      total *= shrink;
      for (std::int64_t i = 0; i < hd; ++i) {
        acc[i] *= shrink;
      }
      top = score;
    }
    const float w = std::exp(score - top);
    total += w;
    for (std::int64_t i = 0; i < hd; ++i) {
      acc[i] += w * static_cast<float>(v[i]);
    }
  }
  for (std::int64_t i = 0; i < hd; ++i) {
    out[i] = T(static_cast<compute_t<T>>(acc[i] / total));
  }
}

template <class T>
void paged_attention_typed(const paged_attention_args& a) {
  const std::int64_t group = a.heads / a.kv_heads;
  const std::int64_t width = a.heads * a.head_dim;
  parallel_chunks(a.tokens * a.heads, 4, [&](std::int64_t lo, std::int64_t hi) {
    std::vector<float> acc(static_cast<std::size_t>(a.head_dim));
    for (std::int64_t n = lo; n < hi; ++n) {
      const std::int64_t r = n / a.heads;
      const std::int64_t h = n % a.heads;
      const std::int64_t* table = a.block_tables + a.sequence[r] * a.table_width;
      attend_row(a, static_cast<const T*>(a.q) + r * width + h * a.head_dim, table, a.context[r],
                 h / group, acc.data(), static_cast<T*>(a.out) + r * width + h * a.head_dim);
    }
  });
}

template <class F>
void visit_float(dtype t, F&& f) {
  visit_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_float_v<T>) {
      f(tag);
    }
  });
}

}  // namespace

void rms_norm(const rms_norm_args& args) {
  visit_float(args.t, [&](auto tag) { rms_norm_typed<typename decltype(tag)::type>(args); });
}

void rope(const rope_args& args) {
  visit_float(args.t, [&](auto tag) { rope_typed<typename decltype(tag)::type>(args); });
}

void scatter_rows(const scatter_rows_args& args) {
  for (std::int64_t r = 0; r < args.rows; ++r) {
    if (args.index[r] < 0 || args.index[r] >= args.out_rows) {
      throw std::out_of_range("cotensor::scatter_rows: index " + std::to_string(args.index[r]) +
                              " is outside [0, " + std::to_string(args.out_rows) + ")");
    }
  }
  for (std::int64_t r = 0; r < args.rows; ++r) {
    std::memcpy(static_cast<char*>(args.out) + args.index[r] * args.row_bytes,
                static_cast<const char*>(args.in) + r * args.row_bytes, args.row_bytes);
  }
}

void paged_attention(const paged_attention_args& args) {
  const std::int64_t capacity = args.table_width * args.block_size;
  for (std::int64_t r = 0; r < args.tokens; ++r) {
    const std::int64_t s = args.sequence[r];
    const std::int64_t keys = args.context[r];
    if (s < 0 || s >= args.sequences || keys < 1 || keys > capacity) {
      throw std::out_of_range("cotensor::paged_attention: row " + std::to_string(r) +
                              " names sequence " + std::to_string(s) + " with " +
                              std::to_string(keys) + " keys (" + std::to_string(args.sequences) +
                              " sequences, at most " + std::to_string(capacity) + " keys)");
    }
    for (std::int64_t b = 0; b < (keys + args.block_size - 1) / args.block_size; ++b) {
      const std::int64_t block = args.block_tables[s * args.table_width + b];
      if (block < 0 || block >= args.blocks) {
        throw std::out_of_range("cotensor::paged_attention: sequence " + std::to_string(s) +
                                " names block " + std::to_string(block) + " of " +
                                std::to_string(args.blocks));
      }
    }
  }
  visit_float(args.t, [&](auto tag) { paged_attention_typed<typename decltype(tag)::type>(args); });
}

}  // namespace cotensor::detail::cpu
