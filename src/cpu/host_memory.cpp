// The CPU's buffers: host memory, 64-byte aligned, from the pooled host allocator; large
// (delayed) buffers through a small cache of recently freed blocks; large lasting ones (a
// model's weights) in whole transparent huge pages.

#include "cotensor/config.hpp"

#include "cpu/cpu_backend.hpp"
#include "engine/faults.hpp"
#include "support/host_allocator.hpp"
#include "support/spin_mutex.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>

namespace cotensor::detail::cpu {
namespace {

constexpr std::size_t buffer_alignment = device_allocator::host_alignment;
// Blocks from this size on are advised for transparent huge pages (advise_huge_pages).
constexpr std::size_t huge_page_threshold = std::size_t{4} << 20;

#if !COTENSOR_SYSTEM_ALLOCATOR
constexpr std::size_t huge_page = huge_page_bytes;
// Lasting blocks from this size on go to the lasting arena, in huge pages throughout.
constexpr std::size_t lasting_arena_threshold = std::size_t{1} << 20;

constexpr std::size_t round_up(std::size_t bytes, std::size_t unit) noexcept {
  return (bytes + unit - 1) / unit * unit;
}

// The blocks of the last few delayed buffers freed, shared by every thread. A result is freed
// where its last handle drops, often on the frontend, and the next one allocated where its op
// starts, on a worker: through oneTBB alone the freed block would wait in the frontend's own
// cache while the worker took another, cold one. From here the worker gets back the block it
// wrote last, still in its cache. A block freed by the taking thread itself comes first (a
// worker that frees its op's result and starts the next op). At most `capacity` blocks and
// `max_bytes` in all; the oldest goes back to oneTBB. Never destroyed (buffers may be freed
// during static destruction).
class recent_blocks {
public:
  static constexpr std::size_t capacity = 4;
  static constexpr std::size_t max_bytes = std::size_t{32} << 20;

  /// A kept block of exactly `bytes`, the most recent one this thread freed, else the most
  /// recent one; or null.
  void* take(std::size_t bytes) noexcept {
    const std::lock_guard lock(mutex_);
    std::size_t found = count_;
    for (std::size_t i = count_; i-- > 0;) {
      if (blocks_[i].bytes != bytes) {
        continue;
      }
      if (blocks_[i].owner == &this_thread_tag) {
        found = i;
        break;
      }
      if (found == count_) {
        found = i;
      }
    }
    if (found == count_) {
      return nullptr;
    }
    void* p = blocks_[found].p;
    std::copy(blocks_.begin() + static_cast<std::ptrdiff_t>(found) + 1,
              blocks_.begin() + static_cast<std::ptrdiff_t>(count_),
              blocks_.begin() + static_cast<std::ptrdiff_t>(found));
    --count_;
    held_ -= bytes;
    return p;
  }

  /// Keeps `p` (of `bytes`), giving the oldest blocks back to oneTBB to make room, or gives `p`
  /// back itself when it is larger than the whole cache.
  void keep(void* p, std::size_t bytes) noexcept {
    if (bytes > max_bytes) {
      free_bytes(p, bytes, buffer_alignment);
      return;
    }
    std::array<block, capacity> evicted{};
    std::size_t n = 0;
    {
      const std::lock_guard lock(mutex_);
      while (count_ == capacity || held_ + bytes > max_bytes) {
        evicted[n++] = blocks_[0];
        held_ -= blocks_[0].bytes;
        std::copy(blocks_.begin() + 1, blocks_.begin() + static_cast<std::ptrdiff_t>(count_),
                  blocks_.begin());
        --count_;
      }
      blocks_[count_++] = {p, bytes, &this_thread_tag};
      held_ += bytes;
    }
    for (std::size_t i = 0; i < n; ++i) {
      free_bytes(evicted[i].p, evicted[i].bytes, buffer_alignment);
    }
  }

private:
  struct block {
    void* p;
    std::size_t bytes;
    const void* owner;  // the thread that freed it
  };
  // Its address names the calling thread.
  static thread_local inline char this_thread_tag = 0;
  spin_mutex mutex_;
  std::array<block, capacity> blocks_{};
  std::size_t count_ = 0;
  std::size_t held_ = 0;
};

recent_blocks& recent() noexcept {
  static auto* const blocks = new recent_blocks;
  return *blocks;
}
#endif

#if !COTENSOR_SYSTEM_ALLOCATOR
// Large lasting blocks (a model's packed weights), one after another in chunks of whole
// transparent huge pages. A model's weights are many matrices of one to a few MiB (GPT-2
// small's are 1.2 to 4.7 MB in bfloat16), which, each in a block of its own, would lie mostly
// on 4 KiB pages (only blocks from 4 MiB are advised, and only the huge pages wholly inside
// them): the decode steps' matrix-vector products stream through them, and the TLB then misses
// once per 4 KiB, the hardware prefetchers stopping at each page's end. In huge pages, one
// sequence of GPT-2 small decoded a median 14 % faster, in bfloat16 and in float32 (bench/
// results/2026-11-28-debian12-2core-lm-lasting-arena.txt). Packed, not each rounded up to whole
// huge pages, a model costs at most the unused end of one chunk, untouched and so not resident.
//
// Each block follows a 64-byte header naming its chunk; a chunk counts its live blocks and goes
// back to oneTBB when the last one does, except the chunk being filled, which starts again
// from its beginning. A block of more than half a chunk gets a chunk of its own. Never
// destroyed, like recent_blocks.
class lasting_arena {
public:
  static constexpr std::size_t chunk_bytes = std::size_t{32} << 20;

