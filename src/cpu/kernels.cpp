#include "cpu/kernels.hpp"

#include "cotensor/config.hpp"

#if COTENSOR_STD_THREADS
#include "cpu/worker_pool.hpp"
#else
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>
#endif

#include <boost/container/small_vector.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace cotensor::detail::cpu {
namespace {

constexpr std::int64_t elementwise_grain = 1 << 15;

template <class F>
void for_chunks(std::int64_t n, std::int64_t grain, F&& f) {
  if (n <= grain) {
    if (n > 0) {
      f(std::int64_t{0}, n);
    }
    return;
  }
#if COTENSOR_STD_THREADS
  worker_pool::parallel_for((n + grain - 1) / grain,
                            [&](std::int64_t c) { f(c * grain, std::min(n, (c + 1) * grain)); });
#else
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, n, grain),
                    [&](const tbb::blocked_range<std::int64_t>& r) { f(r.begin(), r.end()); });
#endif
}

template <class F>
decltype(auto) with_binary(binary_op op, F&& f) {
  switch (op) {
  case binary_op::add:
    return f([](float x, float y) { return x + y; });
  case binary_op::sub:
    return f([](float x, float y) { return x - y; });
  case binary_op::mul:
    return f([](float x, float y) { return x * y; });
  case binary_op::div:
    break;
  }
  return f([](float x, float y) { return x / y; });
}

// The flat loops of the elementwise ops, one clone per x86 vector width: GCC's function
// multi-versioning picks AVX-512's sixteen lanes, AVX2's eight or SSE2's four when the library
// loads. Each element is one IEEE operation, so every clone gives the same bits. Not in the
// TSan build: a clone's resolver runs before the TSan runtime has started (see randn.cpp).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define COTENSOR_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define COTENSOR_VECTOR_CLONES
#endif

// out[i] = a[i] ⊗ b[i] over [0, n).
COTENSOR_VECTOR_CLONES void
binary_span(binary_op op, const float* a, const float* b, float* out, std::int64_t n) {
  with_binary(op, [&](auto f) {
    for (std::int64_t i = 0; i < n; ++i) {
      out[i] = f(a[i], b[i]);
    }
  });
}

// out[i] = a[i] ⊗ s, or s ⊗ a[i] when `scalar_left`, over [0, n).
COTENSOR_VECTOR_CLONES void
scalar_span(binary_op op, const float* a, float s, bool scalar_left, float* out, std::int64_t n) {
  with_binary(op, [&](auto f) {
    if (scalar_left) {
      for (std::int64_t i = 0; i < n; ++i) {
        out[i] = f(s, a[i]);
      }
    } else {
      for (std::int64_t i = 0; i < n; ++i) {
        out[i] = f(a[i], s);
      }
    }
  });
}

}  // namespace

void parallel_chunks(std::int64_t n,
                     std::int64_t grain,
                     function_ref<void(std::int64_t, std::int64_t)> f) {
  for_chunks(n, grain, f);
}

int backend_concurrency() noexcept {
#if COTENSOR_STD_THREADS
  return worker_pool::concurrency();
#else
  return std::max(1, tbb::this_task_arena::max_concurrency());
#endif
}

void parallel_tiles(std::int64_t tiles, function_ref<void(std::int64_t)> f) {
  if (tiles == 1) {
    f(0);
    return;
  }
#if COTENSOR_STD_THREADS
  worker_pool::parallel_for(tiles, [f](std::int64_t t) { f(t); });
#else
  tbb::parallel_for(std::int64_t{0}, tiles, [&](std::int64_t t) { f(t); });
#endif
}

void fill(float* out, std::int64_t n, float value) {
  for_chunks(n, elementwise_grain,
             [&](std::int64_t lo, std::int64_t hi) { std::fill(out + lo, out + hi, value); });
}

void copy(const float* in, float* out, std::int64_t n) {
  for_chunks(n, elementwise_grain, [&](std::int64_t lo, std::int64_t hi) {
    std::memcpy(out + lo, in + lo, static_cast<std::size_t>(hi - lo) * sizeof(float));
  });
}

void binary(binary_op op,
            const float* a,
            const shape& a_shape,
            const float* b,
            const shape& b_shape,
            float* out,
            const shape& out_shape) {
  const std::int64_t n = out_shape.numel();
  if (a_shape == b_shape) {
    binary_same_shape(op, a, b, out, n);
    return;
  }
  if (b_shape.numel() == 1 && a_shape == out_shape) {
    binary_scalar(op, a, b[0], false, out, n);
    return;
  }
  if (a_shape.numel() == 1 && b_shape == out_shape) {
    binary_scalar(op, b, a[0], true, out, n);
    return;
  }
  // General broadcasting: strides of a and b in the output's index space (0 where broadcast).
  const std::size_t rank = out_shape.rank();
  using strides = boost::container::small_vector<std::int64_t, shape::inline_rank>;
  strides a_stride(rank, 0);
  strides b_stride(rank, 0);
  auto strides_for = [&](const shape& s, strides& stride) {
    std::int64_t step = 1;
    for (std::size_t d = 0; d < s.rank(); ++d) {
      const std::size_t si = s.rank() - 1 - d;
      const std::size_t oi = rank - 1 - d;
      stride[oi] = s[si] == 1 ? 0 : step;
      step *= s[si];
    }
  };
  strides_for(a_shape, a_stride);
  strides_for(b_shape, b_stride);
  const std::int64_t inner = out_shape[rank - 1];
  const std::int64_t rows = inner == 0 ? 0 : n / inner;
  const std::int64_t as = a_stride[rank - 1];
  const std::int64_t bs = b_stride[rank - 1];
  const std::int64_t grain =
      std::max<std::int64_t>(1, elementwise_grain / std::max<std::int64_t>(inner, 1));
  with_binary(op, [&](auto f) {
    for_chunks(rows, grain, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t row = lo; row < hi; ++row) {
        std::int64_t ao = 0;
        std::int64_t bo = 0;
        std::int64_t rest = row;
        for (std::size_t d = rank - 1; d-- > 0;) {
          const std::int64_t idx = rest % out_shape[d];
          rest /= out_shape[d];
          ao += idx * a_stride[d];
          bo += idx * b_stride[d];
        }
        float* o = out + row * inner;
        for (std::int64_t i = 0; i < inner; ++i) {
          o[i] = f(a[ao + i * as], b[bo + i * bs]);
        }
      }
    });
  });
}

