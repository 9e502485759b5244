#include "cuda/event_poller.hpp"

#include <cotensor/cotensor.hpp>

#include "engine/engine.hpp"
#include "frontend/frontend.hpp"
#include "support/run.hpp"

#include <boost/asio/use_future.hpp>
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/prctl.h>
#endif

// The GPU completion path without a GPU: ops whose work "launches" and records an event, ended
// by the event poller when a fake event source says the event completed or the device failed.

using namespace cotensor;
using namespace std::chrono_literals;
namespace asio = boost::asio;
namespace cuda = cotensor::detail::cuda;

namespace {

/// Events a test completes or fails by hand; checks that the poller queries no event it has
/// released and releases each once.
class fake_events final : public cuda::event_source {
public:
  struct event {
    std::atomic<cuda::event_state> state{cuda::event_state::pending};
    std::atomic<int> queries{0};  // how often the poller asked about this one
  };

  event* make() {
    std::lock_guard lock(mutex_);
    return &events_.emplace_back();
  }

  cuda::event_state query(void* e, std::error_code& ec) noexcept override {
    queries_.fetch_add(1);
    static_cast<event*>(e)->queries.fetch_add(1);
    std::lock_guard lock(mutex_);
    if (released_.count(e) != 0) {
      misuse_ = true;
    }
    const auto state = static_cast<event*>(e)->state.load();
    if (state == cuda::event_state::failed) {
      ec = std::make_error_code(std::errc::io_error);  // stands for cudaErrorIllegalAddress
    }
    return state;
  }

  void release(void* e) noexcept override {
    std::lock_guard lock(mutex_);
    if (!released_.insert(e).second) {
      misuse_ = true;
    }
  }

  std::size_t released() const {
    std::lock_guard lock(mutex_);
    return released_.size();
  }
  bool misused() const {
    std::lock_guard lock(mutex_);
    return misuse_;
  }
  std::uint64_t queries() const { return queries_.load(); }

  void bind_thread() noexcept override {
#if defined(__linux__)
    timer_slack_ns_ = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
#endif
  }
  /// The poller thread's timer slack in ns, as it was when the poller started (-1: unknown).
  long timer_slack_ns() const { return timer_slack_ns_.load(); }

  void passed(std::uint64_t position, bool ok) noexcept override {
    std::lock_guard lock(mutex_);
    passed_.emplace_back(position, ok);
  }
  std::vector<std::pair<std::uint64_t, bool>> passed_positions() const {
    std::lock_guard lock(mutex_);
    return passed_;
  }

private:
  mutable std::mutex mutex_;
  std::deque<event> events_;  // stable addresses
  std::set<void*> released_;
  bool misuse_ = false;
  std::atomic<std::uint64_t> queries_{0};
  std::atomic<long> timer_slack_ns_{-1};
  std::vector<std::pair<std::uint64_t, bool>> passed_;
};

/// What an `after_event` step saw: how often it ran and with which `ok`.
struct step_log {
  std::atomic<int> runs{0};
  std::atomic<int> ok{0};
  static std::exception_ptr record(void* arg, bool ok) noexcept {
    auto* log = static_cast<step_log*>(arg);
    log->ok += ok ? 1 : 0;
    ++log->runs;
    return nullptr;
  }
};

/// A step that reports an error although the event completed (a collective's library did).
std::exception_ptr report_error(void* /*arg*/, bool /*ok*/) noexcept {
  return std::make_exception_ptr(std::runtime_error("the library reported an error"));
}

/// Issues an op writing `out` whose work "launches" (fills `out` with `value`) and hands its
/// completion to the poller with `event`; counts it in `*launched` if given.
void launch(cuda::event_poller& poller,
            fake_events::event* event,
            const tensor& out,
            float value,
            std::atomic<int>* launched = nullptr,
            std::uint64_t position = 0,
            cuda::after_event after = {},
            const void* stream = nullptr) {
  auto op = detail::make_op("gpu_op", {}, {out.storage()});
  op->kernel.emplace_async([&poller, event, s = out.storage().get(), value, launched, position,
                            after, stream](detail::op_completion done) {
    std::fill(s->data(), s->data() + s->numel(), value);
    poller.watch(event, std::move(done), position, after, stream);
    if (launched != nullptr) {
      ++*launched;
    }
  });
  detail::current_engine().push(std::move(op));
}

bool ready(std::future<void>& f) { return f.wait_for(0s) == std::future_status::ready; }

}  // namespace

