#pragma once

// The kernels the frontend issues, picked by device from tables the backends fill (MXNet's
// FCompute<cpu> / FCompute<gpu>): the frontend names no backend. Every pointer is a device's
// implementation, called on one of that device's backend threads with its buffers' memory.
//
// Buffers are untyped (`void*`); each kernel takes the dtype of its operands. The frontend has
// already promoted the operands to one dtype (inserting casts) and checked that the device
// implements the kernel for it (`supports`): a kernel never sees a dtype it lacks.

#include "cotensor/device.hpp"
#include "cotensor/dtype.hpp"
#include "cotensor/shape.hpp"

#include "support/function_ref.hpp"

#include <cstddef>
#include <cstdint>

namespace cotensor::detail {

/// Elementwise binary ops (the kernels' codes).
enum class binary_op : std::uint8_t {
  add,
  sub,
  mul,
  div,
  maximum,
  minimum,
  eq,
  ne,
  lt,
  le,
  gt,
  ge,
  logical_and,
  logical_or,
};

// Elementwise binary ops (`binary_op`, above). Comparisons and the
// logical ops write bool; the others write the operands' dtype. On bool, `add` is logical or
// and `mul` logical and (`sub`, `div`, `maximum` and `minimum` never reach a kernel on bool,
// nor `div` on integers: the frontend refuses or casts). Integer `add`, `sub` and `mul` wrap
// (two's complement). `maximum` and `minimum` propagate NaN.

/// True for the ops that write bool.
constexpr bool writes_bool(binary_op op) noexcept { return op >= binary_op::eq; }

/// The most dimensions a broadcasting `binary` takes on a GPU (the frontend checks it at the
/// call; the CPU has no limit).
constexpr int gpu_max_broadcast_rank = 8;

/// Elementwise unary ops, writing the input's dtype. The transcendental ones (exp .. gelu) take
/// float dtypes only; `logical_not` takes bool; `neg` and `abs` wrap on integers.
enum class unary_op : std::uint8_t {
  neg,
  relu,
  exp,
  log,
  sqrt,
  tanh,
  sigmoid,
  abs,
  logical_not,
  gelu_erf,
  gelu_tanh,
};

/// Reductions over the middle axis of a tensor viewed as [outer, extent, inner]. `sum` writes
/// int64 for bool and integers, the input's dtype for floats (float16/bfloat16 accumulate in
/// float32, float32 and float64 in double); `max` and `min` the input's dtype, NaN propagating;
/// `argmax` and `argmin` int64, the first index of the extreme (of the first NaN if any).
enum class reduce_op : std::uint8_t { sum, max, min, argmax, argmin };

/// A C++ scalar operand, converted by the frontend for the kernel's dtype: `f` for the float
/// dtypes, `i` for the integers and bool (0 or 1).
struct scalar_arg {
  double f = 0.0;
  std::int64_t i = 0;
};

/// A set of dtypes, one bit each.
using dtype_set = std::uint8_t;
constexpr dtype_set dtype_bit(dtype t) noexcept {
  return static_cast<dtype_set>(1U << static_cast<unsigned>(t));
}
constexpr dtype_set all_dtypes = 0x7F;

// Each kernel takes one argument struct, its signature declared once here: the table holds
// `void (*)(const X_args&)`, each backend defines `void X(const X_args&)` against it, and the
// frontend builds the struct at the call (MLX's uniform `eval_cpu(inputs, out)`). A struct
// holds pointers and sizes only; shapes are referenced, not copied: the frontend's kernel
// closures own them, and a struct lives no longer than the call it is built for.

/// out[i] = value.
struct fill_args {
  dtype t;
  void* out;
  std::int64_t n;
  scalar_arg value;
};

/// out[i] = in[i] converted from `from` to `to` (casts as documented in docs/dtypes.md: float
/// to integer saturates, NaN to 0; to bool is `!= 0`).
struct cast_args {
  dtype from;
  const void* in;
  dtype to;
  void* out;
  std::int64_t n;
};

/// out = a ⊗ b with NumPy broadcasting; `out_shape` is the broadcast shape. `out` may alias
/// `a` when `a_shape == out_shape`, or `b` when `b_shape == out_shape` (when it has their
/// dtype).
struct binary_args {
  binary_op op;
  dtype t;
  const void* a;
  const shape& a_shape;
  const void* b;
  const shape& b_shape;
  void* out;
  const shape& out_shape;
};

/// out = a ⊗ b elementwise over `n` elements of equal shape; `out` may alias `a` or `b`.
struct binary_same_shape_args {
  binary_op op;
  dtype t;
  const void* a;
  const void* b;
  void* out;
  std::int64_t n;
};

/// out = a ⊗ s (or s ⊗ a when `scalar_left`), elementwise; `out` may alias `a`.
struct binary_scalar_args {
  binary_op op;
  dtype t;
  const void* a;
  scalar_arg s;
  bool scalar_left;
  void* out;
  std::int64_t n;
};

/// out = f(in) elementwise; `out` may alias `in`. exp, log, tanh and sigmoid within 4 ulp.
struct unary_args {
  unary_op op;
  dtype t;
  const void* in;
  void* out;
  std::int64_t n;
};

/// out = cond ? a : b with broadcasting of all three to `out_shape`; `cond` is bool.
struct where_args {
  dtype t;
  const void* cond;
  const shape& cond_shape;
  const void* a;
  const shape& a_shape;
  const void* b;
  const shape& b_shape;
  void* out;
  const shape& out_shape;
};

/// c[i] = a[i] · b[i] for `batch` products of [m, k] by [k, n], row-major; the i-th operand
/// starts `a_stride`/`b_stride` elements after the previous one (0: the same matrix for every
/// product). float16/bfloat16 accumulate in float32.
struct matmul_args {
  dtype t;
  const void* a;
  const void* b;
  void* c;
  std::int64_t batch;
  std::int64_t m;
  std::int64_t k;
  std::int64_t n;
  std::int64_t a_stride;
  std::int64_t b_stride;
  /// matmul_packed only: [n] of t added to each row of C (k > 0), with operator+'s bits; null
  /// for none.
  const void* bias = nullptr;
};

/// B [k, n] laid out for matmul_packed (kernel_table::packed_b_elements says how large).
struct pack_b_args {
  dtype t;
  const void* b;
  void* packed;
  std::int64_t k;
  std::int64_t n;
};

/// out[cols, rows] = in[rows, cols]ᵀ.
struct transpose_args {
  dtype t;
  const void* in;
  void* out;
  std::int64_t rows;
  std::int64_t cols;
};

/// out[o, i] = op over a of in[o, a, i], for a tensor viewed as [outer, extent, inner]; the
/// dtype written is `reduce_op`'s. `sum` multiplies by `scale` (1, or 1/extent for a mean).
struct reduce_args {
  reduce_op op;
  dtype t;
  const void* in;
  std::int64_t outer;
  std::int64_t extent;
  std::int64_t inner;
  double scale;
  void* out;
};

/// Rows of `bytes` bytes: row r from `in + r·in_stride` to `out + r·out_stride` (concat,
/// slice).
struct copy_rows_args {
  const void* in;
  std::size_t in_stride;
  void* out;
  std::size_t out_stride;
  std::size_t bytes;
  std::int64_t rows;
};

/// out[o, j, :] = in[o, index[j], :] for a tensor viewed as [outer, extent, inner] of `item`
/// bytes each; an index outside [0, extent) throws std::out_of_range.
struct index_select_args {
  std::size_t item;
  const void* in;
  std::int64_t outer;
  std::int64_t extent;
  std::int64_t inner;
  const std::int64_t* index;
  std::int64_t count;
  void* out;
};

/// Softmax (or its logarithm) over each row of [rows, cols], computed in float32 (double for
/// float64) after subtracting the row's maximum.
struct softmax_args {
  dtype t;
  const void* in;
  void* out;
  std::int64_t rows;
  std::int64_t cols;
  bool log;
};

/// (x − mean) / √(var + eps) · weight + bias over each row of [rows, cols]; `weight` and `bias`
/// are [cols], or null for none.
struct layer_norm_args {
  dtype t;
  const void* in;
  const void* weight;
  const void* bias;
  void* out;
  std::int64_t rows;
  std::int64_t cols;
  double eps;
};

/// x / √(mean(x²) + eps) · weight over each row of [rows, cols] (RMSNorm, Llama's); `weight`
/// is [cols]; the mean in double, the scaling in float (double for float64).
struct rms_norm_args {
  dtype t;
  const void* in;
  const void* weight;
  void* out;
  std::int64_t rows;
  std::int64_t cols;
  double eps;
};

/// SwiGLU's gate: out[r, j] = silu(in[r, j]) · in[r, cols + j] for each row r of `in`
/// [rows, 2 · cols], silu(g) = g · σ(g) with σ as `unary_op::sigmoid` computes it; in float
/// (double for float64), rounded once.
struct silu_and_mul_args {
  dtype t;
  const void* in;
  void* out;
  std::int64_t rows;
  std::int64_t cols;
};

/// Rotary position embedding, rotating halves (`rotate_half`, as Hugging Face's Llama): for
/// each row r of [rows, heads · head_dim] and each head, with i < head_dim / 2 and angle
/// a = positions[r] · theta^(−2i / head_dim) (the frequency rounded to float, the angle a float
/// product): out[i] = x[i]·cos a − x[i + half]·sin a, out[i + half] = x[i + half]·cos a +
/// x[i]·sin a, computed in float and rounded once.
struct rope_args {
  dtype t;
  const void* in;
  void* out;
  const std::int64_t* positions;
  std::int64_t rows;
  std::int64_t heads;
  std::int64_t head_dim;
  double theta;
};

/// out[index[r], :] = in[r, :] for `rows` rows of `row_bytes` bytes, `out` holding `out_rows`
/// rows: an in-place scatter (a key/value cache's writes). An index outside [0, out_rows)
/// throws std::out_of_range before anything is written; repeated indices write in row order.
struct scatter_rows_args {
  const void* in;
  void* out;
  std::size_t row_bytes;
  const std::int64_t* index;
  std::int64_t rows;
  std::int64_t out_rows;
};

/// A generation step's q | k | v product split: for each row r of qkv [tokens, q_width + 2 ·
/// kv_width], its first q_width elements to row r of q, the next kv_width to row slots[r] of
/// k_cache and the last kv_width to row slots[r] of v_cache (the caches seen as `cache_rows` rows
/// of kv_width), in place; with `positions` (else null) q's and k's heads of head_dim rotated
/// as rope_args rotates them. A slot outside [0, cache_rows) throws std::out_of_range, a repeated
/// slot std::invalid_argument, before anything is written.
struct split_into_cache_args {
  dtype t;
  const void* qkv;
  void* q;
  void* k_cache;
  void* v_cache;
  const std::int64_t* slots;
  const std::int64_t* positions;
  std::int64_t tokens;
  std::int64_t q_width;
  std::int64_t kv_width;
  std::int64_t cache_rows;
  std::int64_t head_dim;
  double theta;
};

/// Causal attention of `tokens` query rows over a paged key/value cache. q and out are
/// [tokens, heads · head_dim]; each cache is [blocks, block_size, kv_heads · head_dim]. Query
/// row r belongs to sequence `sequence[r]` (a row of `block_tables`, [sequences, table_width])
/// and sees that sequence's keys 0 .. context[r] − 1, key j being at slot j % block_size of
/// block block_tables[sequence[r], j / block_size]. Head h reads key/value head
/// h / (heads / kv_heads). Scores q·k · scale, a softmax and the weighted sum of values,
/// computed in float with a running maximum (no [tokens, keys] matrix), keys in order: a row's
/// result does not depend on the other rows. An out-of-range sequence, block or context throws
/// std::out_of_range.
struct paged_attention_args {
  dtype t;
  const void* q;
  const void* k_cache;
  const void* v_cache;
  void* out;
  std::int64_t tokens;
  std::int64_t heads;
  std::int64_t kv_heads;
  std::int64_t head_dim;
  std::int64_t blocks;
  std::int64_t block_size;
  const std::int64_t* block_tables;
  std::int64_t sequences;
  std::int64_t table_width;
  const std::int64_t* sequence;
  const std::int64_t* context;
  double scale;
};

/// Standard normal samples: element i from Philox-4x32-10 block i/4 of stream `stream` under
/// key `seed`, through Box-Muller: the same bits on every device. float16/bfloat16 are the
/// float32 samples rounded.
struct randn_args {
  dtype t;
  void* out;
  std::int64_t n;
  std::uint64_t seed;
  std::uint64_t stream;
};

/// The byte copies (`copy`, `copy_from_host`, `copy_to_host`) keep their plain parameters:
/// `bytes` bytes from `from` to `to`, three arguments an argument struct would only wrap. One
/// type for all three.
using byte_copy_kernel = void (*)(const void* from, void* to, std::size_t bytes);

/// One device type's kernels. Results never depend on the number of threads. What each does is
/// its argument struct's comment.
struct kernel_table {
  /// The dtypes each family of kernels takes on this device; the frontend refuses others at
  /// the call (std::invalid_argument naming the dtype and the device).
  dtype_set elementwise_dtypes;  // fill, cast, binary*, unary, where, reduce, gather kernels
  dtype_set matmul_dtypes;
  dtype_set randn_dtypes;

