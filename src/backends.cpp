// The devices of this build: one registration per backend folder.

#include "cotensor/error.hpp"

#include "cpu/cpu_backend.hpp"
#include "cpu/kernels.hpp"
#include "engine/backend.hpp"
#include "kernel_table.hpp"

#include <string>
#include <system_error>

namespace cotensor::detail {
namespace {

[[noreturn]] void unavailable(device d) {
  throw std::system_error(make_error_code(errc::device_unavailable),
                          "cotensor: device cuda:" + std::to_string(d.index) +
                              " is not available (this build has no CUDA backend)");
}

}  // namespace

bool has_device_backend(device d) noexcept { return d.type == device::kind::cpu; }

std::unique_ptr<backend> make_backend(device::kind type, unsigned worker_threads) {
  switch (type) {
  case device::kind::cpu:
    return cpu::make_backend(worker_threads);
  case device::kind::cuda:
    break;
  }
  unavailable(device{type, 0});
}

device_allocator& allocator_of(device d) {
  if (d.type == device::kind::cpu) [[likely]] {
    return cpu::host_memory();
  }
  unavailable(d);
}

constinit const kernel_table* const cpu_kernel_table = &cpu::kernel_table_of_cpu;

const kernel_table& device_kernels(device d) {
  if (d.type == device::kind::cpu) {
    return *cpu_kernel_table;
  }
  unavailable(d);
}

}  // namespace cotensor::detail
