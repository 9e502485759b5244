#pragma once

// The handle that ends an op that completes later. Users meet it as `async_op_done`.

#include <exception>
#include <utility>

namespace cotensor::detail {

struct op_node;

/// Ends one op in flight, once, from any thread.
///
/// Invoking it hands the op back to the engine, which releases its buffers, starts its
/// dependents and completes its waiters on a backend thread, never on the invoking one.
/// Destroying it uninvoked fails the op with `errc::op_abandoned`. Move-only; a moved-from or
/// invoked handle is empty. Thread safety: one handle is used by one thread at a time.
class op_completion {
public:
  op_completion() noexcept = default;
  explicit op_completion(op_node* op) noexcept : op_(op) {}
  op_completion(op_completion&& other) noexcept : op_(std::exchange(other.op_, nullptr)) {}
  op_completion& operator=(op_completion&& other) noexcept {
    if (this != &other) {
      reset();
      op_ = std::exchange(other.op_, nullptr);
    }
    return *this;
  }
  op_completion(const op_completion&) = delete;
  op_completion& operator=(const op_completion&) = delete;
  ~op_completion() { reset(); }

  /// Ends the op: successfully when `error` is null, else failed with `error` as a kernel's
  /// exception. Precondition: not empty (checked: aborts).
  void operator()(std::exception_ptr error = nullptr) noexcept;
  /// Ends the op as `operator()`, but does the engine's part (releasing its buffers,
  /// dispatching its dependents, completing its waiters) on the calling thread: only for a
  /// thread of cotensor's own that may (a communication thread), saving the hand-off.
  void complete_here(std::exception_ptr error = nullptr) noexcept;
  /// Ends the op's buffer accesses now, while it stays in flight until invoked: for a device
  /// that orders its own work (see src/engine/backend.hpp). At most once, before invoking.
  void release_accesses() noexcept;
  /// True until invoked or moved from.
  explicit operator bool() const noexcept { return op_ != nullptr; }

private:
  void reset() noexcept;  // abandons a held op
  op_node* op_ = nullptr;
};

}  // namespace cotensor::detail
