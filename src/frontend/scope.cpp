#include "cotensor/scope.hpp"

#include "engine/engine.hpp"
#include "engine/tracker.hpp"
#include "frontend/frontend.hpp"

namespace cotensor {

scope::scope() : tracker_(std::make_shared<detail::tracker>(true)) {}

scope::activation::activation(scope& s) noexcept : previous_(detail::current_scope()) {
  detail::set_current_scope(s.tracker_.get());
}

scope::activation::~activation() { detail::set_current_scope(previous_); }

void scope::wait() const {
  detail::check_may_block("cotensor::scope::wait");
  const auto traced = detail::trace_wait_begin("scope::wait");
  detail::blocking_waiter w(detail::current_engine().options().wait_spin);
  tracker_->wait(w);
  auto error = w.wait();
  detail::trace_wait_end(traced);
  if (error) {
    std::rethrow_exception(error);
  }
}

}  // namespace cotensor