  void* allocate(std::size_t bytes) {
    const std::size_t need = header + round_up(bytes, buffer_alignment);
    const std::lock_guard lock(mutex_);
    chunk* c = filling_;
    if (c == nullptr || c->used + need > c->bytes) {
      c = new_chunk(std::max(chunk_bytes, round_up(header + need, huge_page)));
      if (need <= chunk_bytes / 2) {
        // The old chunk holds blocks still (one with none starts again from its beginning,
        // where this block would have fit): it goes back when its last block does.
        filling_ = c;
      }
    } else if (fault_hooks::enabled()) [[unlikely]] {
      fault_hooks::allocation();  // counted as allocate_bytes counts a new chunk
    }
    char* const block = reinterpret_cast<char*>(c) + c->used;
    c->used += need;
    ++c->live;
    *reinterpret_cast<chunk**>(block) = c;
    return block + header;
  }

  void deallocate(void* p) noexcept {
    chunk* const c = *reinterpret_cast<chunk**>(static_cast<char*>(p) - header);
    chunk* gone = nullptr;
    {
      const std::lock_guard lock(mutex_);
      if (--c->live == 0) {
        if (c == filling_) {
          c->used = header;
        } else {
          gone = c;
        }
      }
    }
    if (gone != nullptr) {
      free_bytes(gone, gone->bytes, huge_page);
    }
  }

private:
  // At the start of its memory; its blocks follow.
  struct chunk {
    std::size_t bytes;  // of the whole chunk
    std::size_t used;   // from its start: this header and the blocks so far
    std::size_t live;   // blocks not yet freed
  };
  static constexpr std::size_t header = buffer_alignment;  // before the chunk and each block
  static_assert(sizeof(chunk) <= header && sizeof(chunk*) <= header);

  static chunk* new_chunk(std::size_t bytes) {
    void* p = allocate_bytes(bytes, huge_page);
    advise_huge_pages(p, bytes);
    return ::new (p) chunk{bytes, header, 0};
  }

  std::mutex mutex_;
  chunk* filling_ = nullptr;
};

lasting_arena& lasting() noexcept {
  static auto* const arena = new lasting_arena;
  return *arena;
}
#endif

}  // namespace

// A delayed buffer's block: a recent one of its size when there is one (not while faults are
// injected, so that every allocation is counted), else a new one. A large lasting one: from the
// lasting arena (each block counted as one allocation while faults are injected).
void* host_allocator::allocate(device /*d*/, std::size_t bytes, [[maybe_unused]] block_use use) {
#if !COTENSOR_SYSTEM_ALLOCATOR
  if (use == block_use::lasting && bytes >= lasting_arena_threshold) {
    return lasting().allocate(bytes);
  }
  if (use == block_use::delayed && !faults::enabled()) {
    if (void* p = recent().take(bytes)) {
      return p;
    }
  }
#endif
  void* p = allocate_bytes(bytes, buffer_alignment);
  if (bytes >= huge_page_threshold) {
    advise_huge_pages(p, bytes);
  }
  return p;
}

void host_allocator::deallocate(device /*d*/,
                                void* p,
                                std::size_t bytes,
                                [[maybe_unused]] block_use use) noexcept {
#if !COTENSOR_SYSTEM_ALLOCATOR
  if (use == block_use::lasting && bytes >= lasting_arena_threshold) {
    lasting().deallocate(p);
    return;
  }
  if (use == block_use::delayed) {
    recent().keep(p, bytes);
    return;
  }
#endif
  free_bytes(p, bytes, buffer_alignment);
}

constinit host_allocator host_memory;

}  // namespace cotensor::detail::cpu
