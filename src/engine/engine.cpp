#include "engine/engine.hpp"

#include "cotensor/config.hpp"

#include "cotensor/error.hpp"
#include "cotensor/tensor.hpp"

#include "cpu/kernels.hpp"
#include "engine/spin_mutex.hpp"
#include "engine/thread_counts.hpp"

#if !COTENSOR_STD_THREADS
#include <oneapi/tbb/global_control.h>
#endif
#include <oneapi/tbb/scalable_allocator.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <optional>
#include <pthread.h>
#include <stdexcept>
#include <system_error>
#include <thread>

#if COTENSOR_WITH_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace cotensor::detail {
namespace {

// True while this thread runs an op or a chunk of a `map` kernel (see backend_thread_guard).
// A task_scheduler_observer would say the same for every arena thread, but Debian's oneTBB
// leaks its observer proxy at exit, which LeakSanitizer reports.
// Initial-exec, like every thread_local the hot path reads: one `fs`-relative load, where the
// default model for a shared library calls `__tls_get_addr`.
thread_local bool on_backend_thread __attribute__((tls_model("initial-exec"))) = false;

thread_local tracker* current_scope_tracker __attribute__((tls_model("initial-exec"))) = nullptr;

// oneTBB keeps a slot for a joining caller thread and starts at most max_allowed_parallelism - 1
// workers; our callers only enqueue, so raise the process-wide limit to workers + 1. With
// several active global_control objects oneTBB applies the smallest, so a runtime that needs
// more replaces the one in force; the limit never goes down while the process lives.
void raise_parallelism([[maybe_unused]] unsigned workers) {
#if !COTENSOR_STD_THREADS
  static std::mutex mutex;
  static std::unique_ptr<tbb::global_control> control;
  static std::size_t value = 0;
  std::lock_guard lock(mutex);
  const std::size_t wanted = std::size_t{workers} + 1;
  if (wanted > value) {
    auto next =
        std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, wanted);
    control = std::move(next);
    value = wanted;
  }
#endif
}

unsigned default_workers(const runtime_options& options) {
  if (options.worker_threads != 0) {
    return options.worker_threads;
  }
  return std::max(1U, std::thread::hardware_concurrency());
}

}  // namespace

// --- storage -------------------------------------------------------------------------------

namespace {

constexpr std::size_t buffer_alignment = 64;

std::size_t buffer_bytes(const cotensor::shape& s) noexcept {
  return static_cast<std::size_t>(std::max<std::int64_t>(s.numel(), 1)) * sizeof(float);
}

#if !COTENSOR_SYSTEM_ALLOCATOR
// The blocks of the last few delayed buffers freed, shared by every thread. A result is freed
// where its last handle drops, often on the frontend, and the next one allocated where its op
// starts, on a worker: through oneTBB alone the freed block would wait in the frontend's own
// cache while the worker took another, cold one. From here the worker gets back the block it
// wrote last, still in its cache. A block freed by the taking thread itself comes first (a
// worker that frees its op's result and starts the next op). At most `capacity` blocks and
// `max_bytes` in all; the oldest goes back to oneTBB. Never destroyed (buffers may be freed
// during static destruction).
class recent_blocks {
public:
  static constexpr std::size_t capacity = 4;
  static constexpr std::size_t max_bytes = std::size_t{32} << 20;

  /// A kept block of exactly `bytes`, the most recent one this thread freed, else the most
  /// recent one; or null.
  void* take(std::size_t bytes) noexcept {
    const std::lock_guard lock(mutex_);
    std::size_t found = count_;
    for (std::size_t i = count_; i-- > 0;) {
      if (blocks_[i].bytes != bytes) {
        continue;
      }
      if (blocks_[i].owner == &this_thread_tag) {
        found = i;
        break;
      }
      if (found == count_) {
        found = i;
      }
    }
    if (found == count_) {
      return nullptr;
    }
    void* p = blocks_[found].p;
    std::copy(blocks_.begin() + static_cast<std::ptrdiff_t>(found) + 1,
              blocks_.begin() + static_cast<std::ptrdiff_t>(count_),
              blocks_.begin() + static_cast<std::ptrdiff_t>(found));
    --count_;
    held_ -= bytes;
    return p;
  }

