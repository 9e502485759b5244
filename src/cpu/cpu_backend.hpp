#pragma once

// The CPU backend: ops run on a oneTBB arena (or, in the TSan build, on a std::thread pool with
// the same interface), their buffers in host memory.

#include "engine/backend.hpp"

#include <cstddef>
#include <memory>

namespace cotensor::detail::cpu {

/// A CPU backend with `workers` threads (0: one per hardware thread). Raises oneTBB's
/// process-wide parallelism limit to fit, and switches OpenBLAS's own threading off.
std::unique_ptr<backend> make_backend(const engine_options& options);

/// The allocator of host buffers: 64-byte aligned blocks from the pooled host allocator; up to
/// 64 KiB a buffer gets its memory when it is made (storage takes those blocks itself), larger
/// ones when their first writer starts, through a small cache of recently freed blocks; large
/// lasting ones in whole transparent huge pages (host_memory.cpp).
class host_allocator final : public device_allocator {
public:
  constexpr host_allocator() noexcept : device_allocator(64 * 1024, true) {}
  void* allocate(device d, std::size_t bytes, block_use use) override;
  void deallocate(device d, void* p, std::size_t bytes, block_use use) noexcept override;
};

/// The one host allocator (constant-initialised: buffers may be made during static
/// initialisation).
extern host_allocator host_memory;

}  // namespace cotensor::detail::cpu
