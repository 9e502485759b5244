#pragma once

#include "cotensor/detail/op_completion.hpp"

#include "support/host_allocator.hpp"

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace cotensor::detail {

/// An op's work: a `void()` kernel whose return ends the op (`emplace`), or a
/// `void(op_completion)` start that ends it later through the completion (`emplace_async`).
/// Stored inside the op node when it fits (most kernels' captures do), so issuing an op
/// allocates no closure; larger ones come from the pooled host allocator (`allocate_bytes`),
/// never from the global heap. Neither copyable nor movable: it lives in its op.
class kernel_fn {
public:
  static constexpr std::size_t capacity = 96;

  kernel_fn() noexcept = default;
  kernel_fn(const kernel_fn&) = delete;
  kernel_fn& operator=(const kernel_fn&) = delete;
  ~kernel_fn() { reset(); }

  /// Stores a kernel `f()`: the op ends when it returns (or throws).
  template <class F>
  void emplace(F&& f) {
    store(std::forward<F>(f));
    invoke_ = [](void* p) { (*static_cast<std::decay_t<F>*>(p))(); };
  }

  /// Stores a start `f(op_completion)`: the op ends when the completion is invoked.
  template <class F>
  void emplace_async(F&& f) {
    store(std::forward<F>(f));
    start_ = [](void* p, op_completion&& done) {
      (*static_cast<std::decay_t<F>*>(p))(std::move(done));
    };
  }

  /// Runs a kernel stored by `emplace`.
  void operator()() { invoke_(target_); }
  /// Runs a start stored by `emplace_async`, handing it `done`.
  void start(op_completion&& done) { start_(target_, std::move(done)); }
  /// True for a start stored by `emplace_async`.
  bool completes_later() const noexcept { return start_ != nullptr; }
  explicit operator bool() const noexcept { return target_ != nullptr; }

private:
  template <class F>
  void store(F&& f) {
    using fn = std::decay_t<F>;
    reset();
    if constexpr (sizeof(fn) <= capacity && alignof(fn) <= alignof(std::max_align_t) &&
                  std::is_nothrow_move_constructible_v<fn>) {
      target_ = ::new (static_cast<void*>(buffer_)) fn(std::forward<F>(f));
      destroy_ = [](void* p) noexcept { static_cast<fn*>(p)->~fn(); };
    } else {
      void* p = allocate_bytes(sizeof(fn), alignof(fn));
      try {
        target_ = ::new (p) fn(std::forward<F>(f));
      } catch (...) {
        free_bytes(p, sizeof(fn), alignof(fn));
        throw;
      }
      destroy_ = [](void* q) noexcept {
        static_cast<fn*>(q)->~fn();
        free_bytes(q, sizeof(fn), alignof(fn));
      };
    }
  }

  void reset() noexcept {
    if (target_ != nullptr) {
      destroy_(target_);
      target_ = nullptr;
      invoke_ = nullptr;
      start_ = nullptr;
    }
  }

  alignas(std::max_align_t) unsigned char buffer_[capacity];
  void* target_ = nullptr;
  void (*invoke_)(void*) = nullptr;
  void (*start_)(void*, op_completion&&) = nullptr;
  void (*destroy_)(void*) noexcept = nullptr;
};

}  // namespace cotensor::detail