  /// Keeps `p` (of `bytes`), giving the oldest blocks back to oneTBB to make room, or gives `p`
  /// back itself when it is larger than the whole cache.
  void keep(void* p, std::size_t bytes) noexcept {
    if (bytes > max_bytes) {
      free_bytes(p, bytes, buffer_alignment);
      return;
    }
    std::array<block, capacity> evicted{};
    std::size_t n = 0;
    {
      const std::lock_guard lock(mutex_);
      while (count_ == capacity || held_ + bytes > max_bytes) {
        evicted[n++] = blocks_[0];
        held_ -= blocks_[0].bytes;
        std::copy(blocks_.begin() + 1, blocks_.begin() + static_cast<std::ptrdiff_t>(count_),
                  blocks_.begin());
        --count_;
      }
      blocks_[count_++] = {p, bytes, &this_thread_tag};
      held_ += bytes;
    }
    for (std::size_t i = 0; i < n; ++i) {
      free_bytes(evicted[i].p, evicted[i].bytes, buffer_alignment);
    }
  }

private:
  struct block {
    void* p;
    std::size_t bytes;
    const void* owner;  // the thread that freed it
  };
  // Its address names the calling thread.
  static thread_local inline char this_thread_tag = 0;
  spin_mutex mutex_;
  std::array<block, capacity> blocks_{};
  std::size_t count_ = 0;
  std::size_t held_ = 0;
};

recent_blocks& recent() noexcept {
  static auto* const blocks = new recent_blocks;
  return *blocks;
}
#endif

// A delayed buffer's block: a recent one of its size when there is one (not while faults are
// injected, so that every allocation is counted), else a new one.
void* take_block(std::size_t bytes) {
#if !COTENSOR_SYSTEM_ALLOCATOR
  if (!faults::enabled()) {
    if (void* p = recent().take(bytes)) {
      return p;
    }
  }
#endif
  return allocate_bytes(bytes, buffer_alignment);
}

void give_block(void* p, std::size_t bytes) noexcept {
#if !COTENSOR_SYSTEM_ALLOCATOR
  recent().keep(p, bytes);
#else
  free_bytes(p, bytes, buffer_alignment);
#endif
}

}  // namespace

storage::storage(const cotensor::shape& s, cotensor::device d)
    : data_(nullptr), shape_(s), device_(d) {
  if (const std::size_t bytes = buffer_bytes(s); bytes <= delayed_bytes) {
    data_.store(static_cast<float*>(allocate_bytes(bytes, buffer_alignment)),
                std::memory_order_relaxed);
    add_count(live_count::buffer_bytes, static_cast<std::int64_t>(bytes));
  }
  add_count(live_count::buffers, 1);
}

// Two threads may both find no memory (two readers of a buffer whose writer failed before its
// kernel ran): one block wins, the other goes back.
float* storage::first_data() {
  const std::size_t bytes = buffer_bytes(shape_);
  auto* p = static_cast<float*>(take_block(bytes));
  float* expected = nullptr;
  if (data_.compare_exchange_strong(expected, p, std::memory_order_acq_rel)) {
    add_count(live_count::buffer_bytes, static_cast<std::int64_t>(bytes));
    return p;
  }
  give_block(p, bytes);
  return expected;
}

storage::~storage() {
  if (float* p = data_.load(std::memory_order_relaxed)) {
    const std::size_t bytes = buffer_bytes(shape_);
    if (bytes > delayed_bytes) {
      give_block(p, bytes);
    } else {
      free_bytes(p, bytes, buffer_alignment);
    }
    add_count(live_count::buffer_bytes, -static_cast<std::int64_t>(bytes));
  }
  add_count(live_count::buffers, -1);
}

std::int64_t live_buffers() noexcept { return total_count(live_count::buffers); }
std::int64_t live_buffer_bytes() noexcept { return total_count(live_count::buffer_bytes); }
std::int64_t live_op_nodes() noexcept { return total_count(live_count::op_nodes); }

std::shared_ptr<storage> storage::make(const cotensor::shape& s, cotensor::device d) {
  return std::allocate_shared<storage>(allocator<storage>(), s, d);
}

