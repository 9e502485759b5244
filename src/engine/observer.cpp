#include "engine/observer.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>

namespace cotensor::detail {
namespace {

struct registry {
  std::mutex mutex;
  std::shared_ptr<const observer_list> list;  // null when empty
};

registry& the_registry() {
  static auto* const r = new registry;  // never destroyed: ops may end during static destruction
  return *r;
}

void publish(registry& r, std::vector<std::shared_ptr<op_observer>> items) {
  std::shared_ptr<const observer_list> next;
  if (!items.empty()) {
    next = std::make_shared<const observer_list>(observer_list{std::move(items)});
  }
  attached_observers.store(next.get(), std::memory_order_release);
  r.list = std::move(next);
}

}  // namespace

constinit std::atomic<const observer_list*> attached_observers{nullptr};

void attach_observer(std::shared_ptr<op_observer> o) {
  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::shared_ptr<op_observer>> items;
  if (r.list) {
    items = r.list->items;
  }
  items.push_back(std::move(o));
  publish(r, std::move(items));
}

void detach_observer(const op_observer* o) noexcept {
  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  if (!r.list) {
    return;
  }
  try {
    std::vector<std::shared_ptr<op_observer>> items = r.list->items;
    std::erase_if(items, [o](const auto& item) { return item.get() == o; });
    publish(r, std::move(items));
  } catch (...) {
    // Out of memory: the observer stays attached, and keeps seeing ops.
  }
}

std::shared_ptr<const observer_list> current_observers() {
  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  return r.list;
}

}  // namespace cotensor::detail
