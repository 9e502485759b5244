// GEMM on the CPU: float32 on cotensor's own AVX-512 kernel where the CPU has AVX-512
// (cpu/gemm_avx512.hpp), else OpenBLAS SGEMM calls on tiles that the backend's workers share
// (OpenBLAS is opened with its first GEMM: cpu/openblas.hpp); float64 on OpenBLAS DGEMM.
// bfloat16 runs cotensor's own AMX kernel where the CPU has AMX-BF16, its vdpbf16ps kernel on AMD
// CPUs with AVX-512 BF16, and elsewhere on AVX-512 its kernel on float32 multiply-adds up to 64
// rows (cpu/gemm_dispatch.hpp).
// COTENSOR_GEMM_F32 and COTENSOR_GEMM_BF16 force a path. float16, and bfloat16 elsewhere, go
// through float32: the operands are converted, multiplied by SGEMM and the result rounded once
// (Debian's OpenBLAS 0.3.21 exports no sbgemm); float16 products of few rows on the AVX-512
// float32 kernel convert B as they read it instead (the same bits). Integers are exact, wrapping,
// in a plain loop.

#include "cpu/gemm_amx.hpp"
#include "cpu/gemm_avx512.hpp"
#include "cpu/gemm_dispatch.hpp"
#include "cpu/gemm_scratch.hpp"
#include "cpu/gemm_trivial.hpp"
#include "cpu/half_convert.hpp"
#include "cpu/kernels.hpp"
#include "cpu/openblas.hpp"
#include "kernels/element.hpp"

#include <algorithm>
#include <type_traits>

namespace cotensor::detail::cpu {

void sgemm(
    const float* a, const float* b, float* c, std::int64_t m, std::int64_t k, std::int64_t n) {
  if (trivial_gemm(c, m, k, n)) {
    return;
  }
  if (f32_gemm_kernel_for_this_call(m) == gemm_kernel::avx512) {
    sgemm_avx512(a, b, c, m, k, n);
    return;
  }
  // One tile per worker, each one single-threaded SGEMM call (OpenBLAS keeps its own threads
  // off), scheduled by oneTBB. Every call packs its panels of A and B again, so fewer tiles
  // cost less: at 1000^2 on 2 workers, 8 tiles ran at ~190 GFLOP/s, 4 at ~205-230, 2 at
  // ~215-240 (bench/README.md). Tiles are whole rows when there are many rows, and
  // whole-height column panels when there are few (a batch of requests: [64, 512] x [512,
  // 4096]).
  const auto blas_sgemm = openblas().sgemm;  // throws, failing the op, if it cannot be loaded
  const std::int64_t workers = backend_concurrency();
  const std::int64_t tiles_wanted = workers;
  const bool small = m * n * k <= 64 * 64 * 64;
  const bool by_rows = m >= 64 * tiles_wanted;
  std::int64_t col_tile = n;
  std::int64_t row_tile = m;
  if (!small && by_rows) {
    row_tile = std::max<std::int64_t>(8, (m + tiles_wanted - 1) / tiles_wanted);
    row_tile = (row_tile + 7) / 8 * 8;
  } else if (!small) {
    col_tile = std::max<std::int64_t>(64, (n + tiles_wanted - 1) / tiles_wanted);
    col_tile = (col_tile + 63) / 64 * 64;
  }
  const std::int64_t col_tiles = (n + col_tile - 1) / col_tile;
  const std::int64_t row_tiles = (m + row_tile - 1) / row_tile;
  auto tile = [&](std::int64_t t) {
    const std::int64_t i = (t / col_tiles) * row_tile;
    const std::int64_t j = (t % col_tiles) * col_tile;
    const std::int64_t mb = std::min(row_tile, m - i);
    const std::int64_t nb = std::min(col_tile, n - j);
    blas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(mb),
               static_cast<int>(nb), static_cast<int>(k), 1.0F, a + i * k, static_cast<int>(k),
               b + j, static_cast<int>(n), 0.0F, c + i * n + j, static_cast<int>(n));
  };
  parallel_tiles(row_tiles * col_tiles, tile);
}

namespace {

void dgemm(
    const double* a, const double* b, double* c, std::int64_t m, std::int64_t k, std::int64_t n) {
  if (trivial_gemm(c, m, k, n)) {
    return;
  }
  const auto blas_dgemm = openblas().dgemm;
  const std::int64_t tiles =
      std::min<std::int64_t>(backend_concurrency(), std::max<std::int64_t>(1, m / 32));
  const std::int64_t rows = (m + tiles - 1) / tiles;
  parallel_tiles(tiles, [&](std::int64_t t) {
    const std::int64_t i = t * rows;
    const std::int64_t mb = std::min(rows, m - i);
    if (mb > 0) {
      blas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(mb),
                 static_cast<int>(n), static_cast<int>(k), 1.0, a + i * k, static_cast<int>(k), b,
                 static_cast<int>(n), 0.0, c + i * n, static_cast<int>(n));
    }
  });
}

template <class T>
void to_float(const T* in, float* out, std::int64_t n) {
  parallel_chunks(n, elementwise_grain, [&](std::int64_t lo, std::int64_t hi) {
    to_float_span(in + lo, out + lo, hi - lo);
  });
}

template <class T>
void from_float(const float* in, T* out, std::int64_t n) {
  parallel_chunks(n, elementwise_grain, [&](std::int64_t lo, std::int64_t hi) {
    from_float_span(in + lo, out + lo, hi - lo);
  });
}

