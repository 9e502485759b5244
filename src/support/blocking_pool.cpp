#include "support/blocking_pool.hpp"

#include "support/environment.hpp"

#include <pthread.h>
#include <utility>

namespace cotensor::detail {

blocking_pool& blocking_pool::instance() {
  static blocking_pool* const pool = new blocking_pool;
  return *pool;
}

blocking_pool::blocking_pool() {
  const auto n = static_cast<unsigned>(
      whole_number_from_environment("COTENSOR_IO_THREADS", 1, 64).value_or(2));
  threads_.reserve(n);
  try {
    for (unsigned i = 0; i < n; ++i) {
      threads_.emplace_back([this] {
        ::pthread_setname_np(::pthread_self(), "cotensor-io");
        run();
      });
    }
  } catch (...) {
    if (threads_.empty()) {
      throw;
    }
    // Fewer threads than asked: enough to make progress.
  }
}

void blocking_pool::submit(std::unique_ptr<blocking_task> task) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void blocking_pool::hold() {
  std::lock_guard lock(mu_);
  ++held_;
}

void blocking_pool::release() {
  {
    std::lock_guard lock(mu_);
    --held_;
  }
  cv_.notify_all();
}

void blocking_pool::run() noexcept {
  for (;;) {
    std::unique_ptr<blocking_task> task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return !queue_.empty() && held_ == 0; });
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task->run();
  }
}

}  // namespace cotensor::detail
