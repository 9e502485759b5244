#pragma once

// Fault injection for tests: compiled into every build, off by default. A test arms a fault
// (make the N-th op fail, make the N-th allocation fail, delay the N-th op's completion) and
// checks that the engine hands the failure to exactly the waiters that depend on it, and leaks
// nothing. While nothing is armed the engine pays one relaxed load of `faults::armed` per op
// and per allocation, a branch the CPU predicts.
//
// Counting starts when a fault is armed: the N-th op is the N-th op pushed on any runtime
// afterwards (1: the next one), the N-th allocation the N-th call of `allocate_bytes`, which
// serves buffers and op nodes alike. Arming and the count are process-wide: tests that arm
// faults must not run ops on other threads meanwhile.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>

namespace cotensor::detail::faults {

/// What an op is made to do, decided when it is pushed.
enum class op_fault : std::uint8_t {
  none,
  fail,   // its kernel is not run; it throws `injected_fault` instead
  delay,  // its kernel runs, then its completion waits `delay_for(op)` before its outputs are ready
};

/// The exception an injected op failure throws (as if its kernel had).
class injected_fault : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// True while any fault is armed (and not yet spent).
extern std::atomic<bool> armed;
inline bool enabled() noexcept { return armed.load(std::memory_order_relaxed); }

/// Makes the `nth` op pushed from now fail (1: the next).
void fail_op(std::uint64_t nth);
/// Makes the `nth` call of `allocate_bytes` from now throw std::bad_alloc (1: the next).
void fail_allocation(std::uint64_t nth);
/// Delays the completion of the `nth` op pushed from now by `delay` (1: the next).
void delay_op(std::uint64_t nth, std::chrono::microseconds delay);
/// Disarms every fault.
void reset() noexcept;

// Hooks for the engine, called only when enabled().
/// The fault for the op being pushed; counts it.
op_fault on_push() noexcept;
/// Counts an allocation; throws std::bad_alloc if it is the one to fail.
void on_allocate();
/// How long to hold the completion of an op marked `delay`.
std::chrono::microseconds completion_delay() noexcept;

}  // namespace cotensor::detail::faults
