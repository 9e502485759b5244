#include "cotensor/runtime.hpp"

#include "cotensor/wait.hpp"

#include "engine/engine.hpp"
#include "frontend/frontend.hpp"
#include "frontend/recorder.hpp"
#include "support/environment.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace cotensor {
namespace {

std::atomic<runtime*> installed{nullptr};

// The variable's value as a T, std::nullopt when unset or empty; throws std::invalid_argument
// naming it when it is not a whole number that fits a T.
template <class T>
std::optional<T> number_from_environment(const char* name) {
  const auto v = detail::whole_number_from_environment(name, 0, std::numeric_limits<T>::max());
  return v ? std::optional<T>(static_cast<T>(*v)) : std::nullopt;
}

// The engine's options: the runtime's, field by field.
detail::engine_options engine_options_of(const runtime_options& o) {
  detail::engine_options e;
  e.worker_threads = o.worker_threads;
  e.max_in_flight = o.max_in_flight;
  e.max_in_flight_bytes = o.max_in_flight_bytes;
  e.synchronous = o.synchronous;
  e.inline_small_ops = o.inline_small_ops;
  e.allow_tf32 = o.allow_tf32;
  e.wait_spin = o.wait_spin;
  return e;
}

}  // namespace

runtime_options runtime_options::from_environment() {
  runtime_options options;
  if (const auto engine = detail::environment_variable("COTENSOR_ENGINE")) {
    const std::string_view v = *engine;
    if (v == "naive" || v == "synchronous") {
      options.synchronous = true;
    } else if (v != "threaded" && !v.empty()) {
      detail::bad_environment_variable("COTENSOR_ENGINE", v, "'threaded' or 'naive'");
    }
  }
  if (const auto threads = number_from_environment<unsigned>("COTENSOR_NUM_THREADS")) {
    options.worker_threads = *threads;
  }
  if (const auto small = number_from_environment<unsigned>("COTENSOR_INLINE_SMALL_OPS")) {
    options.inline_small_ops = *small != 0;
  }
  if (const auto spin = number_from_environment<unsigned>("COTENSOR_WAIT_SPIN_US")) {
    options.wait_spin = std::chrono::microseconds(*spin);
  }
  if (const auto tf32 = number_from_environment<unsigned>("COTENSOR_ALLOW_TF32")) {
    options.allow_tf32 = *tf32 != 0;
  }
  if (const auto limit = number_from_environment<std::size_t>("COTENSOR_MAX_IN_FLIGHT")) {
    options.max_in_flight = *limit;
  }
  if (const auto bytes = number_from_environment<std::size_t>("COTENSOR_MAX_IN_FLIGHT_BYTES")) {
    options.max_in_flight_bytes = *bytes;
  }
  return options;
}

runtime::runtime(runtime_options options)
    : engine_(std::make_unique<detail::engine>(engine_options_of(options))), options_(options) {
  trace_from_environment();
  // Installed last: a constructor that throws leaves the previous runtime current.
  previous_ = installed.exchange(this, std::memory_order_acq_rel);
  installed_ = true;
}

runtime::runtime(default_tag /*tag*/, runtime_options options)
    : engine_(std::make_unique<detail::engine>(engine_options_of(options))), options_(options) {
  trace_from_environment();
}

// COTENSOR_TRACE=<file>: record every runtime's ops from its start, saved when it ends.
void runtime::trace_from_environment() {
  if (auto path = detail::environment_variable("COTENSOR_TRACE"); path && !path->empty()) {
    trace_path_ = std::move(*path);
    detail::start_recording(*engine_);
  }
}

runtime::~runtime() {
  // A trace still recording ends with the runtime (saved for COTENSOR_TRACE, else dropped).
  auto r = detail::stop_recording(*engine_);
  if (r && !trace_path_.empty()) {
    try {
      r->snapshot().save(trace_path_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cotensor: COTENSOR_TRACE: %s\n", e.what());
    }
  }
  if (installed_) {
    // Become the previous runtime's again only if nobody installed another on top of us.
    runtime* self = this;
    installed.compare_exchange_strong(self, previous_, std::memory_order_acq_rel);
  }
  engine_.reset();  // waits for every op issued on it
}

runtime& runtime::current() {
  if (runtime* r = installed.load(std::memory_order_acquire)) {
    return *r;
  }
  static runtime default_runtime(default_tag{}, runtime_options::from_environment());
  return default_runtime;
}

const runtime_options& runtime::options() const noexcept { return options_; }

runtime_stats runtime::stats() const noexcept {
  const detail::engine_stats e = engine_->stats();
  runtime_stats s;
  s.issued = e.issued;
  s.completed = e.completed;
  s.in_flight = e.in_flight;
  s.peak_in_flight = e.peak_in_flight;
  s.admission_waits = e.admission_waits;
  s.admission_deferred = e.admission_deferred;
  s.live_buffers = e.live_buffers;
  s.live_buffer_bytes = e.live_buffer_bytes;
  s.live_ops = e.live_ops;
  return s;
}

unsigned runtime::worker_threads() const noexcept { return engine_->worker_threads(); }

void wait_all() {
  detail::check_may_block("cotensor::wait_all");
  const auto traced = detail::trace_wait_begin("wait_all");
  detail::blocking_waiter w(detail::current_engine().options().wait_spin);
  detail::current_engine().wait_all(w);
  auto error = w.wait();
  detail::trace_wait_end(traced);
  if (error) {
    std::rethrow_exception(error);
  }
}

namespace detail {

engine& current_engine() { return *runtime::current().engine_; }

}  // namespace detail
}  // namespace cotensor
