#include "cotensor/tensor.hpp"

#include "cotensor/ops.hpp"

#include "frontend.hpp"

#include <algorithm>
#include <ostream>
#include <stdexcept>
#include <string>

namespace cotensor {

tensor::tensor(std::shared_ptr<detail::storage> storage, cotensor::shape s) noexcept
    : storage_(std::move(storage)), shape_(std::move(s)) {}

cotensor::device tensor::device() const noexcept {
  return storage_ ? storage_->device() : device::cpu();
}

void tensor::require_defined(const char* what) const { detail::checked(*this, what); }

void tensor::wait() const {
  const auto& s = detail::checked(*this, "wait");
  detail::check_may_block("cotensor::tensor::wait");
  const auto traced = detail::trace_wait_begin("wait");
  detail::blocking_waiter w;
  detail::wait_for_buffer(*s, w);
  auto error = w.wait();
  detail::trace_wait_end(traced);
  if (error) {
    std::rethrow_exception(error);
  }
}

float tensor::item() const {
  detail::checked(*this, "item");
  if (numel() != 1) {
    detail::throw_invalid("item", "needs a tensor of one element, got shape " + shape_.to_string());
  }
  if (!device().is_cpu()) {
    return to(device::cpu()).item();  // a download, awaited through the device's poller
  }
  wait();
  return storage_->data()[0];
}

std::vector<float> tensor::to_vector() const {
  detail::checked(*this, "to_vector");
  if (!device().is_cpu()) {
    return to(device::cpu()).to_vector();
  }
  wait();
  const float* data = storage_->data();
  return {data, data + numel()};
}

tensor tensor::to(cotensor::device d) const {
  const auto& src = detail::checked(*this, "to");
  detail::require_device("to", d);
  auto dst = detail::allocate("to", shape_, d);
  // A copy between the host and a GPU runs on the GPU's copy streams (see make_op).
  const cotensor::device from = src->device();
  if (from.is_cpu() && !d.is_cpu()) {
    detail::issue("to", {src}, {dst},
                  [k = &detail::kernels_for(d), in = src.get(), out = dst.get(), n = numel()] {
                    k->copy_from_host(in->data(), out->data(), n);
                  });
  } else if (!from.is_cpu() && d.is_cpu()) {
    detail::issue("to", {src}, {dst},
                  [k = &detail::kernels_for(from), in = src.get(), out = dst.get(), n = numel()] {
                    k->copy_to_host(in->data(), out->data(), n);
                  });
  } else {
    detail::issue("to", {src}, {dst},
                  [k = &detail::kernels_for(d), in = src.get(), out = dst.get(), n = numel()] {
                    k->copy(in->data(), out->data(), n);
                  });
  }
  return {std::move(dst), shape_};
}

tensor tensor::sum() const { return cotensor::sum(*this); }

tensor& tensor::operator+=(const tensor& rhs) {
  detail::issue_in_place("operator+=", detail::binary_op::add, *this, rhs);
  return *this;
}
tensor& tensor::operator+=(float rhs) {
  detail::issue_in_place("operator+=", detail::binary_op::add, *this, rhs);
  return *this;
}
tensor& tensor::operator-=(const tensor& rhs) {
  detail::issue_in_place("operator-=", detail::binary_op::sub, *this, rhs);
  return *this;
}
tensor& tensor::operator-=(float rhs) {
  detail::issue_in_place("operator-=", detail::binary_op::sub, *this, rhs);
  return *this;
}
tensor& tensor::operator*=(const tensor& rhs) {
  detail::issue_in_place("operator*=", detail::binary_op::mul, *this, rhs);
  return *this;
}
tensor& tensor::operator*=(float rhs) {
  detail::issue_in_place("operator*=", detail::binary_op::mul, *this, rhs);
  return *this;
}
tensor& tensor::operator/=(const tensor& rhs) {
  detail::issue_in_place("operator/=", detail::binary_op::div, *this, rhs);
  return *this;
}
tensor& tensor::operator/=(float rhs) {
  detail::issue_in_place("operator/=", detail::binary_op::div, *this, rhs);
  return *this;
}

namespace {

// Prints dimension `dim` of the block starting at `offset`, NumPy style: a tensor of more than
// 1000 elements shows the first and last three entries of each dimension.
void print_block(std::ostream& os,
                 const float* data,
                 const shape& s,
                 std::size_t dim,
                 std::int64_t offset,
                 bool summarize) {
  if (dim == s.rank()) {
    os << data[offset];
    return;
  }
  std::int64_t stride = 1;
  for (std::size_t d = dim + 1; d < s.rank(); ++d) {
    stride *= s[d];
  }
  const std::int64_t n = s[dim];
  constexpr std::int64_t edge = 3;
  os << '[';
  for (std::int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * edge && i == edge) {
      os << ", ...";
      i = n - edge - 1;
      continue;
    }
    if (i > 0) {
      os << ", ";
    }
    print_block(os, data, s, dim + 1, offset + i * stride, summarize);
  }
  os << ']';
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const tensor& t) {
  if (!t.defined()) {
    return os << "tensor(undefined)";
  }
  if (!t.device().is_cpu()) {
    const tensor host = t.to(device::cpu());
    host.wait();
    os << "tensor(";
    print_block(os, host.storage()->data(), t.shape(), 0, 0, t.numel() > 1000);
    return os << ", shape=" << t.shape() << ", device=" << t.device() << ')';
  }
  t.wait();
  os << "tensor(";
  print_block(os, t.storage()->data(), t.shape(), 0, 0, t.numel() > 1000);
  return os << ", shape=" << t.shape() << ')';
}

}  // namespace cotensor
