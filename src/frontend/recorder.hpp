#pragma once

#include "cotensor/trace.hpp"

#include "engine/observer.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace cotensor::detail {

class engine;
class storage;
struct op_node;

/// Records the ops of one engine, and waits, for a `cotensor::trace`: an observer of ops while
/// the trace records. Every call takes one short lock; out of memory, an event is lost.
class recorder final : public op_observer {
public:
  /// Records the ops of `e` (observers see every engine's).
  explicit recorder(const engine* e);

  /// Nanoseconds since the recording started.
  std::int64_t now() const noexcept;
  /// Gives an op being issued an id and works out the traced ops it must wait for from each
  /// buffer's last writer and readers since.
  void on_push(const op_node& op) noexcept override;
  void on_issued(std::uint64_t seq) noexcept override;
  void on_ready(std::uint64_t seq) noexcept override;
  void on_start(const op_node& op) noexcept override;
  void on_end(const op_node& op, bool failed) noexcept override;
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
  // The trace op of observer sequence number `seq`, or null if not ours; lock held.
  traced_op* find(std::uint64_t seq);
  void issue(const op_node& op, std::int64_t enqueued);  // lock held

  const engine* engine_;
  std::unordered_map<std::uint64_t, std::uint64_t> ids_;  // observer seq -> trace op id
  mutable std::mutex mutex_;
  std::chrono::steady_clock::time_point start_;
  trace trace_;
  std::unordered_map<std::thread::id, int> threads_;
  std::unordered_map<const storage*, buffer_state> buffers_;
  std::uint64_t next_buffer_id_ = 0;
};

/// Starts recording a trace of the ops of `e` (src/frontend/trace.cpp). Throws std::logic_error if
/// one is recording there.
void start_recording(engine& e);
/// Waits for the ops in flight on `e`, stops recording and returns the trace (null if none).
std::shared_ptr<recorder> stop_recording(engine& e);

}  // namespace cotensor::detail
