// The CPU's row-wise kernels for the language models (src/lm/): RMSNorm, the rotary position
// embedding and a step's split of its q | k | v product into the queries and the key/value
// cache. Rows in parallel; each row's arithmetic in a fixed order whatever the batch around it,
// and in clones per vector width that compute the same bits (compiled without contraction into
// fused multiply-adds; kernel_table.hpp says what each computes).

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
inline void rms_norm_rows(const rms_norm_args& a, std::int64_t lo, std::int64_t hi) {
  const auto* in = static_cast<const T*>(a.in);
  const auto* weight = static_cast<const T*>(a.weight);
  auto* out = static_cast<T*>(a.out);
  const std::int64_t cols = a.cols;
  using C = compute_t<T>;
  for (std::int64_t r = lo; r < hi; ++r) {
    const T* x = in + r * cols;
    T* y = out + r * cols;
    if constexpr (std::is_same_v<T, C>) {
      const double squares = row_sum(cols, [x](std::int64_t j) {
        const double v = static_cast<double>(x[j]);
        return v * v;
      });
      const auto inv = static_cast<C>(1.0 / std::sqrt(squares / static_cast<double>(cols) + a.eps));
      for (std::int64_t j = 0; j < cols; ++j) {
        y[j] = x[j] * inv * weight[j];
      }
    } else {
      // Halves through float blocks, the conversions vectorised (half_convert.hpp): the squares
      // summed in row_sum's order (term j into lane j % 8; the blocks hold whole lanes), the
      // scaling with the element type's roundings.
      constexpr std::int64_t block = 256;
      float xf[block];
      float wf[block];
      double lane[8] = {};
      for (std::int64_t j0 = 0; j0 < cols; j0 += block) {
        const std::int64_t m = std::min(block, cols - j0);
        to_float_span(x + j0, xf, m);
        std::int64_t j = 0;
        for (; j + 8 <= m; j += 8) {
          for (std::int64_t l = 0; l < 8; ++l) {
            const double v = xf[j + l];
            lane[l] += v * v;
          }
        }
        for (std::int64_t l = 0; j < m; ++j, ++l) {
          const double v = xf[j];
          lane[l] += v * v;
        }
      }
      const double squares =
          ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
      const auto inv = static_cast<C>(1.0 / std::sqrt(squares / static_cast<double>(cols) + a.eps));
      for (std::int64_t j0 = 0; j0 < cols; j0 += block) {
        const std::int64_t m = std::min(block, cols - j0);
        to_float_span(x + j0, xf, m);
        to_float_span(weight + j0, wf, m);
        // In 16s, which -O2's cost model vectorises (a loop of unknown count it leaves scalar).
        std::int64_t j = 0;
        for (; j + 16 <= m; j += 16) {
          for (std::int64_t l = 0; l < 16; ++l) {
            xf[j + l] = xf[j + l] * inv * wf[j + l];
          }
        }
        for (; j < m; ++j) {
          xf[j] = xf[j] * inv * wf[j];
        }
        from_float_span(xf, y + j0, m);
      }
    }
  }
}

// One clone per vector width (vector_clones.hpp), as layer norm's (cpu/nn.cpp): the same
// operations in every one, so the same bits. Qwen2.5-0.5B's [512, 896] bfloat16 RMSNorm on AMD
// Zen 5: 0.32 ms in SSE2 alone.
COTENSOR_VECTOR_CLONES COTENSOR_FLATTEN void
rms_norm_span(const rms_norm_args& a, std::int64_t lo, std::int64_t hi, float /*tag*/) {
  rms_norm_rows<float>(a, lo, hi);
}
COTENSOR_VECTOR_CLONES COTENSOR_FLATTEN void
rms_norm_span(const rms_norm_args& a, std::int64_t lo, std::int64_t hi, double /*tag*/) {
  rms_norm_rows<double>(a, lo, hi);
}
COTENSOR_VECTOR_CLONES COTENSOR_FLATTEN void
rms_norm_span(const rms_norm_args& a, std::int64_t lo, std::int64_t hi, bfloat16_t /*tag*/) {
  rms_norm_rows<bfloat16_t>(a, lo, hi);
}
COTENSOR_VECTOR_CLONES COTENSOR_FLATTEN void
rms_norm_span(const rms_norm_args& a, std::int64_t lo, std::int64_t hi, float16_t /*tag*/) {
  rms_norm_rows<float16_t>(a, lo, hi);
}

