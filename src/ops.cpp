#include "cotensor/ops.hpp"

#include "cotensor/error.hpp"

#include "frontend.hpp"

#include <boost/container/small_vector.hpp>

#include <span>
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

std::shared_ptr<storage> allocate(const char* op, const shape& s, device d) {
  require_device(op, d);
  return storage::make(s, d);
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
void check_device_broadcast(const char* op, const tensor& a, const tensor& b, const shape& out) {
  if (!a.device().is_cpu() && a.shape() != b.shape() &&
      out.rank() > static_cast<std::size_t>(gpu_max_broadcast_rank)) {
    throw_invalid(op, "broadcasting over " + std::to_string(out.rank()) + " dimensions on " +
                          "a GPU (at most " + std::to_string(gpu_max_broadcast_rank) + ")");
  }
}

}  // namespace

void issue_in_place(const char* op, binary_op kind, const tensor& a, const tensor& b) {
  require_same_device(op, a, b);
  if (broadcast_shape(a.shape(), b.shape()) != a.shape()) {
    throw_invalid(op, "cannot broadcast " + b.shape().to_string() + " into the shape " +
                          a.shape().to_string() + " of the tensor updated in place");
  }
  check_device_broadcast(op, a, b, a.shape());
  const auto& sa = a.storage();
  const auto& sb = b.storage();
  issue(op, {sa, sb}, {sa},
        [k = &kernels_for(sa->device()), kind, pa = sa.get(), pb = sb.get(), as = a.shape(),
         bs = b.shape()] {
          float* data = pa->data();
          k->binary(kind, data, as, pb->data(), bs, data, as);
        });
}

void issue_in_place(const char* op, binary_op kind, const tensor& a, float s) {
  const auto& sa = checked(a, op);
  issue(op, {sa}, {sa}, [k = &kernels_for(sa->device()), kind, pa = sa.get(), s, n = a.numel()] {
    float* data = pa->data();
    k->binary_scalar(kind, data, s, false, data, n);
  });
}

tensor map_op(const tensor& x, unary_kernel kernel) {
  const auto& in = checked(x, "map");
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

}  // namespace detail

namespace {

using detail::binary_op;
using detail::checked;
using detail::unary_op;

tensor filled(const char* op, shape s, float value, device d) {
  auto out = detail::allocate(op, s, d);
  detail::issue(op, {}, {out}, [k = &detail::kernels_for(d), p = out.get(), n = s.numel(), value] {
    k->fill(p->data(), n, value);
  });
  return {std::move(out), std::move(s)};
}

tensor binary(const char* op, binary_op kind, const tensor& a, const tensor& b) {
  detail::require_same_device(op, a, b);
  shape out_shape = broadcast_shape(a.shape(), b.shape());
  detail::check_device_broadcast(op, a, b, out_shape);
  auto out = detail::allocate(op, out_shape, a.device());
  const auto& sa = a.storage();
  const auto& sb = b.storage();
  if (a.shape() == b.shape()) {  // the common case: a closure small enough to live in the op
    detail::issue(op, {sa, sb}, {out},
                  [k = &detail::kernels_for(out->device()), kind, pa = sa.get(), pb = sb.get(),
                   po = out.get(), n = a.numel()] {
                    k->binary_same_shape(kind, pa->data(), pb->data(), po->data(), n);
                  });
  } else {
    detail::issue(op, {sa, sb}, {out},
                  [k = &detail::kernels_for(out->device()), kind, pa = sa.get(), pb = sb.get(),
                   po = out.get(), as = a.shape(), bs = b.shape(), os = out_shape] {
                    k->binary(kind, pa->data(), as, pb->data(), bs, po->data(), os);
                  });
  }
  return {std::move(out), std::move(out_shape)};
}

tensor scalar(const char* op, binary_op kind, const tensor& a, float s, bool scalar_left) {
  const auto& sa = checked(a, op);
  auto out = detail::allocate(op, a.shape(), a.device());
  detail::issue(
      op, {sa}, {out},
      [k = &detail::kernels_for(out->device()), kind, pa = sa.get(), po = out.get(), s, scalar_left,
       n = a.numel()] { k->binary_scalar(kind, pa->data(), s, scalar_left, po->data(), n); });
  return {std::move(out), a.shape()};
}

tensor unary(const char* op, unary_op kind, const tensor& x) {
  const auto& in = checked(x, op);
  auto out = detail::allocate(op, x.shape(), x.device());
  detail::issue(op, {in}, {out},
                [k = &detail::kernels_for(out->device()), kind, pin = in.get(), po = out.get(),
                 n = x.numel()] { k->unary(kind, pin->data(), po->data(), n); });
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

tensor reduce_all(const char* op, const tensor& x, bool mean) {
  const auto& in = checked(x, op);
  if (mean && x.numel() == 0) {
    detail::throw_invalid(op, "mean of an empty tensor");
  }
  auto out = detail::allocate(op, shape{}, x.device());
  detail::issue(
      op, {in}, {out},
      [k = &detail::kernels_for(out->device()), pin = in.get(), po = out.get(), n = x.numel(),
       mean] { k->sum(pin->data(), n, mean ? static_cast<double>(n) : 1.0, po->data()); });
  return {std::move(out), shape{}};
}

tensor reduce_axis(const char* op, const tensor& x, int axis, bool mean) {
  const auto& in = checked(x, op);
  const std::size_t ax = normalize_axis(op, x, axis);
  const auto extents = x.shape().extents();
  if (mean && extents[ax] == 0) {
    detail::throw_invalid(op, "mean over an empty axis");
  }
  extent_buffer kept;
  std::int64_t outer = 1;
  std::int64_t inner = 1;
  for (std::size_t d = 0; d < extents.size(); ++d) {
    if (d != ax) {
      kept.push_back(extents[d]);
    }
    if (d < ax) {
      outer *= extents[d];
    } else if (d > ax) {
      inner *= extents[d];
    }
  }
  shape out_shape{std::span<const std::int64_t>(kept)};
  auto out = detail::allocate(op, out_shape, x.device());
  const std::int64_t extent = extents[ax];
  const double scale = mean ? 1.0 / static_cast<double>(extent) : 1.0;
  detail::issue(op, {in}, {out},
                [k = &detail::kernels_for(out->device()), pin = in.get(), po = out.get(), outer,
                 extent, inner,
                 scale] { k->sum_axis(pin->data(), outer, extent, inner, scale, po->data()); });
  return {std::move(out), std::move(out_shape)};
}

}  // namespace

tensor zeros(shape s, device d) { return filled("zeros", std::move(s), 0.0F, d); }
tensor ones(shape s, device d) { return filled("ones", std::move(s), 1.0F, d); }
tensor full(shape s, float value, device d) { return filled("full", std::move(s), value, d); }

tensor from_vector(std::vector<float> values, shape s, device d) {
  if (static_cast<std::int64_t>(values.size()) != s.numel()) {
    detail::throw_invalid("from_vector", std::to_string(values.size()) +
                                             " values do not fill shape " + s.to_string() + " (" +
                                             std::to_string(s.numel()) + " elements)");
  }
  auto out = detail::allocate("from_vector", s, d);
  detail::issue("from_vector", {}, {out},
                [k = &detail::kernels_for(d), values = std::move(values), p = out.get()] {
                  k->copy_from_host(values.data(), p->data(),
                                    static_cast<std::int64_t>(values.size()));
                });
  return {std::move(out), std::move(s)};
}

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
  return binary("operator+", binary_op::add, a, b);
}
tensor operator-(const tensor& a, const tensor& b) {
  return binary("operator-", binary_op::sub, a, b);
}
tensor operator*(const tensor& a, const tensor& b) {
  return binary("operator*", binary_op::mul, a, b);
}
tensor operator/(const tensor& a, const tensor& b) {
  return binary("operator/", binary_op::div, a, b);
}
tensor operator+(const tensor& a, float b) {
  return scalar("operator+", binary_op::add, a, b, false);
}
tensor operator-(const tensor& a, float b) {
  return scalar("operator-", binary_op::sub, a, b, false);
}
tensor operator*(const tensor& a, float b) {
  return scalar("operator*", binary_op::mul, a, b, false);
}
tensor operator/(const tensor& a, float b) {
  return scalar("operator/", binary_op::div, a, b, false);
}
tensor operator+(float a, const tensor& b) {
  return scalar("operator+", binary_op::add, b, a, true);
}
tensor operator-(float a, const tensor& b) {
  return scalar("operator-", binary_op::sub, b, a, true);
}
tensor operator*(float a, const tensor& b) {
  return scalar("operator*", binary_op::mul, b, a, true);
}
tensor operator/(float a, const tensor& b) {
  return scalar("operator/", binary_op::div, b, a, true);
}
tensor operator-(const tensor& a) { return unary("operator-", unary_op::neg, a); }