#if !COTENSOR_SYSTEM_ALLOCATOR
namespace {

// A per-thread cache of small blocks in front of oneTBB's allocator. An op issued and run on
// the same thread (a small op run at its call) allocates and frees three small blocks: its
// node, its result's storage and that storage's few floats. Through scalable_aligned_malloc
// and _free they cost ~480 instructions of ~2,300 per op (callgrind); from this cache, a few.
// Blocks are 64-byte aligned, in classes of 64, 128, ..., 512 bytes; each thread keeps at most
// `depth` per class and gives the rest (and all at its exit) back to oneTBB. Not in sanitizer
// builds (COTENSOR_SYSTEM_ALLOCATOR), where every block goes to malloc so that ASan sees it.
struct small_block {
  small_block* next;
};

struct block_cache {
  static constexpr std::size_t granule = 64;
  static constexpr std::size_t classes = 8;
  static constexpr std::uint32_t depth = 64;

  std::array<small_block*, classes> head;
  std::array<std::uint32_t, classes> count;
  bool registered;  // the exit hook is set for this thread
  bool exiting;     // the exit hook ran: blocks go straight back to oneTBB
};

// Zero-initialised and trivially destructible: initial-exec access is one `fs`-relative load.
thread_local block_cache this_thread_blocks __attribute__((tls_model("initial-exec")));

void release_blocks(void* p) {
  auto& cache = *static_cast<block_cache*>(p);
  cache.exiting = true;
  for (std::size_t c = 0; c < block_cache::classes; ++c) {
    while (small_block* b = cache.head[c]) {
      cache.head[c] = b->next;
      scalable_aligned_free(b);
    }
    cache.count[c] = 0;
  }
}

pthread_key_t blocks_key() noexcept {
  static const pthread_key_t key = [] {
    pthread_key_t k{};
    pthread_key_create(&k, release_blocks);
    return k;
  }();
  return key;
}

// The class of a block of `bytes` (> 0) at most `alignment`-aligned, or `classes` if none.
std::size_t block_class(std::size_t bytes, std::size_t alignment) noexcept {
  if (alignment > block_cache::granule || bytes > block_cache::granule * block_cache::classes) {
    return block_cache::classes;
  }
  return (std::max<std::size_t>(bytes, 1) - 1) / block_cache::granule;
}

}  // namespace
#endif

void* allocate_bytes(std::size_t bytes, std::size_t alignment) {
  if (faults::enabled()) [[unlikely]] {
    faults::on_allocate();
  }
#if COTENSOR_SYSTEM_ALLOCATOR
  bytes = (bytes + alignment - 1) / alignment * alignment;
  void* p = std::aligned_alloc(alignment, bytes);
#else
  void* p = nullptr;
  if (const std::size_t c = block_class(bytes, alignment); c < block_cache::classes) {
    auto& cache = this_thread_blocks;
    if (small_block* b = cache.head[c]) {
      cache.head[c] = b->next;
      --cache.count[c];
      return b;
    }
    p = scalable_aligned_malloc((c + 1) * block_cache::granule, block_cache::granule);
  } else {
    p = scalable_aligned_malloc(bytes, alignment);
  }
#endif
  if (p == nullptr) {
    throw std::bad_alloc();
  }
  return p;
}

void free_bytes(void* p,
                [[maybe_unused]] std::size_t bytes,
                [[maybe_unused]] std::size_t alignment) noexcept {
#if COTENSOR_SYSTEM_ALLOCATOR
  std::free(p);
#else
  if (const std::size_t c = block_class(bytes, alignment); c < block_cache::classes) {
    auto& cache = this_thread_blocks;
    if (cache.count[c] < block_cache::depth && !cache.exiting) {
      if (!cache.registered) [[unlikely]] {
        cache.registered = true;
        pthread_setspecific(blocks_key(), &cache);
      }
      auto* b = static_cast<small_block*>(p);
      b->next = cache.head[c];
      cache.head[c] = b;
      ++cache.count[c];
      return;
    }
  }
  scalable_aligned_free(p);
#endif
}

// --- op_node -------------------------------------------------------------------------------

