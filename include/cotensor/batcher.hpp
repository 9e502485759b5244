#pragma once

#include "cotensor/asio.hpp"
#include "cotensor/detail/batch_entry.hpp"
#include "cotensor/tensor.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace cotensor {

/// Why a `batcher` refused a submission, as `std::error_code`s in `batcher_category()`.
enum class batcher_errc {
  /// The queue already holds `max_queue_rows` rows: try again later.
  queue_full = 1,
  /// `batcher::shutdown` was called (or the batcher was destroyed): it takes no more work.
  closed,
};

/// The category of `cotensor::batcher_errc`.
const std::error_category& batcher_category() noexcept;

/// Makes an error code in `cotensor::batcher_category()`.
inline std::error_code make_error_code(batcher_errc e) noexcept {
  return {static_cast<int>(e), batcher_category()};
}

}  // namespace cotensor

template <>
struct std::is_error_code_enum<cotensor::batcher_errc> : std::true_type {};

namespace cotensor {

/// How a `batcher` gathers rows into batches.
struct batcher_options {
  /// The most rows in one batch; a batch runs at once when the queue holds this many.
  std::size_t max_batch_rows = 32;
  /// How long the first row of a batch waits for others before the batch runs anyway.
  std::chrono::microseconds window{500};
  /// The most rows queued (submitted and not yet in a running batch); more are refused with
  /// `batcher_errc::queue_full` instead of growing the queue without bound.
  std::size_t max_queue_rows = 1024;
  /// The most batches running at once; while that many run, rows wait in the queue (and the
  /// next batch grows), so a burst never runs ahead of the backend.
  std::size_t max_running_batches = 2;
  /// While no batch is running, run queued rows without waiting for the window when the
  /// batcher is idle: a lone request then pays no window. Idle means the rows gathered while
  /// the last batch ran (they run as it ends), or no batch ended within the last `window`, or
  /// as many rows as the last batch had are queued. So under load, the first row back after a
  /// batch does not run alone: it waits for the others (at most a window).
  bool start_when_idle = false;
  /// The dtype of a batch's input tensor. Rows submitted as a `tensor` must have it; rows
  /// submitted as floats are converted to it (`astype`).
  cotensor::dtype in_dtype = cotensor::dtype::float32;
  /// The device of a batch's input tensor, as `in_dtype` (rows as floats are copied there).
  cotensor::device in_device = cotensor::device::cpu();
};

/// What a `batcher` has done so far (a snapshot; counters only grow).
struct batcher_stats {
  std::uint64_t submitted = 0;  ///< submissions accepted into the queue
  std::uint64_t rejected = 0;   ///< submissions refused (queue full or closed)
  std::uint64_t cancelled = 0;  ///< submissions whose wait was cancelled
  std::uint64_t failed = 0;     ///< submissions completed with their batch's error
  std::uint64_t batches = 0;    ///< batches run
  std::uint64_t rows = 0;       ///< rows in all batches run
  std::size_t queue_rows = 0;   ///< rows queued now
  /// Batches by row count: bucket `i` counts batches of at most `2^i` rows (and more than
  /// `2^(i-1)`); the last bucket also counts every larger batch.
  std::array<std::uint64_t, 16> batch_rows_log2{};
  /// Summed over the submissions that ran: the time from `async_submit` to the start of the
  /// submission's batch (queueing).
  std::chrono::nanoseconds queue_time{0};
  /// Summed over the submissions that ran: the time from the start of the submission's batch
  /// to the batch's result (computing).
  std::chrono::nanoseconds compute_time{0};
};

/// Dynamic batching: concurrent callers each submit a few input rows and wait for their own
/// output rows; the batcher gathers queued rows into one `[b, in_width]` tensor, runs one
/// batched op on it, and completes every caller with its rows of the `[b, out_width]` result.
///
/// A batch runs as soon as `max_batch_rows` rows are queued, or `window` after the first of its
/// rows was queued, whichever comes first — and only while fewer than `max_running_batches`
/// batches run; otherwise the rows wait for one to end. A batch's failure reaches only the
/// callers in that batch.
/// ```
/// cotensor::batcher b(io.get_executor(), 4, 2, [&](const cotensor::tensor& x) {
///   return cotensor::relu(cotensor::matmul(x, w) + bias);
/// });
/// std::vector<float> y = co_await b.async_submit(row, asio::use_awaitable);
/// ```
/// The batched function is called on a thread running the executor (or in `async_submit` or
/// `shutdown`), with no lock held; it must only issue ops, and return a `[b, out_width]` tensor
/// for a `[b, in_width]` input. Issuing may block while the runtime's in-flight limit is
/// reached (`runtime_options::max_in_flight`); size it to hold a few batches.
///
/// Destroy the batcher before its executor's execution context.
/// Thread safety: every member may be called from any thread.
class batcher {
public:
  /// The batched op: maps a `[b, in_width]` tensor to a `[b, out_width]` tensor.
  using batch_function = std::function<tensor(const tensor&)>;

