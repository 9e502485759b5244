#include "cotensor/batcher.hpp"

#include "cotensor/ops.hpp"

#include "support/error_category.hpp"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <bit>
#include <chrono>
#include <deque>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>

namespace cotensor {

namespace {

std::string batcher_message(int code) {
  static constexpr detail::code_message<batcher_errc> messages[] = {
      {batcher_errc::queue_full, "batcher queue is full"},
      {batcher_errc::closed, "batcher is shut down"},
  };
  return detail::message_in(messages, code, "unknown batcher error");
}

}  // namespace

const std::error_category& batcher_category() noexcept {
  static const detail::message_category category("cotensor.batcher", batcher_message);
  return category;
}

namespace detail {

class batcher_core : public std::enable_shared_from_this<batcher_core> {
public:
  using entry_ptr = std::shared_ptr<batch_entry>;
  using batch = std::vector<entry_ptr>;
  using clock = std::chrono::steady_clock;

  batcher_core(asio::any_io_executor ex,
               std::size_t in_width,
               std::size_t out_width,
               batcher::batch_function fn,
               batcher_options options)
      : executor_(std::move(ex)), in_width_(in_width), out_width_(out_width), fn_(std::move(fn)),
        options_(options), timer_(executor_) {}

  void enqueue(const entry_ptr& entry) {
    std::vector<batch> ready;
    std::error_code refused;
    {
      std::lock_guard lock(mutex_);
      if (closed_) {
        refused = batcher_errc::closed;
      } else if (queue_rows_ + entry->count() > options_.max_queue_rows) {
        refused = batcher_errc::queue_full;
      } else {
        ++stats_.submitted;
        entry->queued_at = clock::now();
        queue_.push_back(entry);
        queue_rows_ += entry->count();
        ready = take_locked();
      }
      if (refused) {
        ++stats_.rejected;
      }
    }
    if (refused) {
      if (entry->claim()) {
        entry->finish(std::make_exception_ptr(std::system_error(refused)), {});
      }
      return;
    }
    for (auto& b : ready) {
      run(std::move(b));
    }
  }

  void forget(const batch_entry& entry) {
    std::lock_guard lock(mutex_);
    ++stats_.cancelled;
    auto it = std::find_if(queue_.begin(), queue_.end(),
                           [&](const entry_ptr& e) { return e.get() == &entry; });
    if (it != queue_.end()) {
      queue_rows_ -= (*it)->count();
      queue_.erase(it);
    }
  }

  void shutdown() {
    std::vector<batch> ready;
    {
      std::lock_guard lock(mutex_);
      if (closed_) {
        return;
      }
      closed_ = true;
      ready = take_locked();
      timer_.cancel();
      timer_armed_ = false;
    }
    for (auto& b : ready) {
      run(std::move(b));
    }
  }

  batcher_stats stats() const {
    std::lock_guard lock(mutex_);
    batcher_stats s = stats_;
    s.queue_rows = queue_rows_;
    return s;
  }

  const asio::any_io_executor& executor() const noexcept { return executor_; }
  std::size_t in_width() const noexcept { return in_width_; }
  std::size_t out_width() const noexcept { return out_width_; }
  const batcher_options& options() const noexcept { return options_; }

private:
  // Whether start_when_idle lets a partial batch run now that no batch runs: when the rows
  // gathered while the last batch ran (`batch_ended`), when the batcher has been idle for a
  // window, or when as many rows as the last batch had are back. Not merely because the last
  // batch just ended: under load the first row to come back would then run alone, and a
  // batch of one costs about what a full one does (the weights are read either way).
  bool idle_start_locked(bool batch_ended) const {
    if (!options_.start_when_idle || running_ != 0) {
      return false;
    }
    return batch_ended || queue_rows_ >= last_rows_ || clock::now() - last_end_ >= options_.window;
  }

  // Takes the batches that may run now off the queue: full ones, and a partial one once its
  // window has passed (or after shutdown, or as start_when_idle allows), while fewer than
  // max_running_batches run. Entries already claimed by a cancellation are dropped here. Arms
  // the window for what stays queued.
  std::vector<batch> take_locked(bool batch_ended = false) {
    std::vector<batch> out;
    while (running_ < options_.max_running_batches && !queue_.empty() &&
           (queue_rows_ >= options_.max_batch_rows || due_ || closed_ ||
            idle_start_locked(batch_ended))) {
      batch b;
      std::size_t rows = 0;
      while (!queue_.empty() && rows + queue_.front()->count() <= options_.max_batch_rows) {
        entry_ptr e = std::move(queue_.front());
        queue_.pop_front();
        queue_rows_ -= e->count();
        if (!e->claimed()) {
          rows += e->count();
          b.push_back(std::move(e));
        }
      }
      if (!b.empty()) {
        ++running_;
        last_rows_ = rows;
        out.push_back(std::move(b));
      }
    }
    if (queue_.empty()) {
      due_ = false;
    } else if (!due_ && !timer_armed_ && !closed_) {
      timer_armed_ = true;
      timer_.expires_after(options_.window);
      // A weak reference: a pending window must not keep the core (and this timer) alive past
      // the batcher, into the destruction of the executor's context.
      timer_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
        auto self = weak.lock();
        if (self && ec != asio::error::operation_aborted) {
          self->on_window();
        }
      });
    }
    return out;
  }

