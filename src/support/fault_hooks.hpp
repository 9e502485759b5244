#pragma once

// Where tests inject faults into the allocator: an injection point that knows nothing of what
// arms it. The fault injector (engine/faults.hpp) sets `armed` and installs `on_allocate`; the
// host allocator calls the hook only while `armed` is set, so that otherwise an allocation pays
// one relaxed load and a branch the CPU predicts.

#include <atomic>

namespace cotensor::detail::fault_hooks {

/// True while any fault is armed (and not yet spent): then the hooks below are called.
extern std::atomic<bool> armed;

inline bool enabled() noexcept { return armed.load(std::memory_order_relaxed); }

/// Called by `allocate_bytes` while `enabled()`: counts an allocation and throws std::bad_alloc
/// if it is the one to fail. Installed by the fault injector before it first arms a fault; null
/// until then.
extern std::atomic<void (*)()> on_allocate;

/// Calls the installed `on_allocate`, if any.
inline void allocation() {
  if (auto* hook = on_allocate.load(std::memory_order_acquire)) {
    hook();
  }
}

}  // namespace cotensor::detail::fault_hooks
