#include "cotensor/runtime.hpp"

#include "cotensor/wait.hpp"

#include "engine/engine.hpp"
#include "engine/recorder.hpp"

#include <atomic>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

namespace cotensor {
namespace {

std::atomic<runtime*> installed{nullptr};

template <class T>
T parse_number(const char* name, std::string_view text) {
  T value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size()) {
    throw std::invalid_argument(std::string("cotensor: environment variable ") + name + "='" +
                                std::string(text) + "' is not a non-negative integer");
  }
  return value;
}

}  // namespace

runtime_options runtime_options::from_environment() {
  runtime_options options;
  if (const char* engine = std::getenv("COTENSOR_ENGINE")) {
    const std::string_view v = engine;
    if (v == "naive" || v == "synchronous") {
      options.synchronous = true;
    } else if (v != "threaded" && !v.empty()) {
      throw std::invalid_argument("cotensor: COTENSOR_ENGINE='" + std::string(v) +
                                  "' (expected 'threaded' or 'naive')");
    }
  }
  if (const char* threads = std::getenv("COTENSOR_NUM_THREADS")) {
    options.worker_threads = parse_number<unsigned>("COTENSOR_NUM_THREADS", threads);
  }
  if (const char* small = std::getenv("COTENSOR_INLINE_SMALL_OPS")) {
    options.inline_small_ops = parse_number<unsigned>("COTENSOR_INLINE_SMALL_OPS", small) != 0;
  }
  if (const char* spin = std::getenv("COTENSOR_WAIT_SPIN_US")) {
    options.wait_spin =
        std::chrono::microseconds(parse_number<unsigned>("COTENSOR_WAIT_SPIN_US", spin));
  }
  if (const char* tf32 = std::getenv("COTENSOR_ALLOW_TF32")) {
    options.allow_tf32 = parse_number<unsigned>("COTENSOR_ALLOW_TF32", tf32) != 0;
  }
  if (const char* limit = std::getenv("COTENSOR_MAX_IN_FLIGHT")) {
    options.max_in_flight = parse_number<std::size_t>("COTENSOR_MAX_IN_FLIGHT", limit);
  }
  if (const char* bytes = std::getenv("COTENSOR_MAX_IN_FLIGHT_BYTES")) {
    options.max_in_flight_bytes = parse_number<std::size_t>("COTENSOR_MAX_IN_FLIGHT_BYTES", bytes);
  }
  return options;
}

runtime::runtime(runtime_options options) : engine_(std::make_unique<detail::engine>(options)) {
  trace_from_environment();
  // Installed last: a constructor that throws leaves the previous runtime current.
  previous_ = installed.exchange(this, std::memory_order_acq_rel);
  installed_ = true;
}

runtime::runtime(default_tag /*tag*/, runtime_options options)
    : engine_(std::make_unique<detail::engine>(options)) {
  trace_from_environment();
}

// COTENSOR_TRACE=<file>: record every runtime's ops from its start, saved when it ends.
void runtime::trace_from_environment() {
  if (const char* path = std::getenv("COTENSOR_TRACE"); path != nullptr && *path != '\0') {
    trace_path_ = path;
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

const runtime_options& runtime::options() const noexcept { return engine_->options(); }
runtime_stats runtime::stats() const noexcept { return engine_->stats(); }
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

engine& current_engine() { return runtime::current().engine(); }

}  // namespace detail
}  // namespace cotensor
