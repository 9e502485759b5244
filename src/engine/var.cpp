#include "engine/var.hpp"

#include "cotensor/detail/engine_fwd.hpp"

#include "engine/engine.hpp"

#include <boost/container/small_vector.hpp>

namespace cotensor::detail {

// What a lock-holding section decided to start; started after the lock is released, since
// starting an op may run it inline and a waiter may post.
struct var::grants {
  boost::container::small_vector<op_node*, 4> ops;
  boost::container::small_vector<std::pair<waiter*, std::exception_ptr>, 2> waits;

  void run() {
    for (auto& [w, error] : waits) {
      w->complete(std::move(error));
    }
    for (op_node* op : ops) {
      op->dependency_met();
    }
  }
};

void var::grant_front(grants& g) {
  while (!queue_.empty() && !writing_) {
    pending& next = queue_.front();
    if (next.is_write) {
      if (readers_ != 0) {
        return;
      }
      writing_ = true;
      g.ops.push_back(next.op);
    } else if (next.op != nullptr) {
      ++readers_;
      g.ops.push_back(next.op);
    } else {
      g.waits.emplace_back(next.w, error);
    }
    queue_.pop_front();
  }
}

void var::read(op_node* op) {
  {
    std::lock_guard lock(mutex_);
    if (writing_ || !queue_.empty()) {
      queue_.push_back({op, nullptr, false});
      return;
    }
    ++readers_;
  }
  op->dependency_met();
}

void var::write(op_node* op) {
  {
    std::lock_guard lock(mutex_);
    if (writing_ || readers_ != 0 || !queue_.empty()) {
      queue_.push_back({op, nullptr, true});
      return;
    }
    writing_ = true;
  }
  op->dependency_met();
}

void var::wait_read(waiter& w) {
  std::exception_ptr captured;
  {
    std::lock_guard lock(mutex_);
    if (writing_ || !queue_.empty()) {
      queue_.push_back({nullptr, &w, false});
      return;
    }
    captured = error;
  }
  w.complete(std::move(captured));
}

void var::end_read() {
  grants g;
  {
    std::lock_guard lock(mutex_);
    --readers_;
    grant_front(g);
  }
  g.run();
}

void var::end_write() {
  grants g;
  {
    std::lock_guard lock(mutex_);
    writing_ = false;
    grant_front(g);
  }
  g.run();
}

}  // namespace cotensor::detail
