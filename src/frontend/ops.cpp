#include "cotensor/ops.hpp"

#include "cotensor/error.hpp"

#include "frontend.hpp"

#include <boost/container/small_vector.hpp>

#include <climits>
#include <cmath>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>

namespace cotensor {
namespace {

// Extents being built: on the stack up to shape's inline rank, so that issuing an op does not
// allocate.
using extent_buffer = boost::container::small_vector<std::int64_t, shape::inline_rank>;

}  // namespace

namespace detail {

std::string device_name(device d) {
  std::ostringstream os;
  os << d;
  return os.str();
}

void throw_invalid(const char* op, const std::string& message) {
  throw std::invalid_argument(std::string("cotensor::") + op + ": " + message);
}

void require_device(const char* op, device d) {
  if (!has_backend(d)) {
    throw std::system_error(make_error_code(errc::device_unavailable),
                            std::string("cotensor::") + op + ": " + unavailable_message(d));
  }
}

const std::shared_ptr<storage>& checked(const tensor& t, const char* op) {
  if (!t.defined()) {
    throw_invalid(op, "empty tensor (default-constructed, no buffer)");
  }
  return t.storage();
}

std::shared_ptr<storage> allocate(const char* op, const shape& s, device d, dtype t) {
  require_device(op, d);
  return storage::make(s, d, t);
}

const kernel_table&
kernels_checked(const char* op, device d, dtype t, dtype_set kernel_table::*family) {
  require_device(op, d);
  const kernel_table& k = kernels_for(d);
  if ((k.*family & dtype_bit(t)) == 0) {
    throw_invalid(op, std::string(name(t)) + " tensors are not supported on " + device_name(d) +
                          " by this op yet");
  }
  return k;
}

const kernel_table& kernels_checked(const char* op, device d, dtype t) {
  return kernels_checked(op, d, t, &kernel_table::elementwise_dtypes);
}

void require_kernel(const char* op, device d, const void* kernel) {
  if (kernel == nullptr) {
    throw_invalid(op, "not implemented on " + device_name(d) + " yet");
  }
}

tensor cast_to(const tensor& x, dtype t, const char* op) {
  const auto& in = checked(x, op);
  if (x.dtype() == t) {
    return x;
  }
  const dtype from = x.dtype();
  const kernel_table& k = kernels_checked(op, x.device(), from);
  kernels_checked(op, x.device(), t);
  auto out = allocate(op, x.shape(), x.device(), t);
  issue("astype", {in}, {out}, [k = &k, from, t, pin = in.get(), po = out.get(), n = x.numel()] {
    k->cast(from, pin->raw(), t, po->raw(), n);
  });
  return {std::move(out), x.shape()};
}

scalar_arg scalar_for(const char* op, scalar s, dtype t) {
  scalar_arg a;
  if (is_floating(t)) {
    // Weak: the scalar becomes an element of the tensor's dtype before the op, as in NumPy
    // (NEP 50) and PyTorch, so `float16 * 0.1` multiplies by float16(0.1); converted as astype
    // converts a float64 (through float32, as PyTorch), so `x + v` is `x + full(v, dtype)`.
    if (t == dtype::float16) {
      a.f = static_cast<float>(float16_t(static_cast<float>(s.f)));
    } else if (t == dtype::bfloat16) {
      a.f = static_cast<float>(bfloat16_t(static_cast<float>(s.f)));
    } else if (t == dtype::float32) {
      a.f = static_cast<float>(s.f);
    } else {
      a.f = s.f;
    }
    return a;
  }
  if (s.k == scalar::kind::floating) {
    throw_invalid(op, "a float scalar on a " + std::string(name(t)) + " tensor");  // a bug
  }
  if (t == dtype::boolean) {
    a.i = s.i != 0 ? 1 : 0;
    return a;
  }
  if (t == dtype::int32 && (s.i < INT32_MIN || s.i > INT32_MAX)) {
    throw_invalid(op, "the scalar " + std::to_string(s.i) + " does not fit int32");
  }
  a.i = s.i;
  return a;
}

void require_same_device(const char* op, const tensor& a, const tensor& b) {
  checked(a, op);
  checked(b, op);
  if (a.device() != b.device()) {
    throw_invalid(op, "operands on different devices");
  }
}

namespace {

// A GPU broadcasts over at most gpu_max_broadcast_rank dimensions: refused at the call.
void check_device_broadcast(const char* op, device d, bool same_shape, const shape& out) {
  if (!d.is_cpu() && !same_shape && out.rank() > static_cast<std::size_t>(gpu_max_broadcast_rank)) {
    throw_invalid(op, "broadcasting over " + std::to_string(out.rank()) + " dimensions on " +
                          "a GPU (at most " + std::to_string(gpu_max_broadcast_rank) + ")");
  }
}

bool is_logical(binary_op op) {
  return op == binary_op::logical_and || op == binary_op::logical_or;
}

// The dtype `op` computes in for operands promoted to `t` (true division, logical ops), or
// a refusal.
dtype compute_dtype(const char* name, binary_op op, dtype t) {
  if (is_logical(op)) {
    return dtype::boolean;
  }
  if (op == binary_op::div && !is_floating(t)) {
    return dtype::float32;
  }
  if (op == binary_op::sub && t == dtype::boolean) {
    throw_invalid(name, "subtraction of bool tensors is not supported (use logical_xor, or "
                        "astype first)");
  }
  return t;
}

// The dtype of a tensor of dtype `t` with the weak scalar `s`.
dtype scalar_result(dtype t, scalar s) {
  if (s.k == scalar::kind::floating && !is_floating(t)) {
    return dtype::float32;
  }
  if (s.k == scalar::kind::integer && t == dtype::boolean) {
    return dtype::int64;
  }
  return t;
}

// The kind of a dtype, in the order in-place ops may not climb: bool, integer, floating.
int kind_rank(dtype t) {
  if (t == dtype::boolean) {
    return 0;
  }
  return is_floating(t) ? 2 : 1;
}

dtype written(binary_op op, dtype c) { return writes_bool(op) ? dtype::boolean : c; }

// The kernel's op for `op` on dtype `t`: the maximum and minimum of bools are logical or and
// and (as NumPy and PyTorch), which the kernels have; they have no bool maximum.
binary_op kernel_op(binary_op op, dtype t) {
  if (t == dtype::boolean && op == binary_op::maximum) {
    return binary_op::logical_or;
  }
  if (t == dtype::boolean && op == binary_op::minimum) {
    return binary_op::logical_and;
  }
  return op;
}

}  // namespace

void issue_in_place(const char* op, binary_op kind, const tensor& a, const tensor& b) {
  require_same_device(op, a, b);
  if (broadcast_shape(a.shape(), b.shape()) != a.shape()) {
    throw_invalid(op, "cannot broadcast " + b.shape().to_string() + " into the shape " +
                          a.shape().to_string() + " of the tensor updated in place");
  }
  const dtype t = compute_dtype(op, kind, promote_types(a.dtype(), b.dtype()));
  if (kind_rank(t) > kind_rank(a.dtype())) {
    throw_invalid(op, "the result's dtype " + std::string(name(t)) + " cannot be stored in the " +
                          std::string(name(a.dtype())) + " tensor updated in place");
  }
  if (t != a.dtype()) {
    // A wider dtype of the same kind (float16 += float32, int32 += int64): computed in it and
    // rounded once into `a`, as PyTorch does.
    const tensor r = binary(op, kind, a, b);
    const kernel_table& k = kernels_checked(op, a.device(), a.dtype());
    const auto& sr = r.storage();
    const auto& sa = a.storage();
    issue(op, {sr}, {sa}, [k = &k, t, to = a.dtype(), pr = sr.get(), pa = sa.get(), n = a.numel()] {
      k->cast(t, pr->raw(), to, pa->raw(), n);
    });
    return;
  }
  check_device_broadcast(op, a.device(), a.shape() == b.shape(), a.shape());
  const kernel_table& k = kernels_checked(op, a.device(), t);
  const tensor rhs = cast_to(b, t, op);
  const auto& sa = a.storage();
  const auto& sb = rhs.storage();
  issue(op, {sa, sb}, {sa},
        [k = &k, kind, t, pa = sa.get(), pb = sb.get(), as = a.shape(), bs = b.shape()] {
          void* data = pa->raw();
          k->binary(kind, t, data, as, pb->raw(), bs, data, as);
        });
}

void issue_in_place(const char* op, binary_op kind, const tensor& a, scalar s) {
  const auto& sa = checked(a, op);
  const dtype t = compute_dtype(op, kind, scalar_result(a.dtype(), s));
  if (t != a.dtype()) {
    throw_invalid(op, "the result's dtype " + std::string(name(t)) + " cannot be stored in the " +
                          std::string(name(a.dtype())) + " tensor updated in place");
  }
  const kernel_table& k = kernels_checked(op, a.device(), t);
  const scalar_arg arg = scalar_for(op, s, t);
  issue(op, {sa}, {sa}, [k = &k, kind, t, pa = sa.get(), arg, n = a.numel()] {
    void* data = pa->raw();
    k->binary_scalar(kind, t, data, arg, false, data, n);
  });
}

tensor map_op(const tensor& x, unary_kernel kernel) {
  const auto& in = checked(x, "map");
  if (x.dtype() != dtype::float32) {
    throw_invalid("map", "needs a float32 tensor, got " + std::string(name(x.dtype())) +
                             " (astype(dtype::float32) first)");
  }
  auto out = allocate("map", x.shape(), x.device());
  const auto host_chunks = kernels_for(x.device()).host_chunks;
  if (host_chunks == nullptr) {
    throw_invalid("map", "the host cannot run a function on this device's memory");
  }
  auto op = make_op("map", {in}, {out});
  op->runs_user_code = true;
  op->kernel.emplace(
      [kernel = std::move(kernel), host_chunks, sin = in.get(), sout = out.get(), n = x.numel()] {
        const float* pin = sin->data();
        float* pout = sout->data();
        host_chunks(n, 4096, [&](std::int64_t lo, std::int64_t hi) {
          const backend_thread_guard backend;  // the chunk may run on another worker
          kernel(pin + lo, pout + lo, hi - lo);
        });
      });
  current_engine().push(std::move(op));
  return {std::move(out), x.shape()};
}

tensor binary(const char* op, binary_op kind, const tensor& a, const tensor& b) {
  require_same_device(op, a, b);
  shape out_shape = broadcast_shape(a.shape(), b.shape());
  const bool same_shape = a.shape() == b.shape();
  check_device_broadcast(op, a.device(), same_shape, out_shape);
  const dtype t = compute_dtype(op, kind, promote_types(a.dtype(), b.dtype()));
  kind = kernel_op(kind, t);
  const kernel_table& k = kernels_checked(op, a.device(), t);
  const tensor x = cast_to(a, t, op);
  const tensor y = cast_to(b, t, op);
  auto out = allocate(op, out_shape, a.device(), written(kind, t));
  const auto& sa = x.storage();
  const auto& sb = y.storage();
  if (same_shape) {  // the common case: a closure small enough to live in the op
    issue(op, {sa, sb}, {out},
          [k = &k, kind, t, pa = sa.get(), pb = sb.get(), po = out.get(), n = a.numel()] {
            k->binary_same_shape(kind, t, pa->raw(), pb->raw(), po->raw(), n);
          });
  } else {
    issue(op, {sa, sb}, {out},
          [k = &k, kind, t, pa = sa.get(), pb = sb.get(), po = out.get(), as = a.shape(),
           bs = b.shape(),
           os = out_shape] { k->binary(kind, t, pa->raw(), as, pb->raw(), bs, po->raw(), os); });
  }
  return {std::move(out), std::move(out_shape)};
}

tensor scalar_op(binary_op kind, const tensor& a, scalar s, bool scalar_left, const char* op) {
  checked(a, op);
  const dtype t = compute_dtype(op, kind, scalar_result(a.dtype(), s));
  kind = kernel_op(kind, t);
  const kernel_table& k = kernels_checked(op, a.device(), t);
  const scalar_arg arg = scalar_for(op, s, t);
  const tensor x = cast_to(a, t, op);
  const auto& sa = x.storage();
  auto out = allocate(op, a.shape(), a.device(), written(kind, t));
  issue(op, {sa}, {out},
        [k = &k, kind, t, pa = sa.get(), po = out.get(), arg, scalar_left, n = a.numel()] {
          k->binary_scalar(kind, t, pa->raw(), arg, scalar_left, po->raw(), n);
        });
  return {std::move(out), a.shape()};
}

}  // namespace detail

namespace {

using detail::binary_op;
using detail::checked;
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

tensor filled(const char* op, shape s, detail::scalar value, dtype t, device d) {
  const detail::kernel_table& k = detail::kernels_checked(op, d, t);
  auto out = detail::allocate(op, s, d, t);
  detail::scalar_arg arg;
  arg.f = value.f;
  arg.i = is_floating(t) ? 0 : integer_fill(value.f, t);
  detail::issue(op, {}, {out},
                [k = &k, t, p = out.get(), n = s.numel(), arg] { k->fill(t, p->raw(), n, arg); });
  return {std::move(out), std::move(s)};
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
                  k->unary(kind, t, pin->raw(), po->raw(), n);
                });
  return {std::move(out), x.shape()};
}

