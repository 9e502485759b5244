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
#include <cstddef>
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
/// Events watched with the same `stream` were recorded in that order on one in-order stream,
/// so they complete in that order: only the oldest pending event of each stream is queried
/// (one `query` per stream and round, however deep the stream's queue). Events watched with no
/// stream are queried each on its own.
///
/// While events are pending it polls by this policy, measured from the last progress (an event
/// watched or ended); `bench/engine/poller.cpp` measures what it costs (docs/performance.md):
/// - up to `spin_for` (20 µs): back to back, `pause` between rounds: a short GPU op ends
///   within it, and its op ends within a round of completing;
/// - up to `yield_for` (100 µs): `yield` between rounds, giving the core to the launcher or an
///   io_context thread on an oversubscribed machine;
/// - up to `short_sleep_for` (10 ms): sleeping `short_sleep` (10 µs) between rounds; the
///   thread's timer slack is 1 µs (`PR_SET_TIMERSLACK`), not Linux's default 50 µs, so a sleep
///   lasts about what it asks;
/// - after that: sleeping `long_sleep` (100 µs), at most 1 % of the wait so far.
/// With nothing pending it sleeps on a condition variable and costs nothing. An event that
/// completes ends its op successfully; a failed event puts the device in the failed state: that
/// op and every op pending or watched later fail at once with a `std::system_error` carrying the
/// device's error, so no waiter hangs.
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
  /// the op ends. A non-null `stream` names the in-order stream `event` was recorded on: the
  /// events of one stream must be watched in the order they were recorded (the caller holds a
  /// lock across both), and only the oldest pending one is queried. Throws std::bad_alloc only
  /// when out of memory, with `done` then abandoned (its op fails) and `event` and `after` left
  /// to the caller.
  void watch(void* event,
             op_completion done,
             std::uint64_t position = 0,
             after_event after = {},
             const void* stream = nullptr);
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
    const void* stream;
  };
  // The events of one stream, oldest first; or, for stream null, the unordered events.
  struct lane {
    const void* stream;
    std::deque<watched> events;
  };

  void run() noexcept;
  // Queries the oldest event of each stream's lane (and every unordered one) once, ending those
  // that completed or failed (and, in a stream, the ones after them that completed too). Returns
  // how many ended.
  std::size_t poll_once(std::deque<lane>& lanes) noexcept;
  // Ends `w` (its event completed, or failed when `ok` is false and the device failed).
  void end(watched& w, bool ok) noexcept;
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