void binary_same_shape(binary_op op, const float* a, const float* b, float* out, std::int64_t n) {
  for_chunks(n, elementwise_grain, [&](std::int64_t lo, std::int64_t hi) {
    binary_span(op, a + lo, b + lo, out + lo, hi - lo);
  });
}

void binary_scalar(
    binary_op op, const float* a, float s, bool scalar_left, float* out, std::int64_t n) {
  for_chunks(n, elementwise_grain, [&](std::int64_t lo, std::int64_t hi) {
    scalar_span(op, a + lo, s, scalar_left, out + lo, hi - lo);
  });
}

void unary(unary_op op, const float* in, float* out, std::int64_t n) {
  for_chunks(n, elementwise_grain / 4,
             [&](std::int64_t lo, std::int64_t hi) { unary_span(op, in + lo, out + lo, hi - lo); });
}

void transpose(const float* in, float* out, std::int64_t rows, std::int64_t cols) {
  constexpr std::int64_t block = 32;
  const std::int64_t row_blocks = (rows + block - 1) / block;
  for_chunks(row_blocks, std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(cols, 1)),
             [&](std::int64_t lo, std::int64_t hi) {
               for (std::int64_t rb = lo; rb < hi; ++rb) {
                 const std::int64_t r_end = std::min(rows, (rb + 1) * block);
                 for (std::int64_t c0 = 0; c0 < cols; c0 += block) {
                   const std::int64_t c_end = std::min(cols, c0 + block);
                   for (std::int64_t r = rb * block; r < r_end; ++r) {
                     for (std::int64_t c = c0; c < c_end; ++c) {
                       out[c * rows + r] = in[r * cols + c];
                     }
                   }
                 }
               }
             });
}

double sum(const float* in, std::int64_t n) {
  constexpr std::int64_t chunk = 1 << 14;
  const std::int64_t chunks = (n + chunk - 1) / chunk;
  // Partial sums on the stack up to 4 M floats, so that small reductions do not allocate.
  boost::container::small_vector<double, 256> partial(static_cast<std::size_t>(chunks), 0.0);
  for_chunks(chunks, 1, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t c = lo; c < hi; ++c) {
      const std::int64_t end = std::min(n, (c + 1) * chunk);
      double acc = 0.0;
      for (std::int64_t i = c * chunk; i < end; ++i) {
        acc += in[i];
      }
      partial[static_cast<std::size_t>(c)] = acc;
    }
  });
  double total = 0.0;
  for (double p : partial) {
    total += p;
  }
  return total;
}

void sum_axis(const float* in,
              std::int64_t outer,
              std::int64_t extent,
              std::int64_t inner,
              double scale,
              float* out) {
  for_chunks(
      outer,
      std::max<std::int64_t>(1, elementwise_grain / std::max<std::int64_t>(extent * inner, 1)),
      [&](std::int64_t lo, std::int64_t hi) {
        boost::container::small_vector<double, 64> acc(static_cast<std::size_t>(inner));
        for (std::int64_t o = lo; o < hi; ++o) {
          std::fill(acc.begin(), acc.end(), 0.0);
          const float* base = in + o * extent * inner;
          for (std::int64_t a = 0; a < extent; ++a) {
            for (std::int64_t i = 0; i < inner; ++i) {
              acc[static_cast<std::size_t>(i)] += base[a * inner + i];
            }
          }
          for (std::int64_t i = 0; i < inner; ++i) {
            out[o * inner + i] = static_cast<float>(acc[static_cast<std::size_t>(i)] * scale);
          }
        }
      });
}

namespace {

void sum_all(const float* in, std::int64_t n, double divisor, float* out) {
  out[0] = static_cast<float>(sum(in, n) / divisor);
}

}  // namespace

constinit const kernel_table kernel_table_of_cpu{
    .fill = fill,
    .copy = copy,
    .copy_from_host = copy,   // host memory is the CPU's
    .copy_to_host = nullptr,  // its `copy` does it
    .binary = binary,
    .binary_same_shape = binary_same_shape,
    .binary_scalar = binary_scalar,
    .unary = unary,
    .matmul = matmul,
    .transpose = transpose,
    .sum = sum_all,
    .sum_axis = sum_axis,
    .randn = randn,
    .host_chunks = parallel_chunks,
};

}  // namespace cotensor::detail::cpu
