#pragma once

// The seam between the dependency engine and the devices that run its ops.
//
// The engine orders ops by the buffers they touch; a backend runs the ops that are ready. The
// engine hands each ready op to the backend of the op's device (`backend::submit`); the backend
// calls `run_op` on one of its threads; the op's work runs there and ends the op through its
// `op_completion`, at once (a CPU kernel) or later, from any thread (a GPU event, an MPI
// request, a socket read). The completion hands the op back to its backend
// (`backend::submit_retire`), whose thread releases the op's buffers, dispatches dependents and
// completes waiters: a completion never runs dependents on the thread that invoked it (unless
// the backend cannot take the hand-off for want of memory: then it retires the op there).
//
// Adding a device is a folder with a `backend` and a `device_allocator`, plus one registration
// in src/backends.cpp. The engine includes no backend's header and no backend includes the
// engine's private headers other than this one (and the op node it carries).
//
// A device that orders its own work (the CUDA backend: src/cuda/) follows this contract:
// - Its ops' work only enqueues work on the device. After an op's kernel returns, the engine
//   hands its completion to the backend (`backend::launched`), which invokes it when the
//   device has finished (an event seen complete by its poller).
// - It may end an op's buffer accesses at launch (`op_completion::release_accesses`), relying
//   on its stream's order for consumers on the same stream; the op stays in flight (for
//   `wait_all`, scopes and admission) until its completion is invoked. An error raised after
//   that reaches the op's own waiters and `wait_all`, and fails the device (CUDA's errors
//   after launch are sticky context errors): its later ops fail too.
// - It then stamps each buffer the op writes with a fence (`storage::fence`, the op's
//   position on its stream). A host wait on the buffer (`wait_for_buffers`) that finds the
//   fence not yet passed waits for it through `await_fence`, completed by the poller: no thread
//   ever blocks on a device event. A consumer on another stream or device waits on the device
//   in its own way (an event recorded on the producer's stream, waited by the consumer's).

#include "cotensor/detail/op_completion.hpp"
#include "cotensor/device.hpp"

#include "engine/options.hpp"

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>

namespace cotensor::detail {

struct op_node;
class waiter;

/// Runs a ready op on the calling backend thread: inherits an input's error or runs the op's
/// work, which ends it through its completion. Implemented by the engine; called by backends.
void run_op(op_node* op) noexcept;
/// Retires an op whose completion was invoked: releases its buffers, dispatches dependents,
/// accounts it and completes its waiters. Called by a backend on its own thread after
/// `submit_retire`.
void retire_op(op_node* op) noexcept;

/// What a buffer's block is for, which its allocator may use to place it.
enum class block_use : std::uint8_t {
  /// Allocated as its buffer is made (at most `delayed_bytes()`).
  immediate,
  /// Allocated as its buffer's first writer starts, on that op's backend thread.
  delayed,
  /// Delayed, of a `buffer_lifetime::lasting` buffer (engine/storage.hpp): a model's weights,
  /// read again and again for as long as the model lives.
  lasting,
};

/// Where a device's buffers get their memory. One per device type, process-wide and never
/// destroyed: a buffer may outlive every runtime.
class device_allocator {
public:
  /// Buffers of more than `delayed_bytes` get their memory when the op writing them first
  /// starts (MXNet's delay_alloc), not when they are made. If `small_in_host_blocks`, smaller
  /// ones are plain host memory from the pooled host allocator (`allocate_bytes`, 64-byte
  /// aligned), which `storage` takes directly, with no call through this interface: the CPU's
  /// fast path, worth ~40 instructions per small op.
  constexpr device_allocator(std::size_t delayed_bytes, bool small_in_host_blocks) noexcept
      : delayed_bytes_(delayed_bytes), small_in_host_blocks_(small_in_host_blocks) {}

  std::size_t delayed_bytes() const noexcept { return delayed_bytes_; }
  bool small_in_host_blocks() const noexcept { return small_in_host_blocks_; }
  /// A block of `bytes` for a buffer on `d`, used as `use` says. Throws std::bad_alloc.
  virtual void* allocate(device d, std::size_t bytes, block_use use) = 0;
  /// Gives back a block from `allocate` with the same `d`, `bytes` and `use`, from any thread,
  /// once no op uses it any more (the ops that touched its buffer have ended).
  virtual void deallocate(device d, void* p, std::size_t bytes, block_use use) noexcept = 0;

  /// The alignment of host blocks.
  static constexpr std::size_t host_alignment = 64;

protected:
  ~device_allocator() = default;

private:
  std::size_t delayed_bytes_;
  bool small_in_host_blocks_;
};

/// The threads of one device type in one engine: a oneTBB arena for the CPU, a launcher thread
/// and an event poller per GPU for CUDA.
///
/// Thread safety: every member may be called from any thread, at once, until `shutdown`.
class backend {
public:
  backend() = default;
  backend(const backend&) = delete;
  backend& operator=(const backend&) = delete;
  virtual ~backend() = default;

