#pragma once

#include "support/spin_mutex.hpp"

#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

namespace cotensor::detail {

class waiter;

/// Counts the ops of a set (a runtime, a scope) so that a wait covers exactly the ops issued
/// before it, even while other threads keep issuing.
///
/// Ops join the open generation. A wait closes it (when it has ops) and completes once every
/// generation up to it has no op left, so later ops never delay it.
class tracker : public std::enable_shared_from_this<tracker> {
public:
  explicit tracker(bool keeps_errors) : keeps_errors_(keeps_errors) {}

  /// A new op joins; returns its generation, to pass to `leave`.
  std::uint64_t enter();
  /// An op of generation `g` ended, with `error` (null if none).
  void leave(std::uint64_t g, const std::exception_ptr& error);
  /// Completes `w` once every op that entered before the call has left (maybe at once), with
  /// the first error recorded if this tracker keeps errors, else null.
  void wait(waiter& w);
  /// The number of ops that entered and have not left.
  std::uint64_t pending() const;

private:
  mutable spin_mutex mutex_;
  std::uint64_t base_ = 0;               // oldest generation with ops left (or the open one)
  std::uint64_t open_ = 0;               // generation new ops join
  std::deque<std::uint64_t> counts_{0};  // counts_[g - base_]: ops of generation g left
  std::vector<std::pair<std::uint64_t, waiter*>> waiters_;  // completes when base_ > first
  std::exception_ptr first_error_;
  bool keeps_errors_;
};

}  // namespace cotensor::detail