template <class T>
void half_gemm(const T* a, const T* b, T* c, std::int64_t m, std::int64_t k, std::int64_t n) {
  if (trivial_gemm(c, m, k, n)) {  // no scratch of 0 bytes
    return;
  }
  if constexpr (std::is_same_v<T, bfloat16_t>) {
    const gemm_kernel kernel = bf16_gemm_kernel_for_this_call(m);
    if (kernel == gemm_kernel::amx_bf16) {
      bf16_gemm_amx(a, b, c, m, k, n);
      return;
    }
    if (kernel == gemm_kernel::avx512_bf16) {
      bf16_gemm_avx512(a, b, c, m, k, n);
      return;
    }
    if (kernel == gemm_kernel::avx512) {
      bf16_gemm_avx512_fma(a, b, c, m, k, n);
      return;
    }
  } else {
    // Few rows (a decode step): B's halves converted as they are read, not whole first; the
    // same bits as below on cotensor's float32 kernel.
    if (f32_gemm_kernel_for_this_call(m) == gemm_kernel::avx512 &&
        f16_gemm_rows_avx512(a, b, c, m, k, n)) {
      return;
    }
  }
  const gemm_scratch<float> fa(m * k);
  const gemm_scratch<float> fb(k * n);
  const gemm_scratch<float> fc(m * n);
  to_float(a, fa.get(), m * k);
  to_float(b, fb.get(), k * n);
  sgemm(fa.get(), fb.get(), fc.get(), m, k, n);
  from_float(fc.get(), c, m * n);
}

template <class T>
void int_gemm(const T* a, const T* b, T* c, std::int64_t m, std::int64_t k, std::int64_t n) {
  parallel_chunks(m, std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(k * n, 1)),
                  [&](std::int64_t lo, std::int64_t hi) {
                    for (std::int64_t i = lo; i < hi; ++i) {
                      T* row = c + i * n;
                      std::fill(row, row + n, T{0});
                      for (std::int64_t p = 0; p < k; ++p) {
                        const T x = a[i * k + p];
                        const T* brow = b + p * n;
                        for (std::int64_t j = 0; j < n; ++j) {
                          row[j] = wrap_add(row[j], wrap_mul(x, brow[j]));
                        }
                      }
                    }
                  });
}

}  // namespace

void matmul(const matmul_args& args) {
  visit_dtype(args.t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      const std::int64_t m = args.m;
      const std::int64_t k = args.k;
      const std::int64_t n = args.n;
      const auto* pa = static_cast<const T*>(args.a);
      const auto* pb = static_cast<const T*>(args.b);
      auto* pc = static_cast<T*>(args.c);
      for (std::int64_t i = 0; i < args.batch; ++i) {
        const T* ai = pa + i * args.a_stride;
        const T* bi = pb + i * args.b_stride;
        T* ci = pc + i * m * n;
        if constexpr (std::is_same_v<T, float>) {
          sgemm(ai, bi, ci, m, k, n);
        } else if constexpr (std::is_same_v<T, double>) {
          dgemm(ai, bi, ci, m, k, n);
        } else if constexpr (is_half_v<T>) {
          half_gemm(ai, bi, ci, m, k, n);
        } else {
          int_gemm(ai, bi, ci, m, k, n);
        }
      }
    }
  });
}

// Packed only for cotensor's own kernels, and only when the kernel chosen now is one of them
// (its three bfloat16 kernels read the same panels).
std::int64_t packed_b_elements(dtype t, std::int64_t k, std::int64_t n) {
  const bool own =
      (t == dtype::float32 && f32_gemm_kernel_for_this_call() == gemm_kernel::avx512) ||
      (t == dtype::bfloat16 && bf16_gemm_kernel_for_this_call() != gemm_kernel::convert);
  return own ? packed_b_elements_avx512(t, k, n) : 0;
}

void pack_b(const pack_b_args& args) { pack_b_avx512(args.t, args.b, args.packed, args.k, args.n); }

// bfloat16 panels packed under one of cotensor's kernels serve whichever runs now; with the
// converting path forced, the float32 multiply-adds', whose bits it gives on cotensor's float32
// kernel (and which, unlike vdpbf16ps, every CPU that packed them runs).
void matmul_packed(const matmul_args& args) {
  const std::size_t item = itemsize(args.t);
  const gemm_kernel kernel =
      args.t == dtype::bfloat16 ? bf16_gemm_kernel_for_this_call() : gemm_kernel::avx512;
  for (std::int64_t i = 0; i < args.batch; ++i) {
    const void* a = offset_bytes(args.a, i * args.a_stride, item);
    void* c = offset_bytes(args.c, i * args.m * args.n, item);
    const auto* a16 = static_cast<const bfloat16_t*>(a);
    auto* c16 = static_cast<bfloat16_t*>(c);
    const auto* bias16 = static_cast<const bfloat16_t*>(args.bias);
    if (args.t != dtype::bfloat16 || kernel == gemm_kernel::avx512_bf16) {
      gemm_packed_avx512(args.t, a, args.b, c, args.m, args.k, args.n, args.bias);
    } else if (kernel == gemm_kernel::amx_bf16) {
      gemm_packed_amx(a16, args.b, c16, args.m, args.k, args.n, bias16);
    } else {
      gemm_packed_bf16_avx512_fma(a16, args.b, c16, args.m, args.k, args.n, bias16);
    }
  }
}

}  // namespace cotensor::detail::cpu
