#pragma once

#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>

namespace cotensor::detail {

class waiter;
struct op_node;

/// The read/write queue of one buffer, after MXNet's ThreadedVar.
///
/// Reads run together; a write waits for every earlier read and write; a read waits for earlier
/// writes. An access that cannot start yet joins a FIFO; invariant: the FIFO is empty or starts
/// with a write. A wait (`wait_read`) is a read that ends the moment it starts: it captures the
/// buffer's error and completes its waiter.
class var {
public:
  /// Asks for a read by `op`; calls `op->dependency_met()` when it may start (maybe at once).
  void read(op_node* op);
  /// Asks for a write by `op`; calls `op->dependency_met()` when it may start (maybe at once).
  void write(op_node* op);
  /// Completes `w` with this buffer's error once every earlier write has ended (maybe at once).
  void wait_read(waiter& w);
  /// Ends a read started by `read`.
  void end_read();
  /// Ends the write started by `write`; the buffer's error has been set by the writer.
  void end_write();

  /// The exception of the op that last wrote this buffer, or null. Written only by the op
  /// holding the write, read only by ops holding a read (or under the lock, by waits).
  std::exception_ptr error;

private:
  struct pending {
    op_node* op;  // null for a wait
    waiter* w;
    bool is_write;
  };
  struct grants;
  // Starts accesses from the front of the FIFO as far as the rules allow; lock held.
  void grant_front(grants& g);

  std::mutex mutex_;
  std::int32_t readers_ = 0;  // reads running now
  bool writing_ = false;      // a write is running now
  std::deque<pending> queue_;
};

}  // namespace cotensor::detail
