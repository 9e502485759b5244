// The frontend's shared part (frontend.hpp): eager validation of an op's arguments at its call,
// dtype promotion, and the issuing of elementwise ops.

#include "cotensor/error.hpp"
#include "cotensor/ops.hpp"

#include "frontend/frontend.hpp"

#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>

namespace cotensor::detail {

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

std::shared_ptr<storage>
allocate(const char* op, const shape& s, device d, dtype t, buffer_lifetime lifetime) {
  require_device(op, d);
  return storage::make(s, d, t, lifetime);
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
    k->cast({.from = from, .in = pin->raw(), .to = t, .out = po->raw(), .n = n});
  });
  return {detail::internal, std::move(out), x.shape()};
}

scalar_arg scalar_for(const char* op, scalar s, dtype t) {
  scalar_arg a;
  if (is_floating(t)) {
    // Weak: the scalar becomes an element of the tensor's dtype before the op, as in NumPy
    // (NEP 50) and PyTorch, so `float16 * 0.1` multiplies by float16(0.1); converted as astype
    // converts a float64 (through float32, as PyTorch), so `x + v` is `x + full(v, dtype)`.
    if (t == dtype::float16) {
      a.f = static_cast<float>(float16_t(static_cast<float>(s.to_double())));
    } else if (t == dtype::bfloat16) {
      a.f = static_cast<float>(bfloat16_t(static_cast<float>(s.to_double())));
    } else if (t == dtype::float32) {
      a.f = static_cast<float>(s.to_double());
    } else {
      a.f = s.to_double();
    }
    return a;
  }
  if (s.is_floating_point()) {
    throw_invalid(op, "a float scalar on a " + std::string(name(t)) + " tensor");  // a bug
  }
  if (t == dtype::boolean) {
    a.i = s.to_int64() != 0 ? 1 : 0;
    return a;
  }
  if (t == dtype::int32 && (s.to_int64() < INT32_MIN || s.to_int64() > INT32_MAX)) {
    throw_invalid(op, "the scalar " + std::to_string(s.to_int64()) + " does not fit int32");
  }
  a.i = s.to_int64();
  return a;
}

void require_same_device(const char* op, const tensor& a, const tensor& b) {
  checked(a, op);
  checked(b, op);
  if (a.device() != b.device()) {
    throw_invalid(op, "operands on different devices");
  }
}

void check_device_broadcast(const char* op, device d, bool same_shape, const shape& out) {
  if (!d.is_cpu() && !same_shape && out.rank() > static_cast<std::size_t>(gpu_max_broadcast_rank)) {
    throw_invalid(op, "broadcasting over " + std::to_string(out.rank()) + " dimensions on " +
                          "a GPU (at most " + std::to_string(gpu_max_broadcast_rank) + ")");
  }
}

namespace {

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
  if (s.is_floating_point() && !is_floating(t)) {
    return dtype::float32;
  }
  if (s.is_integral() && t == dtype::boolean) {
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
      k->cast({.from = t, .in = pr->raw(), .to = to, .out = pa->raw(), .n = n});
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
          k->binary({.op = kind,
                     .t = t,
                     .a = data,
                     .a_shape = as,
                     .b = pb->raw(),
                     .b_shape = bs,
                     .out = data,
                     .out_shape = as});
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
    k->binary_scalar(
        {.op = kind, .t = t, .a = data, .s = arg, .scalar_left = false, .out = data, .n = n});
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
  return {detail::internal, std::move(out), x.shape()};
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
            k->binary_same_shape(
                {.op = kind, .t = t, .a = pa->raw(), .b = pb->raw(), .out = po->raw(), .n = n});
          });
  } else {
    issue(op, {sa, sb}, {out},
          [k = &k, kind, t, pa = sa.get(), pb = sb.get(), po = out.get(), as = a.shape(),
           bs = b.shape(), os = out_shape] {
            k->binary({.op = kind,
                       .t = t,
                       .a = pa->raw(),
                       .a_shape = as,
                       .b = pb->raw(),
                       .b_shape = bs,
                       .out = po->raw(),
                       .out_shape = os});
          });
  }
  return {detail::internal, std::move(out), std::move(out_shape)};
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
          k->binary_scalar({.op = kind,
                            .t = t,
                            .a = pa->raw(),
                            .s = arg,
                            .scalar_left = scalar_left,
                            .out = po->raw(),
                            .n = n});
        });
  return {detail::internal, std::move(out), a.shape()};
}

std::size_t normalize_axis(const char* op, const tensor& x, int axis) {
  const auto rank = static_cast<int>(x.rank());
  if (axis < -rank || axis >= rank) {
    detail::throw_invalid(op, "axis " + std::to_string(axis) + " out of range for shape " +
                                  x.shape().to_string());
  }
  return static_cast<std::size_t>(axis < 0 ? axis + rank : axis);
}

}  // namespace cotensor::detail
