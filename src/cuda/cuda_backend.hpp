#pragma once

// The CUDA backend's registration (src/backends.cpp): its backend, its memory and its kernels.
// Compiled only in builds with the CUDA backend (COTENSOR_WITH_CUDA).

#include "engine/backend.hpp"
#include "kernels/kernel_table.hpp"

#include <cstdint>
#include <memory>

namespace cotensor::detail::cuda {

/// Device memory for buffers on CUDA devices: stream-ordered (cudaMallocAsync on the stream of
/// the op that first writes the buffer) from each device's default pool, whose release
/// threshold keeps freed memory for reuse (PyTorch's CUDAMallocAsyncAllocator). Every buffer is
/// allocated when its writer starts (delay_alloc). Out of memory, the pool gives back what it
/// holds unused and the allocation is tried once more, then throws std::bad_alloc.
///
/// The pool is trimmed (`cudaMemPoolTrimTo`), giving idle memory back to the driver for other
/// processes: to nothing when an engine's context of the device shuts down, and, once more
/// than a quarter of the device's memory lies idle in it (checked after every 256 MiB freed),
/// down to that quarter.
class device_memory_allocator final : public device_allocator {
public:
  constexpr device_memory_allocator() noexcept : device_allocator(0, false) {}
  void* allocate(device d, std::size_t bytes, block_use use) override;
  void deallocate(device d, void* p, std::size_t bytes, block_use use) noexcept override;
};

extern device_memory_allocator device_memory;
extern const kernel_table kernel_table_of_cuda;

/// The backend of every CUDA device of an engine: each device's context (streams, cuBLAS,
/// event poller, launcher thread) is made with its first op.
std::unique_ptr<backend> make_backend(const engine_options& options);

/// Completes `w` once device `d`'s compute stream has passed `fence` (backend::launched).
void await_fence(device d, std::uint64_t fence, waiter& w);

}  // namespace cotensor::detail::cuda
