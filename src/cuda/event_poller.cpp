#include "cuda/event_poller.hpp"

#include "cotensor/error.hpp"

#include "support/spin_mutex.hpp"

#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include <algorithm>
#include <chrono>
#include <exception>
#include <iterator>
#include <utility>

namespace cotensor::detail::cuda {
namespace {

// The backoff policy (event_poller.hpp), measured from the last progress.
constexpr auto spin_for = std::chrono::microseconds(20);
constexpr auto yield_for = std::chrono::microseconds(100);
constexpr auto short_sleep_for = std::chrono::milliseconds(10);
constexpr auto short_sleep = std::chrono::microseconds(10);
constexpr auto long_sleep = std::chrono::microseconds(100);
// The poller's timer slack: Linux rounds a sleep up by the thread's slack (50 µs by default),
// which would make a 10 µs sleep about 60 µs.
constexpr unsigned long timer_slack_ns = 1000;

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
                         after_event after,
                         const void* stream) {
  {
    std::lock_guard lock(mutex_);
    if (!stopping_ && !failed()) {
      incoming_.push_back({event, std::move(done), position, after, stream});
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

void event_poller::end(watched& w, bool ok) noexcept {
  source_.release(w.event);
  auto error = w.after(ok);
  if (w.position != 0) {
    source_.passed(w.position, ok);  // host readers of its buffers first: the data is there
  }
  w.done(ok ? std::move(error) : device_error());
}

std::size_t event_poller::poll_once(std::deque<lane>& lanes) noexcept {
  polls_.fetch_add(1, std::memory_order_relaxed);
  std::size_t ended = 0;
  for (lane& l : lanes) {
    auto& events = l.events;
    for (auto it = events.begin(); it != events.end();) {
      std::error_code ec;
      const event_state state = failed() ? event_state::failed : source_.query(it->event, ec);
      if (state == event_state::pending) {
        if (l.stream != nullptr) {
          break;  // in stream order: every later event of the stream is pending too
        }
        ++it;
        continue;
      }
      if (state == event_state::failed && !failed()) {
        fail_device(ec);
      }
      end(*it, state == event_state::complete);
      it = events.erase(it);
      ++ended;
    }
  }
  return ended;
}

void event_poller::run() noexcept {
#if defined(__linux__)
  (void)prctl(PR_SET_TIMERSLACK, timer_slack_ns);  // this thread's; best effort
#endif
  source_.bind_thread();
  // This thread's own; a lane stays once made (a device has few streams). A deque: its
  // elements never move (a deque of move-only events has no noexcept move).
  std::deque<lane> lanes;
  std::size_t pending = 0;
  using clock = std::chrono::steady_clock;
  auto progress = clock::now();  // the last event watched or ended
  for (;;) {
    if (pending == 0 || has_incoming_.load(std::memory_order_acquire)) {
      std::unique_lock lock(mutex_);
      if (pending == 0) {
        // Nothing pending: sleep until an event is watched or the poller stops.
        wake_.wait(lock, [this] { return stopping_ || !incoming_.empty(); });
      }
      try {
        while (!incoming_.empty()) {
          watched& w = incoming_.front();
          auto it = std::find_if(lanes.begin(), lanes.end(),
                                 [&](const lane& l) { return l.stream == w.stream; });
          if (it == lanes.end()) {
            lanes.push_back(lane{w.stream, {}});
            it = std::prev(lanes.end());
          }
          it->events.push_back(std::move(w));
          incoming_.pop_front();
          ++pending;
        }
      } catch (...) {
        // Out of memory for a lane: the rest stay in incoming_ for a later round.
      }
      has_incoming_.store(!incoming_.empty(), std::memory_order_relaxed);
      if (pending == 0 && stopping_ && incoming_.empty()) {
        return;  // drained
      }
      progress = clock::now();
    }
    if (const std::size_t ended = poll_once(lanes); ended != 0) {
      pending -= ended;
      progress = clock::now();
      continue;
    }
    const auto idle = clock::now() - progress;
    if (idle < spin_for) {
      cpu_relax();
    } else if (idle < yield_for) {
      std::this_thread::yield();
    } else if (idle < short_sleep_for) {
      std::this_thread::sleep_for(short_sleep);
    } else {
      std::this_thread::sleep_for(long_sleep);
    }
  }
}

}  // namespace cotensor::detail::cuda
