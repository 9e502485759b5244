#pragma once

#include "cotensor/asio.hpp"
#include "cotensor/detail/async_wait.hpp"
#include "cotensor/tensor.hpp"

#include <array>
#include <concepts>
#include <utility>

namespace cotensor {

/// Blocks until every op issued on the current runtime before the call has ended (the
/// chapter's `waitall`). Ops issued by other threads while it waits may or may not be covered.
///
/// Errors: none from kernels — an op's exception belongs to the tensors it wrote, and waiting on
/// those rethrows it. Throws `std::system_error` (`errc::wait_on_backend_thread`) on a backend
/// worker thread. Thread safety: any thread; never on a thread running an Asio event loop.
void wait_all();

/// Waits, as a universal Asio async operation, for every op issued on the current runtime before
/// the call.
///
/// Completion: `void(std::exception_ptr)`, always null once the work has ended; the handler runs
/// on its associated executor (the runtime's fallback executor if it has none), never inside
/// this call. Cancellation: every type; completes promptly with `operation_aborted` and the ops
/// run on. Shutdown: as `tensor::async_wait` (destroying the handler's execution context
/// destroys the pending handler unrun). Thread safety: any thread.
template <class Token>
auto async_wait_all(Token&& token) {
  return detail::async_wait_with(std::forward<Token>(token),
                                 [](detail::waiter& w) { detail::start_wait_all(w); });
}

/// `co_await when_all()`: the coroutine form of `wait_all`. Suspends until every op issued
/// before it has ended and resumes on the coroutine's executor. Same as
/// `async_wait_all(asio::deferred)`.
inline auto when_all() { return async_wait_all(asio::deferred); }

/// `co_await when_all(a, b, ...)`: suspends until each of these tensors is computed and resumes
/// on the coroutine's executor; rethrows the first error among them, in argument order.
///
/// Returns an Asio deferred operation with signature `void(std::exception_ptr)`; invoke it with
/// any completion token (`when_all(a, b)(asio::use_future)`). Cancellation and shutdown: as
/// `tensor::async_wait`. Errors: `std::invalid_argument` at the call for an empty tensor.
template <std::same_as<tensor>... Tensors>
requires(sizeof...(Tensors) > 0) auto when_all(const Tensors&... ts) {
  return detail::async_wait_with(
      asio::deferred, [held = std::array<tensor, sizeof...(ts)>{ts...}](detail::waiter& w) {
        std::array<const tensor*, sizeof...(Tensors)> ptrs;
        for (std::size_t i = 0; i < ptrs.size(); ++i) {
          ptrs[i] = &held[i];
        }
        detail::start_wait(ptrs, w);
      });
}

}  // namespace cotensor
