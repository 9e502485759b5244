#pragma once

// The one Asio completion mechanism behind every cotensor wait: tensor::async_wait,
// async_wait_all, when_all, scope::async_wait and async_admit.

#include "cotensor/asio.hpp"
#include "cotensor/detail/waiter.hpp"

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <utility>

namespace cotensor {
class tensor;
}  // namespace cotensor

namespace cotensor::detail {

class tracker;

// What the waits below start, defined by the frontend (src/frontend/waits.cpp, trace.cpp).

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

/// A wait whose handler an execution context's shutdown may have to destroy unrun.
class pending_wait {
public:
  pending_wait() = default;
  pending_wait(const pending_wait&) = delete;
  pending_wait& operator=(const pending_wait&) = delete;

  /// Takes a reference that keeps this wait alive until `abandon` returns.
  virtual void retain() noexcept = 0;
  /// Destroys the handler and its work guard without running them, then drops the reference
  /// `retain` took. Called once, on the thread shutting the context down.
  virtual void abandon() noexcept = 0;

protected:
  virtual ~pending_wait() = default;  // virtual only because wait_registry, a friend, may see it

private:
  friend class wait_registry;
  pending_wait* prev_ = nullptr;
  pending_wait* next_ = nullptr;
  bool listed_ = false;
};

/// The waits whose handlers are bound to one execution context and not yet handed to it.
///
/// Shared by the context's `wait_service` and by each wait, so a wait that the engine completes
/// after the context is gone still finds it. While `claim` holds the lock, the context cannot
/// finish shutting down: a completion posts under it, and never to a destroyed context.
class wait_registry {
public:
  /// Lists `w`; false when the context is shutting down (the caller then abandons `w`).
  bool enlist(pending_wait& w);
  /// If `w` is still listed, unlists it and returns the lock held: the caller may hand `w`'s
  /// handler to the context until it lets go. Otherwise (claimed already, or abandoned by a
  /// shutdown) returns an empty lock.
  std::unique_lock<std::mutex> claim(pending_wait& w);
  /// Refuses new waits and abandons the listed ones; from the service's `shutdown`.
  void shut_down() noexcept;

  /// The registry of `context`, made on first use.
  static std::shared_ptr<wait_registry> of(asio::execution_context& context);

private:
  std::mutex mutex_;
  pending_wait* head_ = nullptr;
  bool shut_ = false;
};

/// Owns a context's `wait_registry`; its `shutdown`, called when the context is destroyed,
/// destroys the handlers of waits still pending there, as Asio does for its own operations.
class wait_service final : public asio::execution_context::service {
public:
  static inline asio::execution_context::id id;

  explicit wait_service(asio::execution_context& context)
      : asio::execution_context::service(context), registry_(std::make_shared<wait_registry>()) {}

  const std::shared_ptr<wait_registry>& registry() const noexcept { return registry_; }

private:
  void shutdown() override { registry_->shut_down(); }

  std::shared_ptr<wait_registry> registry_;
};

/// Completes an Asio handler when the engine completes the wait, or when the wait is cancelled.
///
/// Who owns it: a reference for the engine (dropped in `complete`), one for a cancellation slot
/// while the slot holds our handler, and one for a shutdown while it abandons the wait. Whoever
/// claims the wait from its context's registry first (completion, cancellation or the context's
/// shutdown) takes the user's handler and the work guard; the others do nothing. Completion and
/// cancellation post the handler to its associated executor, so a cancelled wait releases its
/// executor at once while the awaited op runs on; a shutdown destroys the handler unrun.
template <class Handler>
class async_waiter final : public waiter, public pending_wait {
public:
  using executor_type = asio::associated_executor_t<Handler, asio::any_io_executor>;

  template <class Start>
  static void launch(Handler handler, Start&& start) {
    auto* self = new async_waiter(std::move(handler));
    self->registry_ = wait_registry::of(asio::query(self->work_, asio::execution::context));
    if (!self->registry_->enlist(*self)) {
      // The context is being destroyed: like Asio's own operations, the handler never runs.
      delete self;
      return;
    }
    self->trace_ = trace_wait_begin("async_wait");
    auto slot = asio::get_associated_cancellation_slot(*self->handler_);
    if (slot.is_connected()) {
      self->refs_.fetch_add(1, std::memory_order_relaxed);
      slot.template emplace<cancel_handler>(self);
    }
    std::forward<Start>(start)(static_cast<waiter&>(*self));
  }

  void complete(std::exception_ptr error) noexcept override {
    if (auto claimed = registry_->claim(*this)) {
      // Post, never dispatch: we may be inside the initiating call or on a backend thread.
      finish(std::move(error));
    }
    release();
  }

  void retain() noexcept override { refs_.fetch_add(1, std::memory_order_relaxed); }

  void abandon() noexcept override {
    handler_.reset();
    work_ = work_executor();
    trace_ = {};
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
      if (type == asio::cancellation_type::none) {
        return;
      }
      if (auto claimed = self->registry_->claim(*self)) {
        // The wait is abandoned; the awaited op runs on. From a cancellation handler: post.
        self->finish(
            std::make_exception_ptr(boost::system::system_error(asio::error::operation_aborted)));
      }
    }

    async_waiter* self;
  };

  explicit async_waiter(Handler handler)
      : handler_(std::move(handler)),
        work_(asio::prefer(
            work_executor(asio::get_associated_executor(*handler_, fallback_executor())),
            asio::execution::outstanding_work.tracked)) {}

  // Runs the handler with `error` on its executor; called once, by whoever claimed it, with the
  // registry's lock held (so the context is alive until every copy of `work_` here is gone).
  void finish(std::exception_ptr error) {
    auto work = std::move(work_);
    asio::post(work, [handler = std::move(*handler_), work, error = std::move(error),
                      trace = std::move(trace_)]() mutable {
      trace_wait_end(trace);
      std::move(handler)(std::move(error));
    });
    handler_.reset();
  }

  void release() noexcept {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      delete this;
    }
  }

  std::optional<Handler> handler_;
  work_executor work_;
  std::shared_ptr<wait_registry> registry_;
  traced_wait_handle trace_;
  std::atomic<int> refs_{1};
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
