#pragma once

#include "cotensor/shape.hpp"

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace cotensor {

/// One op as the engine saw it while a trace was recording. Times are nanoseconds since the
/// trace started, on `std::chrono::steady_clock`.
struct traced_op {
  std::uint64_t id = 0;                   ///< 0, 1, ... in issue order within the trace
  std::string name;                       ///< `matmul`, `operator+`, `map`, ...
  std::vector<shape> outputs;             ///< shapes of the buffers it wrote
  std::uint64_t bytes = 0;                ///< bytes it read and wrote
  std::vector<std::uint64_t> depends_on;  ///< ids of earlier traced ops it had to wait for
  std::vector<std::uint64_t> reads;       ///< ids of the buffers it read (trace-local)
  std::vector<std::uint64_t> writes;      ///< ids of the buffers it wrote (trace-local)
  int frontend_thread = 0;                ///< small index of the thread that issued it
  int backend_thread = -1;                ///< small index of the worker that ran it (-1: none)
  std::int64_t enqueued = 0;              ///< issue call started
  std::int64_t issued = -1;               ///< issue call returned
  std::int64_t ready = -1;                ///< its last dependency was met
  std::int64_t started = -1;              ///< kernel started
  std::int64_t ended = -1;                ///< kernel ended (or the op was skipped)
  bool failed = false;                    ///< it raised or inherited an exception
};

/// One wait as the engine saw it: a thread or coroutine suspended until a value was ready.
struct traced_wait {
  std::string kind;            ///< `wait`, `wait_all`, `async_wait`, ...
  int thread = 0;              ///< small index of the thread that waited (or initiated)
  int resumed_on = -1;         ///< small index of the thread it resumed on
  std::int64_t suspended = 0;  ///< when it suspended (ns since the trace started)
  std::int64_t resumed = -1;   ///< -1 if it never resumed while recording
};

/// What the engine recorded between `start_trace()` and `stop_trace()`.
class trace {
public:
  std::vector<traced_op> ops;             ///< every op issued while recording, in issue order
  std::vector<traced_wait> waits;         ///< every wait that suspended while recording
  std::vector<std::string> thread_names;  ///< by index: `frontend 0`, `worker 1`, ...

  /// The dependency graph as Graphviz DOT: ops and buffers as nodes, reads and writes as edges.
  std::string to_dot() const;
  /// Chrome trace-event JSON (for Perfetto and chrome://tracing): a track per thread, a slice
  /// per op and per blocking wait, an async slice on the process per `async_wait` (its thread
  /// is free meanwhile), flow arrows from enqueue to execution and producer to consumer.
  std::string to_chrome_json() const;
  /// Writes `to_chrome_json()` to `path`; throws std::system_error if it cannot.
  void save(const std::string& path) const;
};

/// Starts recording every op issued on the current runtime and every wait. Recording costs a
/// few allocations per op; when no trace records, the engine pays one predictable branch per
/// op. `COTENSOR_TRACE=path.json` records the whole run of a program into `path.json`.
void start_trace();

/// Stops recording and returns what was recorded; ops still in flight are waited for first.
/// Throws std::logic_error if no trace was started.
trace stop_trace();

}  // namespace cotensor