void* op_node::operator new(std::size_t size) {
  void* p = allocate_bytes(size, alignof(op_node));
  add_count(live_count::op_nodes, 1);
  return p;
}

void op_node::operator delete(void* p, std::size_t size) noexcept {
  free_bytes(p, size, alignof(op_node));
  add_count(live_count::op_nodes, -1);
}

void op_node::dependency_met() {
  if (unmet.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    if (trace) [[unlikely]] {
      trace->on_ready(trace_id);
    }
    owner->dispatch(this);
  }
}

// --- blocking_waiter -----------------------------------------------------------------------

void blocking_waiter::complete(std::exception_ptr error) noexcept {
  std::lock_guard lock(mutex_);
  error_ = std::move(error);
  done_.store(true, std::memory_order_release);
  cv_.notify_one();
}

std::exception_ptr blocking_waiter::wait() {
  // A short spin catches a result that is about to arrive without paying for a sleep/wake.
  for (int i = 0; i < 256 && !done_.load(std::memory_order_acquire); ++i) {
    cpu_relax();
  }
  // Always take the lock: `complete` may still be inside its critical section, touching us.
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [this] { return done_.load(std::memory_order_relaxed); });
  return std::move(error_);
}

void check_may_block(const char* what) {
  if (engine::on_worker_thread()) {
    throw std::system_error(make_error_code(errc::wait_on_backend_thread), what);
  }
}

// --- engine --------------------------------------------------------------------------------

engine::engine(const runtime_options& options)
    : options_(options), workers_(default_workers(options)) {
  cpu::init_backend();
  raise_parallelism(workers_);
  arena_.initialize(static_cast<int>(workers_), 0);  // no slot kept for a joining caller
  // Nsight Systems (or another NVTX tool) announces itself through this variable; without one,
  // each op pays a single branch.
  nvtx_ = COTENSOR_WITH_NVTX != 0 && std::getenv("NVTX_INJECTION64_PATH") != nullptr;
  // An NVTX tool sees each op as a range, which only push's path emits.
  run_now_enabled_ = options_.inline_small_ops && !options_.synchronous && !nvtx_;
#if COTENSOR_WITH_NVTX
  if (nvtx_) {
    // NVTX loads its tool on its first call, with a double-checked flag that is not atomic;
    // two workers making that first call at once race (TSan reports it). Load it here, once,
    // before any op runs, as NVTX's own header advises.
    nvtxInitialize(nullptr);
  }
#endif
  if (const char* path = std::getenv("COTENSOR_TRACE"); path != nullptr && *path != '\0') {
    trace_path_ = path;
    start_trace();
  }
}

engine::~engine() {
  blocking_waiter all;
  tracker_->wait(all);
  all.wait();
  if (!trace_path_.empty()) {
    if (auto r = stop_trace()) {
      try {
        r->snapshot().save(trace_path_);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "cotensor: COTENSOR_TRACE: %s\n", e.what());
      }
    }
  }
  arena_.terminate();
  if (fallback_) {
    fallback_->join();
  }
}

bool engine::on_worker_thread() noexcept { return on_backend_thread; }

backend_thread_guard::backend_thread_guard() noexcept : previous_(on_backend_thread) {
  on_backend_thread = true;
}

backend_thread_guard::~backend_thread_guard() { on_backend_thread = previous_; }

