#pragma once

#include "cotensor/device.hpp"

#include "engine/kernel_fn.hpp"
#include "engine/storage.hpp"
#include "engine/var.hpp"

#include <boost/container/small_vector.hpp>

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <initializer_list>
#include <memory>

namespace cotensor::detail {

class engine;
struct observer_list;
class tracker;
class waiter;

/// How an op touches a buffer. `read_write` is a write whose old value matters (`+=`): the
/// buffer's old error is inherited like an input's.
enum class access_mode : std::uint8_t { read, write, read_write };

struct access {
  std::shared_ptr<storage> buffer;
  access_mode mode;
  pending_access entry;  // this access's place in the buffer's FIFO
};

/// One op in the engine: what it touches, what it runs, and the sets it belongs to.
struct op_node {
  const char* name = "";
  kernel_fn kernel;
  boost::container::small_vector<access, 3> accesses;  // one per buffer, deduplicated
  engine* owner = nullptr;
  cotensor::device device;  // where it runs: see add_access
  // Accesses not yet granted, plus one held by `push` until every access is requested.
  std::atomic<std::int32_t> unmet{0};
  std::uint64_t generation = 0;    // in the runtime's tracker
  std::shared_ptr<tracker> scope;  // null when issued outside a scope
  std::uint64_t scope_generation = 0;
  waiter* on_done = nullptr;       // synchronous mode: completed with the op's own error
  std::size_t written_bytes = 0;   // counted in flight by admission
  bool holds_room = true;          // false once an op that completes later gave its room back
  bool runs_user_code = false;     // `map`, `async_op`: never run inline on the issuing thread
  bool accesses_released = false;  // by op_completion::release_accesses, before the end
  std::exception_ptr inherited;    // an input's error: the work was skipped
  std::exception_ptr own;          // the error the op's work raised
  // An op that completes later: its start call and its completion each hold it; the last to
  // let go retires it. `ended` is set by the first to end it (which wrote `own`).
  std::atomic<std::int32_t> holds{0};
  std::atomic<bool> ended{false};
  std::shared_ptr<const observer_list> observers;  // attached when it was issued, or null
  std::uint64_t seq = 0;                           // names it to observers

  /// One access granted (or `push` done asking); the last one dispatches the op.
  void dependency_met();

  // Ops are made on the frontend and freed on a worker: a scalable allocator avoids the
  // cross-thread contention of malloc.
  static void* operator new(std::size_t size);
  static void operator delete(void* p, std::size_t size) noexcept;
};

/// The buffers an op reads or writes, by reference: the op node takes the only copies (a list
/// of `shared_ptr` values would cost two more atomic reference-count updates per buffer).
using buffer_list = std::initializer_list<std::reference_wrapper<const std::shared_ptr<storage>>>;

/// A new op node for `issue`, with its accesses: a buffer both read and written is one
/// `read_write` access. Its device is its first written buffer's, else its first read's;
/// but a copy between the host and a GPU runs on the GPU (its first buffer not on the host).
std::unique_ptr<op_node> make_op(const char* name, buffer_list reads, buffer_list writes);

/// Adds an access of `mode` to `buffer` to `op`, merged with an access it has to the same
/// buffer (a write and a read make a `read_write`). Before `push`.
void add_access(op_node& op, const std::shared_ptr<storage>& buffer, access_mode mode);

/// The error an op with these accesses (each with a `mode`; `var_of(a)` its buffer's var)
/// inherits from its inputs (a read, or a read-write), or null. Callers hold the accesses.
template <class Accesses, class VarOf>
std::exception_ptr inherited_error(const Accesses& accesses, VarOf var_of) {
  for (const auto& a : accesses) {
    if (a.mode != access_mode::write) {
      if (const auto& e = var_of(a).error) {
        return e;
      }
    }
  }
  return nullptr;
}

/// Stores `error` (maybe null) as the error of every buffer written by these accesses.
template <class Accesses, class VarOf>
void store_error(const Accesses& accesses, VarOf var_of, const std::exception_ptr& error) {
  for (const auto& a : accesses) {
    if (a.mode != access_mode::read) {
      auto& e = var_of(a).error;
      if (e != error) {
        e = error;
      }
    }
  }
}

}  // namespace cotensor::detail
