#pragma once

// What the templates in cotensor's public headers need from the engine. Users never name these.

#include "cotensor/asio.hpp"

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <span>

namespace cotensor {
class tensor;
}  // namespace cotensor

namespace cotensor::detail {

class storage;
class tracker;

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

/// Completes `w` once every write to `t`'s storage issued so far has ended.
void start_wait(const tensor& t, waiter& w);
/// Completes `w` once every write to each of `ts` issued so far has ended, with the first
/// error among them in argument order.
void start_wait(std::span<const tensor* const> ts, waiter& w);
/// Completes `w` once every op issued so far on the current runtime has ended (no error).
void start_wait_all(waiter& w);
/// Completes `w` once every op issued so far through the scope owning `t` has ended, with the
/// first error any of them raised.
void start_wait_scope(tracker& t, waiter& w);
/// Completes `w` once the current runtime has room for another op in flight.
void start_admission(waiter& w);
/// The executor that runs completion handlers that have no associated executor of their own.
asio::any_io_executor fallback_executor();

/// A wait being recorded by a trace (empty when no trace records).
struct traced_wait_handle {
  std::shared_ptr<void> recorder;
  std::uint64_t index = 0;
};
/// Records that a wait of `kind` began on this thread, if a trace is recording.
traced_wait_handle trace_wait_begin(const char* kind);
/// Records that the wait ended (resumed) on this thread.
void trace_wait_end(const traced_wait_handle& handle) noexcept;

/// An elementwise kernel over a contiguous chunk: `out[i] = f(in[i])` for `i < n`. The engine
/// calls it on backend threads, on several disjoint chunks at once.
using unary_kernel = std::function<void(const float* in, float* out, std::int64_t n)>;

/// Issues `name(x)` running `kernel` elementwise; validates eagerly, returns at once.
tensor map_op(const tensor& x, unary_kernel kernel);

}  // namespace cotensor::detail
