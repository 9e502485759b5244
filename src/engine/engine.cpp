#include "engine/engine.hpp"

#include "cotensor/error.hpp"

#include "engine/faults.hpp"
#include "engine/nvtx.hpp"
#include "engine/observer.hpp"
#include "support/assert.hpp"

#include <optional>
#include <stdexcept>
#include <system_error>
#include <thread>

namespace cotensor::detail {

constinit thread_local bool backend_thread_flag __attribute__((tls_model("initial-exec"))) = false;
constinit thread_local tracker* current_scope_tracker __attribute__((tls_model("initial-exec"))) =
    nullptr;

namespace {

// Names ops for observers.
std::atomic<std::uint64_t> next_seq{0};

template <class F>
void notify(const op_node& op, F&& f) {
  if (op.observers) [[unlikely]] {
    for (const auto& o : op.observers->items) {
      f(*o);
    }
  }
}

}  // namespace

backend_thread_guard::backend_thread_guard() noexcept : previous_(backend_thread_flag) {
  backend_thread_flag = true;
}

backend_thread_guard::~backend_thread_guard() { backend_thread_flag = previous_; }

void set_current_scope(tracker* t) noexcept { current_scope_tracker = t; }

engine::engine(const engine_options& options)
    : options_(options), admission_(options.max_in_flight, options.max_in_flight_bytes) {
  owned_backends_[0] = make_backend(device::kind::cpu, options_);
  backends_[0].store(owned_backends_[0].get(), std::memory_order_release);
  run_now_enabled_ = options_.inline_small_ops && !options_.synchronous;
  observe_with_nvtx_if_profiled();
}

engine::~engine() {
  blocking_waiter all;
  tracker_->wait(all);
  all.wait();
  while (handoffs_.load(std::memory_order_acquire) != 0) {  // a thread still handing an op over
    std::this_thread::yield();
  }
  for (auto& b : owned_backends_) {
    if (b) {
      b->shutdown();
    }
  }
  if (fallback_) {
    fallback_->join();
  }
}

unsigned engine::worker_threads() const noexcept { return owned_backends_[0]->concurrency(); }

backend& engine::start_backend(device::kind type) {
  const auto i = static_cast<std::size_t>(type);
  std::lock_guard lock(backends_mutex_);
  if (!owned_backends_[i]) {
    owned_backends_[i] = make_backend(type, options_);
    backends_[i].store(owned_backends_[i].get(), std::memory_order_release);
  }
  return *owned_backends_[i];
}

void engine::push(std::unique_ptr<op_node> node) {
  backend_for(node->device.type);  // throws here, with nothing enqueued, for no backend
  op_node* op = node.release();
  op->owner = this;
  if (observed()) [[unlikely]] {
    op->observers = current_observers();
    op->seq = next_seq.fetch_add(1, std::memory_order_relaxed);
  }
  std::size_t touched_bytes = 0;
  for (const auto& a : op->accesses) {
    const std::size_t bytes = a.buffer->bytes();
    touched_bytes += bytes;
    if (a.mode != access_mode::read) {
      op->written_bytes += bytes;
    }
  }
  try {
    admission_.acquire(op->written_bytes);
  } catch (...) {
    delete op;
    throw;
  }
  issued_.fetch_add(1, std::memory_order_relaxed);
  notify(*op, [op](op_observer& o) { o.on_push(*op); });
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
  // `op` may be gone after its last dependency is met.
  std::shared_ptr<const observer_list> observers;
  if (op->observers) [[unlikely]] {
    observers = op->observers;
  }
  const std::uint64_t seq = op->seq;
  if (runs_inline(*op, touched_bytes)) {
    if (op->unmet.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      if (observers) [[unlikely]] {
        for (const auto& o : observers->items) {
          o->on_ready(seq);
        }
      }
      run(op);  // ready at its call and tiny: cheaper here than a round trip to a worker
    }
  } else {
    op->dependency_met();
  }
  if (observers) [[unlikely]] {
    for (const auto& o : observers->items) {
      o->on_issued(seq);
    }
  }
  if (options_.synchronous) {
    if (auto error = done->wait()) {
      std::rethrow_exception(error);
    }
  }
}

void engine::dispatch(op_node* op) {
  notify(*op, [op](op_observer& o) { o.on_ready(op->seq); });
  backend& b = backend_for(op->device.type);
  if (options_.synchronous) {
    b.execute(op);
    return;
  }
  // The thread that met the op's last dependency may be none of this backend's: a worker of
  // another runtime whose op wrote what this one reads, a completion's thread. The op may run,
  // retire and the last wait end while that thread is still inside submit (oneTBB's enqueue
  // advertises the task after queueing it, holding no reference on the arena): the destructor
  // waits for this call to leave the backend before shutting it down, as for submit_retire.
  const bool delayed = faults::enabled() && faults::delays_dispatch(*op);
  handoffs_.fetch_add(1, std::memory_order_acq_rel);
  b.submit(op);
  if (delayed) [[unlikely]] {
    faults::end_delayed_dispatch();  // `op` may be gone: the fault was read before submit
  }
  handoffs_.fetch_sub(1, std::memory_order_acq_rel);
}

void engine::run(op_node* op) noexcept {
  const backend_thread_guard backend;
  op->inherited =
      inherited_error(op->accesses, [](const access& a) -> var& { return a.buffer->var; });
  if (op->inherited) {
    finish(op);  // skip the work, pass the error on
    return;
  }
  // An op that completes later is held by its start call and by its completion, from the
  // moment the completion exists.
  bool started_later = false;
  std::exception_ptr own;
  try {
    notify(*op, [op](op_observer& o) { o.on_start(*op); });
    if (op->kernel.completes_later()) {
      op->holds.store(2, std::memory_order_relaxed);
      started_later = true;
      op->kernel.start(op_completion(op));
    } else if (!op->device.is_cpu()) [[unlikely]] {
      run_on_device(op);
      return;
    } else {
      op->kernel();
    }
  } catch (...) {
    own = std::current_exception();
  }
  notify(*op, [op](op_observer& o) { o.on_stop(*op); });
  if (!started_later) {
    op->own = std::move(own);
    finish(op);
    return;
  }
  // `start` threw: the op fails with that, unless its completion ended it first.
  if (own && !op->ended.exchange(true, std::memory_order_acq_rel)) {
    op->own = std::move(own);
  }
  // Started, it waits for something outside the engine (a socket may stay idle for hours):
  // it no longer holds room in flight, which bounds the work queued ahead, not what waits.
  admission_.release(op->written_bytes);
  op->holds_room = false;
  drop_hold(op, true);
}

void engine::run_on_device(op_node* op) noexcept {
  // The kernel enqueues the op's work on the device; the backend ends the op when the device
  // has done it. The op keeps its room in flight until then: admission bounds device work too.
  op->holds.store(2, std::memory_order_relaxed);
  op_completion done(op);
  bool launched = false;
  try {
    op->kernel();
    launched = true;
  } catch (...) {
    done(std::current_exception());
  }
  notify(*op, [op](op_observer& o) { o.on_stop(*op); });
  if (launched) {
    backend_for(op->device.type).launched(op, std::move(done));
  }
  drop_hold(op, true);
}

void engine::complete(op_node* op, std::exception_ptr error) noexcept {
  if (!op->ended.exchange(true, std::memory_order_acq_rel)) {
    op->own = std::move(error);
  }
  drop_hold(op, false);
}

void engine::complete_here(op_node* op, std::exception_ptr error) noexcept {
  if (!op->ended.exchange(true, std::memory_order_acq_rel)) {
    op->own = std::move(error);
  }
  if (options_.synchronous) {
    // The retire would run dependents right here (synchronous dispatch): not on the
    // completing thread, which has its own work.
    drop_hold(op, false);
    return;
  }
  const backend_thread_guard backend;  // the retire may not run ops or wait inline here
  drop_hold(op, true);
}

void engine::abandon(op_node* op) noexcept { drop_hold(op, false); }

void engine::drop_hold(op_node* op, bool here) noexcept {
  if (op->holds.fetch_sub(1, std::memory_order_acq_rel) != 1) {
    return;
  }
  if (!op->ended.load(std::memory_order_relaxed)) {
    try {
      throw std::system_error(make_error_code(errc::op_abandoned),
                              std::string("cotensor: op ") + op->name);
    } catch (...) {
      op->own = std::current_exception();  // or std::bad_alloc's, out of memory
    }
  }
  if (here) {
    finish(op);
    return;
  }
  // Never on the completing thread: hand the op back to a thread of its backend. The op may
  // retire, and the last wait end, before submit_retire returns: the destructor waits for
  // this call to leave the backend before destroying it.
  handoffs_.fetch_add(1, std::memory_order_acq_rel);
  backend_for(op->device.type).submit_retire(op);
  handoffs_.fetch_sub(1, std::memory_order_acq_rel);
}

void engine::finish(op_node* op) noexcept {
  notify(*op, [op](op_observer& o) { o.on_end(*op, op->inherited || op->own); });
  retire(op);
}

void engine::end_accesses(op_node& op, const std::exception_ptr& error) noexcept {
  op.accesses_released = true;
  store_error(
      op.accesses, [](const access& a) -> var& { return a.buffer->var; }, error);
  for (const auto& a : op.accesses) {
    if (a.mode == access_mode::read) {
      a.buffer->var.end_read();
    } else {
      a.buffer->var.end_write();
    }
  }
}

void engine::release_accesses(op_node* op) noexcept {
  COTENSOR_ASSERT(!op->accesses_released);
  end_accesses(*op, nullptr);  // an error raised later reaches the op's own waiters only
}

void engine::retire(op_node* op) noexcept {
  std::unique_ptr<op_node> node(op);
  const std::exception_ptr& error = node->inherited ? node->inherited : node->own;
  if (!node->accesses_released) {
    // Release the buffers first: successors may start while we finish the bookkeeping.
    end_accesses(*node, error);
  }
  auto scope = std::move(node->scope);
  const auto scope_generation = node->scope_generation;
  const auto generation = node->generation;
  const std::size_t written_bytes = node->written_bytes;
  const bool holds_room = node->holds_room;
  waiter* on_done = node->on_done;
  const std::exception_ptr own = std::move(node->own);
  const std::exception_ptr failed = node->inherited ? std::move(node->inherited) : own;
  node.reset();
  if (scope) {
    scope->leave(scope_generation, failed);
  }
  completed_.fetch_add(1, std::memory_order_relaxed);
  if (holds_room) {
    admission_.release(written_bytes);
  }
  if (on_done != nullptr) {
    on_done->complete(own);
  }
  // Last: once the runtime's tracker sees the op leave, the engine may be destroyed.
  auto all = tracker_;
  all->leave(generation, failed);
}

asio::any_io_executor engine::fallback_executor() {
  std::call_once(fallback_once_, [this] { fallback_ = std::make_unique<asio::thread_pool>(1); });
  return fallback_->get_executor();
}

engine_stats engine::stats() const noexcept {
  engine_stats s;
  const std::uint64_t ran_now = ran_now_.load(std::memory_order_relaxed);
  s.issued = issued_.load(std::memory_order_relaxed) + ran_now;
  s.completed = completed_.load(std::memory_order_relaxed) + ran_now;
  s.in_flight = admission_.in_flight();
  s.peak_in_flight = admission_.peak();
  s.admission_waits = admission_.waits();
  s.admission_deferred = admission_.deferred();
  s.live_buffers = live_buffers();
  s.live_buffer_bytes = live_buffer_bytes();
  s.live_ops = live_op_nodes();
  return s;
}

// --- for backends and completions ----------------------------------------------------------

void run_op(op_node* op) noexcept { op->owner->run(op); }
void retire_op(op_node* op) noexcept { op->owner->finish(op); }

void op_completion::operator()(std::exception_ptr error) noexcept {
  COTENSOR_ASSERT(op_ != nullptr);
  op_node* op = std::exchange(op_, nullptr);
  op->owner->complete(op, std::move(error));
}

void op_completion::complete_here(std::exception_ptr error) noexcept {
  COTENSOR_ASSERT(op_ != nullptr);
  op_node* op = std::exchange(op_, nullptr);
  op->owner->complete_here(op, std::move(error));
}

void op_completion::release_accesses() noexcept {
  COTENSOR_ASSERT(op_ != nullptr);
  op_->owner->release_accesses(op_);
}

void op_completion::reset() noexcept {
  if (op_node* op = std::exchange(op_, nullptr)) {
    op->owner->abandon(op);
  }
}

}  // namespace cotensor::detail
