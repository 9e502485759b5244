#pragma once

// Hooks on ops going through the engine, for tracing, profiler ranges and fault injection
// (Taskflow's ObserverInterface). While none is attached, the engine pays one load and one
// predictable branch per op; while any is, ops are issued one by one (no inline fast path).

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace cotensor::detail {

struct op_node;

/// Watches ops of every runtime in the process. Each call runs on the thread where the event
/// happens, for ops issued while the observer was attached (even after it is detached).
/// Only `on_start` may throw: the op then fails as if its work had thrown.
class op_observer {
public:
  op_observer() = default;
  op_observer(const op_observer&) = delete;
  op_observer& operator=(const op_observer&) = delete;
  virtual ~op_observer() = default;

  /// `op` is being issued on this thread; its accesses are not yet requested. `op.seq` names
  /// it in later events.
  virtual void on_push(const op_node& /*op*/) noexcept {}
  /// `op` has asked for its accesses (it may have run already: only its number is left).
  virtual void on_issued(std::uint64_t /*seq*/) noexcept {}
  /// Every access of op `seq` is granted; it goes to its backend.
  virtual void on_ready(std::uint64_t /*seq*/) noexcept {}
  /// `op`'s work is about to run on this backend thread.
  virtual void on_start(const op_node& /*op*/) {}
  /// `op`'s work has returned on this thread (an op that completes later is still in flight).
  virtual void on_stop(const op_node& /*op*/) noexcept {}
  /// `op` has ended (`failed`: with an error, its own or an input's), just before it retires.
  virtual void on_end(const op_node& /*op*/, bool /*failed*/) noexcept {}
};

/// The observers attached when an op was issued.
struct observer_list {
  std::vector<std::shared_ptr<op_observer>> items;
};

/// Attaches `o` to every runtime's ops issued from now on.
void attach_observer(std::shared_ptr<op_observer> o);
/// Detaches `o`: ops issued from now on no longer see it.
void detach_observer(const op_observer* o) noexcept;
/// The attached list, or null; only ever tested for null outside the registry's lock.
extern std::atomic<const observer_list*> attached_observers;
/// True while any observer is attached: one load.
inline bool observed() noexcept {
  return attached_observers.load(std::memory_order_acquire) != nullptr;
}
/// The observers attached now, or null.
std::shared_ptr<const observer_list> current_observers();

}  // namespace cotensor::detail