std::size_t normalize_axis(const char* op, const tensor& x, int axis) {
  const auto rank = static_cast<int>(x.rank());
  if (axis < -rank || axis >= rank) {
    detail::throw_invalid(op, "axis " + std::to_string(axis) + " out of range for shape " +
                                  x.shape().to_string());
  }
  return static_cast<std::size_t>(axis < 0 ? axis + rank : axis);
}

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
                  k->reduce(op, t, pin->raw(), outer, extent, inner, scale, po->raw());
                });
  return {std::move(out), std::move(out_shape)};
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
  return {std::move(out), std::move(s)};
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
tensor zeros(shape s, dtype t, device d) {
  return filled("zeros", std::move(s), detail::make_scalar(0), t, d);
}
tensor ones(shape s, dtype t, device d) {
  return filled("ones", std::move(s), detail::make_scalar(1), t, d);
}
tensor full(shape s, double value, dtype t, device d) {
  return filled("full", std::move(s), detail::make_scalar(value), t, d);
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
  return {std::move(out), std::move(s)};
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

// On bool, the maximum is logical or and the minimum logical and (kernel_op above).
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
      return detail::make_scalar(static_cast<std::int64_t>(v));
    }
    return detail::make_scalar(v);
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
                  k->where(t, pc->raw(), cs, pa->raw(), as, pb->raw(), bs, po->raw(), os);
                });
  return {std::move(out), std::move(out_shape)};
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
                  kt->matmul(t, pa->raw(), pb->raw(), pc->raw(), batch, m, k, n, a_stride,
                             b_stride);
                });
  return {std::move(out), std::move(out_shape)};
}

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
    k->transpose(t, pin->raw(), po->raw(), rows, cols);
  });
  return {std::move(out), std::move(out_shape)};
}

