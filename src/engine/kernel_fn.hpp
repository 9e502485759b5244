#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace cotensor::detail {

void* allocate_bytes(std::size_t bytes, std::size_t alignment);  // engine.hpp
void free_bytes(void* p, std::size_t bytes, std::size_t alignment) noexcept;

/// A `void()` callable stored inside the op node when it fits (most kernels' captures do), so
/// issuing an op allocates no closure; larger ones come from the engine's pooled allocator
/// (`allocate_bytes`), never from the global heap. Neither copyable nor movable: it lives in
/// its op.
class kernel_fn {
public:
  static constexpr std::size_t capacity = 96;

  kernel_fn() noexcept = default;
  kernel_fn(const kernel_fn&) = delete;
  kernel_fn& operator=(const kernel_fn&) = delete;
  ~kernel_fn() { reset(); }

  template <class F>
  void emplace(F&& f) {
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
    invoke_ = [](void* p) { (*static_cast<fn*>(p))(); };
  }

  void operator()() { invoke_(target_); }
  explicit operator bool() const noexcept { return target_ != nullptr; }

private:
  void reset() noexcept {
    if (target_ != nullptr) {
      destroy_(target_);
      target_ = nullptr;
    }
  }

  alignas(std::max_align_t) unsigned char buffer_[capacity];
  void* target_ = nullptr;
  void (*invoke_)(void*) = nullptr;
  void (*destroy_)(void*) noexcept = nullptr;
};

}  // namespace cotensor::detail
