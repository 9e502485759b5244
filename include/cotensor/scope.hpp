#pragma once

#include "cotensor/asio.hpp"
#include "cotensor/detail/async_wait.hpp"

#include <memory>
#include <type_traits>
#include <utility>

namespace cotensor {

/// A set of ops whose completion can be awaited apart from all other work: the `waitall` of one
/// server request, which never waits for another request's ops.
///
/// An op belongs to the scope when it is issued inside `run`, on that thread. `run` is an
/// ordinary (non-coroutine) call, so a coroutine can use it between its `co_await`s:
/// ```
/// cotensor::scope s;
/// auto y = s.run([&] { return cotensor::relu(cotensor::matmul(x, w) + b); });
/// co_await s.when_all();
/// ```
/// Destroying a scope does not cancel or wait for its ops.
/// Thread safety: `run` may be called from several threads; waits from any thread.
class scope {
public:
  scope();

  /// Calls `f()` with this scope current on the calling thread, so that every op `f` issues
  /// belongs to it, and returns what `f` returns. Nests: the previous scope is restored after.
  template <class F>
  std::invoke_result_t<F&> run(F&& f) {
    activation active(*this);
    return std::forward<F>(f)();
  }

  /// Waits for every op issued through this scope before the call.
  ///
  /// Completion: `void(std::exception_ptr)`: null, or the first exception any op of this scope
  /// raised (or inherited) since the scope was made — `use_awaitable` rethrows it. The handler
  /// runs on its associated executor, never inside this call. Cancellation: every type;
  /// completes promptly with `operation_aborted`, and the ops run on. Shutdown: as
  /// `tensor::async_wait`.
  template <class Token>
  auto async_wait(Token&& token) const {
    return detail::async_wait_with(std::forward<Token>(token), [t = tracker_](detail::waiter& w) {
      detail::start_wait_scope(*t, w);
    });
  }

  /// `co_await s.when_all()`: `async_wait(asio::deferred)`.
  auto when_all() const { return async_wait(asio::deferred); }

  /// Blocks until every op issued through this scope before the call has ended; rethrows the
  /// first exception one of them raised. Never call it on an Asio event-loop thread.
  void wait() const;

private:
  class activation {
  public:
    explicit activation(scope& s) noexcept;
    activation(const activation&) = delete;
    activation& operator=(const activation&) = delete;
    ~activation();

  private:
    detail::tracker* previous_;
  };

  std::shared_ptr<detail::tracker> tracker_;
};

}  // namespace cotensor
