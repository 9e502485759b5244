// Ops that move elements without computing on them: transpose, reshape, concat, slice and
// index_select.

#include "cotensor/ops.hpp"

#include "frontend/frontend.hpp"

#include <span>
#include <string>
#include <utility>

namespace cotensor {

using detail::checked;
using detail::extent_buffer;
using detail::normalize_axis;

tensor transpose(const tensor& a) {
  const auto& in = checked(a, "transpose");
  if (a.rank() != 2) {
    detail::throw_invalid("transpose", "needs a 2-D tensor, got " + a.shape().to_string());
  }
  const std::int64_t rows = a.shape()[0];
  const std::int64_t cols = a.shape()[1];
  shape out_shape{cols, rows};
  const dtype t = a.dtype();
  const detail::kernel_table& k = detail::kernels_checked("transpose", a.device(), t);
  auto out = detail::allocate("transpose", out_shape, a.device(), t);
  detail::issue("transpose", {in}, {out}, [k = &k, t, pin = in.get(), po = out.get(), rows, cols] {
    k->transpose({.t = t, .in = pin->raw(), .out = po->raw(), .rows = rows, .cols = cols});
  });
  return {detail::internal, std::move(out), std::move(out_shape)};
}

tensor reshape(const tensor& a, shape s) {
  checked(a, "reshape");
  if (s.numel() != a.numel()) {
    detail::throw_invalid("reshape", "cannot view " + a.shape().to_string() + " (" +
                                         std::to_string(a.numel()) + " elements) as " +
                                         s.to_string() + " (" + std::to_string(s.numel()) +
                                         " elements)");
  }
  return {detail::internal, a.storage(), std::move(s)};
}

namespace {

// The product of the extents before and after `axis`.
std::pair<std::int64_t, std::int64_t> outer_inner(const shape& s, std::size_t axis) {
  std::int64_t outer = 1;
  std::int64_t inner = 1;
  for (std::size_t d = 0; d < s.rank(); ++d) {
    if (d < axis) {
      outer *= s[d];
    } else if (d > axis) {
      inner *= s[d];
    }
  }
  return {outer, inner};
}

shape with_extent(const shape& s, std::size_t axis, std::int64_t extent) {
  extent_buffer e(s.extents().begin(), s.extents().end());
  e[axis] = extent;
  return shape{std::span<const std::int64_t>(e)};
}

}  // namespace

tensor concat(const std::vector<tensor>& xs, int axis) {
  if (xs.empty()) {
    detail::throw_invalid("concat", "no tensors to join");
  }
  const tensor& first = xs.front();
  checked(first, "concat");
  const std::size_t ax = normalize_axis("concat", first, axis);
  std::int64_t total = 0;
  for (const tensor& x : xs) {
    detail::require_same_device("concat", first, x);
    if (x.dtype() != first.dtype()) {
      detail::throw_invalid("concat", "tensors of different dtypes (" +
                                          std::string(name(first.dtype())) + " and " +
                                          std::string(name(x.dtype())) + ")");
    }
    if (x.rank() != first.rank() ||
        with_extent(x.shape(), ax, 0) != with_extent(first.shape(), ax, 0)) {
      detail::throw_invalid("concat", "shapes " + first.shape().to_string() + " and " +
                                          x.shape().to_string() + " differ off axis " +
                                          std::to_string(ax));
    }
    total += x.shape()[ax];
  }
  const dtype t = first.dtype();
  const detail::kernel_table& k = detail::kernels_checked("concat", first.device(), t);
  detail::require_kernel("concat", first.device(), reinterpret_cast<const void*>(k.copy_rows));
  shape out_shape = with_extent(first.shape(), ax, total);
  auto out = detail::allocate("concat", out_shape, first.device(), t);
  const auto [outer, inner] = outer_inner(out_shape, ax);
  const std::size_t item = itemsize(t);
  const std::size_t out_row = static_cast<std::size_t>(total * inner) * item;
  std::size_t offset = 0;
  for (const tensor& x : xs) {
    const std::size_t row = static_cast<std::size_t>(x.shape()[ax] * inner) * item;
    const auto& in = x.storage();
    // One op per part, each writing its columns of the result.
    detail::issue("concat", {in}, {out},
                  [k = &k, pin = in.get(), po = out.get(), offset, row, out_row, rows = outer] {
                    if (row > 0) {
                      k->copy_rows({.in = pin->raw(),
                                    .in_stride = row,
                                    .out = static_cast<char*>(po->raw()) + offset,
                                    .out_stride = out_row,
                                    .bytes = row,
                                    .rows = rows});
                    }
                  });
    offset += row;
  }
  return {detail::internal, std::move(out), std::move(out_shape)};
}

tensor slice(const tensor& x, int axis, std::int64_t start, std::int64_t stop) {
  const auto& in = checked(x, "slice");
  const std::size_t ax = normalize_axis("slice", x, axis);
  const std::int64_t extent = x.shape()[ax];
  auto clamp_index = [extent](std::int64_t i) {
    if (i < 0) {
      i += extent;
    }
    return std::clamp<std::int64_t>(i, 0, extent);
  };
  start = clamp_index(start);
  stop = std::max(start, clamp_index(stop));
  const dtype t = x.dtype();
  const detail::kernel_table& k = detail::kernels_checked("slice", x.device(), t);
  detail::require_kernel("slice", x.device(), reinterpret_cast<const void*>(k.copy_rows));
  shape out_shape = with_extent(x.shape(), ax, stop - start);
  auto out = detail::allocate("slice", out_shape, x.device(), t);
  const auto [outer, inner] = outer_inner(x.shape(), ax);
  const std::size_t item = itemsize(t);
  const std::size_t in_row = static_cast<std::size_t>(extent * inner) * item;
  const std::size_t row = static_cast<std::size_t>((stop - start) * inner) * item;
  const std::size_t skip = static_cast<std::size_t>(start * inner) * item;
  detail::issue("slice", {in}, {out},
                [k = &k, pin = in.get(), po = out.get(), in_row, row, skip, rows = outer] {
                  if (row > 0) {
                    k->copy_rows({.in = static_cast<const char*>(pin->raw()) + skip,
                                  .in_stride = in_row,
                                  .out = po->raw(),
                                  .out_stride = row,
                                  .bytes = row,
                                  .rows = rows});
                  }
                });
  return {detail::internal, std::move(out), std::move(out_shape)};
}

tensor index_select(const tensor& x, int axis, const tensor& index) {
  detail::require_same_device("index_select", x, index);
  const std::size_t ax = normalize_axis("index_select", x, axis);
  if (index.dtype() != dtype::int64 || index.rank() != 1) {
    detail::throw_invalid("index_select", "needs a rank-1 int64 index tensor, got " +
                                              std::string(name(index.dtype())) + " " +
                                              index.shape().to_string());
  }
  const dtype t = x.dtype();
  const detail::kernel_table& k = detail::kernels_checked("index_select", x.device(), t);
  detail::require_kernel("index_select", x.device(), reinterpret_cast<const void*>(k.index_select));
  const std::int64_t count = index.shape()[0];
  shape out_shape = with_extent(x.shape(), ax, count);
  auto out = detail::allocate("index_select", out_shape, x.device(), t);
  const auto [outer, inner] = outer_inner(x.shape(), ax);
  const auto& in = x.storage();
  const auto& idx = index.storage();
  detail::issue("index_select", {in, idx}, {out},
                // Structured bindings captured by name (init-captures): clang 14 cannot
                // capture them plainly.
                [k = &k, item = itemsize(t), pin = in.get(), pi = idx.get(), po = out.get(),
                 outer = outer, extent = x.shape()[ax], inner = inner, count] {
                  k->index_select({.item = item,
                                   .in = pin->raw(),
                                   .outer = outer,
                                   .extent = extent,
                                   .inner = inner,
                                   .index = pi->data<std::int64_t>(),
                                   .count = count,
                                   .out = po->raw()});
                });
  return {detail::internal, std::move(out), std::move(out_shape)};
}

}  // namespace cotensor
