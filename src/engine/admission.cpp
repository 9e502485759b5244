#include "engine/admission.hpp"

#include "cotensor/asio.hpp"
#include "cotensor/detail/waiter.hpp"

#include <boost/asio/detail/thread_context.hpp>

namespace cotensor::detail {
namespace {

thread_local bool owes_room __attribute__((tls_model("initial-exec"))) = false;

// True on a thread inside an Asio event loop (`io_context::run`, a `thread_pool` thread):
// Asio's scheduler keeps its per-thread call stack there, and only there.
bool on_event_loop() noexcept {
  return asio::detail::thread_context::top_of_thread_call_stack() != nullptr;
}

}  // namespace

bool admission::take_owed() noexcept {
  const bool owed = owes_room;
  owes_room = false;
  return owed;
}

void admission::take(std::size_t now, std::size_t bytes) noexcept {
  bytes_.fetch_add(bytes, std::memory_order_seq_cst);
  std::size_t peak = peak_.load(std::memory_order_relaxed);
  while (now + 1 > peak && !peak_.compare_exchange_weak(peak, now + 1, std::memory_order_relaxed)) {
  }
}

void admission::acquire(std::size_t bytes) {
  // The two counters move separately, so two threads admitted at once may overshoot the byte
  // bound by one op: it is a bound on memory pinned ahead, not an exact budget.
  std::size_t now = ops_.load(std::memory_order_relaxed);
  for (;;) {
    if (has_room(now, bytes_.load(std::memory_order_relaxed), bytes)) {
      if (ops_.compare_exchange_weak(now, now + 1, std::memory_order_seq_cst)) {
        take(now, bytes);
        return;
      }
      continue;
    }
    waits_.fetch_add(1, std::memory_order_relaxed);
    if (on_event_loop()) {
      // Never block an event loop: admit now, and make the thread's next wait pay.
      deferred_.fetch_add(1, std::memory_order_relaxed);
      owes_room = true;
      now = ops_.fetch_add(1, std::memory_order_seq_cst);
      take(now, bytes);
      return;
    }
    wanted_.fetch_add(1, std::memory_order_seq_cst);
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] {
        return has_room(ops_.load(std::memory_order_seq_cst),
                        bytes_.load(std::memory_order_seq_cst), bytes);
      });
    }
    wanted_.fetch_sub(1, std::memory_order_seq_cst);
    now = ops_.load(std::memory_order_relaxed);
  }
}

void admission::release(std::size_t bytes) noexcept {
  bytes_.fetch_sub(bytes, std::memory_order_seq_cst);
  ops_.fetch_sub(1, std::memory_order_seq_cst);
  if (wanted_.load(std::memory_order_seq_cst) == 0) {
    return;
  }
  boost::container::small_vector<waiter*, 8> ready;
  {
    std::lock_guard lock(mutex_);
    const std::size_t now = ops_.load(std::memory_order_seq_cst);
    const std::size_t held = bytes_.load(std::memory_order_seq_cst);
    // Waiters in admit() wait for room for one more op (of no particular size).
    while (!waiters_.empty() && has_room(now + ready.size(), held, 0)) {
      ready.push_back(waiters_.front());
      waiters_.pop_front();
    }
    cv_.notify_all();
  }
  wanted_.fetch_sub(static_cast<std::int32_t>(ready.size()), std::memory_order_seq_cst);
  for (waiter* w : ready) {
    w->complete(nullptr);
  }
}

void admission::admit(waiter& w) {
  if (full()) {
    wanted_.fetch_add(1, std::memory_order_seq_cst);
    std::unique_lock lock(mutex_);
    if (full()) {
      waiters_.push_back(&w);
      return;
    }
    lock.unlock();
    wanted_.fetch_sub(1, std::memory_order_seq_cst);
  }
  w.complete(nullptr);
}

}  // namespace cotensor::detail
