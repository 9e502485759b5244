// The devices of this build: one registration per backend folder, in `registry` below.

#include "cotensor/error.hpp"

#include "cpu/cpu_backend.hpp"
#include "cpu/kernels.hpp"
#include "cuda/devices.hpp"
#include "engine/backend.hpp"
#include "kernel_table.hpp"

#include <array>
#include <cstddef>
#include <string>
#include <system_error>

namespace cotensor::detail {
namespace {

/// What a device type brings: its backend, the allocator of its buffers and its kernels.
struct device_registration {
  std::unique_ptr<backend> (*make_backend)(unsigned worker_threads) = nullptr;
  device_allocator* allocator = nullptr;
  const kernel_table* kernels = nullptr;
};

constexpr std::size_t kinds = 2;

// Indexed by device::kind. A device type this build has no backend for stays empty.
constinit const std::array<device_registration, kinds> registry = {{
    /* cpu  */ {cpu::make_backend, &cpu::host_memory, &cpu::kernel_table_of_cpu},
    /* cuda */ {},
}};

const device_registration* find(device::kind type) noexcept {
  const auto i = static_cast<std::size_t>(type);
  return i < kinds && registry[i].make_backend != nullptr ? &registry[i] : nullptr;
}

const device_registration& registered(device d) {
  if (const device_registration* r = find(d.type)) [[likely]] {
    return *r;
  }
  throw std::system_error(make_error_code(errc::device_unavailable),
                          "cotensor: " + unavailable_message(d));
}

}  // namespace

bool has_device_backend(device d) noexcept { return find(d.type) != nullptr; }

std::string unavailable_message(device d) {
  return "device cuda:" + std::to_string(d.index) + " is not available (" +
         cuda::unavailable_reason(d.index) + ")";
}

std::unique_ptr<backend> make_backend(device::kind type, unsigned worker_threads) {
  return registered(device{type, 0}).make_backend(worker_threads);
}

device_allocator& device_allocator_of(device d) { return *registered(d).allocator; }

constinit device_allocator* const cpu_allocator = &cpu::host_memory;
constinit const kernel_table* const cpu_kernel_table = &cpu::kernel_table_of_cpu;

const kernel_table& device_kernels(device d) { return *registered(d).kernels; }

}  // namespace cotensor::detail