  void on_window() {
    std::vector<batch> ready;
    {
      std::lock_guard lock(mutex_);
      timer_armed_ = false;
      due_ = true;
      ready = take_locked();
    }
    for (auto& b : ready) {
      run(std::move(b));
    }
  }

  // Issues the batched op on `b`'s rows and completes each entry when its value is known.
  void run(batch b) {
    std::size_t rows = 0;
    const auto started = clock::now();
    clock::duration queued{0};
    for (const auto& e : b) {
      rows += e->count();
      queued += started - e->queued_at;
    }
    {
      std::lock_guard lock(mutex_);
      stats_.queue_time += queued;
      ++stats_.batches;
      stats_.rows += rows;
      const auto bucket = std::min<std::size_t>(std::bit_width(rows - 1), 15);
      ++stats_.batch_rows_log2[bucket];
    }
    try {
      const auto r = static_cast<std::int64_t>(rows);
      tensor y = fn_(batch_input(b, r));
      if (!(y.shape() == shape{r, static_cast<std::int64_t>(out_width_)})) {
        throw std::invalid_argument("batcher: the batch function returned a tensor of the wrong "
                                    "shape");
      }
      y.async_wait(asio::bind_executor(executor_, [self = shared_from_this(), b = std::move(b), y,
                                                   started](std::exception_ptr error) {
        self->count_compute(b, started);
        self->deliver(b, y, std::move(error));
        self->batch_ended();
      }));
    } catch (...) {
      fail(b, std::current_exception());
      // Not batch_ended() here: we may be inside enqueue's caller chain; post it.
      asio::post(executor_, [self = shared_from_this()] { self->batch_ended(); });
    }
  }

  // The [rows, in_width] input of batch `b`: the floats gathered on the host when every
  // submission is floats for a float32 CPU input (the serving path: one copy), else the
  // submissions' tensors (floats converted) concatenated.
  tensor batch_input(const batch& b, std::int64_t rows) const {
    const auto w = static_cast<std::int64_t>(in_width_);
    const bool floats_only =
        std::ranges::none_of(b, [](const entry_ptr& e) { return e->wants_tensor(); });
    const bool plain = options_.in_dtype == dtype::float32 && options_.in_device == device::cpu();
    if (floats_only && plain) {
      if (b.size() == 1) {  // a batch of one: its rows are the input, moved, not copied
        return from_vector(b.front()->take_rows(), {rows, w});
      }
      std::vector<float> x;
      x.reserve(static_cast<std::size_t>(rows * w));
      for (const auto& e : b) {
        x.insert(x.end(), e->rows().begin(), e->rows().end());
      }
      return from_vector(std::move(x), {rows, w});
    }
    std::vector<tensor> parts;
    parts.reserve(b.size());
    for (const auto& e : b) {
      if (e->wants_tensor()) {
        parts.push_back(e->tensor_rows());
      } else {
        const auto k = static_cast<std::int64_t>(e->count());
        parts.push_back(
            from_vector(e->rows(), {k, w}, options_.in_device).astype(options_.in_dtype));
      }
    }
    return parts.size() == 1 ? parts.front() : concat(parts, 0);
  }

  // A batch has ended: start what was waiting for it.
  void batch_ended() {
    std::vector<batch> ready;
    {
      std::lock_guard lock(mutex_);
      --running_;
      last_end_ = clock::now();
      ready = take_locked(true);
    }
    for (auto& b : ready) {
      run(std::move(b));
    }
  }

  void count_compute(const batch& b, clock::time_point started) {
    const auto took = clock::now() - started;
    std::lock_guard lock(mutex_);
    stats_.compute_time += took * static_cast<std::int64_t>(b.size());
  }

  void deliver(const batch& b, const tensor& y, std::exception_ptr error) {
    if (error) {
      fail(b, std::move(error));
      return;
    }
    std::vector<float> all;
    try {
      if (std::ranges::any_of(b, [](const entry_ptr& e) { return !e->wants_tensor(); })) {
        all = y.to_vector<float>();  // computed: does not block
      }
    } catch (...) {
      fail(b, std::current_exception());
      return;
    }
    std::size_t offset = 0;
    for (const auto& e : b) {
      const std::size_t k = e->count();
      if (e->claim()) {
        detail::batch_output out;
        std::exception_ptr slice_error;
        if (e->wants_tensor()) {
          try {
            out.rows = slice(y, 0, static_cast<std::int64_t>(offset),
                             static_cast<std::int64_t>(offset + k));
          } catch (...) {
            slice_error = std::current_exception();
          }
        } else {
          const auto first = all.begin() + static_cast<std::ptrdiff_t>(offset * out_width_);
          out.floats.assign(first, first + static_cast<std::ptrdiff_t>(k * out_width_));
        }
        e->finish(std::move(slice_error), std::move(out));
      }
      offset += k;
    }
  }

