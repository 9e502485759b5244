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
#include <type_traits>
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

// Copies the field `name` of `from` into `to`: with an engine list (engine/options.hpp), every
// field of the engine's struct between it and its public twin.
#define COTENSOR_COPY_FIELD(type, name, init) to.name = from.name;

// Each engine option's public twin has its type and default, so the copy loses nothing.
#define COTENSOR_CHECK_TWIN(type, name, init)                                                      \
  static_assert(std::is_same_v<decltype(runtime_options::name), type> &&                           \
                runtime_options{}.name == init);
COTENSOR_ENGINE_OPTIONS(COTENSOR_CHECK_TWIN)
#undef COTENSOR_CHECK_TWIN

detail::engine_options engine_options_of(const runtime_options& from) {
  detail::engine_options to;
  COTENSOR_ENGINE_OPTIONS(COTENSOR_COPY_FIELD)
  return to;
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
  const detail::engine_stats from = engine_->stats();
  runtime_stats to;
  COTENSOR_ENGINE_STATS(COTENSOR_COPY_FIELD)
  return to;
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
