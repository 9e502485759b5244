#pragma once

// Process-wide counts that the hot path moves on many threads and that only statistics read.
// Each thread adds to its own slot with a plain load and store (no locked instruction, which
// costs ~20 cycles and would be four per op); a read sums every slot. A thread's slot outlives
// the thread and goes to the next thread that needs one, so the sums stay exact.

#include <array>
#include <atomic>
#include <cstdint>

namespace cotensor::detail {

enum class live_count : unsigned { buffers, buffer_bytes, op_nodes };

struct count_slot {
  count_slot() = default;
  explicit count_slot(bool is_shared) noexcept : shared(is_shared) {}

  std::array<std::atomic<std::int64_t>, 3> values{};
  count_slot* next = nullptr;     // set once, before the slot is published
  std::atomic<bool> taken{true};  // owned by a live thread
  bool shared = false;            // the fallback slot, moved by any thread
};

/// This thread's slot, or null before its first count. Initial-exec: one `fs`-relative load,
/// where the default model for a shared library calls `__tls_get_addr`.
extern thread_local count_slot* this_thread_counts __attribute__((tls_model("initial-exec")));

/// Takes a free slot or publishes a new one for this thread; never fails (a shared slot moved
/// with locked adds stands in if allocation does).
count_slot& claim_count_slot() noexcept;

inline void add_count(live_count c, std::int64_t delta) noexcept {
  count_slot* slot = this_thread_counts;
  if (slot == nullptr) [[unlikely]] {
    slot = &claim_count_slot();
  }
  auto& v = slot->values[static_cast<unsigned>(c)];
  if (slot->shared) [[unlikely]] {
    v.fetch_add(delta, std::memory_order_relaxed);
    return;
  }
  v.store(v.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
}

/// The sum over every slot. Exact once the threads that moved it have nothing in progress.
std::int64_t total_count(live_count c) noexcept;

}  // namespace cotensor::detail
