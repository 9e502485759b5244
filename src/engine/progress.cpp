#include "engine/progress.hpp"

#include "spin_mutex.hpp"

#include <algorithm>
#include <mutex>
#include <shared_mutex>
#include <vector>

namespace cotensor::detail {
namespace {

struct registry {
  std::shared_mutex mutex;  // shared by spinning waiters, exclusive to add and remove
  std::vector<progress_source*> sources;
};

registry& sources() {
  static auto* r = new registry;  // never destroyed: waits may spin during static destruction
  return *r;
}

}  // namespace

void add_progress_source(progress_source& s) {
  auto& r = sources();
  std::lock_guard lock(r.mutex);
  r.sources.push_back(&s);
}

void remove_progress_source(progress_source& s) noexcept {
  auto& r = sources();
  std::lock_guard lock(r.mutex);
  r.sources.erase(std::remove(r.sources.begin(), r.sources.end(), &s), r.sources.end());
}

progress_helper::progress_helper() noexcept {
  auto& r = sources();
  r.mutex.lock_shared();
  any_ = !r.sources.empty();
  for (auto* s : r.sources) {
    s->helper_arrives();
  }
}

progress_helper::~progress_helper() {
  auto& r = sources();
  for (auto* s : r.sources) {
    s->helper_leaves();
  }
  r.mutex.unlock_shared();
}

void progress_helper::step() const noexcept {
  if (!any_) {
    cpu_relax();
    return;
  }
  for (auto* s : sources().sources) {
    s->help();
  }
}

}  // namespace cotensor::detail