tensor matmul(const tensor& a, const tensor& b) {
  detail::require_same_device("matmul", a, b);
  if (a.rank() != 2 || b.rank() != 2) {
    detail::throw_invalid("matmul", "needs 2-D tensors, got " + a.shape().to_string() + " and " +
                                        b.shape().to_string());
  }
  if (a.shape()[1] != b.shape()[0]) {
    detail::throw_invalid("matmul", "inner dimensions differ: " + a.shape().to_string() + " x " +
                                        b.shape().to_string());
  }
  const std::int64_t m = a.shape()[0];
  const std::int64_t k = a.shape()[1];
  const std::int64_t n = b.shape()[1];
  shape out_shape{m, n};
  auto out = detail::allocate("matmul", out_shape, a.device());
  const auto& sa = a.storage();
  const auto& sb = b.storage();
  detail::issue("matmul", {sa, sb}, {out},
                [kernels = &detail::kernels_for(out->device()), pa = sa.get(), pb = sb.get(),
                 pc = out.get(), m, k,
                 n] { kernels->matmul(pa->data(), pb->data(), pc->data(), m, k, n); });
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
  auto out = detail::allocate("transpose", out_shape, a.device());
  detail::issue("transpose", {in}, {out},
                [k = &detail::kernels_for(out->device()), pin = in.get(), po = out.get(), rows,
                 cols] { k->transpose(pin->data(), po->data(), rows, cols); });
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

tensor relu(const tensor& x) { return unary("relu", unary_op::relu, x); }
tensor exp(const tensor& x) { return unary("exp", unary_op::exp, x); }
tensor log(const tensor& x) { return unary("log", unary_op::log, x); }
tensor sqrt(const tensor& x) { return unary("sqrt", unary_op::sqrt, x); }
tensor tanh(const tensor& x) { return unary("tanh", unary_op::tanh, x); }
tensor sigmoid(const tensor& x) { return unary("sigmoid", unary_op::sigmoid, x); }

tensor sum(const tensor& x) { return reduce_all("sum", x, false); }
tensor sum(const tensor& x, int axis) { return reduce_axis("sum", x, axis, false); }
tensor mean(const tensor& x) { return reduce_all("mean", x, true); }
tensor mean(const tensor& x, int axis) { return reduce_axis("mean", x, axis, true); }

}  // namespace cotensor
