#pragma once

// One CUDA device as one engine uses it: its streams, cuBLAS handle (made with its first matmul),
// events, event poller, pinned staging blocks and launcher thread. Compiled only with
// COTENSOR_WITH_CUDA.

#include "cotensor/detail/waiter.hpp"

#include "cuda/event_poller.hpp"
#include "cuda/event_pool.hpp"
#include "engine/options.hpp"

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace cotensor::detail {
struct op_node;
}

namespace cotensor::detail::cuda {

class device_context;

/// What the op being launched on this thread uses: set by its device's launcher (or by the
/// synchronous engine's caller) around `run_op`, read by the kernels and by
/// `backend::launched`.
struct launch {
  device_context* device = nullptr;
  /// The stream the op's work went to: the compute stream unless a copy moved it.
  cudaStream_t stream = nullptr;
  /// Host work when the op's event completes (a staged download, a staging block to return).
  after_event after;
};

/// The launch in progress on this thread, or null.
extern thread_local launch* current_launch;
/// The launch in progress on this thread. Throws the device's error if it failed, so that a
/// failed device's later ops fail at once, without touching it.
launch& launch_here();

/// Makes `index` the calling thread's current CUDA device for its lifetime, then restores the
/// one before: the current device is per thread, and our calls on threads that are not the
/// device's own (a user's, another device's launcher) must leave it as they found it.
class device_guard {
public:
  /// A failure is logged: the calls that follow fail with CUDA's error.
  explicit device_guard(int index) noexcept;
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;
  ~device_guard();

private:
  int previous_ = -1;  // -1: unchanged
};

/// A buffer's fence (storage::fence): the context that wrote it and the position of the write
/// on that context's compute stream, in one word.
constexpr int fence_position_bits = 40;

/// Completes `w` once the context named in `fence` has passed its position; at once if that
/// context is gone (its engine ended every op before it went).
void await_device_fence(std::uint64_t fence, waiter& w);

/// Pinned host blocks for copies (a copy from or to pageable memory is staged, or
/// synchronous): power-of-two sizes from 64 KiB, reused once the copy's event completed.
class staging_pool {
public:
  staging_pool() = default;
  staging_pool(const staging_pool&) = delete;
  staging_pool& operator=(const staging_pool&) = delete;
  ~staging_pool();

  struct block {
    void* data = nullptr;
    std::size_t capacity = 0;
  };
  /// A pinned block of at least `bytes`. Throws std::bad_alloc.
  block acquire(std::size_t bytes);
  void release(block b) noexcept;

private:
  std::mutex mutex_;
  std::multimap<std::size_t, void*> free_;
};

/// One CUDA device of one engine. Thread safety: `submit` from any thread; the rest from the
/// launcher (or, for `execute`, from the synchronous engine's callers, one at a time).
class device_context final : public event_source {
public:
  /// Sets up device `index` (its streams, poller and launcher thread; not cuBLAS). Throws
  /// std::system_error naming CUDA's error.
  device_context(int index, const engine_options& options);
  device_context(const device_context&) = delete;
  device_context& operator=(const device_context&) = delete;
  /// Runs what is queued, drains the poller (every op in flight ends), then destroys the
  /// events, streams and handles.
  ~device_context();

  int index() const noexcept { return index_; }
  std::uint64_t id() const noexcept { return id_; }
  cudaStream_t compute() const noexcept { return compute_; }
  cudaStream_t upload() const noexcept { return h2d_; }
  cudaStream_t download() const noexcept { return d2h_; }
  /// The cuBLAS handle, made on the first call (the device's first matmul), which loads cuBLAS
  /// if no device has: the device's other ops never need it. From the launch in progress
  /// (launch_mutex_ held). Throws std::system_error (errc::device_unavailable) if cuBLAS cannot
  /// be loaded (see blas.hpp), or CUDA's or cuBLAS's error.
  cublasHandle_t blas();
  staging_pool& staging() noexcept { return staging_; }
  event_poller& poller() noexcept { return poller_; }

  /// Runs `op` (or retires it) on the launcher thread, later.
  void submit(op_node* op, bool retire) noexcept;
  /// Runs `op` on the calling thread as the launcher would (the synchronous engine).
  void execute(op_node* op) noexcept;
  /// Ends `done` (the op being launched here) when the work it enqueued is done.
  void launched(op_node* op, op_completion done) noexcept;

  /// Makes `waiting` wait for the work enqueued on the compute stream so far (no host wait).
  void order_after_compute(cudaStream_t waiting);
  /// Makes the compute stream wait for the writes to `op`'s buffers that ended their accesses
  /// on another context's stream (another device, or another engine).
  void order_after_writers_elsewhere(const op_node& op);
  /// Makes this device's compute stream wait for the work enqueued on `other`'s so far.
  void order_after(device_context& other);

  /// Queues `w` to be completed once the compute stream has passed `position`, and returns
  /// true; or returns false, with `error` set if the device failed, for a wait to complete now.
  /// Throws std::bad_alloc.
  bool await(std::uint64_t position, waiter& w, std::exception_ptr& error);

  // event_source, for the poller
  event_state query(void* event, std::error_code& ec) noexcept override;
  void release(void* event) noexcept override;
  void bind_thread() noexcept override;
  void passed(std::uint64_t position, bool ok) noexcept override;

private:
  struct queued {
    op_node* op;
    bool retire;
  };
  struct fence_wait {
    std::uint64_t fence;
    waiter* w;
  };

  void run_launcher() noexcept;
  // Destroys what the constructor made (those it got to).
  void destroy_handles() noexcept;
  // Runs `op` with this thread's launch set, `launch_mutex_` held by the caller.
  void launch_op(op_node* op) noexcept;

  const int index_;
  const std::uint64_t id_;  // names it in fences: unique in the process, never reused
  cudaStream_t compute_ = nullptr;
  cudaStream_t h2d_ = nullptr;
  cudaStream_t d2h_ = nullptr;
  cudaEvent_t order_event_ = nullptr;  // recorded for cross-stream order; launch_mutex_ held
  const bool allow_tf32_;
  cublasHandle_t blas_ = nullptr;  // made by blas(); launch_mutex_ held
  void* blas_workspace_ = nullptr;
  event_pool events_;
  staging_pool staging_;
  event_poller poller_;

  // One launch at a time: stream order is launch order. Recursive: in synchronous mode a
  // launch that ends accesses may run a dependent on the same thread.
  std::recursive_mutex launch_mutex_;
  std::uint64_t launched_position_ = 0;  // of compute-stream ops; launch_mutex_ held
  std::atomic<std::uint64_t> passed_position_{0};
  std::mutex fence_mutex_;
  std::vector<fence_wait> fence_waits_;  // guarded by fence_mutex_

  std::mutex queue_mutex_;
  std::condition_variable queue_wake_;
  std::deque<queued> queue_;  // guarded by queue_mutex_
  bool stopping_ = false;     // guarded by queue_mutex_
  std::thread launcher_;
};

}  // namespace cotensor::detail::cuda
