// The CUDA backend's kernels for the language models, as the CPU's (src/cpu/attention.cpp):
// rotary position embedding, the key/value cache's scatter and causal attention over the paged
// cache. float16 and bfloat16 compute in float and round once. Each row's arithmetic is in a
// fixed order whatever the rows around it, so a sequence's results do not depend on the others
// in its step, and are the same bits every run.

#include "cuda/cuda_error.hpp"
#include "cuda/grid.cuh"
#include "cuda/typed_kernels.hpp"
#include "kernels/element.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace cotensor::detail::cuda {
namespace {

// The type a result is rounded through: double for float64, float otherwise (as the CPU's).
template <class T>
using out_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

unsigned row_blocks(std::int64_t rows) {
  return static_cast<unsigned>(std::clamp<std::int64_t>(rows, 1, 65535));
}

// One thread per (row, i < head_dim / 2): the angle's cosine and sine once, then every head.
template <class T>
__global__ void rope_kernel(const T* in,
                            T* out,
                            const std::int64_t* positions,
                            std::int64_t rows,
                            std::int64_t heads,
                            std::int64_t head_dim,
                            double theta) {
  const std::int64_t half = head_dim / 2;
  const std::int64_t n = rows * half;
  for (std::int64_t e = first_index(); e < n; e += grid_stride()) {
    const std::int64_t r = e / half;
    const std::int64_t i = e % half;
    // The CPU's frequency (theta^(−2i/hd) in double, rounded to float) and float angle.
    const auto inv = static_cast<float>(
        1.0 / ::pow(theta, static_cast<double>(2 * i) / static_cast<double>(head_dim)));
    const float angle = static_cast<float>(positions[r]) * inv;
    const float c = cosf(angle);
    const float s = sinf(angle);
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t at = (r * heads + h) * head_dim + i;
      const auto x0 = static_cast<float>(in[at]);
      const auto x1 = static_cast<float>(in[at + half]);
      out[at] = T(static_cast<out_t<T>>(x0 * c - x1 * s));
      out[at + half] = T(static_cast<out_t<T>>(x1 * c + x0 * s));
    }
  }
}

// Raises the flag if any index is outside [0, out_rows).
__global__ void check_rows_kernel(const std::int64_t* index,
                                  std::int64_t rows,
                                  std::int64_t out_rows,
                                  int* bad_index) {
  for (std::int64_t r = first_index(); r < rows; r += grid_stride()) {
    if (index[r] < 0 || index[r] >= out_rows) {
      *bad_index = 1;
    }
  }
}

// One block per row, after check_rows_kernel: nothing if it raised the flag. A row that a later
// row overwrites writes nothing, so repeated indices end with the last row, as on the CPU.
template <class Word>
__global__ void scatter_rows_kernel(const Word* in,
                                    Word* out,
                                    std::int64_t words,
                                    const std::int64_t* index,
                                    std::int64_t rows,
                                    const int* bad_index) {
  if (*bad_index != 0) {
    return;  // the same for every thread: no barrier is left waiting
  }
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::int64_t to = index[r];
    bool overwritten = false;
    for (std::int64_t k = r + 1 + threadIdx.x; k < rows && !overwritten; k += blockDim.x) {
      overwritten = index[k] == to;
    }
    if (__syncthreads_or(overwritten) != 0) {
      continue;
    }
    for (std::int64_t w = threadIdx.x; w < words; w += blockDim.x) {
      out[to * words + w] = in[r * words + w];
    }
  }
}

// paged_attention: one block per (row, head). Each key's score q·k is summed by a half-warp in
// the CPU's order (lane l takes the elements ≡ l mod 16 in order, then the lanes pairwise: the
// CPU's bits); then every thread walks the keys in order with the running maximum and sum, and
// owns the output elements i ≡ tid mod attention_threads.
constexpr int attention_threads = 128;
constexpr int dot_lanes = 16;
constexpr int half_warps = attention_threads / dot_lanes;
// Keys scored between two barriers.
constexpr int key_tile = 32;

