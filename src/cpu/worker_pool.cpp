#include "cpu/worker_pool.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>

namespace cotensor::detail {
namespace {

// The pool whose thread this is, or null.
thread_local worker_pool* current_pool __attribute__((tls_model("initial-exec"))) = nullptr;

// One parallel_for in progress. Shared with the helper tasks, which may start after the loop
// has ended: they then find no index left and never touch `body`.
struct loop_state {
  std::int64_t n = 0;
  const std::function<void(std::int64_t)>* body = nullptr;
  std::atomic<std::int64_t> next{0};  // the next index to hand out
  std::mutex mutex;
  std::condition_variable cv;
  std::int64_t done = 0;  // indices whose call has returned; guarded by mutex
  std::exception_ptr error;

  // Runs indices until none is left. Each index is claimed by exactly one thread.
  void run() {
    for (;;) {
      const std::int64_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= n) {
        return;
      }
      std::exception_ptr failed;
      try {
        (*body)(i);
      } catch (...) {
        failed = std::current_exception();
      }
      std::lock_guard lock(mutex);
      if (failed && !error) {
        error = std::move(failed);
      }
      if (++done == n) {
        cv.notify_all();
      }
    }
  }
};

}  // namespace

void worker_pool::initialize(int threads, int /*reserved_for_callers*/) {
  threads = std::max(threads, 1);
  size_ = threads;
  threads_.reserve(static_cast<std::size_t>(threads));
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this] { work(); });
  }
}

void worker_pool::terminate() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) {
    t.join();
  }
  threads_.clear();
}

void worker_pool::push(std::function<void()> task, bool urgent) {
  // Notified under the lock: the pushing thread may belong to another pool (an op of another
  // runtime made this one's op ready), and once the task is queued it may run, its runtime end
  // and this pool be destroyed. The task is taken under this lock, so the notify comes before
  // it runs, and before terminate. (ThreadSanitizer saw the notify race the destructor.)
  std::lock_guard lock(mutex_);
  if (urgent) {
    tasks_.push_front(std::move(task));
  } else {
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void worker_pool::work() {
  current_pool = this;
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) {
        return;  // stopping, and nothing left to run
      }
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();  // engine tasks catch their own exceptions
  }
}

int worker_pool::concurrency() noexcept {
  return current_pool == nullptr ? 1 : current_pool->size_;
}

void worker_pool::parallel_for(std::int64_t n, const std::function<void(std::int64_t)>& body) {
  if (n <= 0) {
    return;
  }
  worker_pool* pool = current_pool;
  if (n == 1 || pool == nullptr || pool->size_ < 2) {
    for (std::int64_t i = 0; i < n; ++i) {
      body(i);
    }
    return;
  }
  auto state = std::make_shared<loop_state>();
  state->n = n;
  state->body = &body;
  // Helpers go to the front of the queue, like oneTBB's nested tasks, ahead of queued ops.
  const auto helpers = std::min<std::int64_t>(n - 1, pool->size_ - 1);
  for (std::int64_t h = 0; h < helpers; ++h) {
    pool->push([state] { state->run(); }, true);
  }
  state->run();
  std::unique_lock lock(state->mutex);
  state->cv.wait(lock, [&] { return state->done == n; });
  if (state->error) {
    std::rethrow_exception(state->error);
  }
}

}  // namespace cotensor::detail