  /// A batcher whose timers and internal completions run on `executor`.
  /// Throws `std::invalid_argument` if a width or `max_batch_rows` is 0, `fn` is empty, or
  /// `max_queue_rows < max_batch_rows` or `max_running_batches` is 0.
  batcher(asio::any_io_executor executor,
          std::size_t in_width,
          std::size_t out_width,
          batch_function fn,
          batcher_options options = {});
  batcher(const batcher&) = delete;
  batcher& operator=(const batcher&) = delete;
  /// Calls `shutdown()`. Batches already running complete their callers as usual.
  ~batcher();

  /// Submits `rows` (`k * in_width()` floats, row-major, `1 <= k <= max_batch_rows`) and waits
  /// for the `k * out_width()` floats of their outputs.
  ///
  /// Completion: `void(std::exception_ptr, std::vector<float>)`: null and the output rows, or
  /// an error and an empty vector. The handler runs on its associated executor (the batcher's
  /// executor if it has none), never inside this call; a coroutine using `use_awaitable`
  /// resumes on its own executor. (In Boost 1.81 co_await it with `use_awaitable` or
  /// `as_tuple(use_awaitable)`, not `deferred`.)
  /// Errors: `std::system_error` with `batcher_errc::queue_full` when the queue already holds
  /// `max_queue_rows` rows, `batcher_errc::closed` after `shutdown`; the exception of the
  /// batch's op (or of the batched function itself) for every caller in that batch. Throws
  /// `std::invalid_argument` at the call, with nothing queued, for a bad number of floats.
  /// Cancellation: every type (terminal, partial, total). A cancelled wait completes promptly
  /// with `boost::system::system_error(asio::error::operation_aborted)`; if its rows are still
  /// queued they leave the queue, otherwise the batch runs on and the other callers in it get
  /// their rows as usual.
  /// Thread safety: any thread.
  template <class Token>
  auto async_submit(std::vector<float> rows, Token&& token) {
    const std::size_t count = checked_row_count(rows.size());
    return initiate<std::vector<float>>(std::move(rows), count, std::forward<Token>(token));
  }

  /// Submits `rows`, a `[k, in_width()]` tensor of `options().in_dtype` on
  /// `options().in_device` (`1 <= k <= max_batch_rows`), and waits for the `[k, out_width()]`
  /// rows of the output, as a tensor of the batch function's dtype on its device. The rows
  /// of every dtype take this form; a batch may mix it with submissions of floats.
  ///
  /// Completion: `void(std::exception_ptr, tensor)`: null and the output rows (a copy of the
  /// batch output's rows, issued when the batch output is computed: waiting for it costs that
  /// copy), or an error and an empty tensor. Where the handler runs, errors, cancellation and
  /// thread safety: as the float form above. Throws `std::invalid_argument` at the call, with
  /// nothing queued, for rows of the wrong rank, width, row count, dtype or device.
  ///
  /// (A template only so that `async_submit({...}, token)` keeps meaning floats.)
  template <std::same_as<tensor> Rows, class Token>
  auto async_submit(Rows rows, Token&& token) {
    const std::size_t count = checked_rows(rows);
    return initiate<tensor>(std::move(rows), count, std::forward<Token>(token));
  }

  /// Stops taking work: later submissions complete with `batcher_errc::closed`; rows already
  /// queued run at once (not waiting for the window). Idempotent. Thread safety: any thread.
  void shutdown();

  /// Counters and the current queue depth. Thread safety: any thread.
  batcher_stats stats() const;

  /// Floats per input row, as given at construction.
  std::size_t in_width() const noexcept;
  /// Floats per output row, as given at construction.
  std::size_t out_width() const noexcept;
  /// The options given at construction.
  const batcher_options& options() const noexcept;

private:
  template <class Rows, class Token>
  auto initiate(Rows rows, std::size_t count, Token&& token) {
    return asio::async_initiate<Token, void(std::exception_ptr, Rows)>(
        [](auto handler, std::shared_ptr<detail::batcher_core> core, Rows r, std::size_t k) {
          using handler_type = std::decay_t<decltype(handler)>;
          auto entry = std::make_shared<detail::batch_entry_impl<handler_type, Rows>>(
              std::move(handler), detail::batcher_executor(*core), std::move(r), k);
          auto slot = asio::get_associated_cancellation_slot(entry->handler());
          if (slot.is_connected()) {
            slot.template emplace<detail::batch_cancel_handler>(entry, core);
          }
          detail::batcher_enqueue(core, entry);
        },
        token, core_, std::move(rows), count);
  }

  std::size_t checked_row_count(std::size_t floats) const;
  std::size_t checked_rows(const tensor& rows) const;

  std::shared_ptr<detail::batcher_core> core_;
};

}  // namespace cotensor