template <class T>
__global__ void __launch_bounds__(attention_threads)
    paged_attention_kernel(paged_attention_args a, int* bad_index) {
  extern __shared__ float shared[];  // the query row, then the accumulators: head_dim each
  __shared__ float scores[key_tile];
  const std::int64_t hd = a.head_dim;
  float* q = shared;
  float* acc = shared + hd;
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid % dot_lanes;
  const std::int64_t group = a.heads / a.kv_heads;
  const std::int64_t kv_row = a.kv_heads * hd;
  const std::int64_t capacity = a.table_width * a.block_size;
  const auto* kc = static_cast<const T*>(a.k_cache);
  const auto* vc = static_cast<const T*>(a.v_cache);
  const auto scale = static_cast<float>(a.scale);
  for (std::int64_t n = blockIdx.x; n < a.tokens * a.heads; n += gridDim.x) {
    const std::int64_t r = n / a.heads;
    const std::int64_t h = n % a.heads;
    T* y = static_cast<T*>(a.out) + n * hd;  // [tokens, heads, head_dim]
    const std::int64_t s = a.sequence[r];
    const std::int64_t keys = a.context[r];
    bool ok = s >= 0 && s < a.sequences && keys >= 1 && keys <= capacity;
    const std::int64_t* table = a.block_tables + (ok ? s * a.table_width : 0);
    if (ok) {
      for (std::int64_t b = tid; b < (keys + a.block_size - 1) / a.block_size;
           b += attention_threads) {
        ok = ok && table[b] >= 0 && table[b] < a.blocks;
      }
    }
    // Also the barrier after the previous (row, head) read the query and the accumulators.
    if (__syncthreads_or(!ok) != 0) {
      if (tid == 0) {
        *bad_index = 1;
      }
      for (std::int64_t i = tid; i < hd; i += attention_threads) {
        y[i] = T{};
      }
      continue;
    }
    const T* qr = static_cast<const T*>(a.q) + n * hd;
    for (std::int64_t i = tid; i < hd; i += attention_threads) {
      q[i] = static_cast<float>(qr[i]);
      acc[i] = 0.0F;
    }
    __syncthreads();
    const std::int64_t kv_offset = h / group * hd;
    const auto slot = [&](std::int64_t j) {
      return table[j / a.block_size] * a.block_size + j % a.block_size;
    };
    float top = -std::numeric_limits<float>::infinity();
    float total = 0.0F;
    for (std::int64_t j0 = 0; j0 < keys; j0 += key_tile) {
      const std::int64_t end = std::min(keys, j0 + key_tile);
      // A warp's two half-warps take keys pair by pair, in step: the shuffles need all 32 lanes.
      for (std::int64_t pair = j0 + 2 * warp; pair < end; pair += half_warps) {
        const std::int64_t j = pair + (tid / dot_lanes) % 2;
        float sum = 0.0F;
        if (j < end) {
          const T* k = kc + slot(j) * kv_row + kv_offset;
          for (std::int64_t i = lane; i < hd; i += dot_lanes) {
            sum += q[i] * static_cast<float>(k[i]);
          }
        }
        for (int width = dot_lanes / 2; width > 0; width /= 2) {
          sum += __shfl_xor_sync(0xFFFFFFFFU, sum, width);
        }
        if (j < end && lane == 0) {
          scores[j - j0] = sum * scale;
        }
      }
      __syncthreads();
      for (std::int64_t j = j0; j < end; ++j) {
        const float score = scores[j - j0];
        if (score > top) {
          const float shrink = expf(top - score);  // 0 for the first key
          total *= shrink;
          for (std::int64_t i = tid; i < hd; i += attention_threads) {
            acc[i] *= shrink;
          }
          top = score;
        }
        const float w = expf(score - top);
        total += w;
        const T* v = vc + slot(j) * kv_row + kv_offset;
        for (std::int64_t i = tid; i < hd; i += attention_threads) {
          acc[i] += w * static_cast<float>(v[i]);
        }
      }
      __syncthreads();  // the scores are read before the next tile's are written
    }
    for (std::int64_t i = tid; i < hd; i += attention_threads) {
      y[i] = T(static_cast<out_t<T>>(acc[i] / total));
    }
  }
}

}  // namespace

void rope(const rope_args& args) {
  const std::int64_t n = args.rows * (args.head_dim / 2);
  if (n == 0 || args.heads == 0) {
    return;
  }
  with_float(args.t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    rope_kernel<T><<<blocks_for(n), threads, 0, launch_stream()>>>(
        static_cast<const T*>(args.in), static_cast<T*>(args.out), args.positions, args.rows,
        args.heads, args.head_dim, args.theta);
  });
  check_launch("rope_kernel");
}

void launch_scatter_rows(const scatter_rows_args& args, int* bad_index) {
  const std::int64_t rows = args.rows;
  if (rows == 0 || args.row_bytes == 0) {
    return;
  }
  cudaStream_t stream = launch_stream();
  check_rows_kernel<<<blocks_for(rows), threads, 0, stream>>>(args.index, rows, args.out_rows,
                                                              bad_index);
  check_launch("check_rows_kernel");
  // The widest word that divides the rows and both addresses.
  const auto align = reinterpret_cast<std::uintptr_t>(args.in) |
                     reinterpret_cast<std::uintptr_t>(args.out) | args.row_bytes;
  auto run = [&](auto word) {
    using W = decltype(word);
    scatter_rows_kernel<W><<<row_blocks(rows), threads, 0, stream>>>(
        static_cast<const W*>(args.in), static_cast<W*>(args.out),
        static_cast<std::int64_t>(args.row_bytes / sizeof(W)), args.index, rows, bad_index);
  };
  if (align % 16 == 0) {
    run(uint4{});
  } else if (align % 8 == 0) {
    run(std::uint64_t{});
  } else if (align % 4 == 0) {
    run(std::uint32_t{});
  } else if (align % 2 == 0) {
    run(std::uint16_t{});
  } else {
    run(std::uint8_t{});
  }
  check_launch("scatter_rows_kernel");
}

void launch_paged_attention(const paged_attention_args& args, int* bad_index) {
  const std::int64_t n = args.tokens * args.heads;
  if (n == 0 || args.head_dim == 0) {
    return;
  }
  if (args.head_dim > gpu_max_attention_head_dim) {
    throw std::invalid_argument("cotensor::paged_attention: head_dim " +
                                std::to_string(args.head_dim) + " over " +
                                std::to_string(gpu_max_attention_head_dim) + " on a GPU");
  }
  const std::size_t shared = 2 * static_cast<std::size_t>(args.head_dim) * sizeof(float);
  with_float(args.t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    paged_attention_kernel<T>
        <<<row_blocks(n), attention_threads, shared, launch_stream()>>>(args, bad_index);
  });
  check_launch("paged_attention_kernel");
}

}  // namespace cotensor::detail::cuda
