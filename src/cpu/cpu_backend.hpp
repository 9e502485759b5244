#pragma once

// The CPU backend: ops run on a oneTBB arena (or, in the TSan build, on a std::thread pool with
// the same interface), their buffers in host memory.

#include "engine/backend.hpp"

#include <memory>

namespace cotensor::detail::cpu {

/// A CPU backend with `workers` threads (0: one per hardware thread). Raises oneTBB's
/// process-wide parallelism limit to fit, and switches OpenBLAS's own threading off.
std::unique_ptr<backend> make_backend(unsigned workers);

/// The allocator of host buffers.
device_allocator& host_memory();

}  // namespace cotensor::detail::cpu