void engine::push(std::unique_ptr<op_node> node) {
  op_node* op = node.release();
  op->owner = this;
  if (faults::enabled()) [[unlikely]] {
    op->fault = faults::on_push();
  }
  std::size_t touched_bytes = 0;
  for (const auto& a : op->accesses) {
    const std::size_t bytes = static_cast<std::size_t>(a.buffer->numel()) * sizeof(float);
    touched_bytes += bytes;
    if (a.mode != access_mode::read) {
      op->written_bytes += bytes;
    }
  }
  acquire_room(op->written_bytes);
  issued_.fetch_add(1, std::memory_order_relaxed);
  if (recorder* r = tracing()) [[unlikely]] {
    std::lock_guard lock(trace_mutex_);
    if (recorder_) {
      op->trace = recorder_;
      op->trace_id = r->on_issue(*op, r->now());
    }
  }
  op->generation = tracker_->enter();
  if (tracker* s = current_scope_tracker) {
    op->scope = s->shared_from_this();
    op->scope_generation = s->enter();
  }
  std::optional<blocking_waiter> done;
  if (options_.synchronous) {
    op->on_done = &done.emplace();
  }
  // One unmet dependency per access, plus one we hold until every access is requested, so the
  // op cannot start (and be freed) while we still walk its accesses.
  op->unmet.store(static_cast<std::int32_t>(op->accesses.size()) + 1, std::memory_order_relaxed);
  for (auto& a : op->accesses) {
    a.entry.op = op;
    if (a.mode == access_mode::read) {
      a.buffer->var.read(&a.entry);
    } else {
      a.buffer->var.write(&a.entry);
    }
  }
  std::shared_ptr<recorder> trace = op->trace;  // `op` may be gone after dependency_met
  const std::uint64_t trace_id = op->trace_id;
  if (runs_inline(*op, touched_bytes)) {
    if (op->unmet.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      if (trace) [[unlikely]] {
        trace->on_ready(trace_id);
      }
      run(op);  // ready at its call and tiny: cheaper here than a round trip to a worker
    }
  } else {
    op->dependency_met();
  }
  if (trace) [[unlikely]] {
    trace->on_issued(trace_id);
  }
  if (options_.synchronous) {
    if (auto error = done->wait()) {
      std::rethrow_exception(error);
    }
  }
}

namespace {

// Up to 128 KiB touched (an elementwise op on 16 Ki floats, a few µs of work), handing an op to
// a worker costs more than running it (10^4-element `x + 1`: 3.5 µs handed over, 1.4 µs at its
// call; NumPy 2.2 µs).
constexpr std::size_t inline_bytes = 128 * 1024;

}  // namespace

bool engine::runs_inline(const op_node& op, std::size_t touched_bytes) const noexcept {
  return options_.inline_small_ops && !options_.synchronous && !op.runs_user_code &&
         !on_worker_thread() && touched_bytes <= inline_bytes;
}

