#include "engine/faults.hpp"

#include <mutex>
#include <new>
#include <vector>

namespace cotensor::detail::faults {

std::atomic<bool> armed{false};

namespace {

// One armed fault: fires on the `at`-th event (op push or allocation) counted from the start.
struct target {
  std::uint64_t at;
  op_fault what;  // for allocations: fail
};

struct state {
  std::mutex mutex;
  std::uint64_t pushes = 0;
  std::uint64_t allocations = 0;
  std::vector<target> ops;
  std::vector<target> allocs;
  std::chrono::microseconds delay{0};

  void update_armed() { armed.store(!ops.empty() || !allocs.empty(), std::memory_order_relaxed); }
};

state& global() {
  static state s;
  return s;
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

void delay_op(std::uint64_t nth, std::chrono::microseconds delay) {
  auto& s = global();
  std::lock_guard lock(s.mutex);
  s.ops.push_back({s.pushes + nth, op_fault::delay});
  s.delay = delay;
  s.update_armed();
}

void reset() noexcept {
  auto& s = global();
  std::lock_guard lock(s.mutex);
  s.ops.clear();
  s.allocs.clear();
  s.update_armed();
}

op_fault on_push() noexcept {
  auto& s = global();
  std::lock_guard lock(s.mutex);
  const op_fault what = take(s.ops, ++s.pushes);
  s.update_armed();
  return what;
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

std::chrono::microseconds completion_delay() noexcept {
  auto& s = global();
  std::lock_guard lock(s.mutex);
  return s.delay;
}

}  // namespace cotensor::detail::faults
