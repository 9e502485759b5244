// The event poller's wake-up latency and its cost, on a fake event source: no GPU needed. The
// CUDA backend's poller (src/cuda/event_poller.hpp) ends a GPU op when the event recorded after
// its work completes; here an event "completes" a set delay after it is watched (its query
// answers `complete` from then on), and each sample measures how late the poller sees it: from
// that moment to the poller's host step for the event, which runs just before the op ends.
// One machine-readable line per figure, `cotensor.<name>: <value>`:
//
//   poller_wake_<d>_p50_us, _p99_us  latency in µs for events completing d after being watched,
//                                    d = 0 (the poller wakes from idle), 10us (it spins),
//                                    100us (it yields), 1ms (it sleeps 10 µs between polls),
//                                    20ms (it sleeps 100 µs between polls)
//   poller_busy_cpu_pct              the process's CPU time while one event is pending for
//                                    200 ms and nothing else runs, in % of one core
//   sleep_10us_slack_50us_us         what `sleep_for(10us)` lasts, median, with Linux's default
//   sleep_10us_slack_1us_us          timer slack (50 µs) and with the poller's (1 µs)
//
// Usage: cotensor_bench_poller [--repeat N] [--quick]; --quick takes 20 samples per delay.
// The sample counts are fixed (500 down to 30 per delay); --repeat is accepted and ignored.

#include "cotensor/cotensor.hpp"

#include "../common.hpp"
#include "cuda/event_poller.hpp"
#include "engine/engine.hpp"
#include "frontend/frontend.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <thread>
#include <vector>

namespace {

namespace cuda = cotensor::detail::cuda;
using clock_type = std::chrono::steady_clock;

// One event: complete once `at` has come (set just before it is watched).
struct fake_event {
  std::atomic<clock_type::rep> at{0};
  clock_type::time_point seen;  // when the poller's host step ran for it
};

class fake_source final : public cuda::event_source {
public:
  cuda::event_state query(void* e, std::error_code& /*ec*/) noexcept override {
    const auto at = static_cast<fake_event*>(e)->at.load(std::memory_order_acquire);
    return clock_type::now().time_since_epoch().count() >= at ? cuda::event_state::complete
                                                              : cuda::event_state::pending;
  }
  void release(void* /*e*/) noexcept override {}
};

std::exception_ptr note_seen(void* arg, bool /*ok*/) noexcept {
  static_cast<fake_event*>(arg)->seen = clock_type::now();
  return nullptr;
}

// Watches `e`, completing `delay` from now, through an op of the engine (as the CUDA backend
// does), and waits for the op. Returns the latency in µs.
double sample(cuda::event_poller& poller, fake_event& e, clock_type::duration delay) {
  const auto out = cotensor::zeros({1});
  out.wait();
  auto op = cotensor::detail::make_op("poller_sample", {}, {out.storage()});
  op->kernel.emplace_async([&poller, &e, delay](cotensor::detail::op_completion done) {
    e.at.store((clock_type::now() + delay).time_since_epoch().count(), std::memory_order_release);
    poller.watch(&e, std::move(done), 0, {&note_seen, &e});
  });
  cotensor::detail::current_engine().push(std::move(op));
  out.wait();
  const auto at = clock_type::time_point(clock_type::duration(e.at.load()));
  return std::chrono::duration<double, std::micro>(e.seen - at).count();
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// The median length of `sleep_for(10us)` on this thread with a timer slack of `slack_ns`.
double sleep_10us_median(unsigned long slack_ns, int samples) {
  (void)prctl(PR_SET_TIMERSLACK, slack_ns);
  std::vector<double> us;
  for (int i = 0; i < samples; ++i) {
    const auto start = clock_type::now();
    std::this_thread::sleep_for(std::chrono::microseconds(10));
    us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - start).count());
  }
  return percentile(us, 0.5);
}

}  // namespace

int main(int argc, char** argv) {
  const auto opts = cotensor_bench::parse_options("cotensor_bench_poller", argc, argv);
  std::printf("# cotensor %d.%d.%d, event poller on a fake event source, %s\n",
              COTENSOR_VERSION_MAJOR, COTENSOR_VERSION_MINOR, COTENSOR_VERSION_PATCH,
              opts.quick ? "20 samples per delay" : "500 down to 30 samples per delay");
  fake_source source;
  cuda::event_poller poller(source, "fake:0");
  using std::chrono::microseconds;
  using std::chrono::milliseconds;
  struct delay {
    const char* name;
    clock_type::duration d;
    int samples;
  };
  const delay delays[] = {{"0us", microseconds(0), 500},
                          {"10us", microseconds(10), 500},
                          {"100us", microseconds(100), 300},
                          {"1ms", milliseconds(1), 200},
                          {"20ms", milliseconds(20), 30}};
  fake_event e;
  for (const delay& d : delays) {
    std::vector<double> latencies;
    const int n = opts.quick ? 20 : d.samples;
    for (int i = 0; i < n; ++i) {
      latencies.push_back(sample(poller, e, d.d));
    }
    const std::string name = std::string("poller_wake_") + d.name;
    cotensor_bench::print((name + "_p50_us").c_str(), percentile(latencies, 0.5));
    cotensor_bench::print((name + "_p99_us").c_str(), percentile(latencies, 0.99));
  }
  const double cpu_before = cpu_seconds();
  const auto start = clock_type::now();
  (void)sample(poller, e, milliseconds(200));
  const double wall = cotensor_bench::seconds_since(start);
  cotensor_bench::print("poller_busy_cpu_pct", (cpu_seconds() - cpu_before) / wall * 100.0);
  poller.shutdown();
  const int sleeps = opts.quick ? 50 : 1000;
  cotensor_bench::print("sleep_10us_slack_50us_us", sleep_10us_median(50000, sleeps));
  cotensor_bench::print("sleep_10us_slack_1us_us", sleep_10us_median(1000, sleeps));
  return 0;
}