tensor reshape(const tensor& a, shape s) {
  checked(a, "reshape");
  if (s.numel() != a.numel()) {
    detail::throw_invalid("reshape", "cannot view " + a.shape().to_string() + " (" +
                                         std::to_string(a.numel()) + " elements) as " +
                                         s.to_string() + " (" + std::to_string(s.numel()) +
                                         " elements)");
  }
  return {a.storage(), std::move(s)};
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
                      k->copy_rows(pin->raw(), row, static_cast<char*>(po->raw()) + offset, out_row,
                                   row, rows);
                    }
                  });
    offset += row;
  }
  return {std::move(out), std::move(out_shape)};
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
                    k->copy_rows(static_cast<const char*>(pin->raw()) + skip, in_row, po->raw(),
                                 row, row, rows);
                  }
                });
  return {std::move(out), std::move(out_shape)};
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
                  k->index_select(item, pin->raw(), outer, extent, inner, pi->data<std::int64_t>(),
                                  count, po->raw());
                });
  return {std::move(out), std::move(out_shape)};
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
  detail::issue(op, {sin}, {out},
                [k = &k, t, pin = sin.get(), po = out.get(), rows = rows, cols = cols, log] {
                  k->softmax(t, pin->raw(), po->raw(), rows, cols, log);
                });
  return {std::move(out), x.shape()};
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
                  k->layer_norm(t, pin->raw(), pw != nullptr ? pw->raw() : nullptr,
                                pb != nullptr ? pb->raw() : nullptr, po->raw(), rows, cols, eps);
                });
  return {std::move(out), x.shape()};
}

