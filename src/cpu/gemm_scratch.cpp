#include "cpu/gemm_scratch.hpp"

#include "support/host_allocator.hpp"

#include <algorithm>
#include <array>
#include <mutex>
#include <utility>

namespace cotensor::detail::cpu {
namespace {

constexpr std::size_t alignment = 64;
// Blocks below this size come from the allocator's own caches quickly enough.
constexpr std::size_t smallest_kept = std::size_t{1} << 20;

struct kept_block {
  void* p = nullptr;
  std::size_t capacity = 0;
};

struct kept_blocks {
  std::mutex mutex;
  std::array<kept_block, 6> blocks;
  std::size_t bytes = 0;
};

kept_blocks& kept() {
  static auto* const k = new kept_blocks;  // never destroyed: a worker may run a GEMM at exit
  return *k;
}

}  // namespace

void* take_gemm_scratch(std::size_t bytes, std::size_t* capacity) {
  bytes = std::max<std::size_t>(bytes, alignment);
  if (bytes >= smallest_kept) {
    auto& k = kept();
    const std::lock_guard lock(k.mutex);
    // The smallest kept block that fits.
    kept_block* best = nullptr;
    for (auto& b : k.blocks) {
      if (b.p != nullptr && b.capacity >= bytes &&
          (best == nullptr || b.capacity < best->capacity)) {
        best = &b;
      }
    }
    if (best != nullptr && best->capacity <= 2 * bytes) {
      *capacity = best->capacity;
      k.bytes -= best->capacity;
      return std::exchange(best->p, nullptr);
    }
  }
  *capacity = bytes;
  return allocate_bytes(bytes, alignment);
}

void give_back_gemm_scratch(void* p, std::size_t capacity) noexcept {
  if (capacity >= smallest_kept && capacity <= gemm_scratch_retained_bytes) {
    auto& k = kept();
    const std::lock_guard lock(k.mutex);
    // Keep it in a free slot, or in place of the smallest kept block if it is larger, while the
    // total stays within bounds; free what is displaced.
    kept_block* slot = nullptr;
    for (auto& b : k.blocks) {
      if (b.p == nullptr) {
        slot = &b;
        break;
      }
      if (slot == nullptr || b.capacity < slot->capacity) {
        slot = &b;
      }
    }
    const std::size_t displaced = slot->p == nullptr ? 0 : slot->capacity;
    if (displaced < capacity && k.bytes - displaced + capacity <= gemm_scratch_retained_bytes) {
      if (slot->p != nullptr) {
        free_bytes(slot->p, slot->capacity, alignment);
      }
      k.bytes += capacity - displaced;
      *slot = kept_block{p, capacity};
      return;
    }
  }
  free_bytes(p, capacity, alignment);
}

void* thread_scratch(std::size_t bytes) {
  class buffer {
  public:
    buffer() = default;
    buffer(const buffer&) = delete;
    buffer& operator=(const buffer&) = delete;
    ~buffer() { release(); }
    void* reserve(std::size_t bytes) {
      if (capacity_ < bytes) {
        release();
        p_ = allocate_bytes(bytes, alignment);
        capacity_ = bytes;
      }
      return p_;
    }

  private:
    void release() noexcept {
      if (p_ != nullptr) {
        free_bytes(p_, capacity_, alignment);
        p_ = nullptr;
        capacity_ = 0;
      }
    }
    void* p_ = nullptr;
    std::size_t capacity_ = 0;
  };
  thread_local buffer b;
  return b.reserve(bytes);
}

}  // namespace cotensor::detail::cpu