  void (*fill)(const fill_args&);
  /// Copies `bytes` bytes, both on this device.
  byte_copy_kernel copy;
  /// Copies `bytes` bytes from host memory.
  byte_copy_kernel copy_from_host;
  /// Copies `bytes` bytes into host memory; null for the CPU (its `copy` does it).
  byte_copy_kernel copy_to_host;
  void (*cast)(const cast_args&);
  void (*binary)(const binary_args&);
  void (*binary_same_shape)(const binary_same_shape_args&);
  void (*binary_scalar)(const binary_scalar_args&);
  void (*unary)(const unary_args&);
  void (*where)(const where_args&);
  void (*matmul)(const matmul_args&);
  /// The elements of dtype t that B [k, n] takes laid out for matmul_packed; 0 when this device
  /// (or this CPU, or the GEMM kernel chosen now) multiplies t without. Null: never.
  std::int64_t (*packed_b_elements)(dtype t, std::int64_t k, std::int64_t n);
  void (*pack_b)(const pack_b_args&);
  /// matmul_args with `b` laid out by pack_b (b_stride unused): the same bits as matmul.
  void (*matmul_packed)(const matmul_args&);
  void (*transpose)(const transpose_args&);
  void (*reduce)(const reduce_args&);
  void (*copy_rows)(const copy_rows_args&);
  void (*index_select)(const index_select_args&);
  void (*softmax)(const softmax_args&);
  void (*layer_norm)(const layer_norm_args&);
  void (*rms_norm)(const rms_norm_args&);
  void (*rope)(const rope_args&);
  void (*silu_and_mul)(const silu_and_mul_args&);
  void (*scatter_rows)(const scatter_rows_args&);
  void (*paged_attention)(const paged_attention_args&);
  /// Null where the device has none (the frontend then issues the ops it is made of).
  void (*split_into_cache)(const split_into_cache_args&);
  void (*randn)(const randn_args&);
  /// Calls `f(begin, end)` over `[0, n)` in chunks of about `grain`, in parallel, on host
  /// threads that may touch the device's memory (`map`'s user functions); null for a device
  /// whose memory the host cannot touch. Not a kernel of the table's kind (no device work, a
  /// callback), so it keeps its plain parameters.
  void (*host_chunks)(std::int64_t n,
                      std::int64_t grain,
                      function_ref<void(std::int64_t, std::int64_t)> f);
};

/// The CPU's table, always there: the common case costs one load. Registered, as every other
/// device's, in src/backends.cpp.
extern const kernel_table* const cpu_kernel_table;
/// The kernels of `d`'s device type, for any device. Throws std::system_error
/// (errc::device_unavailable) if this build has none.
const kernel_table& device_kernels(device d);
/// The kernels of `d`'s device type; as `device_kernels`.
inline const kernel_table& kernels_for(device d) {
  return d.is_cpu() ? *cpu_kernel_table : device_kernels(d);
}

}  // namespace cotensor::detail
