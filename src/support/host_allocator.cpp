#include "support/host_allocator.hpp"

#include "cotensor/config.hpp"

#include "support/fault_hooks.hpp"

#include <oneapi/tbb/scalable_allocator.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <pthread.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace cotensor::detail {

#if !COTENSOR_SYSTEM_ALLOCATOR
namespace {

// A per-thread cache of small blocks in front of oneTBB's allocator. An op issued and run on
// the same thread (a small op run at its call) allocates and frees three small blocks: its
// node, its result's storage and that storage's few floats. Through scalable_aligned_malloc
// and _free they cost ~480 instructions of ~2,300 per op (callgrind); from this cache, a few.
// Blocks are 64-byte aligned, in classes of 64, 128, ..., 512 bytes; each thread keeps at most
// `depth` per class and gives the rest (and all at its exit) back to oneTBB. Not in sanitizer
// builds (COTENSOR_SYSTEM_ALLOCATOR), where every block goes to malloc so that ASan sees it.
struct small_block {
  small_block* next;
};

struct block_cache {
  static constexpr std::size_t granule = 64;
  static constexpr std::size_t classes = 8;
  static constexpr std::uint32_t depth = 64;

  std::array<small_block*, classes> head;
  std::array<std::uint32_t, classes> count;
  bool registered;  // the exit hook is set for this thread
  bool exiting;     // the exit hook ran: blocks go straight back to oneTBB
};

// Zero-initialised and trivially destructible: initial-exec access is one `fs`-relative load.
thread_local block_cache this_thread_blocks __attribute__((tls_model("initial-exec")));

void release_blocks(void* p) {
  auto& cache = *static_cast<block_cache*>(p);
  cache.exiting = true;
  for (std::size_t c = 0; c < block_cache::classes; ++c) {
    while (small_block* b = cache.head[c]) {
      cache.head[c] = b->next;
      scalable_aligned_free(b);
    }
    cache.count[c] = 0;
  }
}

pthread_key_t blocks_key() noexcept {
  static const pthread_key_t key = [] {
    pthread_key_t k{};
    pthread_key_create(&k, release_blocks);
    return k;
  }();
  return key;
}

// The class of a block of `bytes` (> 0) at most `alignment`-aligned, or `classes` if none.
std::size_t block_class(std::size_t bytes, std::size_t alignment) noexcept {
  if (alignment > block_cache::granule || bytes > block_cache::granule * block_cache::classes) {
    return block_cache::classes;
  }
  return (std::max<std::size_t>(bytes, 1) - 1) / block_cache::granule;
}

}  // namespace
#endif

void* allocate_bytes(std::size_t bytes, std::size_t alignment) {
  if (fault_hooks::enabled()) [[unlikely]] {
    fault_hooks::allocation();
  }
#if COTENSOR_SYSTEM_ALLOCATOR
  bytes = (bytes + alignment - 1) / alignment * alignment;
  void* p = std::aligned_alloc(alignment, bytes);
#else
  void* p = nullptr;
  if (const std::size_t c = block_class(bytes, alignment); c < block_cache::classes) {
    auto& cache = this_thread_blocks;
    if (small_block* b = cache.head[c]) {
      cache.head[c] = b->next;
      --cache.count[c];
      return b;
    }
    p = scalable_aligned_malloc((c + 1) * block_cache::granule, block_cache::granule);
  } else {
    p = scalable_aligned_malloc(bytes, alignment);
  }
#endif
  if (p == nullptr) {
    throw std::bad_alloc();
  }
  return p;
}

void free_bytes(void* p,
                [[maybe_unused]] std::size_t bytes,
                [[maybe_unused]] std::size_t alignment) noexcept {
#if COTENSOR_SYSTEM_ALLOCATOR
  std::free(p);
#else
  if (const std::size_t c = block_class(bytes, alignment); c < block_cache::classes) {
    auto& cache = this_thread_blocks;
    if (cache.count[c] < block_cache::depth && !cache.exiting) {
      if (!cache.registered) [[unlikely]] {
        cache.registered = true;
        pthread_setspecific(blocks_key(), &cache);
      }
      auto* b = static_cast<small_block*>(p);
      b->next = cache.head[c];
      cache.head[c] = b;
      ++cache.count[c];
      return;
    }
  }
  scalable_aligned_free(p);
#endif
}

// A language model's weights and KV cache, read in strips across many rows, then miss the TLB
// once per 2 MiB rather than once per 4 KiB, and a large vector copied out of a tensor is
// faulted in a 2 MiB page at a time. Where THP is `madvise` (Debian's default), this is what
// turns it on for these ranges.
void advise_huge_pages([[maybe_unused]] void* p, [[maybe_unused]] std::size_t bytes) noexcept {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr std::uintptr_t huge = huge_page_bytes;
  const auto begin = (reinterpret_cast<std::uintptr_t>(p) + huge - 1) & ~(huge - 1);
  const auto end = (reinterpret_cast<std::uintptr_t>(p) + bytes) & ~(huge - 1);
  if (end > begin) {
    // NOLINTNEXTLINE(performance-no-int-to-ptr): the range inside the block, page-aligned
    ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  }
#endif
}

}  // namespace cotensor::detail
