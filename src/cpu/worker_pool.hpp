#pragma once

// The std::thread backend: a plain worker pool that stands in for the oneTBB arena in builds
// where COTENSOR_STD_THREADS is set (the TSan build). ThreadSanitizer cannot see the
// happens-before edges inside Debian's uninstrumented libtbb, so it reports races on every
// hand-off through a task_arena; this pool synchronises with a mutex and a condition variable
// that TSan understands, so a report in that build is a real race in cotensor.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace cotensor::detail {

/// A FIFO of tasks run by a fixed set of threads, with the subset of `tbb::task_arena`'s
/// interface the engine uses (`initialize`, `enqueue`, `execute`, `terminate`).
class worker_pool {
public:
  worker_pool() = default;
  worker_pool(const worker_pool&) = delete;
  worker_pool& operator=(const worker_pool&) = delete;
  /// Runs the tasks still queued, then joins the threads.
  ~worker_pool() { terminate(); }

  /// Starts `threads` threads (at least one). `reserved_for_callers` is ignored: callers never
  /// join the pool.
  void initialize(int threads, int reserved_for_callers = 0);
  /// Queues `f` to run on a pool thread; returns at once.
  template <class F>
  void enqueue(F&& f) {
    push(std::function<void()>(std::forward<F>(f)), false);
  }
  /// Runs `f` on the calling thread (the arena's `execute` may too) and returns its result.
  template <class F>
  decltype(auto) execute(F&& f) {
    return std::forward<F>(f)();
  }
  /// Runs the tasks still queued, then joins the threads. Idempotent.
  void terminate();

  /// Calls `body(i)` for every i in `[0, n)` and returns when all have returned; rethrows the
  /// first exception a call threw (the others still run). On a pool thread, idle pool threads
  /// help; elsewhere it runs serially. Never deadlocks: the caller runs every index nobody
  /// else has taken, and never waits for a task that has not started.
  static void parallel_for(std::int64_t n, const std::function<void(std::int64_t)>& body);
  /// The number of threads of the pool the calling thread belongs to, or 1.
  static int concurrency() noexcept;

private:
  void push(std::function<void()> task, bool urgent);
  void work();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
  int size_ = 0;  // threads started; set before any starts, read by tasks on them
};

}  // namespace cotensor::detail
