#pragma once

#include "cotensor/device.hpp"
#include "cotensor/dtype.hpp"
#include "cotensor/shape.hpp"

#include "engine/var.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace cotensor::detail {

class device_allocator;
enum class block_use : std::uint8_t;

/// How long a buffer is expected to live, for its allocator's choice of memory.
enum class buffer_lifetime : std::uint8_t {
  /// A result, a temporary: freed any time.
  ordinary,
  /// Kept and read again and again for as long as a model lives (weights laid out for its
  /// products): on the CPU, a large one lies in transparent huge pages, packed with others
  /// (cpu/host_memory.cpp).
  lasting,
};

/// A tensor's buffer: its device's memory for `numel` elements of its dtype, the read/write queue
/// that orders access, and a fence slot for devices that order their own work (see
/// engine/backend.hpp).
///
/// A buffer of more than its allocator's `delayed_bytes()` gets its memory at its first data()
/// call, which is when the op that writes it starts (MXNet's delay_alloc): ops queued ahead
/// hold no memory for their results, and a block that a finished op freed comes back, still in
/// the cache, to the next. Smaller buffers get theirs here, so that a small op's failed
/// allocation throws at the call.
class storage {
public:
  /// A new buffer for a tensor of shape `s` on `d`, uninitialised. Throws
  /// std::system_error(errc::device_unavailable) for a device this build cannot serve.
  static std::shared_ptr<storage> make(const cotensor::shape& s,
                                       cotensor::device d,
                                       cotensor::dtype t = cotensor::dtype::float32,
                                       buffer_lifetime lifetime = buffer_lifetime::ordinary);

  /// Memory that a buffer uses but does not own (DLPack's `from_dlpack`): `data` (not null)
  /// holds the elements; `release(context)` runs once, when the buffer is destroyed (the last
  /// handle and op dropped it), on whichever thread drops it.
  struct external_memory {
    void* data;
    void (*release)(void* context) noexcept;
    void* context;
  };
  /// A buffer over external memory, as above. Never allocates or frees memory itself.
  static std::shared_ptr<storage> make_external(const cotensor::shape& s,
                                                cotensor::device d,
                                                cotensor::dtype t,
                                                external_memory memory);

  storage(const cotensor::shape& s,
          cotensor::device d,
          cotensor::dtype t,
          buffer_lifetime lifetime = buffer_lifetime::ordinary);
  storage(const cotensor::shape& s, cotensor::device d, cotensor::dtype t, external_memory memory);
  storage(const storage&) = delete;
  storage& operator=(const storage&) = delete;
  ~storage();

  /// The elements; the first call allocates a delayed buffer and may throw std::bad_alloc (in
  /// a kernel, that becomes the op's error). Safe to call from several threads at once.
  void* raw() {
    void* p = data_.load(std::memory_order_acquire);
    return p != nullptr ? p : first_data();
  }
  /// The elements as `T`, which must be the buffer's element type (float: float32).
  template <class T = float>
  T* data() {
    return static_cast<T*>(raw());
  }
  cotensor::dtype dtype() const noexcept { return dtype_; }
  std::int64_t numel() const noexcept { return shape_.numel(); }
  /// The bytes of its elements (at least 8, for an empty tensor).
  std::size_t bytes() const noexcept { return bytes_; }
  /// The shape the buffer was made with (views may see it otherwise).
  const cotensor::shape& shape() const noexcept { return shape_; }
  cotensor::device device() const noexcept { return device_; }

  detail::var var;
  /// For a device that orders its own work: the position on its stream of the last write
  /// whose accesses ended at launch, which a host reader waits for (`await_fence`); 0: none.
  /// Written by that op's backend thread before it ends its accesses.
  std::atomic<std::uint64_t> fence{0};

private:
  void* first_data();
  std::atomic<void*> data_;
  cotensor::shape shape_;
  cotensor::device device_;
  cotensor::dtype dtype_;
  block_use use_;
  std::size_t bytes_;
  device_allocator* allocator_;
  external_memory external_{nullptr, nullptr, nullptr};  // release == null: owned memory
};

/// Buffers (`storage`), the bytes of their floats and op nodes alive in the process, for leak
/// checks (engine_stats).
std::int64_t live_buffers() noexcept;
std::int64_t live_buffer_bytes() noexcept;
std::int64_t live_op_nodes() noexcept;

}  // namespace cotensor::detail
