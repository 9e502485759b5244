#include "cotensor/tensor.hpp"

#include "cotensor/ops.hpp"

#include "frontend/frontend.hpp"
#include "support/host_allocator.hpp"

#include <algorithm>
#include <cstring>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace cotensor {

tensor::tensor(detail::internal_key /*key*/,
               std::shared_ptr<detail::storage> storage,
               cotensor::shape s) noexcept
    : storage_(std::move(storage)), shape_(std::move(s)) {}

cotensor::device tensor::device() const noexcept {
  return storage_ ? storage_->device() : device::cpu();
}

void tensor::require_defined(const char* what) const { detail::checked(*this, what); }

void tensor::wait() const {
  const auto& s = detail::checked(*this, "wait");
  detail::check_may_block("cotensor::tensor::wait");
  const auto traced = detail::trace_wait_begin("wait");
  detail::blocking_waiter w(detail::current_engine().options().wait_spin);
  detail::wait_for_buffer(*s, w);
  auto error = w.wait();
  detail::trace_wait_end(traced);
  if (error) {
    std::rethrow_exception(error);
  }
}

cotensor::dtype tensor::dtype() const noexcept {
  return storage_ ? storage_->dtype() : cotensor::dtype::float32;
}

tensor tensor::astype(cotensor::dtype t) const {
  detail::checked(*this, "astype");
  if (dtype() == t) {  // a copy all the same: the result never aliases this buffer
    detail::kernels_checked("astype", device(), t);
    auto out = detail::allocate("astype", shape_, device(), t);
    const auto& in = storage_;
    detail::issue("astype", {in}, {out},
                  [k = &detail::kernels_for(device()), pin = in.get(), po = out.get(),
                   bytes = static_cast<std::size_t>(numel()) * itemsize(t)] {
                    k->copy(pin->raw(), po->raw(), bytes);
                  });
    return {detail::internal, std::move(out), shape_};
  }
  return detail::cast_to(*this, t, "astype");
}

void tensor::read_to_host(cotensor::dtype t, void* out, const char* what) const {
  detail::checked(*this, what);
  if (std::string_view(what) == "item" && numel() != 1) {
    detail::throw_invalid(what, "needs a tensor of one element, got shape " + shape_.to_string());
  }
  if (!device().is_cpu()) {
    // A download, awaited through the device's poller; converted on the host.
    to(cotensor::device::cpu()).read_to_host(t, out, what);
    return;
  }
  wait();
  if (numel() == 0) {
    return;
  }
  if (dtype() == t) {
    std::memcpy(out, storage_->raw(), static_cast<std::size_t>(numel()) * itemsize(t));
    return;
  }
  // Converted on the calling thread (the value is computed: nothing else writes it now).
  detail::cpu_kernel_table->cast(
      {.from = dtype(), .in = storage_->raw(), .to = t, .out = out, .n = numel()});
}

void tensor::prepare_host_copy(void* p, std::size_t bytes) noexcept {
  detail::advise_huge_pages(p, bytes);  // nothing below one whole huge page
}

std::shared_ptr<const void> tensor::host_buffer(cotensor::dtype t) const {
  const auto& s = detail::checked(*this, "view_host");
  if (!device().is_cpu()) {
    detail::throw_invalid("view_host", "needs a CPU tensor, got one on " +
                                           detail::device_name(device()) +
                                           ": copy it with to(device::cpu()) first");
  }
  if (dtype() != t) {
    detail::throw_invalid("view_host", std::string("a view of ") + std::string(name(t)) +
                                           " elements of a " + std::string(name(dtype())) +
                                           " tensor: view it as its own dtype, or convert it"
                                           " with astype or to_vector");
  }
  wait();
  return {s, s->raw()};
}

const void* tensor::host_elements(cotensor::dtype t) const noexcept {
  if (storage_ == nullptr || !device().is_cpu() || dtype() != t || numel() == 0) {
    return nullptr;
  }
  return storage_->raw();
}

