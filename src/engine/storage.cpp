#include "engine/storage.hpp"

#include "engine/backend.hpp"
#include "engine/thread_counts.hpp"
#include "support/host_allocator.hpp"

#include <algorithm>

namespace cotensor::detail {

// At least 8 bytes, so that an empty tensor of any dtype still has an address (and a rank-0
// one of any dtype fits).
storage::storage(const cotensor::shape& s,
                 cotensor::device d,
                 cotensor::dtype t,
                 buffer_lifetime lifetime)
    : data_(nullptr), shape_(s), device_(d), dtype_(t),
      use_(lifetime == buffer_lifetime::lasting ? block_use::lasting : block_use::delayed),
      bytes_(std::max<std::size_t>(static_cast<std::size_t>(s.numel()) * itemsize(t), 8)),
      allocator_(&allocator_of(d)) {
  if (bytes_ <= allocator_->delayed_bytes()) {
    use_ = block_use::immediate;
    void* p = allocator_->small_in_host_blocks()
                  ? allocate_bytes(bytes_, device_allocator::host_alignment)
                  : allocator_->allocate(device_, bytes_, use_);
    data_.store(p, std::memory_order_relaxed);
    add_count(live_count::buffer_bytes, static_cast<std::int64_t>(bytes_));
  }
  add_count(live_count::buffers, 1);
}

storage::storage(const cotensor::shape& s,
                 cotensor::device d,
                 cotensor::dtype t,
                 external_memory memory)
    : data_(memory.data), shape_(s), device_(d), dtype_(t), use_(block_use::immediate),
      bytes_(std::max<std::size_t>(static_cast<std::size_t>(s.numel()) * itemsize(t), 8)),
      allocator_(nullptr), external_(memory) {
  add_count(live_count::buffers, 1);
}

std::shared_ptr<storage> storage::make_external(const cotensor::shape& s,
                                                cotensor::device d,
                                                cotensor::dtype t,
                                                external_memory memory) {
  return std::allocate_shared<storage>(allocator<storage>(), s, d, t, memory);
}

// Two threads may both find no memory (two readers of a buffer whose writer failed before its
// kernel ran): one block wins, the other goes back.
void* storage::first_data() {
  void* p = allocator_->allocate(device_, bytes_, use_);
  void* expected = nullptr;
  if (data_.compare_exchange_strong(expected, p, std::memory_order_acq_rel)) {
    add_count(live_count::buffer_bytes, static_cast<std::int64_t>(bytes_));
    return p;
  }
  allocator_->deallocate(device_, p, bytes_, use_);
  return expected;
}

storage::~storage() {
  if (external_.release != nullptr) {
    external_.release(external_.context);
    add_count(live_count::buffers, -1);
    return;
  }
  if (void* p = data_.load(std::memory_order_relaxed)) {
    if (use_ == block_use::immediate && allocator_->small_in_host_blocks()) {
      free_bytes(p, bytes_, device_allocator::host_alignment);
    } else {
      allocator_->deallocate(device_, p, bytes_, use_);
    }
    add_count(live_count::buffer_bytes, -static_cast<std::int64_t>(bytes_));
  }
  add_count(live_count::buffers, -1);
}

std::shared_ptr<storage> storage::make(const cotensor::shape& s,
                                       cotensor::device d,
                                       cotensor::dtype t,
                                       buffer_lifetime lifetime) {
  return std::allocate_shared<storage>(allocator<storage>(), s, d, t, lifetime);
}

std::int64_t live_buffers() noexcept { return total_count(live_count::buffers); }
std::int64_t live_buffer_bytes() noexcept { return total_count(live_count::buffer_bytes); }
std::int64_t live_op_nodes() noexcept { return total_count(live_count::op_nodes); }

}  // namespace cotensor::detail
