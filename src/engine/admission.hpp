#pragma once

#include <boost/container/small_vector.hpp>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>

namespace cotensor::detail {

class waiter;

/// Bounds the ops in flight and the bytes they write (engine_options::max_in_flight and
/// max_in_flight_bytes): the chapter's "don't overfill the task queue".
///
/// A thread issuing an op waits for room, blocked, except a thread that runs an Asio event
/// loop, which is never blocked: its op is admitted at once, over the bound, and the thread
/// owes the wait. Its next cotensor async wait (`co_await t.ready()`, `when_all`, a scope's
/// wait, `admission()`) then completes only once there is room as well (see `owed`), so a
/// coroutine that issues and awaits is paced without stalling its event loop.
class admission {
public:
  admission(std::size_t max_ops, std::size_t max_bytes) noexcept
      : max_ops_(max_ops), max_bytes_(max_bytes) {}

  /// Takes room for an op writing `bytes`: at once, or after a blocking wait, or over the
  /// bound on an Asio event loop's thread (which then owes a wait).
  void acquire(std::size_t bytes);
  /// Gives back the room of an op writing `bytes` that has ended.
  void release(std::size_t bytes) noexcept;
  /// Completes `w` (with no error) once there is room for another op; maybe at once.
  void admit(waiter& w);

  /// True, and cleared, if the calling thread was admitted over the bound since it last asked.
  static bool take_owed() noexcept;

  std::size_t in_flight() const noexcept { return ops_.load(std::memory_order_relaxed); }
  std::size_t peak() const noexcept { return peak_.load(std::memory_order_relaxed); }
  /// Times an issuing thread found no room (blocked, or admitted over the bound).
  std::uint64_t waits() const noexcept { return waits_.load(std::memory_order_relaxed); }
  /// Times an Asio event loop's thread was admitted over the bound instead of blocking.
  std::uint64_t deferred() const noexcept { return deferred_.load(std::memory_order_relaxed); }

private:
  // Whether an op writing `bytes` fits beside `ops` ops writing `held` bytes.
  bool has_room(std::size_t ops, std::size_t held, std::size_t bytes) const noexcept {
    // An op larger than the byte bound still runs: alone, once nothing else is in flight.
    return (max_ops_ == 0 || ops < max_ops_) &&
           (max_bytes_ == 0 || ops == 0 || held + bytes <= max_bytes_);
  }
  bool full() const noexcept {
    return !has_room(ops_.load(std::memory_order_seq_cst), bytes_.load(std::memory_order_seq_cst),
                     0);
  }
  void take(std::size_t now, std::size_t bytes) noexcept;

  const std::size_t max_ops_;
  const std::size_t max_bytes_;
  std::atomic<std::size_t> ops_{0};
  std::atomic<std::size_t> bytes_{0};
  std::atomic<std::size_t> peak_{0};
  std::atomic<std::uint64_t> waits_{0};
  std::atomic<std::uint64_t> deferred_{0};

  // Threads blocked in acquire and async waiters, woken as ops end.
  std::atomic<std::int32_t> wanted_{0};
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<waiter*> waiters_;
};

}  // namespace cotensor::detail
