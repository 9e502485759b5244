#include "cotensor/detail/async_wait.hpp"

namespace cotensor::detail {

bool wait_registry::enlist(pending_wait& w) {
  std::lock_guard lock(mutex_);
  if (shut_) {
    return false;
  }
  w.prev_ = nullptr;
  w.next_ = head_;
  if (head_ != nullptr) {
    head_->prev_ = &w;
  }
  head_ = &w;
  w.listed_ = true;
  return true;
}

std::unique_lock<std::mutex> wait_registry::claim(pending_wait& w) {
  std::unique_lock lock(mutex_);
  if (!w.listed_) {
    return {};
  }
  (w.prev_ != nullptr ? w.prev_->next_ : head_) = w.next_;
  if (w.next_ != nullptr) {
    w.next_->prev_ = w.prev_;
  }
  w.listed_ = false;
  return lock;
}

void wait_registry::shut_down() noexcept {
  pending_wait* taken = nullptr;
  {
    std::lock_guard lock(mutex_);
    shut_ = true;
    taken = std::exchange(head_, nullptr);
    for (auto* w = taken; w != nullptr; w = w->next_) {
      w->listed_ = false;
      w->retain();
    }
  }
  // Outside the lock: destroying a handler runs user destructors (a coroutine frame's), which
  // may start or cancel other waits.
  while (taken != nullptr) {
    auto* next = taken->next_;
    taken->abandon();
    taken = next;
  }
}

std::shared_ptr<wait_registry> wait_registry::of(asio::execution_context& context) {
  return asio::use_service<wait_service>(context).registry();
}

}  // namespace cotensor::detail
