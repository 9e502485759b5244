#include "engine/var.hpp"

#include "cotensor/detail/waiter.hpp"
#include "cotensor/error.hpp"

#include "engine/engine.hpp"
#include "support/assert.hpp"

#include <boost/container/small_vector.hpp>

namespace cotensor::detail {

// What a lock-holding section decided to start; started after the lock is released, since
// starting an op may run it inline and a waiter may post.
struct var::grants {
  boost::container::small_vector<op_node*, 4> ops;
  boost::container::small_vector<std::pair<waiter*, std::exception_ptr>, 2> waits;

  void run() {
    for (auto& [w, e] : waits) {
      w->complete(std::move(e));
    }
    for (op_node* op : ops) {
      op->dependency_met();
    }
  }
};

var::~var() {
  // Every queued access holds the buffer alive, so a dying var has an empty FIFO.
  COTENSOR_ASSERT(head_ == nullptr);
}

void var::enqueue(pending_access* entry) {
  entry->next = nullptr;
  if (tail_ != nullptr) {
    tail_->next = entry;
  } else {
    head_ = entry;
  }
  tail_ = entry;
}

void var::grant_front(grants& g) {
  while (head_ != nullptr && !writing_) {
    pending_access* next = head_;
    if (next->is_write && readers_ != 0) {
      return;
    }
    head_ = next->next;
    if (head_ == nullptr) {
      tail_ = nullptr;
    }
    if (next->is_write) {
      writing_ = true;
      g.ops.push_back(next->op);
    } else if (next->op != nullptr) {
      ++readers_;
      g.ops.push_back(next->op);
    } else {
      g.waits.emplace_back(next->w, error);
      delete next;  // a wait's entry is its own
    }
  }
}

template <bool Write>
bool var::start_now() noexcept {
  if (!(Write ? may_write() : may_read())) {
    return false;
  }
  if constexpr (Write) {
    writing_ = true;
  } else {
    ++readers_;
  }
  return true;
}

template <bool Write>
void var::start_or_enqueue(pending_access* entry) {
  {
    std::lock_guard lock(mutex_);
    if (!start_now<Write>()) {
      entry->is_write = Write;
      enqueue(entry);
      return;
    }
  }
  entry->op->dependency_met();
}

void var::read(pending_access* entry) { start_or_enqueue<false>(entry); }

void var::write(pending_access* entry) { start_or_enqueue<true>(entry); }

bool var::try_read() noexcept {
  std::lock_guard lock(mutex_);
  return start_now<false>();
}

bool var::try_write() noexcept {
  std::lock_guard lock(mutex_);
  return start_now<true>();
}

void var::wait_read(waiter& w) {
  std::exception_ptr captured;
  {
    std::lock_guard lock(mutex_);
    if (!may_read()) {
      enqueue(new pending_access{nullptr, nullptr, &w, false});
      return;
    }
    captured = error;
  }
  w.complete(std::move(captured));
}

void var::end_read() {
  std::unique_lock lock(mutex_);
  --readers_;
  if (head_ != nullptr) {  // rarely: without waiters the end builds no `grants`
    start_waiting(lock);
  }
}

void var::end_write() {
  std::unique_lock lock(mutex_);
  writing_ = false;
  if (head_ != nullptr) {
    start_waiting(lock);
  }
}

void var::start_waiting(std::unique_lock<spin_mutex>& lock) {
  grants g;
  grant_front(g);
  lock.unlock();
  g.run();
}

}  // namespace cotensor::detail
