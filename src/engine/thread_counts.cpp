#include "engine/thread_counts.hpp"

#include <new>
#include <pthread.h>

namespace cotensor::detail {
namespace {

// Every slot ever published, newest first. Slots are never freed: one per thread alive at once.
std::atomic<count_slot*> slots{nullptr};

count_slot& shared_slot() noexcept {
  static count_slot slot(true);
  return slot;
}

// Gives a thread's slot back when the thread ends: a key's destructor runs after every
// thread_local destructor (which may still free buffers), where a thread_local's would not.
pthread_key_t release_key() noexcept {
  static const pthread_key_t key = [] {
    pthread_key_t k{};
    pthread_key_create(&k, [](void* p) {
      this_thread_counts = nullptr;
      static_cast<count_slot*>(p)->taken.store(false, std::memory_order_release);
    });
    return k;
  }();
  return key;
}

}  // namespace

thread_local count_slot* this_thread_counts __attribute__((tls_model("initial-exec"))) = nullptr;

count_slot& claim_count_slot() noexcept {
  count_slot* slot = nullptr;
  for (auto* s = slots.load(std::memory_order_acquire); s != nullptr; s = s->next) {
    bool taken = s->taken.load(std::memory_order_relaxed);
    if (!taken && s->taken.compare_exchange_strong(taken, true, std::memory_order_acquire)) {
      slot = s;
      break;
    }
  }
  if (slot == nullptr) {
    slot = new (std::nothrow) count_slot;
    if (slot == nullptr) {
      return shared_slot();
    }
    slot->next = slots.load(std::memory_order_relaxed);
    while (!slots.compare_exchange_weak(slot->next, slot, std::memory_order_release,
                                        std::memory_order_relaxed)) {
    }
  }
  this_thread_counts = slot;
  pthread_setspecific(release_key(), slot);
  return *slot;
}

std::int64_t total_count(live_count c) noexcept {
  std::int64_t sum = shared_slot().values[static_cast<unsigned>(c)].load(std::memory_order_relaxed);
  for (auto* s = slots.load(std::memory_order_acquire); s != nullptr; s = s->next) {
    sum += s->values[static_cast<unsigned>(c)].load(std::memory_order_relaxed);
  }
  return sum;
}

}  // namespace cotensor::detail
