#pragma once

// What the engine is configured with and what it counts: its own structs, filled by the
// frontend from the public `runtime_options` and read back into `runtime_stats`
// (src/frontend/runtime.cpp), so that the engine includes no public runtime header. Each field
// is named once, in a list below, X(type, name, default); the structs and the frontend's copies
// are made from the lists, so a field is added in two places: its list and the public struct.

#include <chrono>
#include <cstddef>
#include <cstdint>

/// How an engine runs its ops: each field as its twin in `runtime_options`, which says what it
/// does.
#define COTENSOR_ENGINE_OPTIONS(X)                                                                 \
  X(unsigned, worker_threads, 0)                                                                   \
  X(std::size_t, max_in_flight, 1024)                                                              \
  X(std::size_t, max_in_flight_bytes, std::size_t{256} << 20)                                      \
  X(bool, synchronous, false)                                                                      \
  X(bool, inline_small_ops, true)                                                                  \
  X(bool, allow_tf32, false)                                                                       \
  X(std::chrono::microseconds, wait_spin, std::chrono::microseconds{0})

/// What an engine has done so far: each field as its twin in `runtime_stats`.
#define COTENSOR_ENGINE_STATS(X)                                                                   \
  X(std::uint64_t, issued, 0)                                                                      \
  X(std::uint64_t, completed, 0)                                                                   \
  X(std::size_t, in_flight, 0)                                                                     \
  X(std::size_t, peak_in_flight, 0)                                                                \
  X(std::uint64_t, admission_waits, 0)                                                             \
  X(std::uint64_t, admission_deferred, 0)                                                          \
  X(std::int64_t, live_buffers, 0)                                                                 \
  X(std::int64_t, live_buffer_bytes, 0)                                                            \
  X(std::int64_t, live_ops, 0)

// A data member of the structs below, from an entry of a list.
#define COTENSOR_ENGINE_FIELD(type, name, init) type name = init;

namespace cotensor::detail {

/// How an engine runs its ops (COTENSOR_ENGINE_OPTIONS).
struct engine_options {
  COTENSOR_ENGINE_OPTIONS(COTENSOR_ENGINE_FIELD)
};

/// What an engine has done so far (COTENSOR_ENGINE_STATS).
struct engine_stats {
  COTENSOR_ENGINE_STATS(COTENSOR_ENGINE_FIELD)
};

}  // namespace cotensor::detail
