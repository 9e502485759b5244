// The frontend's side of every wait: checks its arguments and hands the waiter to the engine.

#include "cotensor/detail/async_wait.hpp"
#include "cotensor/tensor.hpp"

#include "frontend/frontend.hpp"

#include <boost/container/small_vector.hpp>

namespace cotensor::detail {
namespace {

// The waiter a wait starting on this thread should complete: `w` itself, or, on a thread that
// was admitted over the in-flight bound since its last wait (an Asio event loop's thread, see
// admission), a join that completes `w` once the wait has and there is room in flight.
waiter& paced(waiter& w) {
  if (!admission::take_owed()) [[likely]] {
    return w;
  }
  auto& join = join_waiter::make(2, w);
  waiter& wait = join.part(0);
  current_engine().admit(join.part(1));
  return wait;
}

}  // namespace

void start_wait(const tensor& t, waiter& w) { wait_for_buffer(*checked(t, "wait"), paced(w)); }

void start_wait(std::span<const tensor* const> ts, waiter& w) {
  boost::container::small_vector<storage*, 8> buffers;
  for (const tensor* t : ts) {
    buffers.push_back(checked(*t, "when_all").get());
  }
  wait_for_buffers(buffers, paced(w));
}

void start_wait_all(waiter& w) { current_engine().wait_all(paced(w)); }

void start_wait_scope(tracker& t, waiter& w) { t.wait(paced(w)); }

void start_admission(waiter& w) {
  admission::take_owed();  // this wait is for room already
  current_engine().admit(w);
}

asio::any_io_executor fallback_executor() { return current_engine().fallback_executor(); }

}  // namespace cotensor::detail
