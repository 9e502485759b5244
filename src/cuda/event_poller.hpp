#pragma once

// Ends GPU ops on the host: a thread that polls the events recorded after each op's work and
// invokes the op's completion when its event completes (TensorFlow's EventMgr, HPX/pika's CUDA
// event polling). Not cudaLaunchHostFunc: its callbacks may not call CUDA, run one at a time,
// and never run after a context error, so a waiter would hang.
//
// Plain C++, no CUDA: the events are opaque and queried through an `event_source` (CUDA's
// cudaEventQuery in the CUDA backend; a fake one in the tests, so that everything here is
// tested on machines without a GPU).

#include "cotensor/detail/op_completion.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>

namespace cotensor::detail::cuda {

/// What an event is, asked without blocking.
enum class event_state : std::uint8_t {
  pending,   ///< the work before it has not finished
  complete,  ///< the work before it has finished
  failed,    ///< the device failed (a sticky error): no event of it will complete
};

/// The events of one device, as the poller sees them.
///
/// Thread safety: `query` is called from the poller's thread only; `release` from it, or from
/// the thread calling `watch` when the poller refuses an event (shut down, or the device
/// failed), never for one event twice.
class event_source {
public:
  /// The state of `event`; for `failed`, sets `ec` to the device's error. Never blocks.
  virtual event_state query(void* event, std::error_code& ec) noexcept = 0;
  /// Gives `event` back to its pool: called once per watched event, after `query` said it was
  /// complete or failed, or when the device failed.
  virtual void release(void* event) noexcept = 0;
  /// Called first on the poller's thread: a CUDA source sets the thread's device there.
  virtual void bind_thread() noexcept {}
  /// Called on the poller's thread for an op watched with a `position` (its place on an
  /// in-order stream), just before the poller ends it: `ok` if its event completed, false if
  /// the device failed.
  virtual void passed(std::uint64_t /*position*/, bool /*ok*/) noexcept {}

protected:
  ~event_source() = default;
};

/// Host work the poller does when an event completes, before it ends the op: copy a staged
/// download into its host buffer, give a staging block back, see whether a collective's
/// library reported an error. `ok` is false when the device failed (the step then only frees
/// what it holds). Returns null, or an error for the op to fail with although its event
/// completed. Called exactly once per watched event.
struct after_event {
  std::exception_ptr (*fn)(void* arg, bool ok) noexcept = nullptr;
  void* arg = nullptr;
  std::exception_ptr operator()(bool ok) const noexcept {
    return fn != nullptr ? fn(arg, ok) : nullptr;
  }
};

/// One thread per device that ends ops when their events complete.
///
/// While events are pending it polls them all, spinning briefly (a GPU op of a few µs ends
/// before a sleep would), then yielding, then sleeping `backoff` between rounds; with nothing
/// pending it sleeps on a condition variable and costs nothing. An event that completes ends
/// its op successfully; a failed event puts the device in the failed state: that op and every
/// op pending or watched later fail at once with a `std::system_error` carrying the device's
/// error, so no waiter hangs.
///
/// Thread safety: `watch`, `failed` and `failure` may be called from any thread. Completions
/// are invoked on the poller's thread, which only hands the ops back to the engine.
class event_poller {
public:
  /// Polls `source`'s events; `device_name` ("cuda:0") names the device in errors.
  event_poller(event_source& source, std::string device_name);
  event_poller(const event_poller&) = delete;
  event_poller& operator=(const event_poller&) = delete;
  /// Drains (as `shutdown`), then joins the thread.
  ~event_poller();

  /// Ends `done` when `event` completes, after running `after`, or fails it when the device
  /// has failed (then at once, `event` released). After `shutdown`, fails it with
  /// `errc::shutting_down`. A nonzero `position` is reported to the source's `passed` before
  /// the op ends. Throws std::bad_alloc only when out of memory, with `done` then abandoned (its
  /// op fails) and `event` and `after` left to the caller.
  void watch(void* event, op_completion done, std::uint64_t position = 0, after_event after = {});
  /// The device's error as an exception ("cotensor: device cuda:0 failed: ..."); call once
  /// `failed()`.
  std::exception_ptr device_error() const noexcept;
  /// Waits until every watched event has completed or failed, then stops the thread; later
  /// `watch` calls fail their op. Idempotent, from any threads at once.
  void shutdown() noexcept;

  /// True once an event has failed.
  bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }
  /// The device's error once failed (empty before).
  std::error_code failure() const;

  /// Polls done so far, for tests and statistics.
  std::uint64_t polls() const noexcept { return polls_.load(std::memory_order_relaxed); }

private:
  struct watched {
    void* event;
    op_completion done;
    std::uint64_t position;
    after_event after;
  };

  void run() noexcept;
  // Queries every watched event once, ending those that completed or failed; true if any did.
  bool poll_once(std::deque<watched>& watching) noexcept;
  void fail_device(const std::error_code& ec) noexcept;

  event_source& source_;
  const std::string device_name_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<watched> incoming_;  // handed over by `watch`; guarded by mutex_
  bool stopping_ = false;         // guarded by mutex_
  std::error_code failure_;       // set once, under mutex_, before failed_
  std::atomic<bool> failed_{false};
  std::atomic<bool> has_incoming_{false};  // incoming_ is not empty: checked while polling
  std::atomic<std::uint64_t> polls_{0};
  std::mutex join_mutex_;  // serialises shutdown's join
  std::thread thread_;
};

}  // namespace cotensor::detail::cuda
