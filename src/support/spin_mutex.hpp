#pragma once

#include <atomic>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace cotensor::detail {

/// Tells the CPU this thread is spinning (x86 `pause`): cheaper for the sibling hyperthread and
/// for the lock's owner when the wait ends.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

/// A lock for critical sections of a few dozen instructions that never block inside (the
/// buffers' read/write queues, the generation tracker). Uncontended it is one atomic exchange
/// and one release store, where a pthread mutex is two calls and two atomic read-modify-writes;
/// contended it spins a little, then yields, so a holder preempted on an oversubscribed machine
/// is not starved of its core. Meets Lockable: use it with std::lock_guard/unique_lock.
class spin_mutex {
public:
  void lock() noexcept {
    int spins = 0;
    while (locked_.exchange(true, std::memory_order_acquire)) {
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins < 128) {
          cpu_relax();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) &&
           !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

private:
  std::atomic<bool> locked_{false};
};

}  // namespace cotensor::detail
