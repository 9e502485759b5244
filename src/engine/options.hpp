#pragma once

// What the engine is configured with and what it counts: its own structs, filled by the
// frontend from the public `runtime_options` and read back into `runtime_stats`
// (src/frontend/runtime.cpp), so that the engine includes no public runtime header.

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace cotensor::detail {

/// How an engine runs its ops (each field as its twin in `runtime_options`).
struct engine_options {
  /// Backend worker threads; 0: one per hardware thread.
  unsigned worker_threads = 0;
  /// The most ops in flight before issuing blocks; 0: unbounded.
  std::size_t max_in_flight = 1024;
  /// About the most bytes the ops in flight may write before issuing blocks; 0: unbounded.
  std::size_t max_in_flight_bytes = std::size_t{256} << 20;
  /// Run every op at its call, on the calling thread.
  bool synchronous = false;
  /// Run a small op whose inputs are computed at its call, on the calling thread.
  bool inline_small_ops = true;
  /// Let cuBLAS run FP32 matmuls in TF32.
  bool allow_tf32 = false;
  /// How long a blocking wait spins before it sleeps.
  std::chrono::microseconds wait_spin{0};
};

/// What an engine has done so far (each field as its twin in `runtime_stats`).
struct engine_stats {
  std::uint64_t issued = 0;
  std::uint64_t completed = 0;
  std::size_t in_flight = 0;
  std::size_t peak_in_flight = 0;
  std::uint64_t admission_waits = 0;
  std::uint64_t admission_deferred = 0;
  std::int64_t live_buffers = 0;
  std::int64_t live_buffer_bytes = 0;
  std::int64_t live_ops = 0;
};

}  // namespace cotensor::detail
