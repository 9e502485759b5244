#include "cuda/event_poller.hpp"

#include "cotensor/error.hpp"

#include "spin_mutex.hpp"

#include <chrono>
#include <exception>
#include <utility>

namespace cotensor::detail::cuda {
namespace {

// Rounds of polling with no event ending: spin this many (a short GPU op ends within them),
// yield this many more, then sleep `backoff` between rounds.
constexpr int spin_rounds = 64;
constexpr int yield_rounds = 64;
constexpr auto backoff = std::chrono::microseconds(10);

}  // namespace

event_poller::event_poller(event_source& source, std::string device_name)
    : source_(source), device_name_(std::move(device_name)), thread_([this] { run(); }) {}

event_poller::~event_poller() {
  shutdown();
  if (thread_.joinable()) {
    thread_.join();
  }
}

std::error_code event_poller::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

std::exception_ptr event_poller::device_error() const noexcept {
  try {
    throw std::system_error(failure(), "cotensor: device " + device_name_ + " failed");
  } catch (...) {
    return std::current_exception();  // or std::bad_alloc's, out of memory
  }
}

void event_poller::watch(void* event,
                         op_completion done,
                         std::uint64_t position,
                         after_event after) {
  {
    std::lock_guard lock(mutex_);
    if (!stopping_ && !failed()) {
      incoming_.push_back({event, std::move(done), position, after});
      has_incoming_.store(true, std::memory_order_release);
      wake_.notify_one();
      return;
    }
  }
  source_.release(event);
  after(false);
  if (position != 0) {
    source_.passed(position, false);
  }
  if (failed()) {
    done(device_error());
    return;
  }
  try {
    throw std::system_error(make_error_code(errc::shutting_down),
                            "cotensor: device " + device_name_);
  } catch (...) {
    done(std::current_exception());
  }
}

void event_poller::shutdown() noexcept {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    wake_.notify_one();
  }
  // One joins; a second caller, at once or later, waits for that.
  std::lock_guard join(join_mutex_);
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) {
    thread_.join();
  }
}

void event_poller::fail_device(const std::error_code& ec) noexcept {
  std::lock_guard lock(mutex_);
  if (!failed_.load(std::memory_order_relaxed)) {
    failure_ = ec;
    failed_.store(true, std::memory_order_release);
  }
}

bool event_poller::poll_once(std::deque<watched>& watching) noexcept {
  polls_.fetch_add(1, std::memory_order_relaxed);
  bool ended = false;
  for (auto it = watching.begin(); it != watching.end();) {
    std::error_code ec;
    const event_state state = failed() ? event_state::failed : source_.query(it->event, ec);
    if (state == event_state::pending) {
      ++it;
      continue;
    }
    if (state == event_state::failed && !failed()) {
      fail_device(ec);
    }
    source_.release(it->event);
    const bool ok = state == event_state::complete;
    auto error = it->after(ok);
    if (it->position != 0) {
      source_.passed(it->position, ok);  // host readers of its buffers first: the data is there
    }
    it->done(ok ? std::move(error) : device_error());
    it = watching.erase(it);
    ended = true;
  }
  return ended;
}

void event_poller::run() noexcept {
  source_.bind_thread();
  std::deque<watched> watching;  // this thread's own
  int idle_rounds = 0;
  for (;;) {
    if (watching.empty() || has_incoming_.load(std::memory_order_acquire)) {
      std::unique_lock lock(mutex_);
      if (watching.empty()) {
        // Nothing pending: sleep until an event is watched or the poller stops.
        wake_.wait(lock, [this] { return stopping_ || !incoming_.empty(); });
        idle_rounds = 0;
      }
      while (!incoming_.empty()) {
        watching.push_back(std::move(incoming_.front()));
        incoming_.pop_front();
      }
      has_incoming_.store(false, std::memory_order_relaxed);
      if (watching.empty() && stopping_) {
        return;  // drained
      }
    }
    if (poll_once(watching)) {
      idle_rounds = 0;
      continue;
    }
    ++idle_rounds;
    if (idle_rounds < spin_rounds) {
      cpu_relax();
    } else if (idle_rounds < spin_rounds + yield_rounds) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(backoff);
    }
  }
}

}  // namespace cotensor::detail::cuda