TEST_SUITE("event_poller") {
  TEST_CASE("ops end in the order their events complete, not the order they were issued" *
            doctest::timeout(20)) {
    fake_events source;
    cuda::event_poller poller(source, "cuda:0");
    auto a = zeros({2});
    auto b = zeros({2});
    auto* ea = source.make();
    auto* eb = source.make();
    launch(poller, ea, a, 1.0F);
    launch(poller, eb, b, 2.0F);
    auto a_ready = a.async_wait(asio::use_future);
    auto all = std::async(std::launch::async, [] { wait_all(); });
    std::this_thread::sleep_for(20ms);
    CHECK_FALSE(ready(a_ready));
    eb->state = cuda::event_state::complete;
    CHECK(b.to_vector() == std::vector<float>{2, 2});  // b's op ended; a's is pending still
    CHECK_FALSE(ready(a_ready));
    CHECK(all.wait_for(0s) == std::future_status::timeout);
    ea->state = cuda::event_state::complete;
    a_ready.get();
    all.get();
    CHECK(a.to_vector() == std::vector<float>{1, 1});
    poller.shutdown();
    CHECK(source.released() == 2);
    CHECK_FALSE(source.misused());
  }

  TEST_CASE("a failed event puts the device in the failed state: every op on it fails promptly,"
            " waiters and scopes complete, CPU work goes on" *
            doctest::timeout(20)) {
    fake_events source;
    cuda::event_poller poller(source, "cuda:0");
    cotensor::scope s;
    auto a = zeros({2});
    auto b = zeros({2});
    auto* ea = source.make();
    auto* eb = source.make();
    s.run([&] {
      launch(poller, ea, a, 1.0F);
      launch(poller, eb, b, 2.0F);
    });
    auto a_plus = a + 1.0F;                 // a dependent, skipped
    ea->state = cuda::event_state::failed;  // eb never completes: the device failure ends it
    auto is_device_error = [](const tensor& t) {
      try {
        t.wait();
      } catch (const std::system_error& e) {
        return e.code() == std::make_error_code(std::errc::io_error) &&
               std::string(e.what()).find("cuda:0") != std::string::npos;
      }
      return false;
    };
    CHECK(is_device_error(a));
    CHECK(is_device_error(b));
    CHECK(is_device_error(a_plus));
    CHECK_THROWS_AS(s.wait(), std::system_error);
    bool resumed_with_error = false;
    try {
      cotensor::test::run_to_completion([b]() -> asio::awaitable<void> { co_await b.ready(); });
    } catch (const std::system_error&) {
      resumed_with_error = true;
    }
    CHECK(resumed_with_error);
    CHECK(poller.failed());
    CHECK(poller.failure() == std::make_error_code(std::errc::io_error));
    // Later ops on the device fail at once; the CPU keeps computing.
    auto c = zeros({2});
    launch(poller, source.make(), c, 3.0F);
    CHECK(is_device_error(c));
    CHECK((full({2}, 2.0F) * 2.0F).to_vector() == std::vector<float>{4, 4});
    wait_all();
    poller.shutdown();
    CHECK(source.released() == 3);
    CHECK_FALSE(source.misused());
  }

  TEST_CASE("shutdown drains: it returns once every pending event has completed" *
            doctest::timeout(20)) {
    fake_events source;
    auto poller = std::make_unique<cuda::event_poller>(source, "cuda:0");
    std::vector<fake_events::event*> events;
    std::vector<tensor> outs;
    std::atomic<int> launched{0};
    for (int i = 0; i < 8; ++i) {
      events.push_back(source.make());
      outs.push_back(zeros({1}));
      launch(*poller, events.back(), outs.back(), static_cast<float>(i), &launched);
    }
    while (launched.load() < 8) {  // every op launched and watched
      std::this_thread::sleep_for(1ms);
    }
    std::thread completer([&] {
      std::this_thread::sleep_for(30ms);
      for (auto* e : events) {
        e->state = cuda::event_state::complete;
      }
    });
    poller->shutdown();  // waits for the completer
    CHECK(source.released() == 8);
    completer.join();
    wait_all();
    for (int i = 0; i < 8; ++i) {
      CHECK(outs[static_cast<std::size_t>(i)].item() == static_cast<float>(i));
    }
    // A poller shut down refuses new events: the op fails, its event is released.
    auto late = zeros({1});
    launch(*poller, source.make(), late, 1.0F);
    CHECK_THROWS_AS(late.wait(), std::system_error);
    CHECK(source.released() == 9);
    poller.reset();
    CHECK_FALSE(source.misused());
  }

  TEST_CASE("with nothing pending the poller sleeps" * doctest::timeout(20)) {
    fake_events source;
    cuda::event_poller poller(source, "cuda:0");
    auto a = zeros({1});
    auto* e = source.make();
    launch(poller, e, a, 5.0F);
    std::this_thread::sleep_for(20ms);
    CHECK(source.queries() > 0);  // polled while pending
    e->state = cuda::event_state::complete;
    CHECK(a.item() == 5.0F);
    std::this_thread::sleep_for(5ms);
    const auto polls = poller.polls();
    std::this_thread::sleep_for(50ms);
    CHECK(poller.polls() == polls);  // asleep: not one poll more
  }

  TEST_CASE("positions are reported as their ops end, and host steps run once before the op ends"
            " (with ok false when the device failed)" *
            doctest::timeout(20)) {
    fake_events source;
    cuda::event_poller poller(source, "cuda:0");
    step_log first_step;
    step_log second_step;
    auto a = zeros({1});
    auto b = zeros({1});
    auto* ea = source.make();
    auto* eb = source.make();
    launch(poller, ea, a, 1.0F, nullptr, 1, {&step_log::record, &first_step});
    launch(poller, eb, b, 2.0F, nullptr, 2, {&step_log::record, &second_step});
    std::this_thread::sleep_for(10ms);
    CHECK(first_step.runs == 0);
    CHECK(source.passed_positions().empty());
    ea->state = cuda::event_state::complete;
    a.wait();
    CHECK(first_step.runs == 1);  // ran before a's waiters completed
    CHECK(first_step.ok == 1);
    CHECK(source.passed_positions() == std::vector<std::pair<std::uint64_t, bool>>{{1, true}});
    eb->state = cuda::event_state::failed;
    CHECK_THROWS_AS(b.wait(), std::system_error);
    CHECK(second_step.runs == 1);
    CHECK(second_step.ok == 0);
    CHECK(source.passed_positions() ==
          std::vector<std::pair<std::uint64_t, bool>>{{1, true}, {2, false}});
    // Watched after the failure: refused at once, its step run with ok false, its position too.
    step_log late_step;
    auto c = zeros({1});
    launch(poller, source.make(), c, 3.0F, nullptr, 3, {&step_log::record, &late_step});
    CHECK_THROWS_AS(c.wait(), std::system_error);
    CHECK(late_step.runs == 1);
    CHECK(late_step.ok == 0);
    CHECK(source.passed_positions().back() == std::pair<std::uint64_t, bool>{3, false});
    wait_all();
    poller.shutdown();
    CHECK_FALSE(source.misused());
  }

  TEST_CASE("a host step's error fails its op though the event completed: the device goes on" *
            doctest::timeout(20)) {
    fake_events source;
    cuda::event_poller poller(source, "cuda:0");
    auto a = zeros({1});
    auto b = zeros({1});
    auto* ea = source.make();
    auto* eb = source.make();
    launch(poller, ea, a, 1.0F, nullptr, 1, {&report_error, nullptr});
    launch(poller, eb, b, 2.0F, nullptr, 2);
    ea->state = cuda::event_state::complete;
    eb->state = cuda::event_state::complete;
    CHECK_THROWS_WITH_AS(a.wait(), "the library reported an error", std::runtime_error);
    CHECK(b.to_vector() == std::vector<float>{2.0F});
    CHECK_FALSE(poller.failed());
    // Its position passed: host readers of what it wrote are not held. Both events completed
    // before either was seen, so the poller may end them in either order.
    auto passed = source.passed_positions();
    std::sort(passed.begin(), passed.end());
    CHECK(passed == std::vector<std::pair<std::uint64_t, bool>>{{1, true}, {2, true}});
    wait_all();
    poller.shutdown();
    CHECK_FALSE(source.misused());
  }

  TEST_CASE("of one stream's events only the oldest pending one is queried, each stream apart" *
            doctest::timeout(20)) {
    fake_events source;
    cuda::event_poller poller(source, "cuda:0");
    int stream_a = 0;  // two streams, named by any address
    int stream_b = 0;
    std::vector<tensor> outs;
    std::vector<fake_events::event*> events;
    std::atomic<int> launched{0};
    for (int i = 0; i < 4; ++i) {
      outs.push_back(zeros({1}));
      events.push_back(source.make());
      // Three ops in order on stream a (positions 1, 2, 3), the fourth on stream b.
      launch(poller, events.back(), outs.back(), static_cast<float>(i + 1), &launched,
             i < 3 ? static_cast<std::uint64_t>(i + 1) : 0, {}, i < 3 ? &stream_a : &stream_b);
    }
    while (launched.load() < 4) {
      std::this_thread::sleep_for(1ms);
    }
    std::this_thread::sleep_for(20ms);
    CHECK(events[0]->queries > 0);
    CHECK(events[1]->queries == 0);  // behind a pending event of its stream
    CHECK(events[2]->queries == 0);
    CHECK(events[3]->queries > 0);  // the oldest of its own stream
    // Stream b's op ends while stream a's are pending.
    events[3]->state = cuda::event_state::complete;
    CHECK(outs[3].item() == 4.0F);
    CHECK(source.passed_positions().empty());
    // Stream a's events complete in order, as a stream's do; its ops end in that order.
    events[0]->state = cuda::event_state::complete;
    CHECK(outs[0].item() == 1.0F);
    std::this_thread::sleep_for(10ms);
    CHECK(events[1]->queries > 0);  // now the oldest pending one
    CHECK(events[2]->queries == 0);
    events[1]->state = cuda::event_state::complete;
    events[2]->state = cuda::event_state::complete;
    wait_all();
    CHECK(source.passed_positions() ==
          std::vector<std::pair<std::uint64_t, bool>>{{1, true}, {2, true}, {3, true}});
    poller.shutdown();
    CHECK(source.released() == 4);
    CHECK_FALSE(source.misused());
  }

  TEST_CASE("a failed event fails the pending events of every stream, queried or not" *
            doctest::timeout(20)) {
    fake_events source;
    cuda::event_poller poller(source, "cuda:0");
    int stream = 0;
    auto a = zeros({1});
    auto b = zeros({1});
    auto c = zeros({1});
    auto* ea = source.make();
    auto* eb = source.make();
    auto* ec = source.make();
    std::atomic<int> launched{0};
    launch(poller, ea, a, 1.0F, &launched, 1, {}, &stream);
    launch(poller, eb, b, 2.0F, &launched, 2, {}, &stream);
    launch(poller, ec, c, 3.0F, &launched, 0, {}, nullptr);
    while (launched.load() < 3) {
      std::this_thread::sleep_for(1ms);
    }
    std::this_thread::sleep_for(10ms);
    ec->state = cuda::event_state::failed;
    CHECK_THROWS_AS(a.wait(), std::system_error);
    CHECK_THROWS_AS(b.wait(), std::system_error);
    CHECK_THROWS_AS(c.wait(), std::system_error);
    CHECK(eb->queries == 0);  // never queried: failed with its device
    CHECK(source.passed_positions() ==
          std::vector<std::pair<std::uint64_t, bool>>{{1, false}, {2, false}});
    wait_all();
    poller.shutdown();
    CHECK(source.released() == 3);
    CHECK_FALSE(source.misused());
  }

#if defined(__linux__)
  TEST_CASE("the poller's thread sleeps with a timer slack of 1 µs" * doctest::timeout(20)) {
    fake_events source;
    cuda::event_poller poller(source, "cuda:0");
    auto a = zeros({1});
    auto* e = source.make();
    launch(poller, e, a, 1.0F);  // the thread has started once the op ends
    e->state = cuda::event_state::complete;
    a.wait();
    CHECK(source.timer_slack_ns() == 1000);
    poller.shutdown();
  }
#endif
}
