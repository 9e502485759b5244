#include "engine/op_node.hpp"

#include "engine/engine.hpp"
#include "engine/thread_counts.hpp"
#include "support/host_allocator.hpp"

#include <algorithm>

namespace cotensor::detail {

void* op_node::operator new(std::size_t size) {
  void* p = allocate_bytes(size, alignof(op_node));
  add_count(live_count::op_nodes, 1);
  return p;
}

void op_node::operator delete(void* p, std::size_t size) noexcept {
  free_bytes(p, size, alignof(op_node));
  add_count(live_count::op_nodes, -1);
}

void op_node::dependency_met() {
  if (unmet.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    owner->dispatch(this);
  }
}

void add_access(op_node& op, const std::shared_ptr<storage>& buffer, access_mode mode) {
  auto it = std::ranges::find_if(op.accesses,
                                 [&](const access& a) { return a.buffer.get() == buffer.get(); });
  if (it == op.accesses.end()) {
    // Its first buffer's device (writes come first: a copy's destination's), unless that is
    // the host and another is a GPU: a copy between the two runs on the GPU's streams.
    if (op.accesses.empty() || (op.device.is_cpu() && !buffer->device().is_cpu())) {
      op.device = buffer->device();
    }
    op.accesses.push_back({buffer, mode, {}});
  } else if (it->mode != mode) {
    it->mode = access_mode::read_write;
  }
}

std::unique_ptr<op_node> make_op(const char* name, buffer_list reads, buffer_list writes) {
  // Default-initialised, not value-initialised: make_unique would zero the whole node first
  // (its kernel's 96-byte buffer included), ~60 instructions per op.
  std::unique_ptr<op_node> op(new op_node);
  op->name = name;
  for (const std::shared_ptr<storage>& w : writes) {
    add_access(*op, w, access_mode::write);
  }
  for (const std::shared_ptr<storage>& r : reads) {
    add_access(*op, r, access_mode::read);
  }
  return op;
}

}  // namespace cotensor::detail
