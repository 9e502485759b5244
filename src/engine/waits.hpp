#pragma once

#include "cotensor/detail/waiter.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <span>

namespace cotensor::detail {

class storage;

/// A thread blocked until the engine completes it; spins briefly before sleeping.
class blocking_waiter final : public waiter {
public:
  /// `spin`: how long `wait` polls before it sleeps (engine_options::wait_spin).
  explicit blocking_waiter(std::chrono::microseconds spin = {}) noexcept : spin_(spin) {}
  void complete(std::exception_ptr error) noexcept override;
  /// Blocks until `complete`, then returns its error.
  std::exception_ptr wait();

private:
  std::chrono::microseconds spin_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::exception_ptr error_;
  std::atomic<bool> done_{false};  // set under mutex_, read lock-free while spinning
};

/// Joins `n` waits into one that completes `target` once all have, with the first error in
/// index order. Frees itself when done.
class join_waiter {
public:
  /// A join of `n` parts, whose waiters `part(0)` ... `part(n - 1)` must each be completed once.
  static join_waiter& make(std::size_t n, waiter& target);
  waiter& part(std::size_t i) noexcept;

private:
  struct part_waiter final : waiter {
    void complete(std::exception_ptr error) noexcept override;
    join_waiter* join = nullptr;
    std::exception_ptr error;
  };
  join_waiter(std::size_t n, waiter& target);
  void finish_one() noexcept;

  std::unique_ptr<part_waiter[]> parts_;
  std::size_t n_;
  std::atomic<std::size_t> remaining_;
  waiter& target_;
};

/// Completes `w` once every write to `buffer` issued so far has ended, with its error: for a
/// device buffer, once the device has done that write (its fence, see engine/backend.hpp).
void wait_for_buffer(storage& buffer, waiter& w);
/// Completes `w` once every write to each of `buffers` issued so far has ended, with the first
/// error among them in order (as `wait_for_buffer`).
void wait_for_buffers(std::span<storage* const> buffers, waiter& w);

/// Throws std::system_error (errc::wait_on_backend_thread) on a backend worker thread.
void check_may_block(const char* what);

}  // namespace cotensor::detail