// y0 = x0·c − x1·s and y1 = x1·c + x0·s over n floats, in 16s, which -O2's cost model
// vectorises (a loop of unknown count it leaves scalar); the pointers do not overlap.
inline void rotate_halves(const float* __restrict x0,
                          const float* __restrict x1,
                          const float* __restrict c,
                          const float* __restrict s,
                          float* __restrict y0,
                          float* __restrict y1,
                          std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (std::int64_t l = 0; l < 16; ++l) {
      y0[i + l] = x0[i + l] * c[i + l] - x1[i + l] * s[i + l];
      y1[i + l] = x1[i + l] * c[i + l] + x0[i + l] * s[i + l];
    }
  }
  for (; i < n; ++i) {
    y0[i] = x0[i] * c[i] - x1[i] * s[i];
    y1[i] = x1[i] * c[i] + x0[i] * s[i];
  }
}

// cs[i] = cos(p · inv[i]), cs[half + i] = sin(p · inv[i]): a row's angles, as Hugging Face's
// (the frequency and the angle floats).
inline void row_angles(float* cs, const float* inv, std::int64_t position, std::int64_t half) {
  const auto p = static_cast<float>(position);
  for (std::int64_t i = 0; i < half; ++i) {
    const float angle = p * inv[i];
    cs[i] = std::cos(angle);
    cs[half + i] = std::sin(angle);
  }
}

// `heads` heads of hd elements from x to y, each rotated by the angles in cs (row_angles; cs
// holds 3 · hd floats, the last 2 · hd scratch), in float and rounded once.
template <class T>
inline void rotate_heads(const T* x, T* y, std::int64_t heads, std::int64_t hd, float* cs) {
  const std::int64_t half = hd / 2;
  for (std::int64_t h = 0; h < heads; ++h, x += hd, y += hd) {
    if constexpr (is_half_v<T>) {
      // Halves through float (xf, the result in yf), the conversions vectorised.
      float* const xf = cs + hd;
      float* const yf = cs + 2 * hd;
      to_float_span(x, xf, hd);
      rotate_halves(xf, xf + half, cs, cs + half, yf, yf + half, half);
      from_float_span(yf, y, hd);
    } else {
      for (std::int64_t i = 0; i < half; ++i) {
        const float c = cs[i];
        const float s = cs[half + i];
        const auto x0 = static_cast<float>(x[i]);
        const auto x1 = static_cast<float>(x[i + half]);
        y[i] = T(static_cast<compute_t<T>>(x0 * c - x1 * s));
        y[i + half] = T(static_cast<compute_t<T>>(x1 * c + x0 * s));
      }
    }
  }
}

// Rows [lo, hi) of a rotary embedding; `inv` the frequencies, `cs` scratch of 3 · head_dim floats.
template <class T>
inline void
rope_rows(const rope_args& a, const float* inv, float* cs, std::int64_t lo, std::int64_t hi) {
  const std::int64_t width = a.heads * a.head_dim;
  for (std::int64_t r = lo; r < hi; ++r) {
    row_angles(cs, inv, a.positions[r], a.head_dim / 2);
    rotate_heads(static_cast<const T*>(a.in) + r * width, static_cast<T*>(a.out) + r * width,
                 a.heads, a.head_dim, cs);
  }
}

// Rows [lo, hi) of a split of q | k | v into q and the caches (`inv` and `cs` as rope_rows', with
// positions): each row's angles once for its query and key heads.
template <class T>
inline void split_rows(
    const split_into_cache_args& a, const float* inv, float* cs, std::int64_t lo, std::int64_t hi) {
  const std::int64_t width = a.q_width + 2 * a.kv_width;
  for (std::int64_t r = lo; r < hi; ++r) {
    const T* x = static_cast<const T*>(a.qkv) + r * width;
    T* q = static_cast<T*>(a.q) + r * a.q_width;
    T* k = static_cast<T*>(a.k_cache) + a.slots[r] * a.kv_width;
    T* v = static_cast<T*>(a.v_cache) + a.slots[r] * a.kv_width;
    if (a.positions != nullptr) {
      row_angles(cs, inv, a.positions[r], a.head_dim / 2);
      rotate_heads(x, q, a.q_width / a.head_dim, a.head_dim, cs);
      rotate_heads(x + a.q_width, k, a.kv_width / a.head_dim, a.head_dim, cs);
    } else {
      std::memcpy(q, x, static_cast<std::size_t>(a.q_width) * sizeof(T));
      std::memcpy(k, x + a.q_width, static_cast<std::size_t>(a.kv_width) * sizeof(T));
    }
    std::memcpy(v, x + a.q_width + a.kv_width, static_cast<std::size_t>(a.kv_width) * sizeof(T));
  }
}

