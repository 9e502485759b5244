// The public device queries, answered by the backend registry (src/backends.cpp).

#include "cotensor/device.hpp"

#include "engine/backend.hpp"

namespace cotensor {

bool is_available(device d) noexcept { return detail::has_backend(d); }

std::string unavailable_reason(device d) { return detail::unavailable_reason(d); }

int cuda_device_count() noexcept { return detail::device_count(device::kind::cuda); }

}  // namespace cotensor
