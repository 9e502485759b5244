// The devices of this build: one registration per backend folder, in `registry` below.

#include "cotensor/config.hpp"

#include "cotensor/detail/waiter.hpp"
#include "cotensor/error.hpp"

#include "cpu/cpu_backend.hpp"
#include "cpu/kernels.hpp"
#include "cuda/devices.hpp"
#if COTENSOR_WITH_CUDA
#include "cuda/cuda_backend.hpp"
#endif
#include "engine/backend.hpp"
#include "kernels/kernel_table.hpp"

#include <array>
#include <cstddef>
#include <string>
#include <system_error>

namespace cotensor::detail {
namespace {

/// What a device type brings: its backend, the allocator of its buffers and its kernels.
struct device_registration {
  std::unique_ptr<backend> (*make_backend)(const engine_options& options) = nullptr;
  /// Completes a host wait once the device passed a buffer's fence (backend::launched).
  void (*await_fence)(device d, std::uint64_t fence, waiter& w) = nullptr;
  device_allocator* allocator = nullptr;
  const kernel_table* kernels = nullptr;
};

constexpr std::size_t kinds = 2;

// Indexed by device::kind. A device type this build has no backend for stays empty.
constinit const std::array<device_registration, kinds> registry = {{
    /* cpu  */ {cpu::make_backend, nullptr, &cpu::host_memory, &cpu::kernel_table_of_cpu},
#if COTENSOR_WITH_CUDA
    /* cuda */
    {cuda::make_backend, cuda::await_fence, &cuda::device_memory, &cuda::kernel_table_of_cuda},
#else
    /* cuda */ {},
#endif
}};

const device_registration* find(device::kind type) noexcept {
  const auto i = static_cast<std::size_t>(type);
  return i < kinds && registry[i].make_backend != nullptr ? &registry[i] : nullptr;
}

const device_registration& registered(device d) {
  if (const device_registration* r = find(d.type); r != nullptr && has_device_backend(d)) {
    return *r;
  }
  throw std::system_error(make_error_code(errc::device_unavailable),
                          "cotensor: " + unavailable_message(d));
}

}  // namespace

bool has_device_backend(device d) noexcept {
  return find(d.type) != nullptr && (d.type != device::kind::cuda || cuda::usable(d.index));
}

std::string unavailable_message(device d) {
  return "device cuda:" + std::to_string(d.index) + " is not available (" +
         cuda::unavailable_reason(d.index) + ")";
}

std::string unavailable_reason(device d) {
  return has_backend(d) ? std::string() : cuda::unavailable_reason(d.index);
}

int device_count(device::kind type) noexcept {
  if (type == device::kind::cpu) {
    return 1;
  }
  return has_device_backend(device{type, 0}) ? cuda::device_count() : 0;
}

std::unique_ptr<backend> make_backend(device::kind type, const engine_options& options) {
  return registered(device{type, 0}).make_backend(options);
}

void await_fence(device d, std::uint64_t fence, waiter& w) {
  const device_registration* r = find(d.type);
  if (fence == 0 || r == nullptr || r->await_fence == nullptr) {
    w.complete(nullptr);
    return;
  }
  r->await_fence(d, fence, w);
}

void backend::launched(op_node* /*op*/, op_completion done) noexcept { done(); }

device_allocator& device_allocator_of(device d) { return *registered(d).allocator; }

constinit device_allocator* const cpu_allocator = &cpu::host_memory;
constinit const kernel_table* const cpu_kernel_table = &cpu::kernel_table_of_cpu;

const kernel_table& device_kernels(device d) { return *registered(d).kernels; }

}  // namespace cotensor::detail
