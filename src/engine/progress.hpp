#pragma once

// Work that moves on only while some thread calls into it: Open MPI progresses a non-blocking
// collective only inside MPI calls, so each communicator has a thread that polls. A blocking
// wait that spins (engine_options::wait_spin) lends its thread to that work instead, as
// MPI_Wait does for its caller: while any waiter spins, a communicator's own thread sleeps and
// the waiters poll for it, so a rank keeps one busy thread where it would keep two.

#include <boost/container/small_vector.hpp>

#include <memory>

namespace cotensor::detail {

/// Something a spinning waiter can drive (dist::detail::comm_state). Its functions are called
/// from any thread that waits, never throw and never block beyond a short critical section.
class progress_source {
public:
  /// A waiter starts spinning: the source's own thread may step aside until it leaves.
  virtual void helper_arrives() noexcept = 0;
  /// One step of the source's work, unless another thread is driving it now.
  virtual void help() noexcept = 0;
  /// That waiter stops spinning (its wait ended, or it goes to sleep).
  virtual void helper_leaves() noexcept = 0;

protected:
  ~progress_source() = default;
};

/// Registers `s` with every later spinning wait, until it expires or is removed. A wait that
/// spins holds the source (a shared_ptr) meanwhile, so it may still call the source after
/// `remove_progress_source`: a source must stay callable once its own thread has stopped.
void add_progress_source(std::weak_ptr<progress_source> s);
/// Unregisters `s` (and any expired source). Never blocks on a waiter.
void remove_progress_source(const progress_source* s) noexcept;

/// A blocking wait's spin, lending the thread to the registered sources for its lifetime.
class progress_helper {
public:
  progress_helper();
  ~progress_helper();
  progress_helper(const progress_helper&) = delete;
  progress_helper& operator=(const progress_helper&) = delete;

  /// One step of every source, or a pause of the CPU where there is none.
  void step() const noexcept;

private:
  boost::container::small_vector<std::shared_ptr<progress_source>, 4> sources_;
};

}  // namespace cotensor::detail
