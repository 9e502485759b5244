// The CUDA backend: one context per device in use (device_context.cpp), made with the device's
// first op, and the stream-ordered memory of every CUDA buffer.

#include "cuda/cuda_backend.hpp"

#include "cotensor/error.hpp"

#include "cuda/cuda_error.hpp"
#include "cuda/device_context.hpp"
#include "cuda/devices.hpp"
#include "engine/op_node.hpp"

#include <atomic>
#include <cuda_runtime_api.h>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

namespace cotensor::detail::cuda {
namespace {

void trim_pool(int index, std::uint64_t keep_idle, bool after_queued_frees) noexcept;

class cuda_backend final : public backend {
public:
  explicit cuda_backend(const engine_options& options)
      : options_(options), contexts_(static_cast<std::size_t>(device_count())),
        owned_(contexts_.size()) {}

  ~cuda_backend() override { shutdown(); }

  void submit(op_node* op) noexcept override { context_or_fail(op, false); }
  void submit_retire(op_node* op) noexcept override { context_or_fail(op, true); }

  void execute(op_node* op) noexcept override {
    if (device_context* c = context_for(op)) {
      c->execute(op);
    }
  }

  void launched(op_node* op, op_completion done) noexcept override {
    current_launch->device->launched(op, std::move(done));
  }

  unsigned concurrency() const noexcept override { return 1; }

  void shutdown() noexcept override {
    std::lock_guard lock(mutex_);
    for (auto& c : owned_) {
      if (c) {
        const int index = c->index();
        c.reset();  // drains its launcher and poller
        trim_pool(index, 0, true);
      }
    }
  }

  // The context of device `index` if this engine has made it.
  device_context* existing(int index) const noexcept {
    if (index < 0 || static_cast<std::size_t>(index) >= contexts_.size()) {
      return nullptr;
    }
    return contexts_[static_cast<std::size_t>(index)].load(std::memory_order_acquire);
  }

private:
  // The context of `op`'s device, made now if this is its first op; null (the op run here and
  // failed with the reason) if it cannot be made.
  device_context* context_for(op_node* op) noexcept {
    const int index = op->device.index;
    if (device_context* c = existing(index); c != nullptr && device_count() > 0) [[likely]] {
      return c;  // (0 in a forked child, whose copy of our threads is gone)
    }
    try {
      if (!usable(index)) {
        throw std::system_error(make_error_code(errc::device_unavailable),
                                "cotensor: " + unavailable_message(op->device));
      }
      std::lock_guard lock(mutex_);
      if (device_context* c = existing(index)) {
        return c;
      }
      if (index < 0 || static_cast<std::size_t>(index) >= contexts_.size()) {
        throw std::system_error(make_error_code(errc::device_unavailable),
                                "cotensor: " + unavailable_message(op->device));
      }
      auto& slot = owned_[static_cast<std::size_t>(index)];
      slot = std::make_unique<device_context>(index, options_);
      contexts_[static_cast<std::size_t>(index)].store(slot.get(), std::memory_order_release);
      return slot.get();
    } catch (...) {
      fail_here(op, std::current_exception());
      return nullptr;
    }
  }

  void context_or_fail(op_node* op, bool retire) noexcept {
    if (retire) {
      // An op's completion exists only once its context does.
      existing(op->device.index)->submit(op, true);
      return;
    }
    if (device_context* c = context_for(op)) {
      c->submit(op, false);
    }
  }

  // A device that cannot be set up fails its ops, on this thread.
  static void fail_here(op_node* op, std::exception_ptr error) noexcept {
    op->own = std::move(error);
    retire_op(op);
  }

  const engine_options options_;
  std::vector<std::atomic<device_context*>> contexts_;
  std::vector<std::unique_ptr<device_context>> owned_;  // guarded by mutex_
  std::mutex mutex_;
};

// Frees go on a stream of their own per device, process-wide (a buffer may outlive every
// engine): by the time a buffer is freed every op that touched it has ended, so its memory is
// idle and needs no order with the streams that used it.
struct memory_state {
  std::once_flag once;
  cudaStream_t free_stream = nullptr;
  cudaMemPool_t pool = nullptr;
  std::uint64_t idle_limit = 0;         // bytes the pool may hold unused: a quarter of the device's
  std::atomic<std::uint64_t> freed{0};  // bytes freed since the pool was last checked
};

// How often the pool's idle memory is checked: after this many bytes freed.
constexpr std::uint64_t trim_check_bytes = std::uint64_t{256} << 20;

memory_state& memory_of(int index) {
  // Never destroyed: buffers with static storage duration may be freed after it otherwise.
  static auto* states = new std::vector<memory_state>(static_cast<std::size_t>(device_count()));
  memory_state& m = states->at(static_cast<std::size_t>(index));
  std::call_once(m.once, [&] {
    const device_guard on_device(index);
    // Keep freed memory in the pool for reuse instead of returning it to the driver at each
    // synchronisation.
    cudaMemPool_t pool = nullptr;
    COTENSOR_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, index));
    std::uint64_t keep = std::numeric_limits<std::uint64_t>::max();
    COTENSOR_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    COTENSOR_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    m.idle_limit = total_bytes / 4;
    COTENSOR_CUDA_CHECK(cudaStreamCreateWithFlags(&m.free_stream, cudaStreamNonBlocking));
    m.pool = pool;
  });
  return m;
}

