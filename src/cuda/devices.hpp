#pragma once

// The CUDA devices of this machine, as CUDA's runtime sees them (libcotensor_cuda).

#include <string>

namespace cotensor::detail::cuda {

/// The GPUs CUDA's runtime reports: 0 without a driver. Asks CUDA
/// once per process, on first use: CUDA initialises then.
int device_count() noexcept;
/// True if this build can run ops on `cuda:<index>` on this machine.
bool usable(int index) noexcept;
/// Why `cuda:<index>` cannot be used by this build, in words: CUDA's own reason when there is
/// no usable device ("cudaGetDeviceCount: cudaErrorInsufficientDriver (CUDA driver version is
/// insufficient for CUDA runtime version)") or the device count when the index is past it.
/// Empty for a usable device.
std::string unavailable_reason(int index);

}  // namespace cotensor::detail::cuda
