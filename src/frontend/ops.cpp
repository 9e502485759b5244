#include "cotensor/ops.hpp"

#include "cotensor/error.hpp"

#include "frontend/frontend.hpp"

#include <cmath>
#include <span>
#include <stdexcept>
#include <string>

namespace cotensor {

namespace {

using detail::binary_op;
using detail::checked;
using detail::extent_buffer;
using detail::normalize_axis;
using detail::reduce_op;
using detail::unary_op;

// `v` as an integer or bool element, as astype converts a float64.
std::int64_t integer_fill(double v, dtype t) {
  if (t == dtype::boolean) {
    return v != 0.0 ? 1 : 0;
  }
  if (v != v) {
    return 0;
  }
  const double top = t == dtype::int32 ? 0x1p31 : 0x1p63;
  if (v >= top) {
    return t == dtype::int32 ? INT32_MAX : INT64_MAX;
  }
  if (v <= -top) {
    return t == dtype::int32 ? INT32_MIN : INT64_MIN;
  }
  return static_cast<std::int64_t>(v);
}

tensor filled(const char* op, shape s, scalar value, dtype t, device d) {
  const detail::kernel_table& k = detail::kernels_checked(op, d, t);
  auto out = detail::allocate(op, s, d, t);
  detail::scalar_arg arg;
  arg.f = value.to_double();
  arg.i = is_floating(t) ? 0 : integer_fill(value.to_double(), t);
  detail::issue(op, {}, {out}, [k = &k, t, p = out.get(), n = s.numel(), arg] {
    k->fill({.t = t, .out = p->raw(), .n = n, .value = arg});
  });
  return {detail::internal, std::move(out), std::move(s)};
}

bool is_transcendental(unary_op op) {
  switch (op) {
  case unary_op::exp:
  case unary_op::log:
  case unary_op::sqrt:
  case unary_op::tanh:
  case unary_op::sigmoid:
  case unary_op::gelu_erf:
  case unary_op::gelu_tanh:
    return true;
  default:
    return false;
  }
}

tensor unary(const char* op, unary_op kind, const tensor& x) {
  checked(x, op);
  dtype t = x.dtype();
  if (is_transcendental(kind) && !is_floating(t)) {
    t = dtype::float32;  // as PyTorch: exp of an integer tensor is float32
  } else if (kind == unary_op::logical_not) {
    t = dtype::boolean;
  } else if (t == dtype::boolean) {
    detail::throw_invalid(op, "not defined on bool tensors");
  }
  const detail::kernel_table& k = detail::kernels_checked(op, x.device(), t);
  const tensor in = detail::cast_to(x, t, op);
  const auto& sin = in.storage();
  auto out = detail::allocate(op, x.shape(), x.device(), t);
  detail::issue(op, {sin}, {out},
                [k = &k, kind, t, pin = sin.get(), po = out.get(), n = x.numel()] {
                  k->unary({.op = kind, .t = t, .in = pin->raw(), .out = po->raw(), .n = n});
                });
  return {detail::internal, std::move(out), x.shape()};
}

template <class T>
tensor from_values(std::vector<T> values, shape s, device d) {
  if (static_cast<std::int64_t>(values.size()) != s.numel()) {
    detail::throw_invalid("from_vector", std::to_string(values.size()) +
                                             " values do not fill shape " + s.to_string() + " (" +
                                             std::to_string(s.numel()) + " elements)");
  }
  constexpr dtype t = dtype_of<T>;
  const detail::kernel_table& k = detail::kernels_checked("from_vector", d, t);
  auto out = detail::allocate("from_vector", s, d, t);
  detail::issue("from_vector", {}, {out}, [k = &k, values = std::move(values), p = out.get()] {
    k->copy_from_host(values.data(), p->raw(), values.size() * sizeof(T));
  });
  return {detail::internal, std::move(out), std::move(s)};
}

// The batch extents of a matmul operand of rank >= 2 and their product.
std::int64_t batch_of(const shape& s) {
  std::int64_t b = 1;
  for (std::size_t d = 0; d + 2 < s.rank(); ++d) {
    b *= s[d];
  }
  return b;
}

}  // namespace

tensor zeros(shape s, device d) { return zeros(std::move(s), dtype::float32, d); }
tensor ones(shape s, device d) { return ones(std::move(s), dtype::float32, d); }
tensor full(shape s, float value, device d) {
  return full(std::move(s), static_cast<double>(value), dtype::float32, d);
}
tensor zeros(shape s, dtype t, device d) { return filled("zeros", std::move(s), scalar(0), t, d); }
tensor ones(shape s, dtype t, device d) { return filled("ones", std::move(s), scalar(1), t, d); }
tensor full(shape s, double value, dtype t, device d) {
  return filled("full", std::move(s), scalar(value), t, d);
}

tensor arange(std::int64_t n, dtype t, device d) {
  if (n < 0) {
    detail::throw_invalid("arange", "negative length " + std::to_string(n));
  }
  std::vector<std::int64_t> values(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    values[static_cast<std::size_t>(i)] = i;
  }
  tensor ints = from_values(std::move(values), shape{n}, d);
  return t == dtype::int64 ? ints : detail::cast_to(ints, t, "arange");
}

tensor from_vector(std::vector<float> values, shape s, device d) {
  return from_values(std::move(values), std::move(s), d);
}
namespace detail {

tensor from_host(const void* values, std::size_t count, dtype t, shape s, device d) {
  if (static_cast<std::int64_t>(count) != s.numel()) {
    throw_invalid("from_vector", std::to_string(count) + " values do not fill shape " +
                                     s.to_string() + " (" + std::to_string(s.numel()) +
                                     " elements)");
  }
  const kernel_table& k = kernels_checked("from_vector", d, t);
  const std::size_t bytes = count * itemsize(t);
  std::vector<std::byte> copy(static_cast<const std::byte*>(values),
                              static_cast<const std::byte*>(values) + bytes);
  auto out = allocate("from_vector", s, d, t);
  issue("from_vector", {}, {out}, [k = &k, copy = std::move(copy), p = out.get()] {
    k->copy_from_host(copy.data(), p->raw(), copy.size());
  });
  return {detail::internal, std::move(out), std::move(s)};
}

}  // namespace detail

shape broadcast_shape(const shape& a, const shape& b) {
  const std::size_t rank = std::max(a.rank(), b.rank());
  extent_buffer out(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    const std::int64_t ea = d < a.rank() ? a[a.rank() - 1 - d] : 1;
    const std::int64_t eb = d < b.rank() ? b[b.rank() - 1 - d] : 1;
    if (ea != eb && ea != 1 && eb != 1) {
      throw std::invalid_argument("cotensor: shapes " + a.to_string() + " and " + b.to_string() +
                                  " cannot be broadcast together");
    }
    out[rank - 1 - d] = ea == 1 ? eb : ea;
  }
  return shape{std::span<const std::int64_t>(out)};
}

tensor operator+(const tensor& a, const tensor& b) {
  return detail::binary("operator+", binary_op::add, a, b);
}
tensor operator-(const tensor& a, const tensor& b) {
  return detail::binary("operator-", binary_op::sub, a, b);
}
tensor operator*(const tensor& a, const tensor& b) {
  return detail::binary("operator*", binary_op::mul, a, b);
}
tensor operator/(const tensor& a, const tensor& b) {
  return detail::binary("operator/", binary_op::div, a, b);
}
tensor operator==(const tensor& a, const tensor& b) {
  return detail::binary("operator==", binary_op::eq, a, b);
}
tensor operator!=(const tensor& a, const tensor& b) {
  return detail::binary("operator!=", binary_op::ne, a, b);
}
tensor operator<(const tensor& a, const tensor& b) {
  return detail::binary("operator<", binary_op::lt, a, b);
}
tensor operator<=(const tensor& a, const tensor& b) {
  return detail::binary("operator<=", binary_op::le, a, b);
}
tensor operator>(const tensor& a, const tensor& b) {
  return detail::binary("operator>", binary_op::gt, a, b);
}
tensor operator>=(const tensor& a, const tensor& b) {
  return detail::binary("operator>=", binary_op::ge, a, b);
}

tensor operator+(const tensor& a, scalar b) {
  return detail::scalar_op(binary_op::add, a, b, false, "operator+");
}
tensor operator-(const tensor& a, scalar b) {
  return detail::scalar_op(binary_op::sub, a, b, false, "operator-");
}
tensor operator*(const tensor& a, scalar b) {
  return detail::scalar_op(binary_op::mul, a, b, false, "operator*");
}
tensor operator/(const tensor& a, scalar b) {
  return detail::scalar_op(binary_op::div, a, b, false, "operator/");
}
tensor operator+(scalar a, const tensor& b) {
  return detail::scalar_op(binary_op::add, b, a, true, "operator+");
}
tensor operator-(scalar a, const tensor& b) {
  return detail::scalar_op(binary_op::sub, b, a, true, "operator-");
}
tensor operator*(scalar a, const tensor& b) {
  return detail::scalar_op(binary_op::mul, b, a, true, "operator*");
}
tensor operator/(scalar a, const tensor& b) {
  return detail::scalar_op(binary_op::div, b, a, true, "operator/");
}
tensor operator==(const tensor& a, scalar b) {
  return detail::scalar_op(binary_op::eq, a, b, false, "operator==");
}
tensor operator!=(const tensor& a, scalar b) {
  return detail::scalar_op(binary_op::ne, a, b, false, "operator!=");
}
tensor operator<(const tensor& a, scalar b) {
  return detail::scalar_op(binary_op::lt, a, b, false, "operator<");
}
tensor operator<=(const tensor& a, scalar b) {
  return detail::scalar_op(binary_op::le, a, b, false, "operator<=");
}
tensor operator>(const tensor& a, scalar b) {
  return detail::scalar_op(binary_op::gt, a, b, false, "operator>");
}
tensor operator>=(const tensor& a, scalar b) {
  return detail::scalar_op(binary_op::ge, a, b, false, "operator>=");
}
tensor logical_and(const tensor& a, const tensor& b) {
  return detail::binary("logical_and", binary_op::logical_and, a, b);
}
tensor logical_or(const tensor& a, const tensor& b) {
  return detail::binary("logical_or", binary_op::logical_or, a, b);
}
tensor logical_not(const tensor& a) { return unary("logical_not", unary_op::logical_not, a); }

namespace {

void require_bool(const char* op, const tensor& x) {
  checked(x, op);
  if (x.dtype() != dtype::boolean) {
    detail::throw_invalid(op, "needs bool tensors, got " + std::string(name(x.dtype())) +
                                  " (logical_and/logical_or/logical_not take any dtype)");
  }
}

}  // namespace

tensor operator&(const tensor& a, const tensor& b) {
  require_bool("operator&", a);
  require_bool("operator&", b);
  return logical_and(a, b);
}
tensor operator|(const tensor& a, const tensor& b) {
  require_bool("operator|", a);
  require_bool("operator|", b);
  return logical_or(a, b);
}
tensor operator!(const tensor& a) {
  require_bool("operator!", a);
  return logical_not(a);
}

// On bool, the maximum is logical or and the minimum logical and (kernel_op in issue.cpp).
tensor maximum(const tensor& a, const tensor& b) {
  return detail::binary("maximum", binary_op::maximum, a, b);
}
tensor minimum(const tensor& a, const tensor& b) {
  return detail::binary("minimum", binary_op::minimum, a, b);
}
tensor abs(const tensor& x) { return unary("abs", unary_op::abs, x); }

tensor clamp(const tensor& x, double lo, double hi) {
  checked(x, "clamp");
  if (!(lo <= hi)) {
    detail::throw_invalid("clamp", "lower bound above the upper bound");
  }
  // The bounds are weak: for an integer tensor, integral bounds keep its dtype.
  auto bound = [&](double v) {
    // Range first: converting a double outside int64's range is undefined behaviour.
    if (!is_floating(x.dtype()) && std::fabs(v) < 0x1p63 && v == std::trunc(v)) {
      return scalar(static_cast<std::int64_t>(v));
    }
    return scalar(v);
  };
  const tensor low = detail::scalar_op(binary_op::maximum, x, bound(lo), false, "clamp");
  return detail::scalar_op(binary_op::minimum, low, bound(hi), false, "clamp");
}

tensor where(const tensor& cond, const tensor& a, const tensor& b) {
  detail::require_same_device("where", a, b);
  detail::require_same_device("where", cond, a);
  if (cond.dtype() != dtype::boolean) {
    detail::throw_invalid("where", "the condition must be a bool tensor, got " +
                                       std::string(name(cond.dtype())));
  }
  shape out_shape = broadcast_shape(broadcast_shape(cond.shape(), a.shape()), b.shape());
  const bool same = cond.shape() == out_shape && a.shape() == out_shape && b.shape() == out_shape;
  detail::check_device_broadcast("where", a.device(), same, out_shape);
  const dtype t = promote_types(a.dtype(), b.dtype());
  const detail::kernel_table& k = detail::kernels_checked("where", a.device(), t);
  detail::require_kernel("where", a.device(), reinterpret_cast<const void*>(k.where));
  const tensor x = detail::cast_to(a, t, "where");
  const tensor y = detail::cast_to(b, t, "where");
  auto out = detail::allocate("where", out_shape, a.device(), t);
  const auto& sc = cond.storage();
  const auto& sa = x.storage();
  const auto& sb = y.storage();
  detail::issue("where", {sc, sa, sb}, {out},
                [k = &k, t, pc = sc.get(), pa = sa.get(), pb = sb.get(), po = out.get(),
                 cs = cond.shape(), as = a.shape(), bs = b.shape(), os = out_shape] {
                  k->where({.t = t,
                            .cond = pc->raw(),
                            .cond_shape = cs,
                            .a = pa->raw(),
                            .a_shape = as,
                            .b = pb->raw(),
                            .b_shape = bs,
                            .out = po->raw(),
                            .out_shape = os});
                });
  return {detail::internal, std::move(out), std::move(out_shape)};
}

tensor operator-(const tensor& a) { return unary("operator-", unary_op::neg, a); }

tensor matmul(const tensor& a, const tensor& b) {
  detail::require_same_device("matmul", a, b);
  if (a.rank() < 2 || b.rank() < 2) {
    detail::throw_invalid("matmul", "needs tensors of rank 2 or more, got " +
                                        a.shape().to_string() + " and " + b.shape().to_string());
  }
  if (a.dtype() != b.dtype()) {
    detail::throw_invalid("matmul", "operands of different dtypes (" +
                                        std::string(name(a.dtype())) + " and " +
                                        std::string(name(b.dtype())) + "): astype first");
  }
  const std::size_t ra = a.rank();
  const std::size_t rb = b.rank();
  const std::int64_t m = a.shape()[ra - 2];
  const std::int64_t k = a.shape()[ra - 1];
  const std::int64_t n = b.shape()[rb - 1];
  if (b.shape()[rb - 2] != k) {
    detail::throw_invalid("matmul", "inner dimensions differ: " + a.shape().to_string() + " x " +
                                        b.shape().to_string());
  }
  if (ra > 2 && rb > 2) {
    const auto ea = a.shape().extents();
    const auto eb = b.shape().extents();
    if (ra != rb || !std::equal(ea.begin(), ea.end() - 2, eb.begin())) {
      detail::throw_invalid("matmul", "batch dimensions differ: " + a.shape().to_string() + " x " +
                                          b.shape().to_string());
    }
  }
  const dtype t = a.dtype();
  const detail::kernel_table& kt =
      detail::kernels_checked("matmul", a.device(), t, &detail::kernel_table::matmul_dtypes);
  const shape& lead = ra >= rb ? a.shape() : b.shape();
  extent_buffer extents(lead.extents().begin(), lead.extents().end() - 2);
  extents.push_back(m);
  extents.push_back(n);
  shape out_shape{std::span<const std::int64_t>(extents)};
  const std::int64_t batch = std::max(batch_of(a.shape()), batch_of(b.shape()));
  const std::int64_t a_stride = ra > 2 ? m * k : 0;
  const std::int64_t b_stride = rb > 2 ? k * n : 0;
  auto out = detail::allocate("matmul", out_shape, a.device(), t);
  const auto& sa = a.storage();
  const auto& sb = b.storage();
  detail::issue("matmul", {sa, sb}, {out},
                [kt = &kt, t, pa = sa.get(), pb = sb.get(), pc = out.get(), batch, m, k, n,
                 a_stride, b_stride] {
                  kt->matmul({.t = t,
                              .a = pa->raw(),
                              .b = pb->raw(),
                              .c = pc->raw(),
                              .batch = batch,
                              .m = m,
                              .k = k,
                              .n = n,
                              .a_stride = a_stride,
                              .b_stride = b_stride});
                });
  return {detail::internal, std::move(out), std::move(out_shape)};
}

tensor relu(const tensor& x) { return unary("relu", unary_op::relu, x); }
tensor exp(const tensor& x) { return unary("exp", unary_op::exp, x); }
tensor log(const tensor& x) { return unary("log", unary_op::log, x); }
tensor sqrt(const tensor& x) { return unary("sqrt", unary_op::sqrt, x); }
tensor tanh(const tensor& x) { return unary("tanh", unary_op::tanh, x); }
tensor sigmoid(const tensor& x) { return unary("sigmoid", unary_op::sigmoid, x); }
tensor gelu(const tensor& x, bool tanh_approximation) {
  return unary("gelu", tanh_approximation ? unary_op::gelu_tanh : unary_op::gelu_erf, x);
}
}  // namespace cotensor
