#include "cuda/device_context.hpp"

#include "cotensor/error.hpp"

#include "cuda/blas.hpp"
#include "cuda/cuda_error.hpp"
#include "engine/backend.hpp"
#include "engine/op_node.hpp"

#include <bit>
#include <new>
#include <string>
#include <utility>

namespace cotensor::detail::cuda {
namespace {

// cuBLAS's own workspace, set with cublasSetWorkspace so that it never allocates (or frees,
// synchronising the device) during a launch: NVIDIA's recommended size for Hopper.
constexpr std::size_t blas_workspace_bytes = std::size_t{32} << 20;

constexpr std::size_t smallest_staging = std::size_t{64} << 10;

// The live contexts, for host waits on fences. Guarded by contexts_mutex.
std::mutex contexts_mutex;
std::vector<device_context*>& live_contexts() {
  // Never destroyed: a runtime with static storage duration may end after it otherwise.
  static auto* v = new std::vector<device_context*>;
  return *v;
}
std::atomic<std::uint64_t> next_context_id{1};

}  // namespace

thread_local launch* current_launch = nullptr;

device_guard::device_guard(int index) noexcept {
  int current = 0;
  COTENSOR_CUDA_LOG(cudaGetDevice(&current));
  if (current != index) {
    COTENSOR_CUDA_LOG(cudaSetDevice(index));
    previous_ = current;
  }
}

device_guard::~device_guard() {
  if (previous_ >= 0) {
    COTENSOR_CUDA_LOG(cudaSetDevice(previous_));
  }
}

void await_device_fence(std::uint64_t fence, waiter& w) {
  const std::uint64_t id = fence >> fence_position_bits;
  const std::uint64_t position = fence & ((std::uint64_t{1} << fence_position_bits) - 1);
  std::exception_ptr error;
  {
    std::lock_guard lock(contexts_mutex);  // keeps the context alive while the wait is queued
    for (device_context* c : live_contexts()) {
      if (c->id() == id) {
        if (c->await(position, w, error)) {
          return;  // queued: the poller completes it
        }
        break;
      }
    }
  }
  w.complete(std::move(error));  // passed, failed, or its context gone with every op ended
}

launch& launch_here() {
  launch* l = current_launch;
  if (l == nullptr) [[unlikely]] {
    throw std::logic_error("cotensor: a CUDA kernel ran outside its device's launch");
  }
  if (l->device->poller().failed()) [[unlikely]] {
    std::rethrow_exception(l->device->poller().device_error());
  }
  return *l;
}

// --- staging ---------------------------------------------------------------------------------

staging_pool::~staging_pool() {
  for (const auto& [capacity, p] : free_) {
    COTENSOR_CUDA_LOG(cudaFreeHost(p));
  }
}

staging_pool::block staging_pool::acquire(std::size_t bytes) {
  const std::size_t capacity = std::bit_ceil(std::max(bytes, smallest_staging));
  {
    std::lock_guard lock(mutex_);
    if (auto it = free_.find(capacity); it != free_.end()) {
      block b{it->second, capacity};
      free_.erase(it);
      return b;
    }
  }
  void* p = nullptr;
  COTENSOR_CUDA_CHECK(cudaHostAlloc(&p, capacity, cudaHostAllocPortable));
  return {p, capacity};
}

void staging_pool::release(block b) noexcept {
  try {
    std::lock_guard lock(mutex_);
    free_.emplace(b.capacity, b.data);
  } catch (...) {
    COTENSOR_CUDA_LOG(cudaFreeHost(b.data));  // out of memory for the list
  }
}

// --- the context -----------------------------------------------------------------------------

device_context::device_context(int index, const engine_options& options)
    : index_(index), id_(next_context_id.fetch_add(1, std::memory_order_relaxed)),
      allow_tf32_(options.allow_tf32), events_(index),
      poller_(*this, "cuda:" + std::to_string(index)) {
  const device_guard on_device(index_);  // maybe another device's launcher, or a user's thread
  try {
    // Never the legacy default stream, which would serialise with every other stream.
    COTENSOR_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
    COTENSOR_CUDA_CHECK(cudaStreamCreateWithFlags(&h2d_, cudaStreamNonBlocking));
    COTENSOR_CUDA_CHECK(cudaStreamCreateWithFlags(&d2h_, cudaStreamNonBlocking));
    COTENSOR_CUDA_CHECK(cudaEventCreateWithFlags(&order_event_, cudaEventDisableTiming));
    {
      std::lock_guard lock(contexts_mutex);
      live_contexts().push_back(this);
    }
    try {
      launcher_ = std::thread([this] { run_launcher(); });
    } catch (...) {
      std::lock_guard lock(contexts_mutex);
      std::erase(live_contexts(), this);
      throw;
    }
  } catch (...) {
    poller_.shutdown();
    destroy_handles();
    throw;
  }
}

cublasHandle_t device_context::blas() {
  if (blas_ != nullptr) [[likely]] {
    return blas_;
  }
  const blas_api& cublas = cuda::cublas();  // loaded with the first matmul on any device
  cublasHandle_t h = nullptr;
  COTENSOR_CUBLAS_CHECK(cublas.create(&h));
  try {
    COTENSOR_CUBLAS_CHECK(cublas.set_stream(h, compute_));
    // After set_stream, which resets the workspace: cuBLAS then never allocates (or frees,
    // synchronising the device) during a launch.
    if (blas_workspace_ == nullptr) {
      COTENSOR_CUDA_CHECK(cudaMalloc(&blas_workspace_, blas_workspace_bytes));
    }
    COTENSOR_CUBLAS_CHECK(cublas.set_workspace(h, blas_workspace_, blas_workspace_bytes));
    // FP32 stays FP32 unless the user opts in to TF32 (as PyTorch since 1.12).
    COTENSOR_CUBLAS_CHECK(
        cublas.set_math_mode(h, allow_tf32_ ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  } catch (...) {
    cublas.destroy(h);
    throw;
  }
  blas_ = h;
  return blas_;
}

void device_context::destroy_handles() noexcept {
  if (blas_ != nullptr) {
    cublas().destroy(blas_);  // loaded: the handle exists
  }
  for (cudaStream_t s : {compute_, h2d_, d2h_}) {
    if (s != nullptr) {
      COTENSOR_CUDA_LOG(cudaStreamDestroy(s));
    }
  }
  if (order_event_ != nullptr) {
    COTENSOR_CUDA_LOG(cudaEventDestroy(order_event_));
  }
  if (blas_workspace_ != nullptr) {
    COTENSOR_CUDA_LOG(cudaFree(blas_workspace_));
  }
}

device_context::~device_context() {
  {
    std::lock_guard lock(contexts_mutex);
    std::erase(live_contexts(), this);
  }
  {
    std::lock_guard lock(queue_mutex_);
    stopping_ = true;
    queue_wake_.notify_one();
  }
  launcher_.join();
  poller_.shutdown();  // every event seen (or the device failed): nothing uses what follows
  const device_guard on_device(index_);
  destroy_handles();
}

void device_context::submit(op_node* op, bool retire) noexcept {
  std::unique_lock lock(queue_mutex_);
  // The engine hands over work only while it runs; the deque may throw only out of memory,
  // and then the op runs (or retires) here, as a backend that cannot take work must.
  try {
    queue_.push_back({op, retire});
  } catch (...) {
    lock.unlock();
    if (retire) {
      retire_op(op);
    } else {
      execute(op);
    }
    return;
  }
  queue_wake_.notify_one();
}

void device_context::execute(op_node* op) noexcept {
  const backend_thread_guard backend;
  std::lock_guard launching(launch_mutex_);
  const device_guard on_device(index_);  // the caller's thread
  launch_op(op);
}

void device_context::run_launcher() noexcept {
  const backend_thread_guard backend;
  COTENSOR_CUDA_LOG(cudaSetDevice(index_));
  std::deque<queued> batch;
  for (;;) {
    {
      std::unique_lock lock(queue_mutex_);
      queue_wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) {
        return;  // stopping, and everything queued has run
      }
      batch.swap(queue_);
    }
    while (!batch.empty()) {
      const queued q = batch.front();
      batch.pop_front();
      if (q.retire) {
        retire_op(q.op);
      } else {
        std::lock_guard launching(launch_mutex_);
        launch_op(q.op);
      }
    }
  }
}

void device_context::launch_op(op_node* op) noexcept {
  launch l{this, compute_, {}};
  launch* const outer = std::exchange(current_launch, &l);  // nested in synchronous mode
  const char* const outer_op = std::exchange(launching_op, op->name);
  try {
    order_after_writers_elsewhere(*op);
    run_op(op);  // the kernel, then launched(); or the op's inherited or own error
  } catch (...) {
    op->own = std::current_exception();  // the op fails without running
    retire_op(op);
  }
  launching_op = outer_op;
  current_launch = outer;
  if (l.after.fn != nullptr) {
    // A kernel threw after taking a staging block, maybe with its copy queued: let that
    // finish, then give the block back.
    COTENSOR_CUDA_LOG(cudaStreamSynchronize(l.stream));
    l.after(false);
  }
}

void device_context::order_after_writers_elsewhere(const op_node& op) {
  for (const auto& a : op.accesses) {
    const std::uint64_t fence = a.buffer->fence.load(std::memory_order_acquire);
    const std::uint64_t writer = fence >> fence_position_bits;
    if (fence == 0 || writer == id_) {
      continue;  // no fence, or stream order on our own compute stream
    }
    // Written on another device, or by another engine's context for this one: wait on its
    // stream (no host wait). A context that is gone had ended all its work.
    const std::uint64_t position = fence & ((std::uint64_t{1} << fence_position_bits) - 1);
    std::lock_guard lock(contexts_mutex);
    for (device_context* c : live_contexts()) {
      if (c->id() == writer) {
        if (c->passed_position_.load(std::memory_order_acquire) < position) {
          order_after(*c);  // still to run there
        }
        break;
      }
    }
  }
}

void device_context::order_after_compute(cudaStream_t waiting) {
  COTENSOR_CUDA_CHECK(cudaEventRecord(order_event_, compute_));
  COTENSOR_CUDA_CHECK(cudaStreamWaitEvent(waiting, order_event_, 0));
}

void device_context::order_after(device_context& other) {
  cudaEvent_t e = nullptr;
  COTENSOR_CUDA_CHECK(cudaSetDevice(other.index_));
  try {
    COTENSOR_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    COTENSOR_CUDA_CHECK(cudaEventRecord(e, other.compute_));
    COTENSOR_CUDA_CHECK(cudaSetDevice(index_));
    COTENSOR_CUDA_CHECK(cudaStreamWaitEvent(compute_, e, 0));
  } catch (...) {
    if (e != nullptr) {
      COTENSOR_CUDA_LOG(cudaEventDestroy(e));
    }
    COTENSOR_CUDA_LOG(cudaSetDevice(index_));
    throw;
  }
  COTENSOR_CUDA_LOG(cudaEventDestroy(e));  // released once the wait no longer needs it
}

void device_context::launched(op_node* op, op_completion done) noexcept {
  launch& l = *current_launch;
  const after_event after = std::exchange(l.after, {});
  cudaEvent_t event = nullptr;
  try {
    event = events_.acquire();
    COTENSOR_CUDA_CHECK(cudaEventRecord(event, l.stream));
  } catch (...) {
    // The op's work may be queued still: let it finish before its staging block and buffers
    // go back (an error path; the device is likely failed anyway).
    COTENSOR_CUDA_LOG(cudaStreamSynchronize(l.stream));
    if (event != nullptr) {
      events_.release(event);
    }
    after(false);
    done(std::current_exception());
    return;
  }
  // On the compute stream, touching only this device's memory: later ops on the stream run
  // after it in stream order, so its buffers are released now; host readers wait for its
  // fence. Anything else (a copy stream, host memory, another device) ends at its event.
  std::uint64_t position = 0;
  bool stays_here = l.stream == compute_;
  for (const auto& a : op->accesses) {
    const device d = a.buffer->device();
    stays_here = stays_here && !d.is_cpu() && d.index == index_;
  }
  if (stays_here) {
    position = ++launched_position_;
    for (const auto& a : op->accesses) {
      if (a.mode != access_mode::read) {
        a.buffer->fence.store((id_ << fence_position_bits) | position, std::memory_order_release);
      }
    }
    done.release_accesses();
  }
  try {
    // Recorded and watched under launch_mutex_: in stream order, so that the poller queries
    // only the oldest pending event of each stream.
    poller_.watch(event, std::move(done), position, after, l.stream);
  } catch (...) {
    // Out of memory: the op fails (abandoned). Its work may be queued: let it finish before its
    // staging block goes back, and let host readers of its buffers pass its fence.
    COTENSOR_CUDA_LOG(cudaStreamSynchronize(l.stream));
    events_.release(event);
    after(false);
    if (position != 0) {
      passed(position, true);
    }
  }
}

bool device_context::await(std::uint64_t position, waiter& w, std::exception_ptr& error) {
  auto passed = [&] { return passed_position_.load(std::memory_order_acquire) >= position; };
  if (passed()) {
    return false;
  }
  // `passed` updates the position, then takes this lock: a wait queued here is seen by it.
  std::lock_guard lock(fence_mutex_);
  if (passed()) {
    return false;
  }
  if (poller_.failed()) {
    error = poller_.device_error();
    return false;
  }
  fence_waits_.push_back({position, &w});
  return true;
}

void device_context::passed(std::uint64_t position, bool ok) noexcept {
  // Events of the stream complete in order, but the poller may see a later one first.
  std::uint64_t seen = passed_position_.load(std::memory_order_relaxed);
  while (ok && seen < position &&
         !passed_position_.compare_exchange_weak(seen, position, std::memory_order_acq_rel)) {
  }
  std::vector<fence_wait> ready;
  {
    std::lock_guard lock(fence_mutex_);
    const std::uint64_t now = passed_position_.load(std::memory_order_relaxed);
    std::erase_if(fence_waits_, [&](const fence_wait& f) {
      if (!ok || f.fence <= now) {
        try {
          ready.push_back(f);
        } catch (...) {
          return false;  // out of memory: completed on a later pass
        }
        return true;
      }
      return false;
    });
  }
  const std::uint64_t now = passed_position_.load(std::memory_order_acquire);
  const std::exception_ptr error = ok ? nullptr : poller_.device_error();
  for (const fence_wait& f : ready) {
    f.w->complete(f.fence <= now ? nullptr : error);
  }
}

event_state device_context::query(void* event, std::error_code& ec) noexcept {
  return events_.query(event, ec);
}
void device_context::release(void* event) noexcept { events_.release(event); }
void device_context::bind_thread() noexcept { events_.bind_thread(); }

}  // namespace cotensor::detail::cuda
