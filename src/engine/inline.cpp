// The inline fast path: a small op whose buffers are free runs at its call, on the issuing
// thread, with no op node.

#include "engine/engine.hpp"
#include "engine/observer.hpp"

#include <array>
#include <span>

namespace cotensor::detail {
namespace {

// Up to 128 KiB touched (an elementwise op on 16 Ki floats, a few µs of work), handing an op to
// a worker costs more than running it (10^4-element `x + 1`: 3.5 µs handed over, 1.4 µs at its
// call; NumPy 2.2 µs).
// An op that completes later (the collectives' own, which run no user code) touches no bytes
// at its start, which only hands it on: it runs at its call whatever its size.
constexpr std::size_t inline_bytes = 128 * 1024;

}  // namespace

bool engine::runs_inline(const op_node& op, std::size_t touched_bytes) const noexcept {
  return options_.inline_small_ops && !options_.synchronous && !op.runs_user_code &&
         !backend_thread_flag && (touched_bytes <= inline_bytes || op.kernel.completes_later()) &&
         op.device.type == device::kind::cpu;
}

bool engine::run_now(buffer_list reads, buffer_list writes, function_ref<void()> kernel) noexcept {
  // What push would cost on top of the kernel (an op node, its accesses' reference counts,
  // admission, the runtime's tracker, two passes over each buffer's queue) is most of a small
  // op's time. An op that is ready at its call and will run there needs none of it, only its
  // buffers held while it runs: ~1,000 of ~1,700 instructions per `y = x + 1` (callgrind).
  if (!run_now_enabled_ || backend_thread_flag || current_scope_tracker != nullptr || observed()) {
    return false;
  }
  struct held_access {
    detail::var* var;
    access_mode mode;
  };
  constexpr std::size_t max_accesses = 4;
  std::array<held_access, max_accesses> held;
  std::size_t count = 0;
  std::size_t touched_bytes = 0;
  // As make_op: one access per buffer, `read_write` for one both read and written.
  auto add = [&](const std::shared_ptr<storage>& s, access_mode mode) {
    for (std::size_t i = 0; i < count; ++i) {
      if (held[i].var == &s->var) {
        if (held[i].mode == access_mode::write && mode == access_mode::read) {
          held[i].mode = access_mode::read_write;
        }
        return true;
      }
    }
    if (count == max_accesses) {
      return false;
    }
    if (s->device().type != device::kind::cpu) {
      return false;
    }
    held[count++] = {&s->var, mode};
    touched_bytes += s->bytes();
    return true;
  };
  for (const std::shared_ptr<storage>& w : writes) {
    if (!add(w, access_mode::write)) {
      return false;
    }
  }
  for (const std::shared_ptr<storage>& r : reads) {
    if (!add(r, access_mode::read)) {
      return false;
    }
  }
  if (touched_bytes > inline_bytes) {
    return false;
  }
  auto release = [&](std::size_t n) noexcept {
    for (std::size_t i = 0; i < n; ++i) {
      if (held[i].mode == access_mode::read) {
        held[i].var->end_read();
      } else {
        held[i].var->end_write();
      }
    }
  };
  for (std::size_t i = 0; i < count; ++i) {
    const bool started =
        held[i].mode == access_mode::read ? held[i].var->try_read() : held[i].var->try_write();
    if (!started) {  // something runs or waits there: the op queues behind it, through push
      release(i);
      return false;
    }
  }
  auto var_of = [](const held_access& h) -> var& { return *h.var; };
  std::exception_ptr error = inherited_error(std::span(held.data(), count), var_of);
  if (!error) {
    const backend_thread_guard backend;
    try {
      kernel();
    } catch (...) {
      error = std::current_exception();
    }
  }
  store_error(std::span(held.data(), count), var_of, error);
  release(count);
  ran_now_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace cotensor::detail
