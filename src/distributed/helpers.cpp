// Blocking waits that spin lend their thread to the communicator (engine/progress.hpp; see
// "Helpers" in comm_state.hpp): the thread's loop steps, taken by a waiter while the
// communication thread sleeps, and the hand-back when the last waiter leaves.

#include "distributed/comm_state.hpp"

#include <mutex>

namespace cotensor::dist::detail {

void comm_state::helper_arrives() noexcept {
  std::lock_guard lock(mu_);
  ++helpers_;
}

void comm_state::helper_leaves() noexcept {
  // What the helpers leave unfinished goes back to the thread, which may be asleep in its idle
  // wait (a helper took the request it was woken for). An idle communicator stays asleep.
  bool work_left = true;  // unless seen otherwise: the thread or another helper is in a step
  {
    std::unique_lock drive(drive_mu_, std::try_to_lock);
    if (drive.owns_lock()) {
      work_left = !idle();
    }
  }
  {
    std::lock_guard lock(mu_);
    --helpers_;
    handed_back_ = handed_back_ || (helpers_ == 0 && work_left);
  }
  if (work_left) {
    cv_.notify_one();
  }
}

void comm_state::help() noexcept {
  std::unique_lock drive(drive_mu_, std::try_to_lock);
  if (!drive.owns_lock()) {
    return;  // the thread, or another helper, is in a step
  }
  // mail_ read under drive_mu_: the thread sets exited_ (after mail_) before it lets go of
  // drive_mu_ for the last time, so a helper stepping after that sees mail_ and returns.
  if (mail_.load(std::memory_order_relaxed)) {
    std::lock_guard lock(mu_);
    if (stopping_ || exited_) {
      return;  // the thread drains alone
    }
    take_incoming();
  }
  if (step(true)) {
    helped_.fetch_add(1, std::memory_order_relaxed);
  }
  if (next_needs_thread()) {
    {
      std::lock_guard lock(mu_);
      wanted_ = true;
    }
    cv_.notify_one();
  }
}

}  // namespace cotensor::dist::detail
