#pragma once

// The process's threads for blocking work (a file read that may wait on the disk for
// milliseconds), so that no backend worker or event loop ever blocks on it, and no part of
// cotensor starts threads of its own for it. One pool per process, of COTENSOR_IO_THREADS threads
// (default 2, at most 64), started by the first submission; it lives until the process ends.

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace cotensor::detail {

/// A task for the pool: move-only, run once.
class blocking_task {
public:
  virtual ~blocking_task() = default;
  /// Runs the work; must not throw (nothing could catch it: a task reports its own failure,
  /// as an op's completion does).
  virtual void run() noexcept = 0;
};

class blocking_pool {
public:
  /// The pool. Throws std::invalid_argument for a bad COTENSOR_IO_THREADS, std::system_error if
  /// no thread can start (the next call tries again). Never destroyed: a runtime destroyed at
  /// exit after it still waits for the work it queued.
  static blocking_pool& instance();

  /// Queues `task` to run on a pool thread; returns at once.
  void submit(std::unique_ptr<blocking_task> task);

  /// Queues the move-only callable `work` (`void() noexcept`), as `submit`.
  template <class F>
  void submit_work(F work) {
    struct task final : blocking_task {
      explicit task(F f) : f_(std::move(f)) {}
      void run() noexcept override { f_(); }
      F f_;
    };
    submit(std::make_unique<task>(std::move(work)));
  }

  /// While held (a count: every hold is released once), no queued work starts; for tests that
  /// need work to stay queued.
  void hold();
  void release();

  blocking_pool(const blocking_pool&) = delete;
  blocking_pool& operator=(const blocking_pool&) = delete;

private:
  blocking_pool();
  void run() noexcept;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<blocking_task>> queue_;
  unsigned held_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace cotensor::detail
