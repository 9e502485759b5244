#include "engine/faults.hpp"

#include "engine/observer.hpp"
#include "engine/op_node.hpp"
#include "support/fault_hooks.hpp"

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

namespace cotensor::detail::faults {

namespace {

enum class op_fault : std::uint8_t { none, fail, delay, delay_dispatch };

// One armed fault: fires on the `at`-th event (op push or allocation) counted from the start.
struct target {
  std::uint64_t at;
  op_fault what;  // for allocations: fail
};

struct state {
  std::mutex mutex;
  std::uint64_t pushes = 0;
  std::uint64_t allocations = 0;
  std::uint64_t cuda_calls = 0;
  std::vector<target> ops;
  std::vector<target> allocs;
  std::vector<target> cuda;
  std::chrono::microseconds delay{0};
  std::chrono::microseconds dispatch_delay{0};
  bool dispatch_released = false;         // release_delayed_dispatches ends the sleeps at once
  std::condition_variable dispatch_wake;  // ... and wakes the one in progress
  std::vector<std::uint64_t> failing;     // observer numbers of pushed ops to fail
  std::vector<std::uint64_t> delayed;     // ... to delay
  std::vector<std::uint64_t> dispatched;  // ... and whose hand-off to their backend to delay

  // While anything is armed, the observer counts pushes (and keeps the inline path off, so
  // that every op is pushed and allocates its node).
  void update_armed();
};

state& global() {
  static state s;
  return s;
}

// Removes `seq` from `list`; true if it was there.
bool take_seq(std::vector<std::uint64_t>& list, std::uint64_t seq) {
  auto it = std::ranges::find(list, seq);
  if (it == list.end()) {
    return false;
  }
  list.erase(it);
  return true;
}

class fault_observer final : public op_observer {
public:
  void on_push(const op_node& op) noexcept override;

  void on_start(const op_node& op) override {
    auto& s = global();
    std::unique_lock lock(s.mutex);
    if (take_seq(s.failing, op.seq)) {
      lock.unlock();
      throw injected_fault(std::string("cotensor: injected fault in op ") + op.name);
    }
  }

  void on_end(const op_node& op, bool /*failed*/) noexcept override {
    auto& s = global();
    std::unique_lock lock(s.mutex);
    if (take_seq(s.delayed, op.seq)) {
      const auto delay = s.delay;
      lock.unlock();
      std::this_thread::sleep_for(delay);
    }
  }
};

std::shared_ptr<fault_observer> observer() {
  static auto* const o = new std::shared_ptr<fault_observer>(std::make_shared<fault_observer>());
  return *o;
}

void state::update_armed() {
  const bool now = !ops.empty() || !allocs.empty() || !cuda.empty() || !dispatched.empty();
  if (now == fault_hooks::enabled()) {
    return;
  }
  if (now) {
    fault_hooks::on_allocate.store(&on_allocate, std::memory_order_release);
    attach_observer(observer());
  } else {
    detach_observer(observer().get());
  }
  fault_hooks::armed.store(now, std::memory_order_relaxed);
}

// Removes and returns the fault due at `count`, or none.
op_fault take(std::vector<target>& targets, std::uint64_t count) {
  for (auto it = targets.begin(); it != targets.end(); ++it) {
    if (it->at == count) {
      const op_fault what = it->what;
      targets.erase(it);
      return what;
    }
  }
  return op_fault::none;
}

void fault_observer::on_push(const op_node& op) noexcept {
  auto& s = global();
  std::lock_guard lock(s.mutex);
  try {
    switch (take(s.ops, ++s.pushes)) {
    case op_fault::fail:
      s.failing.push_back(op.seq);
      break;
    case op_fault::delay:
      s.delayed.push_back(op.seq);
      break;
    case op_fault::delay_dispatch:
      s.dispatched.push_back(op.seq);
      break;
    case op_fault::none:
      break;
    }
    s.update_armed();
  } catch (...) {
    // Out of memory in a test's fault injection: the fault is lost.
  }
}

}  // namespace

void fail_op(std::uint64_t nth) {
  auto& s = global();
  std::lock_guard lock(s.mutex);
  s.ops.push_back({s.pushes + nth, op_fault::fail});
  s.update_armed();
}

void fail_allocation(std::uint64_t nth) {
  auto& s = global();
  std::lock_guard lock(s.mutex);
  s.allocs.push_back({s.allocations + nth, op_fault::fail});
  s.update_armed();
}

void fail_cuda_call(std::uint64_t nth) {
  auto& s = global();
  std::lock_guard lock(s.mutex);
  s.cuda.push_back({s.cuda_calls + nth, op_fault::fail});
  s.update_armed();
}

void delay_op(std::uint64_t nth, std::chrono::microseconds delay) {
  auto& s = global();
  std::lock_guard lock(s.mutex);
  s.ops.push_back({s.pushes + nth, op_fault::delay});
  s.delay = delay;
  s.update_armed();
}

void delay_dispatch(std::uint64_t nth, std::chrono::microseconds delay) {
  auto& s = global();
  std::lock_guard lock(s.mutex);
  s.ops.push_back({s.pushes + nth, op_fault::delay_dispatch});
  s.dispatch_delay = delay;
  s.dispatch_released = false;
  s.update_armed();
}

void release_delayed_dispatches() noexcept {
  auto& s = global();
  {
    std::lock_guard lock(s.mutex);
    s.dispatch_released = true;
  }
  s.dispatch_wake.notify_all();
}

namespace {
std::atomic<std::uint64_t> dispatch_delays_ended{0};
}  // namespace

std::uint64_t delayed_dispatches_ended() noexcept {
  return dispatch_delays_ended.load(std::memory_order_acquire);
}

bool delays_dispatch(const op_node& op) noexcept {
  auto& s = global();
  std::lock_guard lock(s.mutex);
  if (!take_seq(s.dispatched, op.seq)) {
    return false;
  }
  try {
    s.update_armed();
  } catch (...) {
    // Out of memory detaching the observer: it stays attached until reset.
  }
  return true;
}

void end_delayed_dispatch() noexcept {
  auto& s = global();
  {
    std::unique_lock lock(s.mutex);
    s.dispatch_wake.wait_for(lock, s.dispatch_delay, [&s] { return s.dispatch_released; });
  }
  dispatch_delays_ended.fetch_add(1, std::memory_order_release);
}

void reset() noexcept {
  auto& s = global();
  std::lock_guard lock(s.mutex);
  s.ops.clear();
  s.allocs.clear();
  s.cuda.clear();
  s.dispatched.clear();
  s.dispatch_released = false;
  s.update_armed();
}

void on_allocate() {
  auto& s = global();
  std::unique_lock lock(s.mutex);
  const op_fault what = take(s.allocs, ++s.allocations);
  s.update_armed();
  if (what == op_fault::fail) {
    lock.unlock();
    throw std::bad_alloc();
  }
}

bool on_cuda_call() noexcept {
  auto& s = global();
  std::lock_guard lock(s.mutex);
  const op_fault what = take(s.cuda, ++s.cuda_calls);
  s.update_armed();
  return what == op_fault::fail;
}

}  // namespace cotensor::detail::faults
