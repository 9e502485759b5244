#pragma once

#include "cotensor/trace.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace cotensor::detail {

class storage;
struct op_node;

/// Records ops and waits for a `cotensor::trace`. Every call takes one short lock; the engine
/// calls it only while a trace is recording.
class recorder {
public:
  recorder();

  /// Nanoseconds since the recording started.
  std::int64_t now() const noexcept;
  /// An op is being issued (at `enqueued`): gives it an id and works out the traced ops it
  /// must wait for from each buffer's last writer and readers since.
  std::uint64_t on_issue(const op_node& op, std::int64_t enqueued);
  void on_issued(std::uint64_t id);
  void on_ready(std::uint64_t id);
  void on_start(std::uint64_t id);
  void on_end(std::uint64_t id, bool failed);
  /// A wait began on this thread; returns a handle for `on_wait_end`.
  std::uint64_t on_wait_begin(const char* kind);
  void on_wait_end(std::uint64_t handle);

  /// What was recorded so far.
  trace snapshot() const;

private:
  struct buffer_state {
    std::weak_ptr<storage> alive;  // an address reused by a new buffer is a new buffer
    std::uint64_t id = 0;
    std::int64_t last_writer = -1;
    std::vector<std::uint64_t> readers;  // traced readers since the last write
  };
  int thread_index();                                       // lock held
  buffer_state& buffer(const std::shared_ptr<storage>& s);  // lock held

  mutable std::mutex mutex_;
  std::chrono::steady_clock::time_point start_;
  trace trace_;
  std::unordered_map<std::thread::id, int> threads_;
  std::unordered_map<const storage*, buffer_state> buffers_;
  std::uint64_t next_buffer_id_ = 0;
};

}  // namespace cotensor::detail
