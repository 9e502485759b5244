// detail::packed_matrix (frontend/packed_matmul.hpp): B laid out once by the device's pack_b
// kernel, products by its matmul_packed kernel.

#include "frontend/packed_matmul.hpp"

#include "cotensor/ops.hpp"

#include "frontend/frontend.hpp"

#include <string>
#include <utility>

namespace cotensor::detail {

packed_matrix::packed_matrix(const tensor& b) : data_(b) {
  if (!b.defined()) {
    return;
  }
  if (b.rank() != 2) {
    throw_invalid("matmul", "a packed right-hand side needs rank 2, got " + b.shape().to_string());
  }
  k_ = b.shape()[0];
  n_ = b.shape()[1];
  const kernel_table& kt = kernels_for(b.device());
  const std::int64_t elements =
      kt.packed_b_elements == nullptr ? 0 : kt.packed_b_elements(b.dtype(), k_, n_);
  if (elements == 0) {
    return;
  }
  const auto& in = checked(b, "matmul");
  const shape s{elements};
  // Kept and streamed through at every product for as long as the weights live.
  auto out = allocate("matmul", s, b.device(), b.dtype(), buffer_lifetime::lasting);
  issue("pack", {in}, {out},
        [kt = &kt, t = b.dtype(), pin = in.get(), pout = out.get(), k = k_, n = n_] {
          kt->pack_b({.t = t, .b = pin->raw(), .packed = pout->raw(), .k = k, .n = n});
        });
  data_ = tensor(internal, std::move(out), s);
  packed_ = true;
}

namespace {

// x · B into a new tensor, `bias` (when defined) added to its rows as the kernel stores them: one
// op.
tensor packed_product(const tensor& x, const packed_matrix& b, const tensor* bias) {
  const tensor& p = b.data();
  require_same_device("matmul", x, p);
  const std::size_t r = x.rank();
  if (r < 2 || x.shape()[r - 1] != b.rows() || x.dtype() != p.dtype()) {
    throw_invalid("matmul", "cannot multiply " + x.shape().to_string() + " (" +
                                std::string(name(x.dtype())) + ") by [" + std::to_string(b.rows()) +
                                ", " + std::to_string(b.cols()) + "] (" +
                                std::string(name(p.dtype())) + ")");
  }
  const std::int64_t m = x.shape()[r - 2];
  const std::int64_t k = b.rows();
  const std::int64_t n = b.cols();
  extent_buffer extents(x.shape().extents().begin(), x.shape().extents().end() - 1);
  extents.push_back(n);
  shape out_shape{std::span<const std::int64_t>(extents)};
  const std::int64_t batch = m * k == 0 ? 0 : x.numel() / (m * k);
  const kernel_table& kt = kernels_for(x.device());
  auto out = allocate("matmul", out_shape, x.device(), x.dtype());
  const auto& sx = checked(x, "matmul");
  const auto& sp = checked(p, "matmul");
  const auto product = [kt = &kt, t = x.dtype(), px = sx.get(), pp = sp.get(), pc = out.get(),
                        batch, m, k, n](const void* add) {
    kt->matmul_packed({.t = t,
                       .a = px->raw(),
                       .b = pp->raw(),
                       .c = pc->raw(),
                       .batch = batch,
                       .m = m,
                       .k = k,
                       .n = n,
                       .a_stride = m * k,
                       .b_stride = 0,
                       .bias = add});
  };
  if (bias == nullptr) {
    issue("matmul", {sx, sp}, {out}, [product] { product(nullptr); });
  } else if (k > 0) {
    // The kernel adds the bias to each tile of C as it stores it, with operator+'s bits.
    const auto& sb = checked(*bias, "matmul");
    issue("linear", {sx, sp, sb}, {out}, [product, pb = sb.get()] { product(pb->raw()); });
  } else {
    // No sums to store the bias with: the bias as operator+ adds it (the binary kernel,
    // broadcast over the rows, the product itself the output).
    const auto& sb = checked(*bias, "matmul");
    issue("linear", {sx, sp, sb}, {out},
          [product, kt = &kt, t = x.dtype(), pb = sb.get(), pc = out.get(), out_shape,
           bias_shape = bias->shape()] {
            product(nullptr);
            kt->binary({.op = binary_op::add,
                        .t = t,
                        .a = pc->raw(),
                        .a_shape = out_shape,
                        .b = pb->raw(),
                        .b_shape = bias_shape,
                        .out = pc->raw(),
                        .out_shape = out_shape});
          });
  }
  return {internal, std::move(out), std::move(out_shape)};
}

}  // namespace

tensor matmul(const tensor& x, const packed_matrix& b) {
  if (!b.packed()) {
    return cotensor::matmul(x, b.data());
  }
  return packed_product(x, b, nullptr);
}

tensor matmul(const tensor& x, const packed_matrix& b, const tensor& bias) {
  if (!bias.defined()) {
    return matmul(x, b);
  }
  if (!b.packed() || bias.rank() != 1 || bias.shape()[0] != b.cols() || bias.dtype() != x.dtype() ||
      bias.device() != x.device()) {
    return matmul(x, b) + bias;
  }
  return packed_product(x, b, &bias);
}

}  // namespace cotensor::detail
