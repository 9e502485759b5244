// Reductions (sum, mean, max, min, argmax, argmin; over all elements or one axis) and the
// row-wise ops built on them: softmax, log_softmax and layer_norm.

#include "cotensor/ops.hpp"

#include "frontend/frontend.hpp"

#include <span>
#include <string>
#include <utility>

namespace cotensor {
namespace {

using detail::checked;
using detail::extent_buffer;
using detail::normalize_axis;
using detail::reduce_op;

// The dtype `op` writes for input dtype `t`.
dtype reduced_dtype(reduce_op op, dtype t) {
  switch (op) {
  case reduce_op::sum:
    return is_floating(t) ? t : dtype::int64;
  case reduce_op::argmax:
  case reduce_op::argmin:
    return dtype::int64;
  default:
    return t;
  }
}

// `op` over `x` viewed as [outer, extent, inner], giving `out_shape`.
tensor reduce_view(const char* name,
                   reduce_op op,
                   const tensor& x,
                   std::int64_t outer,
                   std::int64_t extent,
                   std::int64_t inner,
                   double scale,
                   shape out_shape) {
  if (op != reduce_op::sum && extent == 0) {
    detail::throw_invalid(name, "of an empty tensor or axis (no identity)");
  }
  const dtype t = x.dtype();
  const detail::kernel_table& k = detail::kernels_checked(name, x.device(), t);
  const auto& in = x.storage();
  auto out = detail::allocate(name, out_shape, x.device(), reduced_dtype(op, t));
  detail::issue(name, {in}, {out},
                [k = &k, op, t, pin = in.get(), po = out.get(), outer, extent, inner, scale] {
                  k->reduce({.op = op,
                             .t = t,
                             .in = pin->raw(),
                             .outer = outer,
                             .extent = extent,
                             .inner = inner,
                             .scale = scale,
                             .out = po->raw()});
                });
  return {detail::internal, std::move(out), std::move(out_shape)};
}

tensor reduce_all(const char* name, reduce_op op, const tensor& x, bool mean) {
  checked(x, name);
  if (mean && x.numel() == 0) {
    detail::throw_invalid(name, "mean of an empty tensor");
  }
  const tensor in = mean && !is_floating(x.dtype()) ? detail::cast_to(x, dtype::float32, name) : x;
  const double scale = mean ? 1.0 / static_cast<double>(x.numel()) : 1.0;
  return reduce_view(name, op, in, 1, x.numel(), 1, scale, shape{});
}

tensor
reduce_axis(const char* name, reduce_op op, const tensor& x, int axis, bool keepdims, bool mean) {
  checked(x, name);
  const std::size_t ax = normalize_axis(name, x, axis);
  const auto extents = x.shape().extents();
  if (mean && extents[ax] == 0) {
    detail::throw_invalid(name, "mean over an empty axis");
  }
  extent_buffer kept;
  std::int64_t outer = 1;
  std::int64_t inner = 1;
  for (std::size_t d = 0; d < extents.size(); ++d) {
    if (d != ax) {
      kept.push_back(extents[d]);
    } else if (keepdims) {
      kept.push_back(1);
    }
    if (d < ax) {
      outer *= extents[d];
    } else if (d > ax) {
      inner *= extents[d];
    }
  }
  const std::int64_t extent = extents[ax];
  const tensor in = mean && !is_floating(x.dtype()) ? detail::cast_to(x, dtype::float32, name) : x;
  const double scale = mean ? 1.0 / static_cast<double>(extent) : 1.0;
  return reduce_view(name, op, in, outer, extent, inner, scale,
                     shape{std::span<const std::int64_t>(kept)});
}

}  // namespace

namespace {

// x as a float tensor of rank >= 1 for the row-wise ops, and its [rows, cols].
std::pair<std::int64_t, std::int64_t> rows_cols(const char* op, const tensor& x) {
  checked(x, op);
  if (x.rank() == 0) {
    detail::throw_invalid(op, "needs a tensor of rank 1 or more");
  }
  const std::int64_t cols = x.shape()[x.rank() - 1];
  return {cols == 0 ? 0 : x.numel() / cols, cols};
}

tensor softmax_op(const char* op, const tensor& x, bool log) {
  const auto [rows, cols] = rows_cols(op, x);
  const tensor in = is_floating(x.dtype()) ? x : detail::cast_to(x, dtype::float32, op);
  const dtype t = in.dtype();
  const detail::kernel_table& k = detail::kernels_checked(op, x.device(), t);
  detail::require_kernel(op, x.device(), reinterpret_cast<const void*>(k.softmax));
  auto out = detail::allocate(op, x.shape(), x.device(), t);
  const auto& sin = in.storage();
  detail::issue(
      op, {sin}, {out},
      [k = &k, t, pin = sin.get(), po = out.get(), rows = rows, cols = cols, log] {
        k->softmax(
            {.t = t, .in = pin->raw(), .out = po->raw(), .rows = rows, .cols = cols, .log = log});
      });
  return {detail::internal, std::move(out), x.shape()};
}

}  // namespace

tensor softmax(const tensor& x) { return softmax_op("softmax", x, false); }
tensor log_softmax(const tensor& x) { return softmax_op("log_softmax", x, true); }

tensor layer_norm(const tensor& x, const tensor& weight, const tensor& bias, double eps) {
  const auto [rows, cols] = rows_cols("layer_norm", x);
  const dtype t = x.dtype();
  if (!is_floating(t)) {
    detail::throw_invalid("layer_norm", "needs a float tensor, got " + std::string(name(t)));
  }
  for (const tensor* p : {&weight, &bias}) {
    if (!p->defined()) {
      continue;
    }
    detail::require_same_device("layer_norm", x, *p);
    if (p->dtype() != t || p->shape() != shape{cols}) {
      detail::throw_invalid("layer_norm", "weight and bias must be " + std::string(name(t)) + " " +
                                              shape{cols}.to_string() + ", got " +
                                              std::string(name(p->dtype())) + " " +
                                              p->shape().to_string());
    }
  }
  const detail::kernel_table& k = detail::kernels_checked("layer_norm", x.device(), t);
  detail::require_kernel("layer_norm", x.device(), reinterpret_cast<const void*>(k.layer_norm));
  auto out = detail::allocate("layer_norm", x.shape(), x.device(), t);
  const auto& sin = x.storage();
  // Absent weight or bias: read x in their place (a harmless extra read) and pass null.
  const auto& sw = weight.defined() ? weight.storage() : sin;
  const auto& sb = bias.defined() ? bias.storage() : sin;
  detail::issue("layer_norm", {sin, sw, sb}, {out},
                [k = &k, t, pin = sin.get(), pw = weight.defined() ? sw.get() : nullptr,
                 pb = bias.defined() ? sb.get() : nullptr, po = out.get(), rows = rows, cols = cols,
                 eps] {
                  k->layer_norm({.t = t,
                                 .in = pin->raw(),
                                 .weight = pw != nullptr ? pw->raw() : nullptr,
                                 .bias = pb != nullptr ? pb->raw() : nullptr,
                                 .out = po->raw(),
                                 .rows = rows,
                                 .cols = cols,
                                 .eps = eps});
                });
  return {detail::internal, std::move(out), x.shape()};
}

// A reduction of ops.hpp, both overloads: over all elements, and along `axis`. `divide`: the
// sum divided by the count (mean).
#define COTENSOR_REDUCTION(fn, op, divide)                                                         \
  tensor fn(const tensor& x) { return reduce_all(#fn, reduce_op::op, x, divide); }                 \
  tensor fn(const tensor& x, int axis, bool keepdims) {                                            \
    return reduce_axis(#fn, reduce_op::op, x, axis, keepdims, divide);                             \
  }

COTENSOR_REDUCTION(sum, sum, false)
COTENSOR_REDUCTION(mean, sum, true)
COTENSOR_REDUCTION(max, max, false)
COTENSOR_REDUCTION(min, min, false)
COTENSOR_REDUCTION(argmax, argmax, false)
COTENSOR_REDUCTION(argmin, argmin, false)

#undef COTENSOR_REDUCTION

}  // namespace cotensor
