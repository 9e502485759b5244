#pragma once

// The CUDA devices of this machine, as CUDA's runtime sees them (when the build links it).

#include <string>

namespace cotensor::detail::cuda {

/// Why `cuda:<index>` cannot be used by this build, in words: CUDA's own reason when there is
/// no usable device ("cudaGetDeviceCount: cudaErrorInsufficientDriver (CUDA driver version is
/// insufficient for CUDA runtime version)"), the device count when the index is past it, or
/// that this build cannot run ops on a GPU. Asks CUDA once per process, on first use.
std::string unavailable_reason(int index);

}  // namespace cotensor::detail::cuda