// Gives the memory that `index`'s pool holds unused back to the driver, down to `keep_idle`
// bytes unused; with `after_queued_frees`, once the frees queued so far are done (a host wait:
// at shutdown only). Never throws: trimming only returns memory.
void trim_pool(int index, std::uint64_t keep_idle, bool after_queued_frees) noexcept {
  // Best effort, and quiet: a failure only leaves memory in the pool, and at exit CUDA may be
  // unloading already (cudaErrorCudartUnloading).
  try {
    memory_state& m = memory_of(index);
    const device_guard on_device(index);
    if (after_queued_frees) {
      (void)cudaStreamSynchronize(m.free_stream);  // the frees queued so far reach the pool
    }
    std::uint64_t used = 0;
    if (keep_idle != 0) {
      (void)cudaMemPoolGetAttribute(m.pool, cudaMemPoolAttrUsedMemCurrent, &used);
    }
    // Keeps `used + keep_idle` bytes reserved at least: what buffers hold plus the idle limit.
    (void)cudaMemPoolTrimTo(m.pool, static_cast<std::size_t>(used + keep_idle));
    (void)cudaGetLastError();
  } catch (...) {
    // The pool could not be set up: it holds nothing.
  }
}

// After `bytes` freed on device `index`: every trim_check_bytes, trims the pool if more than
// its idle limit lies unused in it.
void note_freed(int index, memory_state& m, std::uint64_t bytes) noexcept {
  const std::uint64_t before = m.freed.fetch_add(bytes, std::memory_order_relaxed);
  if (before + bytes < trim_check_bytes || before >= trim_check_bytes) {
    return;  // below the step, or another thread crossed it and checks
  }
  std::uint64_t reserved = 0;
  std::uint64_t used = 0;
  const device_guard on_device(index);
  if (cudaMemPoolGetAttribute(m.pool, cudaMemPoolAttrReservedMemCurrent, &reserved) ==
          cudaSuccess &&
      cudaMemPoolGetAttribute(m.pool, cudaMemPoolAttrUsedMemCurrent, &used) == cudaSuccess &&
      reserved > used + m.idle_limit) {
    trim_pool(index, m.idle_limit, false);
  }
  (void)cudaGetLastError();
  m.freed.store(0, std::memory_order_relaxed);
}

}  // namespace

device_memory_allocator device_memory;

void* device_memory_allocator::allocate(device d, std::size_t bytes, block_use /*use*/) {
  memory_state& m = memory_of(d.index);
  void* p = nullptr;
  if (launch* l = current_launch; l != nullptr && l->device->index() == d.index) {
    // Stream-ordered on the stream of the op that writes it first. The pool keeps what was
    // freed; out of memory, it gives back what it holds unused and tries once more.
    if (const cudaError_t rc = cudaMallocAsync(&p, bytes, l->stream); rc == cudaSuccess) {
      return p;
    } else if (rc != cudaErrorMemoryAllocation) {
      throw_cuda_error(rc, "cudaMallocAsync", __FILE__, __LINE__);
    }
    (void)cudaGetLastError();
    cudaMemPool_t pool = nullptr;
    COTENSOR_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, d.index));
    COTENSOR_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
    COTENSOR_CUDA_CHECK(cudaMallocAsync(&p, bytes, l->stream));  // std::bad_alloc if out
    return p;
  }
  // Outside a launch of its device (not reached by the frontend's ops): ready on return.
  const device_guard on_device(d.index);
  COTENSOR_CUDA_CHECK(cudaMallocAsync(&p, bytes, m.free_stream));
  COTENSOR_CUDA_CHECK(cudaStreamSynchronize(m.free_stream));
  return p;
}

void device_memory_allocator::deallocate(device d,
                                         void* p,
                                         std::size_t bytes,
                                         block_use /*use*/) noexcept {
  try {
    // Freed during a launch on its device (the loser of a race for a buffer's first memory,
    // whose allocation may be queued still): in that launch's stream order.
    if (launch* l = current_launch; l != nullptr && l->device->index() == d.index) {
      COTENSOR_CUDA_LOG(cudaFreeAsync(p, l->stream));
      return;
    }
    memory_state& m = memory_of(d.index);
    {
      const device_guard on_device(d.index);
      COTENSOR_CUDA_LOG(cudaFreeAsync(p, m.free_stream));
    }
    note_freed(d.index, m, bytes);
  } catch (...) {
    // The device's pool could not be set up: then nothing was allocated from it.
  }
}

std::unique_ptr<backend> make_backend(const engine_options& options) {
  return std::make_unique<cuda_backend>(options);
}

void await_fence(device /*d*/, std::uint64_t fence, waiter& w) { await_device_fence(fence, w); }

}  // namespace cotensor::detail::cuda
