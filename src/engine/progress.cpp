#include "engine/progress.hpp"

#include "support/spin_mutex.hpp"

#include <mutex>
#include <utility>
#include <vector>

namespace cotensor::detail {
namespace {

struct registry {
  std::mutex mutex;  // held only to copy or change the list, never while a source runs
  std::vector<std::weak_ptr<progress_source>> sources;
};

registry& sources() {
  static auto* r = new registry;  // never destroyed: waits may spin during static destruction
  return *r;
}

}  // namespace

void add_progress_source(std::weak_ptr<progress_source> s) {
  auto& r = sources();
  std::lock_guard lock(r.mutex);
  r.sources.push_back(std::move(s));
}

void remove_progress_source(const progress_source* s) noexcept {
  auto& r = sources();
  std::lock_guard lock(r.mutex);
  std::erase_if(r.sources, [s](const std::weak_ptr<progress_source>& w) {
    const auto p = w.lock();  // null while `s` is being destroyed: expired, erased too
    return p == nullptr || p.get() == s;
  });
}

progress_helper::progress_helper() {
  {
    auto& r = sources();
    std::lock_guard lock(r.mutex);
    for (const auto& w : r.sources) {
      if (auto p = w.lock()) {
        sources_.push_back(std::move(p));
      }
    }
  }
  for (const auto& s : sources_) {
    s->helper_arrives();
  }
}

progress_helper::~progress_helper() {
  for (const auto& s : sources_) {
    s->helper_leaves();
  }
}

void progress_helper::step() const noexcept {
  if (sources_.empty()) {
    cpu_relax();
    return;
  }
  for (const auto& s : sources_) {
    s->help();
  }
}

}  // namespace cotensor::detail