  void fail(const batch& b, const std::exception_ptr& error) {
    std::uint64_t failed = 0;
    for (const auto& e : b) {
      if (e->claim()) {
        e->finish(error, batch_output{});
        ++failed;
      }
    }
    std::lock_guard lock(mutex_);
    stats_.failed += failed;
  }

  asio::any_io_executor executor_;
  std::size_t in_width_;
  std::size_t out_width_;
  batcher::batch_function fn_;
  batcher_options options_;

  mutable std::mutex mutex_;  // guards everything below, the timer included
  asio::steady_timer timer_;
  bool timer_armed_ = false;
  bool due_ = false;  // the window of the queued rows has passed
  bool closed_ = false;
  std::size_t running_ = 0;       // batches issued and not yet ended
  std::size_t last_rows_ = 0;     // rows of the batch started last
  clock::time_point last_end_{};  // when a batch last ended (epoch: never)
  std::deque<entry_ptr> queue_;
  std::size_t queue_rows_ = 0;
  batcher_stats stats_;
};

void batcher_enqueue(const std::shared_ptr<batcher_core>& core,
                     const std::shared_ptr<batch_entry>& entry) {
  core->enqueue(entry);
}

void batcher_forget(const std::shared_ptr<batcher_core>& core, const batch_entry& entry) {
  core->forget(entry);
}

asio::any_io_executor batcher_executor(const batcher_core& core) noexcept {
  return core.executor();
}

}  // namespace detail

batcher::batcher(asio::any_io_executor executor,
                 std::size_t in_width,
                 std::size_t out_width,
                 batch_function fn,
                 batcher_options options) {
  if (in_width == 0 || out_width == 0) {
    throw std::invalid_argument("batcher: row widths must be positive");
  }
  if (options.max_batch_rows == 0) {
    throw std::invalid_argument("batcher: max_batch_rows must be positive");
  }
  if (options.max_running_batches == 0) {
    throw std::invalid_argument("batcher: max_running_batches must be positive");
  }
  if (options.max_queue_rows < options.max_batch_rows) {
    throw std::invalid_argument("batcher: max_queue_rows must be at least max_batch_rows");
  }
  if (!fn) {
    throw std::invalid_argument("batcher: the batch function is empty");
  }
  core_ = std::make_shared<detail::batcher_core>(std::move(executor), in_width, out_width,
                                                 std::move(fn), options);
}

batcher::~batcher() { core_->shutdown(); }

void batcher::shutdown() { core_->shutdown(); }

batcher_stats batcher::stats() const { return core_->stats(); }

std::size_t batcher::in_width() const noexcept { return core_->in_width(); }
std::size_t batcher::out_width() const noexcept { return core_->out_width(); }
const batcher_options& batcher::options() const noexcept { return core_->options(); }

std::size_t batcher::checked_row_count(std::size_t floats) const {
  const std::size_t w = core_->in_width();
  if (floats == 0 || floats % w != 0) {
    throw std::invalid_argument("batcher::async_submit: the number of floats is not a positive "
                                "multiple of in_width()");
  }
  const std::size_t count = floats / w;
  if (count > core_->options().max_batch_rows) {
    throw std::invalid_argument("batcher::async_submit: more rows than max_batch_rows");
  }
  return count;
}

std::size_t batcher::checked_rows(const tensor& rows) const {
  const batcher_options& o = core_->options();
  const auto fail = [](const std::string& why) {
    throw std::invalid_argument("batcher::async_submit: " + why);
  };
  if (rows.rank() != 2 || rows.shape()[1] != static_cast<std::int64_t>(core_->in_width())) {
    fail("rows of shape " + rows.shape().to_string() + ", want [k, " +
         std::to_string(core_->in_width()) + "]");
  }
  if (rows.dtype() != o.in_dtype) {
    fail("rows of dtype " + std::string(name(rows.dtype())) + ", want options().in_dtype " +
         std::string(name(o.in_dtype)));
  }
  if (rows.device() != o.in_device) {
    std::ostringstream os;
    os << "rows on " << rows.device() << ", want options().in_device " << o.in_device;
    fail(os.str());
  }
  const auto count = static_cast<std::size_t>(rows.shape()[0]);
  if (count == 0 || count > o.max_batch_rows) {
    fail("a row count of " + std::to_string(count) + ", want 1 to max_batch_rows (" +
         std::to_string(o.max_batch_rows) + ")");
  }
  return count;
}

}  // namespace cotensor