tensor tensor::to(cotensor::device d) const {
  const auto& src = detail::checked(*this, "to");
  detail::require_device("to", d);
  auto dst = detail::allocate("to", shape_, d, dtype());
  const std::size_t bytes = static_cast<std::size_t>(numel()) * itemsize(dtype());
  // A copy between the host and a GPU runs on the GPU's copy streams (see make_op).
  const cotensor::device from = src->device();
  if (from.is_cpu() && !d.is_cpu()) {
    detail::issue("to", {src}, {dst},
                  [k = &detail::kernels_for(d), in = src.get(), out = dst.get(), bytes] {
                    k->copy_from_host(in->raw(), out->raw(), bytes);
                  });
  } else if (!from.is_cpu() && d.is_cpu()) {
    detail::issue("to", {src}, {dst},
                  [k = &detail::kernels_for(from), in = src.get(), out = dst.get(), bytes] {
                    k->copy_to_host(in->raw(), out->raw(), bytes);
                  });
  } else {
    detail::issue("to", {src}, {dst},
                  [k = &detail::kernels_for(d), in = src.get(), out = dst.get(), bytes] {
                    k->copy(in->raw(), out->raw(), bytes);
                  });
  }
  return {detail::internal, std::move(dst), shape_};
}

tensor tensor::sum() const { return cotensor::sum(*this); }

tensor& tensor::operator+=(const tensor& rhs) {
  detail::issue_in_place("operator+=", detail::binary_op::add, *this, rhs);
  return *this;
}
tensor& tensor::operator-=(const tensor& rhs) {
  detail::issue_in_place("operator-=", detail::binary_op::sub, *this, rhs);
  return *this;
}
tensor& tensor::operator*=(const tensor& rhs) {
  detail::issue_in_place("operator*=", detail::binary_op::mul, *this, rhs);
  return *this;
}
tensor& tensor::operator/=(const tensor& rhs) {
  detail::issue_in_place("operator/=", detail::binary_op::div, *this, rhs);
  return *this;
}
tensor& tensor::operator+=(scalar rhs) {
  detail::issue_in_place("operator+=", detail::binary_op::add, *this, rhs);
  return *this;
}
tensor& tensor::operator-=(scalar rhs) {
  detail::issue_in_place("operator-=", detail::binary_op::sub, *this, rhs);
  return *this;
}
tensor& tensor::operator*=(scalar rhs) {
  detail::issue_in_place("operator*=", detail::binary_op::mul, *this, rhs);
  return *this;
}
tensor& tensor::operator/=(scalar rhs) {
  detail::issue_in_place("operator/=", detail::binary_op::div, *this, rhs);
  return *this;
}

namespace {

void print_element(std::ostream& os, cotensor::dtype t, const void* data, std::int64_t i) {
  switch (t) {
  case cotensor::dtype::boolean:
    os << (static_cast<const bool*>(data)[i] ? "True" : "False");
    return;
  case cotensor::dtype::int32:
    os << static_cast<const std::int32_t*>(data)[i];
    return;
  case cotensor::dtype::int64:
    os << static_cast<const std::int64_t*>(data)[i];
    return;
  case cotensor::dtype::float16:
    os << static_cast<float>(static_cast<const float16_t*>(data)[i]);
    return;
  case cotensor::dtype::bfloat16:
    os << static_cast<float>(static_cast<const bfloat16_t*>(data)[i]);
    return;
  case cotensor::dtype::float32:
    os << static_cast<const float*>(data)[i];
    return;
  case cotensor::dtype::float64:
    os << static_cast<const double*>(data)[i];
    return;
  }
}

// Prints dimension `dim` of the block starting at `offset`, NumPy style: a tensor of more than
// 1000 elements shows the first and last three entries of each dimension.
void print_block(std::ostream& os,
                 cotensor::dtype t,
                 const void* data,
                 const shape& s,
                 std::size_t dim,
                 std::int64_t offset,
                 bool summarize) {
  if (dim == s.rank()) {
    print_element(os, t, data, offset);
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
    print_block(os, t, data, s, dim + 1, offset + i * stride, summarize);
  }
  os << ']';
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const tensor& t) {
  if (!t.defined()) {
    return os << "tensor(undefined)";
  }
  const tensor host = t.device().is_cpu() ? t : t.to(device::cpu());
  host.wait();
  os << "tensor(";
  print_block(os, t.dtype(), host.storage()->raw(), t.shape(), 0, 0, t.numel() > 1000);
  os << ", shape=" << t.shape();
  if (t.dtype() != dtype::float32) {
    os << ", dtype=" << t.dtype();
  }
  if (!t.device().is_cpu()) {
    os << ", device=" << t.device();
  }
  return os << ')';
}

}  // namespace cotensor
