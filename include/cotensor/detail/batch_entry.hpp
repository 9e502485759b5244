#pragma once

// The machinery behind `batcher::async_submit`: one submission waiting for its rows of a batch,
// its completion and its cancellation. Users never name these.

#include "cotensor/asio.hpp"
#include "cotensor/tensor.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <exception>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace cotensor {

namespace detail {

class batcher_core;

// What a submission gets back: its output rows as floats or as a tensor, whichever it asked
// for (the other is empty).
struct batch_output {
  std::vector<float> floats;
  tensor rows;
};

// One submission waiting for its rows of a batch. Whoever claims it first — the batch's
// completion or a cancellation — completes its handler; the other does nothing.
class batch_entry {
public:
  batch_entry(std::vector<float> rows, std::size_t count) noexcept
      : rows_(std::move(rows)), count_(count) {}
  batch_entry(tensor rows, std::size_t count) noexcept
      : tensor_rows_(std::move(rows)), count_(count), wants_tensor_(true) {}
  batch_entry(const batch_entry&) = delete;
  batch_entry& operator=(const batch_entry&) = delete;
  virtual ~batch_entry() = default;

  // True for the one caller that may complete this entry.
  bool claim() noexcept { return !claimed_.exchange(true, std::memory_order_acq_rel); }
  bool claimed() const noexcept { return claimed_.load(std::memory_order_acquire); }
  // Posts the handler with these arguments to its executor; only after a successful claim().
  virtual void finish(std::exception_ptr error, batch_output out) = 0;

  // The rows of a submission of floats (empty for a tensor submission).
  const std::vector<float>& rows() const noexcept { return rows_; }
  // Moves the rows of a submission of floats out (a batch of this submission alone takes them
  // as its input, with no copy); rows() is empty afterwards.
  std::vector<float> take_rows() noexcept { return std::move(rows_); }
  // The rows of a tensor submission (empty for floats).
  const tensor& tensor_rows() const noexcept { return tensor_rows_; }
  bool wants_tensor() const noexcept { return wants_tensor_; }
  std::size_t count() const noexcept { return count_; }
  // When the batcher queued it (set under the batcher's lock).
  std::chrono::steady_clock::time_point queued_at{};

private:
  std::vector<float> rows_;
  tensor tensor_rows_;
  std::size_t count_;
  bool wants_tensor_ = false;
  // false: pending; true: completion or cancellation has taken the handler.
  std::atomic<bool> claimed_{false};
};

// Queues `entry`, or completes it at once with the reason it was refused.
void batcher_enqueue(const std::shared_ptr<batcher_core>& core,
                     const std::shared_ptr<batch_entry>& entry);
// Called by a cancellation handler that claimed `entry`: drops it from the queue.
void batcher_forget(const std::shared_ptr<batcher_core>& core, const batch_entry& entry);
asio::any_io_executor batcher_executor(const batcher_core& core) noexcept;

// `Rows` is what the handler takes: std::vector<float> or tensor.
template <class Handler, class Rows>
class batch_entry_impl final : public batch_entry {
public:
  batch_entry_impl(Handler handler,
                   const asio::any_io_executor& fallback,
                   Rows rows,
                   std::size_t count)
      : batch_entry(std::move(rows), count), handler_(std::move(handler)),
        work_(asio::prefer(asio::any_io_executor(asio::get_associated_executor(handler_, fallback)),
                           asio::execution::outstanding_work.tracked)) {}

  Handler& handler() noexcept { return handler_; }

  void finish(std::exception_ptr error, batch_output out) override {
    auto work = std::move(work_);
    Rows rows;
    if constexpr (std::is_same_v<Rows, tensor>) {
      rows = std::move(out.rows);
    } else {
      rows = std::move(out.floats);
    }
    // Post, never dispatch: we may be inside the initiating call or on a backend thread.
    asio::post(work, [handler = std::move(handler_), work, error = std::move(error),
                      rows = std::move(rows)]() mutable {
      std::move(handler)(std::move(error), std::move(rows));
    });
  }

private:
  Handler handler_;
  asio::any_io_executor work_;
};

// Installed in the handler's cancellation slot; the slot owns it.
struct batch_cancel_handler {
  batch_cancel_handler(std::shared_ptr<batch_entry> e, std::weak_ptr<batcher_core> c) noexcept
      : entry(std::move(e)), core(std::move(c)) {}

  void operator()(asio::cancellation_type type) {
    if (type == asio::cancellation_type::none || !entry->claim()) {
      return;
    }
    entry->finish(
        std::make_exception_ptr(boost::system::system_error(asio::error::operation_aborted)), {});
    if (auto c = core.lock()) {
      batcher_forget(c, *entry);
    }
  }

  std::shared_ptr<batch_entry> entry;
  std::weak_ptr<batcher_core> core;
};

}  // namespace detail

}  // namespace cotensor
