#include "engine/tracker.hpp"

#include "cotensor/detail/waiter.hpp"

#include <algorithm>
#include <numeric>

namespace cotensor::detail {

std::uint64_t tracker::enter() {
  std::lock_guard lock(mutex_);
  ++counts_.back();
  return open_;
}

void tracker::leave(std::uint64_t g, const std::exception_ptr& error) {
  std::vector<std::pair<std::uint64_t, waiter*>> done;
  std::exception_ptr result;
  {
    std::lock_guard lock(mutex_);
    if (error && keeps_errors_ && !first_error_) {
      first_error_ = error;
    }
    --counts_[g - base_];
    while (base_ < open_ && counts_.front() == 0) {
      counts_.pop_front();
      ++base_;
    }
    if (!waiters_.empty()) {
      // std::partition, not std::ranges: clang 14 (the fuzzer's compiler) cannot compile the
      // std::ranges::subrange of libstdc++ 12.
      auto finished = std::partition(waiters_.begin(), waiters_.end(),
                                     [this](const auto& entry) { return entry.first >= base_; });
      done.assign(finished, waiters_.end());
      waiters_.erase(finished, waiters_.end());
      result = first_error_;
    }
  }
  for (auto& entry : done) {
    entry.second->complete(result);
  }
}

void tracker::wait(waiter& w) {
  std::exception_ptr result;
  {
    std::lock_guard lock(mutex_);
    if (base_ == open_ && counts_.back() == 0) {
      result = first_error_;
    } else {
      // Close the open generation (when it has ops), so that ops entering from now on belong
      // to the next one and cannot delay this wait.
      std::uint64_t target = open_;
      if (counts_.back() != 0) {
        ++open_;
        counts_.push_back(0);
      } else {
        target = open_ - 1;
      }
      waiters_.emplace_back(target, &w);
      return;
    }
  }
  w.complete(std::move(result));
}

std::uint64_t tracker::pending() const {
  std::lock_guard lock(mutex_);
  return std::accumulate(counts_.begin(), counts_.end(), std::uint64_t{0});
}

}  // namespace cotensor::detail
