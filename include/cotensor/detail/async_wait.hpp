#pragma once

// The one Asio completion mechanism behind every cotensor wait: tensor::async_wait,
// async_wait_all, when_all, scope::async_wait and async_admit.

#include "cotensor/asio.hpp"
#include "cotensor/detail/engine_fwd.hpp"

#include <atomic>
#include <exception>
#include <utility>

namespace cotensor::detail {

/// Completes an Asio handler when the engine completes the wait, or when the wait is cancelled.
///
/// Who owns it: a reference for the engine (dropped in `complete`) and, while a cancellation
/// slot holds our handler, one for the slot (dropped when the slot lets go of it). Whoever
/// claims `claimed_` first — completion or cancellation — moves the user's handler and the work
/// guard out and posts the handler to its associated executor; the other does nothing. So a
/// cancelled wait releases its executor at once, while the awaited op runs on.
template <class Handler>
class async_waiter final : public waiter {
public:
  using executor_type = asio::associated_executor_t<Handler, asio::any_io_executor>;

  template <class Start>
  static void launch(Handler handler, Start&& start) {
    auto* self = new async_waiter(std::move(handler));
    self->trace_ = trace_wait_begin("async_wait");
    auto slot = asio::get_associated_cancellation_slot(self->handler_);
    if (slot.is_connected()) {
      self->refs_.fetch_add(1, std::memory_order_relaxed);
      slot.template emplace<cancel_handler>(self);
    }
    std::forward<Start>(start)(static_cast<waiter&>(*self));
  }

  void complete(std::exception_ptr error) noexcept override {
    if (!claimed_.exchange(true, std::memory_order_acq_rel)) {
      // Post, never dispatch: we may be inside the initiating call or on a backend thread.
      finish(std::move(error));
    }
    release();
  }

private:
  // Type-erased on purpose: the type `asio::prefer` yields for a given executor can depend on
  // which Asio headers a translation unit included, and this class must have one layout.
  using work_executor = asio::any_io_executor;

  struct cancel_handler {
    explicit cancel_handler(async_waiter* w) noexcept : self(w) {}
    cancel_handler(const cancel_handler&) = delete;
    cancel_handler& operator=(const cancel_handler&) = delete;
    ~cancel_handler() { self->release(); }

    void operator()(asio::cancellation_type type) {
      if (type == asio::cancellation_type::none ||
          self->claimed_.exchange(true, std::memory_order_acq_rel)) {
        return;
      }
      // The wait is abandoned; the awaited op runs on. From a cancellation handler: post.
      self->finish(
          std::make_exception_ptr(boost::system::system_error(asio::error::operation_aborted)));
    }

    async_waiter* self;
  };

  explicit async_waiter(Handler handler)
      : handler_(std::move(handler)),
        work_(asio::prefer(
            work_executor(asio::get_associated_executor(handler_, fallback_executor())),
            asio::execution::outstanding_work.tracked)) {}

  // Runs the handler with `error` on its executor; called once, by whoever claimed it.
  void finish(std::exception_ptr error) {
    auto work = std::move(work_);
    asio::post(work, [handler = std::move(handler_), work, error = std::move(error),
                      trace = std::move(trace_)]() mutable {
      trace_wait_end(trace);
      std::move(handler)(std::move(error));
    });
  }

  void release() noexcept {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      delete this;
    }
  }

  Handler handler_;
  work_executor work_;
  traced_wait_handle trace_;
  std::atomic<int> refs_{1};
  // false: nobody has completed the handler yet; true: completion or cancellation took it.
  std::atomic<bool> claimed_{false};
};

/// Starts a wait as a universal Asio async operation with signature `void(std::exception_ptr)`.
/// `start(waiter&)` hands the waiter to the engine.
template <class Token, class Start>
auto async_wait_with(Token&& token, Start start) {
  return asio::async_initiate<Token, void(std::exception_ptr)>(
      [](auto handler, Start start_) {
        using handler_type = std::decay_t<decltype(handler)>;
        async_waiter<handler_type>::launch(std::move(handler), std::move(start_));
      },
      token, std::move(start));
}

}  // namespace cotensor::detail
