#pragma once

#include "cotensor/asio.hpp"
#include "cotensor/detail/async_wait.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

namespace cotensor {

namespace detail {
class engine;
engine& current_engine();
}  // namespace detail

/// How a runtime runs its ops.
struct runtime_options {
  /// Backend worker threads; 0 means one per hardware thread.
  unsigned worker_threads = 0;
  /// The most ops in flight (issued and not yet ended) before issuing blocks; 0: unbounded.
  /// Bounds the memory a frontend that runs ahead can pin (the chapter's overfilled queue).
  /// A thread running an Asio event loop is never blocked: it is admitted over the bound and
  /// its next cotensor async wait waits for room too (see `runtime_stats::admission_deferred`;
  /// the debt belongs to the thread, not to one coroutine, so a coroutine that only awaits
  /// other things is not paced: `co_await admission()` does that). An `async_op` counts until
  /// its `start` returns, not while it waits for its completion.
  std::size_t max_in_flight = 1024;
  /// About the most bytes the ops in flight may write before issuing blocks; 0: unbounded. An
  /// op that writes more is admitted alone, once nothing else is in flight. Bounds the memory
  /// a frontend running ahead over medium or large tensors pins, and the fresh buffers it makes
  /// the kernel fault in: 10^5-element `y = x + 1` issued ahead costs 62 µs per op with 1024
  /// such ops (800 MB) in flight, 36 µs with 256. The default leaves room for the chapter's
  /// matmul loop (80 MB) to be issued at once.
  std::size_t max_in_flight_bytes = std::size_t{256} << 20;
  /// Run every op at its call, on the calling thread, like MXNet's NaiveEngine: a kernel's
  /// exception is thrown by the op call itself, at the offending line.
  bool synchronous = false;
  /// Run a small op (at most 128 KiB of data touched, no user function) at its call when its
  /// inputs are already computed and nothing is queued on its buffers: handing it to a worker
  /// and back would cost more than running it. Such an op never counts as in flight, so it
  /// never waits for admission. Ops that must wait, larger ops and `map` always go to the
  /// backend.
  bool inline_small_ops = true;
  /// Let cuBLAS run FP32 `matmul` on CUDA devices in TF32 (10-bit mantissa inputs, FP32
  /// accumulation): up to 8x faster on an H100, about 1e-3 relative error. Off by default, as in
  /// PyTorch since 1.12: results then match the CPU's to FP32 rounding.
  bool allow_tf32 = false;
  /// How long a blocking wait (`tensor::wait`, `item`, `wait_all`, `scope::wait`) spins on its
  /// core, polling, before it sleeps. A sleeping thread costs a wake-up when its op ends (a
  /// futex wake and a reschedule: 5 to 30 µs), which dominates short ops such as a lone
  /// all-reduce of a few kilobytes (docs/distributed.md, "A lone op"). While it spins, the
  /// waiting thread also drives the MPI collectives in flight, as MPI_Wait does, and the
  /// communication threads sleep: the rank keeps one busy thread, not two. With 2 ranks on
  /// 2 vCPUs a lone all-reduce then costs +4.6 to +5.8 µs over MPI_Allreduce, not +8 to +9.
  /// The spin yields its core every few µs to a thread that shares it, but still takes cycles
  /// from CPU work it waits for (the backend's workers). So 0 (the short spin of about 1 µs
  /// that every wait makes) by default; turn it on, 20 to 100 µs, where waits are mostly for
  /// collectives or a core is free.
  /// Coroutine waits (`co_await t.ready()`) never spin.
  std::chrono::microseconds wait_spin{0};

