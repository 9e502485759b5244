#pragma once

// Shared by the frontend's .cpp files: eager validation and issuing of elementwise ops.

#include "cotensor/async_op.hpp"
#include "cotensor/device.hpp"
#include "cotensor/shape.hpp"
#include "cotensor/tensor.hpp"

#include "engine/engine.hpp"
#include "kernels/kernel_table.hpp"

#include <boost/container/small_vector.hpp>

#include <memory>
#include <span>
#include <string>
#include <utility>

namespace cotensor::detail {

/// The engine of the current runtime (src/frontend/runtime.cpp): the one place
/// the frontend finds the engine it issues to.
engine& current_engine();

/// Issues an op running `kernel` on the current engine: run at once by `run_now` when it can
/// be, else built into an op node and pushed. `reads` and `writes` may overlap.
template <class Kernel>
void issue(const char* name, buffer_list reads, buffer_list writes, Kernel&& kernel) {
  engine& e = current_engine();
  if (e.run_now(reads, writes, kernel)) {
    return;
  }
  auto op = make_op(name, reads, writes);
  op->kernel.emplace(std::forward<Kernel>(kernel));
  e.push(std::move(op));
}

/// Extents being built: on the stack up to shape's inline rank, so that issuing an op does not
/// allocate.
using extent_buffer = boost::container::small_vector<std::int64_t, shape::inline_rank>;

/// Throws std::invalid_argument when an op on device `d` would broadcast to `out` over more
/// dimensions than a GPU's kernels do (gpu_max_broadcast_rank); `same_shape`: no broadcast.
void check_device_broadcast(const char* op, device d, bool same_shape, const shape& out);

/// `axis` (negative counts from the end) as an index into x's extents; throws
/// std::invalid_argument("cotensor::<op>: axis ... out of range ...") when x has no such axis.
std::size_t normalize_axis(const char* op, const tensor& x, int axis);

/// Throws std::invalid_argument("cotensor::<op>: <message>").
[[noreturn]] void throw_invalid(const char* op, const std::string& message);
/// Throws std::system_error(errc::device_unavailable) unless `d` can hold tensors here.
void require_device(const char* op, device d);
/// The buffer of `t`; throws std::invalid_argument for an empty tensor.
const std::shared_ptr<storage>& checked(const tensor& t, const char* op);
/// The device's name, as printed (`cpu`, `cuda:0`).
std::string device_name(device d);
/// A new buffer of `s.numel()` elements of `t` on `d`, expected to live as `lifetime` says.
std::shared_ptr<storage> allocate(const char* op,
                                  const shape& s,
                                  device d,
                                  dtype t = dtype::float32,
                                  buffer_lifetime lifetime = buffer_lifetime::ordinary);
/// `d`'s kernels, after checking that its `family` of kernels takes `t`: else
/// std::invalid_argument naming the op, the dtype and the device.
const kernel_table&
kernels_checked(const char* op, device d, dtype t, dtype_set kernel_table::*family);
/// As above, for the elementwise family.
const kernel_table& kernels_checked(const char* op, device d, dtype t);
/// Throws std::invalid_argument naming `op` and `d` if `kernel` is null.
void require_kernel(const char* op, device d, const void* kernel);
/// `x` converted to `t`: `x` itself when it is `t` already, else a cast op's result.
tensor cast_to(const tensor& x, dtype t, const char* op);
/// The C++ scalar `s` as a kernel's operand of dtype `t`; std::invalid_argument if an integer
/// does not fit `t`.
scalar_arg scalar_for(const char* op, scalar s, dtype t);
/// a ⊗ s (or s ⊗ a when `scalar_left`), the scalar weak in promotion.
tensor scalar_op(binary_op kind, const tensor& a, scalar s, bool scalar_left, const char* op);
/// a ⊗ b, promoted and broadcast.
tensor binary(const char* op, binary_op kind, const tensor& a, const tensor& b);
/// Checks that `a` and `b` are on one device.
void require_same_device(const char* op, const tensor& a, const tensor& b);

/// a ⊗= b, broadcasting b over a's shape.
void issue_in_place(const char* op, binary_op kind, const tensor& a, const tensor& b);
/// a ⊗= s.
void issue_in_place(const char* op, binary_op kind, const tensor& a, scalar s);

/// `async_op` for cotensor's own starts, which only hand the op to a thread of their own and
/// return (the collectives): when the op is ready at its call, `start` runs there, on the
/// issuing thread, instead of on a backend thread after a hand-off to it. Takes tensors of any
/// dtype: the context's spans are empty; the start reaches the buffers through the tensors'
/// storage (allocated by then). Name the op with a `static_name` where it is a literal.
void issue_quick_async_op(std::span<const tensor> reads,
                          std::span<const tensor> writes,
                          std::unique_ptr<async_start> start);
/// Ends an op of `issue_quick_async_op` on the calling thread, a thread of cotensor's own
/// (op_completion::complete_here). `done` is left empty.
void complete_here(async_op_done& done, std::exception_ptr error) noexcept;

}  // namespace cotensor::detail
