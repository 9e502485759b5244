#pragma once

// Host memory for the engine's own objects (op nodes, large kernel closures) and for the CPU
// backend's buffers: oneTBB's scalable allocator behind a per-thread cache of small blocks.

#include <cstddef>

namespace cotensor::detail {

/// Allocates `bytes` aligned to `alignment` (a power of two) from oneTBB's scalable allocator,
/// or from malloc in sanitizer builds (COTENSOR_SYSTEM_ALLOCATOR). Throws std::bad_alloc.
void* allocate_bytes(std::size_t bytes, std::size_t alignment);
/// Frees a block from `allocate_bytes`, given the same `bytes` and `alignment`.
void free_bytes(void* p, std::size_t bytes, std::size_t alignment) noexcept;

/// The size of an x86-64 transparent huge page.
inline constexpr std::size_t huge_page_bytes = std::size_t{2} << 20;

/// Asks Linux for transparent huge pages over the 2 MiB pages that lie wholly inside
/// [p, p + bytes), before they are first touched; a hint only (nothing where THP is `never`).
void advise_huge_pages(void* p, std::size_t bytes) noexcept;

/// A std::allocator-like front for `allocate_bytes`.
template <class T>
struct allocator {
  using value_type = T;
  allocator() noexcept = default;
  template <class U>
  allocator(const allocator<U>& /*other*/) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(allocate_bytes(n * sizeof(T), alignof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { free_bytes(p, n * sizeof(T), alignof(T)); }
  template <class U>
  bool operator==(const allocator<U>& /*other*/) const noexcept {
    return true;
  }
};

}  // namespace cotensor::detail