  /// Runs `op` (every access granted) by calling `run_op(op)` on one of the backend's threads,
  /// later; returns at once. Never throws: a backend that cannot take work any more runs it
  /// itself.
  virtual void submit(op_node* op) noexcept = 0;
  /// Runs `run_op(op)` on the calling thread, inside the backend's context (so nested
  /// parallel loops use its threads), and returns when it returns: the synchronous engine.
  virtual void execute(op_node* op) noexcept = 0;
  /// Calls `retire_op(op)` on one of the backend's threads, later; returns at once.
  virtual void submit_retire(op_node* op) noexcept = 0;
  /// The threads that run ops.
  virtual unsigned concurrency() const noexcept = 0;
  /// Runs the work still queued, then stops the threads. Called once, by the engine's
  /// destructor, after every op has retired.
  virtual void shutdown() noexcept = 0;
  /// For a backend whose kernels enqueue work on a device: called on the thread that ran the
  /// kernel of `op` (every access still held), right after it returned; invokes `done` when the
  /// device has finished that work (the default: at once). See the contract above.
  virtual void launched(op_node* op, op_completion done) noexcept;
};

/// Completes `w` once the device of a buffer has passed its `fence` (see the contract above),
/// at once if it has, with the device's error if it failed. For a CPU buffer, at once.
void await_fence(device d, std::uint64_t fence, waiter& w);

struct kernel_table;

/// What a device type brings to the composition root (src/backends.cpp): its backend, the
/// allocator of its buffers, its kernels and what this machine has of it. The CPU's is built
/// in; a GPU's comes from its backend library (libcotensor_cuda), loaded with the first
/// question about such a device.
struct device_registration {
  /// Its backend for an engine with `options`.
  std::unique_ptr<backend> (*make_backend)(const engine_options& options) = nullptr;
  /// Completes a host wait once the device passed a buffer's fence (backend::launched); null
  /// for a device whose ops end when their kernels return.
  void (*await_fence)(device d, std::uint64_t fence, waiter& w) = nullptr;
  device_allocator* allocator = nullptr;
  const kernel_table* kernels = nullptr;
  /// The devices of this type on this machine (asks the driver once).
  int (*device_count)() noexcept = nullptr;
  /// True if ops can run on the device of this index.
  bool (*usable)(int index) noexcept = nullptr;
  /// Why the device of this index cannot be used, in words; empty if it can.
  std::string (*unavailable_reason)(int index) = nullptr;
};

/// The backend that runs ops on `type` devices for an engine with `options` (worker_threads:
/// its CPU workers, 0: one per hardware thread). Throws std::system_error
/// (errc::device_unavailable) if this build has none. Registered in src/backends.cpp.
std::unique_ptr<backend> make_backend(device::kind type, const engine_options& options);
/// "device cuda:0 is not available (<why>)", for an error about a device `has_backend` refuses.
std::string unavailable_message(device d);
/// Why this build cannot run ops on `d` on this machine, in words; empty if it can.
std::string unavailable_reason(device d);
/// The devices of `type` this build can run ops on, on this machine (the CPU: 1).
int device_count(device::kind type) noexcept;
/// True if this build has a backend for `d`'s device type (the CPU: always).
bool has_device_backend(device d) noexcept;
inline bool has_backend(device d) noexcept { return d.is_cpu() || has_device_backend(d); }
/// The CPU's allocator, always there: the common case costs one load. Registered, as every
/// other device's, in src/backends.cpp.
extern device_allocator* const cpu_allocator;
/// The allocator of `d`'s buffers, for any device. Throws std::system_error
/// (errc::device_unavailable) if this build has none.
device_allocator& device_allocator_of(device d);
/// The allocator of `d`'s buffers; as `device_allocator_of`.
inline device_allocator& allocator_of(device d) {
  return d.is_cpu() ? *cpu_allocator : device_allocator_of(d);
}

/// Set while this thread runs backend work (see backend_thread_guard). Initial-exec, like
/// every thread_local the hot path reads: one `fs`-relative load, where the default model for
/// a shared library calls `__tls_get_addr`.
extern constinit thread_local bool backend_thread_flag __attribute__((tls_model("initial-exec")));
/// True on a thread running backend work (see backend_thread_guard).
inline bool on_backend_thread() noexcept { return backend_thread_flag; }

/// Marks the calling thread as running backend work (an op, or a chunk of a `map` kernel that
/// oneTBB may have handed to another worker) for its lifetime, so that blocking waits there are
/// refused instead of deadlocking.
class backend_thread_guard {
public:
  backend_thread_guard() noexcept;
  backend_thread_guard(const backend_thread_guard&) = delete;
  backend_thread_guard& operator=(const backend_thread_guard&) = delete;
  ~backend_thread_guard();

private:
  bool previous_;
};

}  // namespace cotensor::detail
