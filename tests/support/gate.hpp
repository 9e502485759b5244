#pragma once

// Test support: a gate that holds ops in flight until the test opens it.

#include <atomic>
#include <future>

namespace cotensor::test {

/// Holds the kernels that wait on `future()` (ops made with `gated`, or a map or async op that
/// waits on it) until `open()`: lets a test keep an op in flight while it checks what depends on
/// it. Opens itself when destroyed, so a failed check never leaves a worker blocked: declare it
/// after the runtime, which waits for every op when it is destroyed. `open()` may be called more
/// than once, and from any thread.
class gate {
public:
  gate() = default;
  gate(const gate&) = delete;
  gate& operator=(const gate&) = delete;
  ~gate() { open(); }

  /// What a kernel waits on: ready once the gate is open.
  std::shared_future<void> future() const { return future_; }

  /// Lets the kernels waiting on the gate go on; the first call opens it, later ones do nothing.
  void open() {
    if (!opened_.exchange(true)) {
      promise_.set_value();
    }
  }

private:
  std::promise<void> promise_;
  std::shared_future<void> future_ = promise_.get_future().share();
  std::atomic<bool> opened_{false};
};

}  // namespace cotensor::test