bool engine::run_now(buffer_list reads, buffer_list writes, function_ref<void()> kernel) noexcept {
  // What push would cost on top of the kernel (an op node, its accesses' reference counts,
  // admission, the runtime's tracker, two passes over each buffer's queue) is most of a small
  // op's time. An op that is ready at its call and will run there needs none of it, only its
  // buffers held while it runs: ~1,000 of ~1,700 instructions per `y = x + 1` (callgrind).
  if (!run_now_enabled_ || on_backend_thread || current_scope_tracker != nullptr ||
      tracing() != nullptr || faults::enabled()) {
    return false;
  }
  struct held_access {
    detail::var* var;
    access_mode mode;
  };
  constexpr std::size_t max_accesses = 4;
  std::array<held_access, max_accesses> held;
  std::size_t count = 0;
  std::size_t touched_bytes = 0;
  // As make_op: one access per buffer, `read_write` for one both read and written.
  auto add = [&](const std::shared_ptr<storage>& s, access_mode mode) {
    for (std::size_t i = 0; i < count; ++i) {
      if (held[i].var == &s->var) {
        if (held[i].mode == access_mode::write && mode == access_mode::read) {
          held[i].mode = access_mode::read_write;
        }
        return true;
      }
    }
    if (count == max_accesses) {
      return false;
    }
    held[count++] = {&s->var, mode};
    touched_bytes += static_cast<std::size_t>(s->numel()) * sizeof(float);
    return true;
  };
  for (const std::shared_ptr<storage>& w : writes) {
    if (!add(w, access_mode::write)) {
      return false;
    }
  }
  for (const std::shared_ptr<storage>& r : reads) {
    if (!add(r, access_mode::read)) {
      return false;
    }
  }
  if (touched_bytes > inline_bytes) {
    return false;
  }
  auto release = [&](std::size_t n) noexcept {
    for (std::size_t i = 0; i < n; ++i) {
      if (held[i].mode == access_mode::read) {
        held[i].var->end_read();
      } else {
        held[i].var->end_write();
      }
    }
  };
  for (std::size_t i = 0; i < count; ++i) {
    const bool started =
        held[i].mode == access_mode::read ? held[i].var->try_read() : held[i].var->try_write();
    if (!started) {  // something runs or waits there: the op queues behind it, through push
      release(i);
      return false;
    }
  }
  std::exception_ptr error;
  for (std::size_t i = 0; i < count; ++i) {
    if (held[i].mode != access_mode::write && held[i].var->error) {
      error = held[i].var->error;  // an input's error: skip the kernel, pass the error on
      break;
    }
  }
  if (!error) {
    const backend_thread_guard backend;
    try {
      kernel();
    } catch (...) {
      error = std::current_exception();
    }
  }
  for (std::size_t i = 0; i < count; ++i) {
    if (held[i].mode != access_mode::read && held[i].var->error != error) {
      held[i].var->error = error;
    }
  }
  release(count);
  ran_now_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void engine::dispatch(op_node* op) {
  if (options_.synchronous) {
    arena_.execute([this, op] { run(op); });
    return;
  }
  arena_.enqueue([this, op] { run(op); });
}

std::exception_ptr engine::run(op_node* op) noexcept {
  const backend_thread_guard backend;
  std::exception_ptr inherited;
  for (const auto& a : op->accesses) {
    if (a.mode != access_mode::write && a.buffer->var.error) {
      inherited = a.buffer->var.error;
      break;
    }
  }
  if (op->trace) [[unlikely]] {
    op->trace->on_start(op->trace_id);
  }
#if COTENSOR_WITH_NVTX
  if (nvtx_) [[unlikely]] {
    nvtxRangePushA(op->name);
  }
#endif
  std::exception_ptr own;
  if (!inherited) {
    try {
      if (op->fault == faults::op_fault::fail) [[unlikely]] {
        throw faults::injected_fault(std::string("cotensor: injected fault in op ") + op->name);
      }
      op->kernel();
    } catch (...) {
      own = std::current_exception();
    }
  }
  if (op->fault == faults::op_fault::delay) [[unlikely]] {
    std::this_thread::sleep_for(faults::completion_delay());
  }
#if COTENSOR_WITH_NVTX
  if (nvtx_) [[unlikely]] {
    nvtxRangePop();
  }
#endif
  if (op->trace) [[unlikely]] {
    op->trace->on_end(op->trace_id, inherited || own);
  }
  waiter* on_done = op->on_done;
  retire(op, inherited ? inherited : own);
  if (on_done != nullptr) {
    on_done->complete(own);
  }
  return own;
}

void engine::retire(op_node* op, const std::exception_ptr& error) noexcept {
  std::unique_ptr<op_node> node(op);
  for (const auto& a : node->accesses) {
    if (a.mode != access_mode::read) {
      a.buffer->var.error = error;
    }
  }
  // Release the buffers first: successors may start while we finish the bookkeeping.
  for (const auto& a : node->accesses) {
    if (a.mode == access_mode::read) {
      a.buffer->var.end_read();
    } else {
      a.buffer->var.end_write();
    }
  }
  auto scope = std::move(node->scope);
  auto scope_generation = node->scope_generation;
  auto generation = node->generation;
  const std::size_t written_bytes = node->written_bytes;
  node.reset();
  if (scope) {
    scope->leave(scope_generation, error);
  }
  completed_.fetch_add(1, std::memory_order_relaxed);
  release_room(written_bytes);
  // Last: once the runtime's tracker sees the op leave, the engine may be destroyed.
  auto all = tracker_;
  all->leave(generation, error);
}

bool engine::has_room(std::size_t ops, std::size_t held, std::size_t bytes) const noexcept {
  const std::size_t limit = options_.max_in_flight;
  const std::size_t byte_limit = options_.max_in_flight_bytes;
  // An op larger than the byte bound still runs: alone, once nothing else is in flight.
  return (limit == 0 || ops < limit) && (byte_limit == 0 || ops == 0 || held + bytes <= byte_limit);
}

void engine::acquire_room(std::size_t bytes) {
  // The two counters move separately, so two threads admitted at once may overshoot the byte
  // bound by one op: it is a bound on memory pinned ahead, not an exact budget.
  std::size_t now = in_flight_.load(std::memory_order_relaxed);
  for (;;) {
    if (has_room(now, in_flight_bytes_.load(std::memory_order_relaxed), bytes)) {
      if (in_flight_.compare_exchange_weak(now, now + 1, std::memory_order_seq_cst)) {
        in_flight_bytes_.fetch_add(bytes, std::memory_order_seq_cst);
        break;
      }
      continue;
    }
    admission_waits_.fetch_add(1, std::memory_order_relaxed);
    room_wanted_.fetch_add(1, std::memory_order_seq_cst);
    {
      std::unique_lock lock(room_mutex_);
      room_cv_.wait(lock, [&] {
        return has_room(in_flight_.load(std::memory_order_seq_cst),
                        in_flight_bytes_.load(std::memory_order_seq_cst), bytes);
      });
    }
    room_wanted_.fetch_sub(1, std::memory_order_seq_cst);
    now = in_flight_.load(std::memory_order_relaxed);
  }
  std::size_t peak = peak_in_flight_.load(std::memory_order_relaxed);
  while (now + 1 > peak &&
         !peak_in_flight_.compare_exchange_weak(peak, now + 1, std::memory_order_relaxed)) {
  }
}

void engine::release_room(std::size_t bytes) noexcept {
  in_flight_bytes_.fetch_sub(bytes, std::memory_order_seq_cst);
  in_flight_.fetch_sub(1, std::memory_order_seq_cst);
  if (room_wanted_.load(std::memory_order_seq_cst) == 0) {
    return;
  }
  boost::container::small_vector<waiter*, 8> ready;
  {
    std::lock_guard lock(room_mutex_);
    const std::size_t now = in_flight_.load(std::memory_order_seq_cst);
    const std::size_t held = in_flight_bytes_.load(std::memory_order_seq_cst);
    // Coroutines in admission() wait for room for one more op (of no particular size).
    while (!room_waiters_.empty() && has_room(now + ready.size(), held, 0)) {
      ready.push_back(room_waiters_.front());
      room_waiters_.pop_front();
    }
    room_cv_.notify_all();
  }
  room_wanted_.fetch_sub(static_cast<std::int32_t>(ready.size()), std::memory_order_seq_cst);
  for (waiter* w : ready) {
    w->complete(nullptr);
  }
}

void engine::admit(waiter& w) {
  auto full = [this] {
    return !has_room(in_flight_.load(std::memory_order_seq_cst),
                     in_flight_bytes_.load(std::memory_order_seq_cst), 0);
  };
  if (full()) {
    room_wanted_.fetch_add(1, std::memory_order_seq_cst);
    std::unique_lock lock(room_mutex_);
    if (full()) {
      room_waiters_.push_back(&w);
      return;
    }
    lock.unlock();
    room_wanted_.fetch_sub(1, std::memory_order_seq_cst);
  }
  w.complete(nullptr);
}

void engine::start_trace() {
  std::lock_guard lock(trace_mutex_);
  if (recorder_) {
    throw std::logic_error("cotensor::start_trace: a trace is already recording");
  }
  recorder_ = std::make_shared<recorder>();
  tracing_.store(recorder_.get(), std::memory_order_release);
}

std::shared_ptr<recorder> engine::stop_trace() {
  blocking_waiter all;
  tracker_->wait(all);
  all.wait();
  std::lock_guard lock(trace_mutex_);
  tracing_.store(nullptr, std::memory_order_release);
  return std::move(recorder_);
}

asio::any_io_executor engine::fallback_executor() {
  std::call_once(fallback_once_, [this] { fallback_ = std::make_unique<asio::thread_pool>(1); });
  return fallback_->get_executor();
}

runtime_stats engine::stats() const noexcept {
  runtime_stats s;
  const std::uint64_t ran_now = ran_now_.load(std::memory_order_relaxed);
  s.issued = issued_.load(std::memory_order_relaxed) + ran_now;
  s.completed = completed_.load(std::memory_order_relaxed) + ran_now;
  s.in_flight = in_flight_.load(std::memory_order_relaxed);
  s.peak_in_flight = peak_in_flight_.load(std::memory_order_relaxed);
  s.admission_waits = admission_waits_.load(std::memory_order_relaxed);
  s.live_buffers = live_buffers();
  s.live_buffer_bytes = live_buffer_bytes();
  s.live_ops = live_op_nodes();
  return s;
}

// --- scopes --------------------------------------------------------------------------------

tracker* current_scope() noexcept { return current_scope_tracker; }
void set_current_scope(tracker* t) noexcept { current_scope_tracker = t; }

// --- issuing -------------------------------------------------------------------------------

std::unique_ptr<op_node> make_op(const char* name, buffer_list reads, buffer_list writes) {
  // Default-initialised, not value-initialised: make_unique would zero the whole node first
  // (its kernel's 96-byte buffer included), ~60 instructions per op.
  std::unique_ptr<op_node> op(new op_node);
  op->name = name;
  auto find = [&](const storage* s) {
    return std::ranges::find_if(op->accesses, [s](const access& a) { return a.buffer.get() == s; });
  };
  for (const std::shared_ptr<storage>& w : writes) {
    if (find(w.get()) == op->accesses.end()) {
      op->accesses.push_back({w, access_mode::write, {}});
    }
  }
  for (const std::shared_ptr<storage>& r : reads) {
    auto it = find(r.get());
    if (it == op->accesses.end()) {
      op->accesses.push_back({r, access_mode::read, {}});
    } else if (it->mode == access_mode::write) {
      it->mode = access_mode::read_write;
    }
  }
  return op;
}

// --- waits ---------------------------------------------------------------------------------

namespace {

// Joins several waits into one: completes `target` when all have, with the first error in
// argument order.
class join_waiter {
public:
  join_waiter(std::size_t n, waiter& target) : errors_(n), target_(target) {}

  waiter& part(std::size_t i) { return parts_.emplace_back(this, i); }
  void arm(std::size_t n) { remaining_.store(static_cast<std::int64_t>(n)); }

private:
  struct part_waiter final : waiter {
    part_waiter(join_waiter* j, std::size_t i) : join(j), index(i) {}
    void complete(std::exception_ptr error) noexcept override {
      join->errors_[index] = std::move(error);
      join->finish_one();
    }
    join_waiter* join;
    std::size_t index;
  };

  void finish_one() noexcept {
    if (remaining_.fetch_sub(1, std::memory_order_acq_rel) != 1) {
      return;
    }
    std::exception_ptr first;
    for (auto& e : errors_) {
      if (e) {
        first = e;
        break;
      }
    }
    waiter& target = target_;
    delete this;
    target.complete(std::move(first));
  }

  std::vector<std::exception_ptr> errors_;
  std::deque<part_waiter> parts_;  // stable addresses
  std::atomic<std::int64_t> remaining_{0};
  waiter& target_;
};

const std::shared_ptr<storage>& checked_storage(const tensor& t, const char* what) {
  if (!t.defined()) {
    throw std::invalid_argument(std::string("cotensor::") + what + ": empty tensor");
  }
  return t.storage();
}

}  // namespace

void start_wait(const tensor& t, waiter& w) { checked_storage(t, "wait").get()->var.wait_read(w); }

void start_wait(std::span<const tensor* const> ts, waiter& w) {
  for (const tensor* t : ts) {
    checked_storage(*t, "when_all");
  }
  if (ts.empty()) {
    w.complete(nullptr);
    return;
  }
  auto* join = new join_waiter(ts.size(), w);
  std::vector<waiter*> parts;
  parts.reserve(ts.size());
  for (std::size_t i = 0; i < ts.size(); ++i) {
    parts.push_back(&join->part(i));
  }
  join->arm(ts.size());
  // After arming, `join` may be deleted by the last part to complete: use only `parts`.
  for (std::size_t i = 0; i < ts.size(); ++i) {
    ts[i]->storage()->var.wait_read(*parts[i]);
  }
}

void start_wait_all(waiter& w) { current_engine().wait_all(w); }

void start_wait_scope(tracker& t, waiter& w) { t.wait(w); }

void start_admission(waiter& w) { current_engine().admit(w); }

asio::any_io_executor fallback_executor() { return current_engine().fallback_executor(); }

engine& current_engine() { return runtime::current().engine(); }

}  // namespace cotensor::detail
