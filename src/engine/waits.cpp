#include "engine/waits.hpp"

#include "cotensor/error.hpp"

#include "engine/backend.hpp"
#include "engine/progress.hpp"
#include "engine/storage.hpp"
#include "support/spin_mutex.hpp"

#include <boost/container/small_vector.hpp>

#include <cstdint>
#include <system_error>
#include <thread>

namespace cotensor::detail {

void blocking_waiter::complete(std::exception_ptr error) noexcept {
  std::lock_guard lock(mutex_);
  error_ = std::move(error);
  done_.store(true, std::memory_order_release);
  cv_.notify_one();
}

std::exception_ptr blocking_waiter::wait() {
  // A short spin catches a result that is about to arrive without paying for a sleep/wake.
  // With engine_options::wait_spin, the longer spin below does that from its first poll, and
  // drives the work the result waits for: a pause-only spin first would only delay it (256
  // pauses are microseconds, during which an MPI op issued before this wait does not start).
  if (spin_.count() == 0) {
    for (int i = 0; i < 256 && !done_.load(std::memory_order_acquire); ++i) {
      cpu_relax();
    }
  }
  // The longer spin of engine_options::wait_spin, looking at the clock every 64 polls. It
  // drives what needs a thread to move on meanwhile (MPI's progress, engine/progress.hpp), so
  // that the communication threads can sleep while it spins.
  if (spin_.count() > 0 && !done_.load(std::memory_order_acquire)) {
    const progress_helper helper;
    const auto until = std::chrono::steady_clock::now() + spin_;
    for (unsigned i = 1; !done_.load(std::memory_order_acquire); ++i) {
      helper.step();
      if (i % 64 == 0) {
        if (std::chrono::steady_clock::now() >= until) {
          break;
        }
        // A thread that shares this core (the peer rank's, when there are more busy threads
        // than cores) runs now rather than at the end of the spin.
        std::this_thread::yield();
      }
    }
  }
  // Always take the lock: `complete` may still be inside its critical section, touching us.
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [this] { return done_.load(std::memory_order_relaxed); });
  return std::move(error_);
}

join_waiter::join_waiter(std::size_t n, waiter& target)
    : parts_(new part_waiter[n]), n_(n), remaining_(n), target_(target) {
  for (std::size_t i = 0; i < n; ++i) {
    parts_[i].join = this;
  }
}

join_waiter& join_waiter::make(std::size_t n, waiter& target) {
  return *new join_waiter(n, target);
}

waiter& join_waiter::part(std::size_t i) noexcept { return parts_[i]; }

void join_waiter::part_waiter::complete(std::exception_ptr e) noexcept {
  error = std::move(e);
  join->finish_one();
}

void join_waiter::finish_one() noexcept {
  if (remaining_.fetch_sub(1, std::memory_order_acq_rel) != 1) {
    return;
  }
  std::exception_ptr first;
  for (std::size_t i = 0; i < n_; ++i) {
    if (parts_[i].error) {
      first = std::move(parts_[i].error);
      break;
    }
  }
  waiter& target = target_;
  delete this;
  target.complete(std::move(first));
}

namespace {

// A wait on a device buffer: once its writes have ended their accesses, waits for the device
// to pass the fence of the last one.
class fence_waiter final : public waiter {
public:
  fence_waiter(storage& buffer, waiter& target) noexcept : buffer_(buffer), target_(target) {}

  // Called by the buffer's queue, which the last write still holds: the buffer is alive.
  void complete(std::exception_ptr error) noexcept override {
    waiter& target = target_;
    const device d = buffer_.device();
    const std::uint64_t fence = buffer_.fence.load(std::memory_order_acquire);
    delete this;
    if (error) {
      target.complete(std::move(error));
      return;
    }
    try {
      await_fence(d, fence, target);
    } catch (...) {
      target.complete(std::current_exception());  // out of memory for the queued wait
    }
  }

private:
  storage& buffer_;
  waiter& target_;
};

}  // namespace

void wait_for_buffer(storage& buffer, waiter& w) {
  if (buffer.device().is_cpu()) [[likely]] {
    buffer.var.wait_read(w);
    return;
  }
  auto* fenced = new fence_waiter(buffer, w);
  try {
    buffer.var.wait_read(*fenced);
  } catch (...) {
    delete fenced;
    throw;
  }
}

void wait_for_buffers(std::span<storage* const> buffers, waiter& w) {
  if (buffers.empty()) {
    w.complete(nullptr);
    return;
  }
  if (buffers.size() == 1) {
    wait_for_buffer(*buffers[0], w);
    return;
  }
  auto& join = join_waiter::make(buffers.size(), w);
  // Take every part first: the last part to complete frees `join`.
  boost::container::small_vector<waiter*, 8> parts;
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    parts.push_back(&join.part(i));
  }
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    wait_for_buffer(*buffers[i], *parts[i]);
  }
}

void check_may_block(const char* what) {
  if (on_backend_thread()) {
    throw std::system_error(make_error_code(errc::wait_on_backend_thread), what);
  }
}

}  // namespace cotensor::detail
