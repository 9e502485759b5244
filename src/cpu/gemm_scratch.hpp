#pragma once

// Scratch for the GEMMs: packed operands, float32 copies of half operands, partial sums.
//
// Blocks come from the pooled host allocator, and the largest few are kept between GEMMs: a
// fresh block of several MB is fresh pages, faulted in and zeroed by the kernel at first touch
// (at 2000² the bfloat16 GEMM's two packed operands, 16 MB, took 10 of its 80 ms that way).
// At most `gemm_scratch_retained_bytes` stay, in total, until the process exits. Thread-safe:
// any worker may take and give back blocks.

#include <cstddef>
#include <cstdint>

namespace cotensor::detail::cpu {

/// The most bytes of scratch kept between GEMMs.
inline constexpr std::size_t gemm_scratch_retained_bytes = std::size_t{96} << 20;

/// A block of at least `bytes` bytes, 64-byte aligned, its size in `*capacity`; a kept block
/// when one is large enough. Throws std::bad_alloc.
void* take_gemm_scratch(std::size_t bytes, std::size_t* capacity);
/// Gives back a block from take_gemm_scratch, kept or freed.
void give_back_gemm_scratch(void* p, std::size_t capacity) noexcept;

/// A block of at least `bytes` bytes, 64-byte aligned, that the calling thread keeps for its
/// next call (a worker's float32 partial sums, a panel of B it packs for itself): valid until the
/// same thread calls again, freed when the thread ends. From the pooled host allocator: a block
/// that size from the allocator at each tile would be fresh pages to fault in, with the other
/// workers faulting in theirs at the same time. Throws std::bad_alloc.
void* thread_scratch(std::size_t bytes);

/// `n` items of T (a trivial type) of GEMM scratch, given back when it goes.
template <class T>
class gemm_scratch {
public:
  explicit gemm_scratch(std::int64_t n)
      : p_(static_cast<T*>(
            take_gemm_scratch(static_cast<std::size_t>(n) * sizeof(T), &capacity_))) {}
  gemm_scratch(const gemm_scratch&) = delete;
  gemm_scratch& operator=(const gemm_scratch&) = delete;
  ~gemm_scratch() { give_back_gemm_scratch(p_, capacity_); }
  T* get() const noexcept { return p_; }

private:
  std::size_t capacity_ = 0;
  T* p_;
};

}  // namespace cotensor::detail::cpu
