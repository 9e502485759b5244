#pragma once

#include "support/spin_mutex.hpp"

#include <cstdint>
#include <exception>
#include <mutex>

namespace cotensor::detail {

class waiter;
struct op_node;

/// One access waiting in a var's FIFO. Ops embed theirs (one per buffer they touch), so queuing
/// allocates nothing; a queued wait allocates one.
struct pending_access {
  pending_access* next = nullptr;
  op_node* op = nullptr;  // null for a wait
  waiter* w = nullptr;
  bool is_write = false;
};

/// The read/write queue of one buffer, after MXNet's ThreadedVar.
///
/// Reads run together; a write waits for every earlier read and write; a read waits for earlier
/// writes. An access that cannot start yet joins a FIFO; invariant: the FIFO is empty or starts
/// with a write. A wait (`wait_read`) is a read that ends the moment it starts: it captures the
/// buffer's error and completes its waiter.
class var {
public:
  var() = default;
  var(const var&) = delete;
  var& operator=(const var&) = delete;
  ~var();

  /// Asks for a read by `entry->op`; calls `op->dependency_met()` when it may start (maybe at
  /// once). `entry` must stay valid until then.
  void read(pending_access* entry);
  /// Asks for a write by `entry->op`, as `read`.
  void write(pending_access* entry);
  /// Starts a read at once if no write runs or waits (nothing queued), without an op; false
  /// (and nothing changed) otherwise. End it with `end_read`.
  bool try_read() noexcept;
  /// Starts a write at once if nothing runs or waits, as `try_read`. End it with `end_write`.
  bool try_write() noexcept;
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
  struct grants;
  // Whether a read (a write) may start now, ahead of nothing: no write running, nothing
  // queued (and, for a write, no read running). Lock held.
  bool may_read() const noexcept { return !writing_ && head_ == nullptr; }
  bool may_write() const noexcept { return may_read() && readers_ == 0; }
  // Starts a read (a write, if `Write`) if one may start now, and says whether it did. Lock held.
  template <bool Write>
  bool start_now() noexcept;
  // read and write: starts the access now, or queues `entry`.
  template <bool Write>
  void start_or_enqueue(pending_access* entry);
  // Starts accesses from the front of the FIFO as far as the rules allow; lock held.
  void grant_front(grants& g);
  // After an access ended under `lock`, with accesses queued: starts what the FIFO now allows,
  // outside the lock.
  void start_waiting(std::unique_lock<spin_mutex>& lock);
  void enqueue(pending_access* entry);

  spin_mutex mutex_;
  std::int32_t readers_ = 0;  // reads running now
  bool writing_ = false;      // a write is running now
  pending_access* head_ = nullptr;
  pending_access* tail_ = nullptr;
};

}  // namespace cotensor::detail