// One clone per vector width, as RMSNorm's: the rotations vectorised, the same bits (the cosines
// and sines are libm's, element by element, in every clone).
#define COTENSOR_ROWS_CLONES(name, args_t, rows)                                                   \
  COTENSOR_VECTOR_CLONES COTENSOR_FLATTEN void name(const args_t& a, const float* inv, float* cs,  \
                                                    std::int64_t lo, std::int64_t hi, float) {     \
    rows<float>(a, inv, cs, lo, hi);                                                               \
  }                                                                                                \
  COTENSOR_VECTOR_CLONES COTENSOR_FLATTEN void name(const args_t& a, const float* inv, float* cs,  \
                                                    std::int64_t lo, std::int64_t hi, double) {    \
    rows<double>(a, inv, cs, lo, hi);                                                              \
  }                                                                                                \
  COTENSOR_VECTOR_CLONES COTENSOR_FLATTEN void name(const args_t& a, const float* inv, float* cs,  \
                                                    std::int64_t lo, std::int64_t hi,              \
                                                    bfloat16_t) {                                  \
    rows<bfloat16_t>(a, inv, cs, lo, hi);                                                          \
  }                                                                                                \
  COTENSOR_VECTOR_CLONES COTENSOR_FLATTEN void name(const args_t& a, const float* inv, float* cs,  \
                                                    std::int64_t lo, std::int64_t hi, float16_t) { \
    rows<float16_t>(a, inv, cs, lo, hi);                                                           \
  }
COTENSOR_ROWS_CLONES(rope_span, rope_args, rope_rows)
COTENSOR_ROWS_CLONES(split_span, split_into_cache_args, split_rows)
#undef COTENSOR_ROWS_CLONES

// Frequencies as Hugging Face computes them: theta^(−2i/hd) rounded to float.
std::vector<float> rope_frequencies(double theta, std::int64_t hd) {
  std::vector<float> inv(static_cast<std::size_t>(hd / 2));
  for (std::int64_t i = 0; i < hd / 2; ++i) {
    inv[static_cast<std::size_t>(i)] = static_cast<float>(
        1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(hd)));
  }
  return inv;
}

template <class T>
void split_typed(const split_into_cache_args& a) {
  const std::int64_t hd = a.positions != nullptr ? a.head_dim : 0;
  const std::vector<float> inv = rope_frequencies(a.theta, hd);
  const std::int64_t width = a.q_width + 2 * a.kv_width;
  parallel_chunks(a.tokens, std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(width, 1)),
                  [&](std::int64_t lo, std::int64_t hi) {
                    std::vector<float> cs(static_cast<std::size_t>(3 * hd));
                    split_span(a, inv.data(), cs.data(), lo, hi, T{});
                  });
}

template <class T>
void rope_typed(const rope_args& a) {
  const std::int64_t hd = a.head_dim;
  const std::int64_t width = a.heads * hd;
  const std::vector<float> inv = rope_frequencies(a.theta, hd);
  parallel_chunks(a.rows, std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(width, 1)),
                  [&](std::int64_t lo, std::int64_t hi) {
                    std::vector<float> cs(static_cast<std::size_t>(3 * hd));
                    rope_span(a, inv.data(), cs.data(), lo, hi, T{});
                  });
}

}  // namespace

void rms_norm(const rms_norm_args& args) {
  visit_float(args.t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    parallel_chunks(args.rows,
                    std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(args.cols, 1)),
                    [&](std::int64_t lo, std::int64_t hi) { rms_norm_span(args, lo, hi, T{}); });
  });
}

void rope(const rope_args& args) {
  visit_float(args.t, [&](auto tag) { rope_typed<typename decltype(tag)::type>(args); });
}

void split_into_cache(const split_into_cache_args& args) {
  for (std::int64_t r = 0; r < args.tokens; ++r) {
    if (args.slots[r] < 0 || args.slots[r] >= args.cache_rows) {
      throw std::out_of_range("cotensor::split_into_cache: slot " + std::to_string(args.slots[r]) +
                              " is outside [0, " + std::to_string(args.cache_rows) + ")");
    }
  }
  // Rows run in parallel: a repeated slot would have two writers.
  std::vector<std::int64_t> sorted(args.slots, args.slots + args.tokens);
  std::sort(sorted.begin(), sorted.end());
  if (const auto twice = std::adjacent_find(sorted.begin(), sorted.end()); twice != sorted.end()) {
    throw std::invalid_argument("cotensor::split_into_cache: slot " + std::to_string(*twice) +
                                " is written twice");
  }
  visit_float(args.t, [&](auto tag) { split_typed<typename decltype(tag)::type>(args); });
}

}  // namespace cotensor::detail::cpu
