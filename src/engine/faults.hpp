#pragma once

// Fault injection for tests (the op side is an observer in src/engine/faults.cpp): compiled
// into every build, off by default. A test arms a fault (make the N-th op fail, make the N-th
// allocation fail, delay the N-th op's completion or its hand-off to its backend) and checks
// that the engine hands the failure to exactly the waiters that depend on it, and leaks nothing.
// While anything is armed, an observer of ops (engine/observer.hpp) counts pushes and fails or
// delays the chosen op; while nothing is, ops pay nothing and allocations one relaxed load of
// `fault_hooks::armed`, a branch the CPU predicts.
//
// Counting starts when a fault is armed: the N-th op is the N-th op pushed on any runtime
// afterwards (1: the next one), the N-th allocation the N-th call of `allocate_bytes`, which
// serves buffers and op nodes alike. Arming and the count are process-wide: tests that arm
// faults must not run ops on other threads meanwhile. The N-th CUDA call is the N-th call
// checked by COTENSOR_CUDA_CHECK.

#include "support/fault_hooks.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>

namespace cotensor::detail {
struct op_node;
}  // namespace cotensor::detail

namespace cotensor::detail::faults {

/// The exception an injected op failure throws (as if its kernel had).
class injected_fault : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// True while any fault is armed (and not yet spent).
inline bool enabled() noexcept { return fault_hooks::enabled(); }

/// Makes the `nth` op pushed from now fail (1: the next): its work is not run; it throws
/// `injected_fault` instead.
void fail_op(std::uint64_t nth);
/// Makes the `nth` call of `allocate_bytes` from now throw std::bad_alloc (1: the next).
void fail_allocation(std::uint64_t nth);
/// Delays the completion of the `nth` op pushed from now by `delay` (1: the next): its work
/// runs, then its backend thread sleeps before its outputs are ready.
void delay_op(std::uint64_t nth, std::chrono::microseconds delay);
/// Delays the hand-off of the `nth` op pushed from now to its backend by `delay` (1: the next):
/// when its last dependency is met, the thread that met it queues it on the backend, then sleeps
/// before it leaves the engine's dispatch, as a thread preempted inside the backend's enqueue
/// would. The op itself runs at once, on a worker. The sleep ends after `delay` or at
/// release_delayed_dispatches, whichever comes first; `delayed_dispatches_ended` counts these
/// sleeps that have ended.
void delay_dispatch(std::uint64_t nth, std::chrono::microseconds delay);
/// Ends the sleep of a hand-off delayed by delay_dispatch now, and of any that begins before the
/// next delay_dispatch or reset.
void release_delayed_dispatches() noexcept;
/// How many hand-offs delayed by delay_dispatch have ended since the process began.
std::uint64_t delayed_dispatches_ended() noexcept;
/// Makes the `nth` CUDA call checked by the CUDA backend from now fail (1: the next), as if it
/// had returned `cudaErrorUnknown` (the call itself is made). Counts only while enabled().
void fail_cuda_call(std::uint64_t nth);
/// Disarms every fault.
void reset() noexcept;

/// For the allocator, called only when enabled(): counts an allocation; throws std::bad_alloc
/// if it is the one to fail.
void on_allocate();
/// For COTENSOR_CUDA_CHECK, called only when enabled(): counts a CUDA call; true if it is the
/// one to fail.
bool on_cuda_call() noexcept;
/// For the engine's dispatch, called only when enabled(), before `op` goes to its backend:
/// true if its hand-off is the one to delay (then the engine calls end_delayed_dispatch after
/// the backend's submit returns).
bool delays_dispatch(const op_node& op) noexcept;
/// Sleeps the delay of delay_dispatch, then counts it ended.
void end_delayed_dispatch() noexcept;

}  // namespace cotensor::detail::faults
