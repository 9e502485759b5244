#pragma once

// The interface through which the engine completes a wait. Users never name it.

#include <exception>

namespace cotensor::detail {

/// Something that waits for the engine: a blocked thread, an Asio completion handler, a join.
///
/// The engine calls `complete` exactly once, with the exception of the awaited work (or null),
/// on whatever thread finished that work, possibly inside the call that started the wait. An
/// implementation must not run user code there: it hands off to the waiter's own executor.
class waiter {
public:
  virtual void complete(std::exception_ptr error) noexcept = 0;

protected:
  ~waiter() = default;
};

}  // namespace cotensor::detail
