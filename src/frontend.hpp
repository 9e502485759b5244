#pragma once

// Shared by the frontend's .cpp files: eager validation and issuing of elementwise ops.

#include "cotensor/device.hpp"
#include "cotensor/shape.hpp"
#include "cotensor/tensor.hpp"

#include "engine/engine.hpp"
#include "kernel_table.hpp"

#include <memory>
#include <string>

namespace cotensor::detail {

/// Throws std::invalid_argument("cotensor::<op>: <message>").
[[noreturn]] void throw_invalid(const char* op, const std::string& message);
/// Throws std::system_error(errc::device_unavailable) unless `d` can hold tensors here.
void require_device(const char* op, device d);
/// The buffer of `t`; throws std::invalid_argument for an empty tensor.
const std::shared_ptr<storage>& checked(const tensor& t, const char* op);
/// A new buffer of `s.numel()` floats on `d`.
std::shared_ptr<storage> allocate(const char* op, const shape& s, device d);
/// Checks that `a` and `b` are on one device.
void require_same_device(const char* op, const tensor& a, const tensor& b);

/// a ⊗= b, broadcasting b over a's shape.
void issue_in_place(const char* op, binary_op kind, const tensor& a, const tensor& b);
/// a ⊗= s.
void issue_in_place(const char* op, binary_op kind, const tensor& a, float s);

}  // namespace cotensor::detail