tensor sum(const tensor& x) { return reduce_all("sum", reduce_op::sum, x, false); }
tensor sum(const tensor& x, int axis, bool keepdims) {
  return reduce_axis("sum", reduce_op::sum, x, axis, keepdims, false);
}
tensor mean(const tensor& x) { return reduce_all("mean", reduce_op::sum, x, true); }
tensor mean(const tensor& x, int axis, bool keepdims) {
  return reduce_axis("mean", reduce_op::sum, x, axis, keepdims, true);
}
tensor max(const tensor& x) { return reduce_all("max", reduce_op::max, x, false); }
tensor max(const tensor& x, int axis, bool keepdims) {
  return reduce_axis("max", reduce_op::max, x, axis, keepdims, false);
}
tensor min(const tensor& x) { return reduce_all("min", reduce_op::min, x, false); }
tensor min(const tensor& x, int axis, bool keepdims) {
  return reduce_axis("min", reduce_op::min, x, axis, keepdims, false);
}
tensor argmax(const tensor& x) { return reduce_all("argmax", reduce_op::argmax, x, false); }
tensor argmax(const tensor& x, int axis, bool keepdims) {
  return reduce_axis("argmax", reduce_op::argmax, x, axis, keepdims, false);
}
tensor argmin(const tensor& x) { return reduce_all("argmin", reduce_op::argmin, x, false); }
tensor argmin(const tensor& x, int axis, bool keepdims) {
  return reduce_axis("argmin", reduce_op::argmin, x, axis, keepdims, false);
}

}  // namespace cotensor
