#include "cotensor/device.hpp"

#include "cuda/devices.hpp"
#include "engine/backend.hpp"

#include <ostream>

namespace cotensor {

bool is_available(device d) noexcept { return detail::has_backend(d); }

std::string unavailable_reason(device d) {
  if (is_available(d)) {
    return {};
  }
  return detail::cuda::unavailable_reason(d.index);
}

int cuda_device_count() noexcept {
  return is_available(device::cuda(0)) ? detail::cuda::device_count() : 0;
}

std::ostream& operator<<(std::ostream& os, const device& d) {
  if (d.is_cpu()) {
    return os << "cpu";
  }
  return os << "cuda:" << d.index;
}

}  // namespace cotensor
