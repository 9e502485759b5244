#pragma once

#include "cotensor/config.hpp"

#include "cotensor/asio.hpp"
#include "cotensor/detail/waiter.hpp"
#include "cotensor/device.hpp"

#include "engine/admission.hpp"
#include "engine/backend.hpp"
#include "engine/op_node.hpp"
#include "engine/options.hpp"
#include "engine/storage.hpp"
#include "engine/tracker.hpp"
#include "engine/waits.hpp"
#include "support/function_ref.hpp"

#include <boost/asio/thread_pool.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>

namespace cotensor::detail {

/// The dependency engine of one runtime: orders ops by the buffers they touch, hands the ready
/// ones to the backend of their device, and retires them when they end.
class engine {
public:
  explicit engine(const engine_options& options);
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;
  /// Waits for every op issued on this engine, then stops the backends.
  ~engine();

  /// Issues `op`: waits for room in flight (see admission), then requests its accesses;
  /// returns at once. In synchronous mode runs it before returning and rethrows its own
  /// exception. Throws std::system_error(errc::device_unavailable) for a device this build
  /// cannot serve, with nothing enqueued.
  void push(std::unique_ptr<op_node> op);
  /// Runs an op on the calling thread, now, with no op node, if it is small enough to run
  /// inline (see runs_inline), on the CPU, nothing observes ops one by one (no trace, scope,
  /// NVTX tool, fault injection or synchronous mode) and every buffer is free this instant:
  /// nothing writing it, or waiting to. Returns false, having changed nothing, otherwise: then
  /// issue the op as usual. `kernel`'s exception is stored in the written buffers, as an op's.
  bool run_now(buffer_list reads, buffer_list writes, function_ref<void()> kernel) noexcept;

  void wait_all(waiter& w) { tracker_->wait(w); }
  void admit(waiter& w) { admission_.admit(w); }
  asio::any_io_executor fallback_executor();
  const engine_options& options() const noexcept { return options_; }
  engine_stats stats() const noexcept;
  unsigned worker_threads() const noexcept;

  // For backends (run_op, retire_op) and completions (op_completion).
  /// Runs a ready op on the calling backend thread.
  void run(op_node* op) noexcept;
  /// Ends an op whose work is over (its error in `op->own`): tells observers, then retires
  /// it, on the calling backend thread.
  void finish(op_node* op) noexcept;
  /// An op that completes later was ended (`error`: null for success) by its completion.
  void complete(op_node* op, std::exception_ptr error) noexcept;
  /// As `complete`, retiring the op on the calling thread if this ends it (complete_here).
  void complete_here(op_node* op, std::exception_ptr error) noexcept;
  /// An op's completion was destroyed uninvoked.
  void abandon(op_node* op) noexcept;
  /// Ends an op's buffer accesses before the op ends (op_completion::release_accesses).
  void release_accesses(op_node* op) noexcept;

private:
  friend struct op_node;
  static constexpr std::size_t device_kinds = 2;

  // The backend of `type`, started with its first op (may throw then).
  backend& backend_for(device::kind type) {
    if (backend* b = backends_[static_cast<std::size_t>(type)].load(std::memory_order_acquire))
        [[likely]] {
      return *b;
    }
    return start_backend(type);
  }
  backend& start_backend(device::kind type);
  void dispatch(op_node* op);
  // Runs the kernel of an op on a device that orders its own work (see backend.hpp).
  void run_on_device(op_node* op) noexcept;
  // True for an op small enough to run on the issuing thread if it is ready at its call.
  bool runs_inline(const op_node& op, std::size_t touched_bytes) const noexcept;
  // Releases an ended op's buffers and accounts its end; frees it.
  void retire(op_node* op) noexcept;
  // Stores `error` in the buffers `op` writes and ends its accesses, granting what waits.
  static void end_accesses(op_node& op, const std::exception_ptr& error) noexcept;
  // One of the two holds on an op that completes later (its start call, its completion) is
  // gone; the last retires it (`here`: on this backend thread).
  void drop_hold(op_node* op, bool here) noexcept;

  engine_options options_;
  std::shared_ptr<tracker> tracker_ = std::make_shared<tracker>(false);
  admission admission_;
  std::array<std::atomic<backend*>, device_kinds> backends_{};
  std::array<std::unique_ptr<backend>, device_kinds> owned_backends_;
  std::mutex backends_mutex_;

  std::atomic<std::uint64_t> issued_{0};
  std::atomic<std::uint64_t> completed_{0};
  std::atomic<std::uint64_t> ran_now_{0};  // issued and completed by run_now
  std::atomic<std::int32_t> handoffs_{0};  // threads inside backend::submit or submit_retire

  bool run_now_enabled_ = false;  // run_now may run ops: set once, by the constructor

  std::once_flag fallback_once_;
  std::unique_ptr<asio::thread_pool> fallback_;
};

/// The tracker of the scope current on this thread, or null (initial-exec, as above).
extern constinit thread_local tracker* current_scope_tracker
    __attribute__((tls_model("initial-exec")));
inline tracker* current_scope() noexcept { return current_scope_tracker; }
void set_current_scope(tracker* t) noexcept;

}  // namespace cotensor::detail
