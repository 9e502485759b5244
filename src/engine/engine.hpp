#pragma once

#include "cotensor/config.hpp"

#include "cotensor/asio.hpp"
#include "cotensor/detail/engine_fwd.hpp"
#include "cotensor/device.hpp"
#include "cotensor/runtime.hpp"
#include "cotensor/shape.hpp"

#include "engine/faults.hpp"
#include "engine/kernel_fn.hpp"
#include "engine/recorder.hpp"
#include "engine/tracker.hpp"
#include "engine/var.hpp"
#include "engine/worker_pool.hpp"
#include "function_ref.hpp"

#include <boost/asio/thread_pool.hpp>
#include <boost/container/small_vector.hpp>
#if !COTENSOR_STD_THREADS
#include <oneapi/tbb/task_arena.h>
#endif

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace cotensor::detail {

class engine;

/// What runs the engine's ops: a oneTBB arena, or in the TSan build (COTENSOR_STD_THREADS) a
/// std::thread pool with the same interface. Chosen at compile time: no indirection.
#if COTENSOR_STD_THREADS
using backend_arena = worker_pool;
#else
using backend_arena = tbb::task_arena;
#endif

/// Allocates `bytes` aligned to `alignment` (a power of two) from oneTBB's scalable allocator,
/// or from malloc in sanitizer builds (COTENSOR_SYSTEM_ALLOCATOR). Throws std::bad_alloc.
void* allocate_bytes(std::size_t bytes, std::size_t alignment);
/// Frees a block from `allocate_bytes`, given the same `bytes` and `alignment`.
void free_bytes(void* p, std::size_t bytes, std::size_t alignment) noexcept;

/// Buffers (`storage`), the bytes of their floats and op nodes alive in the process, for leak
/// checks (runtime_stats).
std::int64_t live_buffers() noexcept;
std::int64_t live_buffer_bytes() noexcept;
std::int64_t live_op_nodes() noexcept;

/// A std::allocator-like front for `allocate_bytes`.
template <class T>
struct allocator {
  using value_type = T;
  allocator() noexcept = default;
  template <class U>
  allocator(const allocator<U>& /*other*/) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(allocate_bytes(n * sizeof(T), alignof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { free_bytes(p, n * sizeof(T), alignof(T)); }
  template <class U>
  bool operator==(const allocator<U>& /*other*/) const noexcept {
    return true;
  }
};

/// A tensor's buffer: 64-byte aligned floats plus the read/write queue that orders access.
///
/// A buffer of more than `delayed_bytes` gets its memory at its first data() call, which is
/// when the op that writes it starts (MXNet's delay_alloc): ops queued ahead hold no memory for
/// their results, and a block that a finished op freed comes back, still in the cache, to the
/// next. Smaller buffers get theirs here, from the per-thread block cache, so that a small op's
/// failed allocation throws at the call.
class storage {
public:
  static constexpr std::size_t delayed_bytes = 64 * 1024;

  /// A new buffer for a tensor of shape `s`, uninitialised.
  static std::shared_ptr<storage> make(const cotensor::shape& s, cotensor::device d);

  storage(const cotensor::shape& s, cotensor::device d);
  storage(const storage&) = delete;
  storage& operator=(const storage&) = delete;
  ~storage();

  /// The floats; the first call allocates a delayed buffer and may throw std::bad_alloc (in a
  /// kernel, that becomes the op's error). Safe to call from several threads at once.
  float* data() {
    float* p = data_.load(std::memory_order_acquire);
    return p != nullptr ? p : first_data();
  }
  std::int64_t numel() const noexcept { return shape_.numel(); }
  /// The shape the buffer was made with (views may see it otherwise).
  const cotensor::shape& shape() const noexcept { return shape_; }
  cotensor::device device() const noexcept { return device_; }

  detail::var var;

private:
  float* first_data();
  std::atomic<float*> data_;
  cotensor::shape shape_;
  cotensor::device device_;
};

/// How an op touches a buffer. `read_write` is a write whose old value matters (`+=`): the
/// buffer's old error is inherited like an input's.
enum class access_mode : std::uint8_t { read, write, read_write };

struct access {
  std::shared_ptr<storage> buffer;
  access_mode mode;
  pending_access entry;  // this access's place in the buffer's FIFO
};

/// One op in the engine: what it touches, what it runs, and the sets it belongs to.
struct op_node {
  const char* name = "";
  kernel_fn kernel;
  boost::container::small_vector<access, 3> accesses;  // one per buffer, deduplicated
  engine* owner = nullptr;
  // Accesses not yet granted, plus one held by `push` until every access is requested.
  std::atomic<std::int32_t> unmet{0};
  std::uint64_t generation = 0;    // in the runtime's tracker
  std::shared_ptr<tracker> scope;  // null when issued outside a scope
  std::uint64_t scope_generation = 0;
  waiter* on_done = nullptr;      // synchronous mode: completed with the op's own error
  std::size_t written_bytes = 0;  // counted in flight by admission
  bool runs_user_code = false;    // `map`: never run inline on the issuing thread
  faults::op_fault fault = faults::op_fault::none;  // injected by a test (engine/faults.hpp)
  std::shared_ptr<recorder> trace;  // the trace recording when it was issued, or null
  std::uint64_t trace_id = 0;

  /// One access granted (or `push` done asking); the last one dispatches the op.
  void dependency_met();

  // Ops are made on the frontend and freed on a worker: a scalable allocator avoids the
  // cross-thread contention of malloc.
  static void* operator new(std::size_t size);
  static void operator delete(void* p, std::size_t size) noexcept;
};

/// The buffers an op reads or writes, by reference: the op node takes the only copies (a list
/// of `shared_ptr` values would cost two more atomic reference-count updates per buffer).
using buffer_list = std::initializer_list<std::reference_wrapper<const std::shared_ptr<storage>>>;

/// The dependency engine and the CPU backend of one runtime.
class engine {
public:
  explicit engine(const runtime_options& options);
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;
  /// Waits for every op issued on this engine, then stops the backend.
  ~engine();

  /// Issues `op`: waits for room in flight (blocking), then requests its accesses; returns at
  /// once. In synchronous mode runs it before returning and rethrows its own exception.
  void push(std::unique_ptr<op_node> op);
  /// Runs an op on the calling thread, now, with no op node, if it is small enough to run
  /// inline (see runs_inline), nothing observes ops one by one (no trace, scope, NVTX tool,
  /// fault injection or synchronous mode) and every buffer is free this instant: nothing
  /// writing it, or waiting to. Returns false, having changed nothing, otherwise: then issue
  /// the op as usual. `kernel`'s exception is stored in the written buffers, as an op's.
  bool run_now(buffer_list reads, buffer_list writes, function_ref<void()> kernel) noexcept;

  void wait_all(waiter& w) { tracker_->wait(w); }
  void admit(waiter& w);
  asio::any_io_executor fallback_executor();
  /// Starts recording a trace; throws std::logic_error if one is recording.
  void start_trace();
  /// Waits for the ops in flight, stops recording and returns the trace (null if none).
  std::shared_ptr<recorder> stop_trace();
  /// The recording trace, kept alive by the caller; null if none.
  std::shared_ptr<recorder> current_recorder() {
    std::lock_guard lock(trace_mutex_);
    return recorder_;
  }
  /// The recording trace, or null: one load, the only cost when tracing is off.
  recorder* tracing() const noexcept { return tracing_.load(std::memory_order_acquire); }
  const runtime_options& options() const noexcept { return options_; }
  runtime_stats stats() const noexcept;
  unsigned worker_threads() const noexcept { return workers_; }
  /// True on a thread running backend work (see backend_thread_guard).
  static bool on_worker_thread() noexcept;
  /// Runs `f` inside the backend arena (so nested parallel loops use its workers) and waits.
  template <class F>
  void execute(F&& f) {
    arena_.execute(std::forward<F>(f));
  }

private:
  friend struct op_node;
  void dispatch(op_node* op);
  // True for an op small enough to run on the issuing thread if it is ready at its call.
  bool runs_inline(const op_node& op, std::size_t touched_bytes) const noexcept;
  // Runs the kernel (or skips it after an input's error), then retires the op.
  // Returns the op's own exception (null if it succeeded or inherited one); completes
  // `op->on_done` with it.
  std::exception_ptr run(op_node* op) noexcept;
  void retire(op_node* op, const std::exception_ptr& error) noexcept;
  // Admission: whether an op writing `bytes` fits beside `ops` ops writing `held` bytes.
  bool has_room(std::size_t ops, std::size_t held, std::size_t bytes) const noexcept;
  void acquire_room(std::size_t bytes);
  void release_room(std::size_t bytes) noexcept;

  runtime_options options_;
  unsigned workers_;
  backend_arena arena_;
  std::shared_ptr<tracker> tracker_ = std::make_shared<tracker>(false);

  std::atomic<std::size_t> in_flight_{0};
  std::atomic<std::size_t> in_flight_bytes_{0};
  std::atomic<std::uint64_t> issued_{0};
  std::atomic<std::uint64_t> completed_{0};
  std::atomic<std::uint64_t> ran_now_{0};  // issued and completed by run_now
  std::atomic<std::size_t> peak_in_flight_{0};
  std::atomic<std::uint64_t> admission_waits_{0};

  // Admission: threads blocked in push and async waiters, woken as ops retire.
  std::atomic<std::int32_t> room_wanted_{0};
  std::mutex room_mutex_;
  std::condition_variable room_cv_;
  std::deque<waiter*> room_waiters_;

  std::atomic<recorder*> tracing_{nullptr};
  std::mutex trace_mutex_;
  std::shared_ptr<recorder> recorder_;
  std::string trace_path_;        // COTENSOR_TRACE: saved when the engine stops
  bool nvtx_ = false;             // emit NVTX ranges: a profiler is attached
  bool run_now_enabled_ = false;  // run_now may run ops: set once, by the constructor

  std::once_flag fallback_once_;
  std::unique_ptr<asio::thread_pool> fallback_;
};

/// Marks the calling thread as running backend work (an op, or a chunk of a `map` kernel that
/// oneTBB may have handed to another worker) for its lifetime, so that blocking waits there are
/// refused instead of deadlocking.
class backend_thread_guard {
public:
  backend_thread_guard() noexcept;
  backend_thread_guard(const backend_thread_guard&) = delete;
  backend_thread_guard& operator=(const backend_thread_guard&) = delete;
  ~backend_thread_guard();

private:
  bool previous_;
};

/// The engine of the current runtime.
engine& current_engine();

/// The tracker of the scope current on this thread, or null.
tracker* current_scope() noexcept;
void set_current_scope(tracker* t) noexcept;

/// A new op node for `issue`, with its accesses: a buffer both read and written is one
/// `read_write` access.
std::unique_ptr<op_node> make_op(const char* name, buffer_list reads, buffer_list writes);

/// Issues an op running `kernel` on the current engine: run at once by `run_now` when it can
/// be, else built into an op node and pushed. `reads` and `writes` may overlap.
template <class Kernel>
void issue(const char* name, buffer_list reads, buffer_list writes, Kernel&& kernel) {
  engine& e = current_engine();
  if (e.run_now(reads, writes, kernel)) {
    return;
  }
  auto op = make_op(name, reads, writes);
  op->kernel.emplace(std::forward<Kernel>(kernel));
  e.push(std::move(op));
}

/// A thread blocked until the engine completes it; spins briefly before sleeping.
class blocking_waiter final : public waiter {
public:
  void complete(std::exception_ptr error) noexcept override;
  /// Blocks until `complete`, then returns its error.
  std::exception_ptr wait();

private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::exception_ptr error_;
  std::atomic<bool> done_{false};  // set under mutex_, read lock-free while spinning
};

/// Throws std::system_error (errc::wait_on_backend_thread) on a backend worker thread.
void check_may_block(const char* what);

}  // namespace cotensor::detail