  /// The defaults, overridden by the environment: `COTENSOR_ENGINE=naive` (synchronous) or
  /// `threaded`, `COTENSOR_NUM_THREADS=N`, `COTENSOR_MAX_IN_FLIGHT=N` (0: unbounded),
  /// `COTENSOR_MAX_IN_FLIGHT_BYTES=N` (0: unbounded), `COTENSOR_INLINE_SMALL_OPS=0|1`,
  /// `COTENSOR_ALLOW_TF32=0|1`, `COTENSOR_WAIT_SPIN_US=N`.
  /// An empty variable counts as unset. Throws std::invalid_argument, naming the variable and its
  /// value, for a malformed one (not a whole number, or too large for its field).
  static runtime_options from_environment();
};

/// What a runtime has done so far.
struct runtime_stats {
  std::uint64_t issued = 0;     ///< ops issued
  std::uint64_t completed = 0;  ///< ops ended (run, failed or skipped)
  /// Ops holding room in flight: issued and not yet ended, less the ops run at their call
  /// and the `async_op`s whose start has returned (they wait outside the engine).
  std::size_t in_flight = 0;
  std::size_t peak_in_flight = 0;     ///< the most `in_flight` has been
  std::uint64_t admission_waits = 0;  ///< times an issuing thread found the queue full
  /// Of those, times the thread ran an Asio event loop and so was admitted over the bound
  /// instead of blocked: its next cotensor async wait waits for room as well.
  std::uint64_t admission_deferred = 0;
  /// Tensor buffers alive in the whole process (all runtimes), for leak checks.
  std::int64_t live_buffers = 0;
  /// Bytes of tensor memory allocated in the whole process. A buffer of more than 64 KiB is
  /// allocated when the op that writes it starts, not when that op is issued, so ops queued
  /// ahead do not count here until they run.
  std::int64_t live_buffer_bytes = 0;
  /// Op nodes alive in the whole process (issued or being built, not yet freed).
  std::int64_t live_ops = 0;
};

/// The engine and backend that run the ops issued while it is current.
///
/// Ops need no setup: a process-wide default runtime, configured by
/// `runtime_options::from_environment()`, starts on first use. Constructing a `runtime` makes it
/// current for the whole process (ops issued from any thread go to it) until it is destroyed,
/// when the previous one is current again.
///
/// Destruction waits for every op issued on it to end. Thread safety: construct and destroy
/// runtimes while no other thread issues ops; everything else may be called from any thread.
class runtime {
public:
  /// Starts a runtime with `options` (workers, engine) and makes it current.
  explicit runtime(runtime_options options = runtime_options::from_environment());
  runtime(const runtime&) = delete;
  runtime& operator=(const runtime&) = delete;
  ~runtime();

  /// The current runtime, starting the default one on first use.
  static runtime& current();

  /// The options it was started with.
  const runtime_options& options() const noexcept;
  /// Its counters now (a snapshot). Thread safety: any thread.
  runtime_stats stats() const noexcept;
  /// The number of backend worker threads.
  unsigned worker_threads() const noexcept;

private:
  friend detail::engine& detail::current_engine();
  struct default_tag {};
  runtime(default_tag, runtime_options options);
  void trace_from_environment();

  std::unique_ptr<detail::engine> engine_;
  runtime_options options_;
  runtime* previous_ = nullptr;
  bool installed_ = false;
  std::string trace_path_;  // COTENSOR_TRACE: the trace is saved there when the runtime ends
};

/// Waits, as a universal Asio async operation, until the current runtime has room for another op
/// in flight, so that a coroutine can pace itself instead of blocking its thread in an op call.
///
/// Completion: `void(std::exception_ptr)`, null; the handler runs on its associated executor.
/// Room is not reserved: another thread may take it first. Cancellation: every type, completing
/// promptly with `operation_aborted`. Shutdown: as `tensor::async_wait`. Thread safety: any
/// thread.
template <class Token>
auto async_admit(Token&& token) {
  return detail::async_wait_with(std::forward<Token>(token),
                                 [](detail::waiter& w) { detail::start_admission(w); });
}

/// `co_await admission()`: `async_admit(asio::deferred)`.
inline auto admission() { return async_admit(asio::deferred); }

}  // namespace cotensor
