// The ops transformer language models are made of beyond the general ones (ops.hpp): RMSNorm,
// rotary position embedding, SwiGLU's gate, the key/value cache's in-place scatter and causal
// attention over a paged cache. Checked here at the call; the kernels are the backends'
// (kernel_table.hpp).

#include "cotensor/ops.hpp"

#include "frontend/frontend.hpp"
#include "frontend/split_into_cache.hpp"

#include <string>
#include <vector>

namespace cotensor {
namespace {

using detail::throw_invalid;

std::string described(const tensor& t) {
  return std::string(name(t.dtype())) + " " + t.shape().to_string();
}

// Checks that `t` is a float tensor of rank `rank` and returns the device's kernels for it,
// after checking that `kernel` (a member of the table) is there.
template <class Kernel>
const detail::kernel_table& float_kernels(const char* op,
                                          const tensor& t,
                                          std::size_t rank,
                                          Kernel detail::kernel_table::*kernel) {
  detail::checked(t, op);
  if (!is_floating(t.dtype()) || t.rank() != rank) {
    throw_invalid(op,
                  "needs a float tensor of rank " + std::to_string(rank) + ", got " + described(t));
  }
  const detail::kernel_table& k = detail::kernels_checked(op, t.device(), t.dtype());
  detail::require_kernel(op, t.device(), reinterpret_cast<const void*>(k.*kernel));
  return k;
}

// Checks that `index` is an int64 tensor [extent] on x's device.
void require_index(
    const char* op, const char* what, const tensor& x, const tensor& index, std::int64_t extent) {
  detail::checked(index, op);
  detail::require_same_device(op, x, index);
  if (index.dtype() != dtype::int64 || index.shape() != shape{extent}) {
    throw_invalid(op, std::string(what) + " must be int64 [" + std::to_string(extent) + "], got " +
                          described(index));
  }
}

}  // namespace

tensor rms_norm(const tensor& x, const tensor& weight, double eps) {
  const char* op = "rms_norm";
  detail::checked(x, op);
  if (x.rank() == 0) {
    throw_invalid(op, "needs a tensor of rank 1 or more");
  }
  const std::int64_t cols = x.shape()[x.rank() - 1];
  const tensor rows2 = reshape(x, {cols == 0 ? 0 : x.numel() / cols, cols});
  const detail::kernel_table& k = float_kernels(op, rows2, 2, &detail::kernel_table::rms_norm);
  detail::checked(weight, op);
  detail::require_same_device(op, x, weight);
  if (weight.dtype() != x.dtype() || weight.shape() != shape{cols}) {
    throw_invalid(op, "weight must be " + std::string(name(x.dtype())) + " " +
                          shape{cols}.to_string() + ", got " + described(weight));
  }
  auto out = detail::allocate(op, x.shape(), x.device(), x.dtype());
  const auto& sin = x.storage();
  const auto& sw = weight.storage();
  detail::issue(op, {sin, sw}, {out},
                [k = &k, t = x.dtype(), pin = sin.get(), pw = sw.get(), po = out.get(),
                 rows = rows2.shape()[0], cols, eps] {
                  k->rms_norm({.t = t,
                               .in = pin->raw(),
                               .weight = pw->raw(),
                               .out = po->raw(),
                               .rows = rows,
                               .cols = cols,
                               .eps = eps});
                });
  return {detail::internal, std::move(out), x.shape()};
}

tensor
rotary_embedding(const tensor& x, const tensor& positions, std::int64_t head_dim, double theta) {
  const char* op = "rotary_embedding";
  const detail::kernel_table& k = float_kernels(op, x, 2, &detail::kernel_table::rope);
  const std::int64_t rows = x.shape()[0];
  const std::int64_t width = x.shape()[1];
  if (head_dim <= 0 || head_dim % 2 != 0 || width % head_dim != 0) {
    throw_invalid(op, "head_dim " + std::to_string(head_dim) +
                          " must be even and divide the row's " + std::to_string(width));
  }
  if (!(theta > 0.0)) {
    throw_invalid(op, "theta must be positive");
  }
  require_index(op, "positions", x, positions, rows);
  auto out = detail::allocate(op, x.shape(), x.device(), x.dtype());
  const auto& sin = x.storage();
  const auto& sp = positions.storage();
  detail::issue(op, {sin, sp}, {out},
                [k = &k, t = x.dtype(), pin = sin.get(), pp = sp.get(), po = out.get(), rows,
                 heads = width / head_dim, head_dim, theta] {
                  k->rope({.t = t,
                           .in = pin->raw(),
                           .out = po->raw(),
                           .positions = pp->data<std::int64_t>(),
                           .rows = rows,
                           .heads = heads,
                           .head_dim = head_dim,
                           .theta = theta});
                });
  return {detail::internal, std::move(out), x.shape()};
}

tensor silu_and_mul(const tensor& x) {
  const char* op = "silu_and_mul";
  detail::checked(x, op);
  if (x.rank() == 0 || x.shape()[x.rank() - 1] % 2 != 0) {
    throw_invalid(op, "needs a last axis of even extent (the gate's and the up projection's "
                      "halves), got " +
                          described(x));
  }
  const std::int64_t cols = x.shape()[x.rank() - 1] / 2;
  const std::int64_t rows = cols == 0 ? 0 : x.numel() / (2 * cols);
  const detail::kernel_table& k =
      float_kernels(op, reshape(x, {rows, 2 * cols}), 2, &detail::kernel_table::silu_and_mul);
  std::vector<std::int64_t> extents(x.shape().extents().begin(), x.shape().extents().end());
  extents.back() = cols;
  const shape out_shape(extents);
  auto out = detail::allocate(op, out_shape, x.device(), x.dtype());
  const auto& sin = x.storage();
  detail::issue(
      op, {sin}, {out}, [k = &k, t = x.dtype(), pin = sin.get(), po = out.get(), rows, cols] {
        k->silu_and_mul({.t = t, .in = pin->raw(), .out = po->raw(), .rows = rows, .cols = cols});
      });
  return {detail::internal, std::move(out), out_shape};
}

void scatter_rows(const tensor& dst, const tensor& index, const tensor& rows) {
  const char* op = "scatter_rows";
  detail::checked(dst, op);
  detail::checked(rows, op);
  detail::require_same_device(op, dst, rows);
  if (rows.rank() == 0 || dst.rank() == 0 || rows.dtype() != dst.dtype()) {
    throw_invalid(op, "needs rows and a destination of rank 1 or more and one dtype, got " +
                          described(rows) + " into " + described(dst));
  }
  const std::int64_t count = rows.shape()[0];
  const std::int64_t row = count == 0 ? 0 : rows.numel() / count;
  if (row == 0 || dst.numel() % row != 0) {
    throw_invalid(op, "rows " + described(rows) + " do not divide " + described(dst));
  }
  require_index(op, "index", dst, index, count);
  const detail::kernel_table& k = detail::kernels_checked(op, dst.device(), dst.dtype());
  detail::require_kernel(op, dst.device(), reinterpret_cast<const void*>(k.scatter_rows));
  const auto& sin = rows.storage();
  const auto& si = index.storage();
  const auto& so = dst.storage();
  detail::issue(op, {sin, si}, {so},
                [k = &k, pin = sin.get(), pi = si.get(), po = so.get(),
                 row_bytes = static_cast<std::size_t>(row) * itemsize(dst.dtype()), count,
                 out_rows = dst.numel() / row] {
                  k->scatter_rows({.in = pin->raw(),
                                   .out = po->raw(),
                                   .row_bytes = row_bytes,
                                   .index = pi->data<std::int64_t>(),
                                   .rows = count,
                                   .out_rows = out_rows});
                });
}

tensor paged_attention(const tensor& q,
                       const tensor& k_cache,
                       const tensor& v_cache,
                       const tensor& block_tables,
                       const tensor& sequence,
                       const tensor& context,
                       double scale) {
  const char* op = "paged_attention";
  const detail::kernel_table& k =
      float_kernels(op, k_cache, 4, &detail::kernel_table::paged_attention);
  detail::checked(q, op);
  detail::checked(v_cache, op);
  detail::require_same_device(op, q, k_cache);
  detail::require_same_device(op, q, v_cache);
  const shape& cache = k_cache.shape();  // [blocks, block_size, kv_heads, head_dim]
  const std::int64_t head_dim = cache[3];
  if (v_cache.shape() != cache || v_cache.dtype() != k_cache.dtype() ||
      q.dtype() != k_cache.dtype() || q.rank() != 2 || head_dim == 0 ||
      q.shape()[1] % head_dim != 0 || (q.shape()[1] / head_dim) % cache[2] != 0) {
    throw_invalid(op, "needs q [tokens, heads · head_dim] and caches [blocks, block_size, "
                      "kv_heads, head_dim] of one dtype, heads a multiple of kv_heads; got q " +
                          described(q) + ", caches " + described(k_cache) + " and " +
                          described(v_cache));
  }
  detail::checked(block_tables, op);
  detail::require_same_device(op, q, block_tables);
  if (block_tables.dtype() != dtype::int64 || block_tables.rank() != 2) {
    throw_invalid(op,
                  "block_tables must be int64 [sequences, width], got " + described(block_tables));
  }
  const std::int64_t tokens = q.shape()[0];
  require_index(op, "sequence", q, sequence, tokens);
  require_index(op, "context", q, context, tokens);
  auto out = detail::allocate(op, q.shape(), q.device(), q.dtype());
  const auto& sq = q.storage();
  const auto& sk = k_cache.storage();
  const auto& sv = v_cache.storage();
  const auto& sb = block_tables.storage();
  const auto& ss = sequence.storage();
  const auto& sc = context.storage();
  detail::issue(op, {sq, sk, sv, sb, ss, sc}, {out},
                [k = &k, t = q.dtype(), pq = sq.get(), pk = sk.get(), pv = sv.get(), pb = sb.get(),
                 ps = ss.get(), pc = sc.get(), po = out.get(), tokens,
                 heads = q.shape()[1] / head_dim, kv_heads = cache[2], head_dim, blocks = cache[0],
                 block_size = cache[1], sequences = block_tables.shape()[0],
                 width = block_tables.shape()[1], scale] {
                  k->paged_attention({.t = t,
                                      .q = pq->raw(),
                                      .k_cache = pk->raw(),
                                      .v_cache = pv->raw(),
                                      .out = po->raw(),
                                      .tokens = tokens,
                                      .heads = heads,
                                      .kv_heads = kv_heads,
                                      .head_dim = head_dim,
                                      .blocks = blocks,
                                      .block_size = block_size,
                                      .block_tables = pb->data<std::int64_t>(),
                                      .sequences = sequences,
                                      .table_width = width,
                                      .sequence = ps->data<std::int64_t>(),
                                      .context = pc->data<std::int64_t>(),
                                      .scale = scale});
                });
  return {detail::internal, std::move(out), q.shape()};
}

namespace detail {

tensor split_into_cache(const tensor& qkv,
                        std::int64_t q_width,
                        std::int64_t kv_width,
                        const tensor& slots,
                        const tensor& k_cache,
                        const tensor& v_cache,
                        const split_rotary* rotary) {
  const char* op = "split_into_cache";
  // The rotary kernel, which the ops it is made of need where the device has no kernel for it.
  const kernel_table& k = float_kernels(op, qkv, 2, &kernel_table::rope);
  checked(k_cache, op);
  checked(v_cache, op);
  require_same_device(op, qkv, k_cache);
  require_same_device(op, qkv, v_cache);
  const std::int64_t tokens = qkv.shape()[0];
  if (q_width <= 0 || kv_width <= 0 || qkv.shape()[1] != q_width + 2 * kv_width ||
      k_cache.dtype() != qkv.dtype() || v_cache.dtype() != qkv.dtype() ||
      k_cache.numel() % kv_width != 0 || v_cache.numel() != k_cache.numel()) {
    throw_invalid(op, "needs qkv [tokens, " + std::to_string(q_width) + " + 2 · " +
                          std::to_string(kv_width) + "] and caches of rows of " +
                          std::to_string(kv_width) + " of its dtype, got " + described(qkv) + ", " +
                          described(k_cache) + " and " + described(v_cache));
  }
  require_index(op, "slots", qkv, slots, tokens);
  if (rotary != nullptr) {
    require_index(op, "positions", qkv, rotary->positions, tokens);
    if (rotary->head_dim <= 0 || rotary->head_dim % 2 != 0 || q_width % rotary->head_dim != 0 ||
        kv_width % rotary->head_dim != 0 || !(rotary->theta > 0.0)) {
      throw_invalid(op, "head_dim " + std::to_string(rotary->head_dim) +
                            " must be even and divide " + std::to_string(q_width) + " and " +
                            std::to_string(kv_width) + ", theta positive");
    }
  }
  if (k.split_into_cache == nullptr) {
    // The ops it is made of, the same bits.
    tensor q = slice(qkv, 1, 0, q_width);
    tensor key = slice(qkv, 1, q_width, q_width + kv_width);
    if (rotary != nullptr) {
      q = rotary_embedding(q, rotary->positions, rotary->head_dim, rotary->theta);
      key = rotary_embedding(key, rotary->positions, rotary->head_dim, rotary->theta);
    }
    scatter_rows(k_cache, slots, key);
    scatter_rows(v_cache, slots, slice(qkv, 1, q_width + kv_width, q_width + 2 * kv_width));
    return q;
  }
  const shape q_shape{tokens, q_width};
  auto out = allocate(op, q_shape, qkv.device(), qkv.dtype());
  const auto& sx = qkv.storage();
  const auto& ss = slots.storage();
  const auto& sk = k_cache.storage();
  const auto& sv = v_cache.storage();
  const std::shared_ptr<storage> none;
  const auto& sp = rotary != nullptr ? checked(rotary->positions, op) : none;
  const auto kernel = [k = &k, t = qkv.dtype(), px = sx.get(), ps = ss.get(), po = out.get(),
                       pk = sk.get(), pv = sv.get(), pp = sp.get(), tokens, q_width, kv_width,
                       cache_rows = k_cache.numel() / kv_width,
                       head_dim = rotary != nullptr ? rotary->head_dim : 0,
                       theta = rotary != nullptr ? rotary->theta : 0.0] {
    k->split_into_cache({.t = t,
                         .qkv = px->raw(),
                         .q = po->raw(),
                         .k_cache = pk->raw(),
                         .v_cache = pv->raw(),
                         .slots = ps->data<std::int64_t>(),
                         .positions = pp != nullptr ? pp->data<std::int64_t>() : nullptr,
                         .tokens = tokens,
                         .q_width = q_width,
                         .kv_width = kv_width,
                         .cache_rows = cache_rows,
                         .head_dim = head_dim,
                         .theta = theta});
  };
  if (rotary != nullptr) {
    issue(op, {sx, ss, sp}, {out, sk, sv}, kernel);
  } else {
    issue(op, {sx, ss}, {out, sk, sv}, kernel);
  }
  return {internal, std::move(out), q_shape};
}

}  // namespace detail

}  // namespace cotensor
