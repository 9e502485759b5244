#include "cotensor/dlpack.hpp"

#include "engine/storage.hpp"
#include "frontend/frontend.hpp"

#include <cstddef>
#include <cstdint>
#include <dlpack/dlpack.h>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace cotensor {

namespace {

constexpr const char* export_op = "to_dlpack";
constexpr const char* import_op = "from_dlpack";

// DLPack 0.8's kDLBool; Debian's dlpack.h (0.6) predates it.
constexpr std::uint8_t dl_bool_code = 6;

DLDataType dl_type_of(dtype t) {
  const auto bits = static_cast<std::uint8_t>(itemsize(t) * 8);
  switch (t) {
  case dtype::boolean:
    return {dl_bool_code, 8, 1};
  case dtype::int32:
  case dtype::int64:
    return {kDLInt, bits, 1};
  case dtype::bfloat16:
    return {kDLBfloat, 16, 1};
  case dtype::float16:
  case dtype::float32:
  case dtype::float64:
    return {kDLFloat, bits, 1};
  }
  return {kDLFloat, 32, 1};
}

// The dtype that dl_type_of gives `ty`'s code and bits, if any.
std::optional<dtype> dtype_of_dl(const DLDataType& ty) {
  for (std::size_t i = 0; i < dtype_count; ++i) {
    const auto t = static_cast<dtype>(i);
    const DLDataType d = dl_type_of(t);
    if (d.code == ty.code && d.bits == ty.bits) {
      return t;
    }
  }
  return std::nullopt;
}

// What an exported DLManagedTensor owns: the buffer and the arrays its DLTensor points at.
struct export_context {
  DLManagedTensor managed{};
  std::shared_ptr<detail::storage> buffer;
  std::vector<std::int64_t> extents;
  std::vector<std::int64_t> strides;
};

void delete_export(DLManagedTensor* self) {
  delete static_cast<export_context*>(
      self->manager_ctx);  // NOLINT(cppcoreguidelines-owning-memory)
}

void release_import(void* context) noexcept {
  auto* m = static_cast<DLManagedTensor*>(context);
  if (m->deleter != nullptr) {
    m->deleter(m);
  }
}

std::string describe(const DLDataType& t) {
  return "code " + std::to_string(t.code) + ", " + std::to_string(t.bits) + " bits, " +
         std::to_string(t.lanes) + " lanes";
}

}  // namespace

namespace detail {

DLManagedTensor* export_dlpack(const tensor& t) {
  const auto& buffer = checked(t, export_op);
  auto ctx = std::make_unique<export_context>();
  ctx->buffer = buffer;
  const std::size_t rank = t.rank();
  ctx->extents.resize(rank);
  ctx->strides.resize(rank);
  std::int64_t stride = 1;
  for (std::size_t i = rank; i-- > 0;) {
    ctx->extents[i] = t.shape()[i];
    ctx->strides[i] = stride;
    stride *= t.shape()[i];
  }
  DLTensor& dl = ctx->managed.dl_tensor;
  dl.data = buffer->raw();
  const device d = t.device();
  dl.device = {d.is_cpu() ? kDLCPU : kDLCUDA, d.is_cpu() ? 0 : d.index};
  dl.ndim = static_cast<std::int32_t>(rank);
  dl.dtype = dl_type_of(t.dtype());
  dl.shape = ctx->extents.data();
  dl.strides = ctx->strides.data();
  dl.byte_offset = 0;
  ctx->managed.manager_ctx = ctx.get();
  ctx->managed.deleter = delete_export;
  return &ctx.release()->managed;
}

}  // namespace detail

DLManagedTensor* to_dlpack(const tensor& t) {
  detail::checked(t, export_op);
  t.wait();
  return detail::export_dlpack(t);
}

tensor from_dlpack(DLManagedTensor* m) {
  if (m == nullptr) {
    detail::throw_invalid(import_op, "null DLManagedTensor");
  }
  const DLTensor& dl = m->dl_tensor;
  device d = device::cpu();
  switch (dl.device.device_type) {
  case kDLCPU:
  case kDLCUDAHost:
    break;
  case kDLCUDA:
    d = device::cuda(dl.device.device_id);
    detail::require_device(import_op, d);
    break;
  default:
    detail::throw_invalid(import_op, "DLPack device type " + std::to_string(dl.device.device_type) +
                                         " (device id " + std::to_string(dl.device.device_id) +
                                         ") is not supported: only kDLCPU, kDLCUDAHost, kDLCUDA");
  }
  const DLDataType& ty = dl.dtype;
  if (ty.lanes != 1) {
    detail::throw_invalid(import_op, "vector dtypes are not supported (" + describe(ty) + ")");
  }
  const std::optional<dtype> found = dtype_of_dl(ty);
  if (!found) {
    detail::throw_invalid(import_op, "unsupported dtype (" + describe(ty) + ")");
  }
  const dtype t = *found;
  if (dl.ndim < 0 || (dl.ndim > 0 && dl.shape == nullptr)) {
    detail::throw_invalid(import_op, "bad rank or null shape");
  }
  std::vector<std::int64_t> extents(dl.shape, dl.shape + dl.ndim);
  for (const auto e : extents) {
    if (e < 0) {
      detail::throw_invalid(import_op, "negative extent " + std::to_string(e));
    }
  }
  const shape s{std::span<const std::int64_t>(extents)};
  if (dl.strides != nullptr && s.numel() > 0) {
    // Compact row-major; the stride of an extent of 1 does not matter (PyTorch sets it freely).
    std::int64_t expected = 1;
    for (std::int32_t i = dl.ndim; i-- > 0;) {
      if (extents[i] != 1 && dl.strides[i] != expected) {
        detail::throw_invalid(import_op,
                              "strides are not compact row-major (dimension " + std::to_string(i) +
                                  " has stride " + std::to_string(dl.strides[i]) + ", expected " +
                                  std::to_string(expected) + "): pass a contiguous copy");
      }
      expected *= extents[i];
    }
  }
  auto* data = static_cast<char*>(dl.data);
  if (data == nullptr && s.numel() > 0) {
    detail::throw_invalid(import_op, "null data for " + std::to_string(s.numel()) + " elements");
  }
  if (data != nullptr) {
    data += dl.byte_offset;
  } else {
    // An empty tensor may come without memory; any aligned address serves.
    alignas(8) static char no_elements[8];
    data = no_elements;
  }
  if (reinterpret_cast<std::uintptr_t>(data) % itemsize(t) != 0) {
    detail::throw_invalid(import_op, "data is not aligned to the " + std::to_string(itemsize(t)) +
                                         "-byte element size");
  }
  auto buffer = detail::storage::make_external(s, d, t, {data, release_import, m});
  return {detail::internal, std::move(buffer), s};
}

}  // namespace cotensor
