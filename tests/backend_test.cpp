#include "engine/backend.hpp"

#include <cotensor/cotensor.hpp>

#include "engine/engine.hpp"
#include "frontend/frontend.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <memory>
#include <system_error>
#include <thread>
#include <vector>

// The engine's seam to its devices (src/engine/backend.hpp), through the hooks that only a
// device with its own ordering uses: ending an op's buffer accesses at launch while the op stays
// in flight, and the registry of devices.

using namespace cotensor;
using namespace std::chrono_literals;

TEST_SUITE("backend") {
  TEST_CASE("an op that releases its accesses at launch lets readers run while it is in flight" *
            doctest::timeout(20)) {
    auto y = zeros({4});
    wait_all();
    std::promise<detail::op_completion> launched;
    auto op = detail::make_op("launch", {}, {y.storage()});
    op->kernel.emplace_async([&launched, s = y.storage().get()](detail::op_completion done) {
      std::fill(s->data(), s->data() + 4, 3.0F);  // "launched": ordered for later consumers
      done.release_accesses();
      launched.set_value(std::move(done));
    });
    detail::current_engine().push(std::move(op));
    detail::op_completion done = launched.get_future().get();
    // The buffer is free: a reader runs and sees the launched work, though the op has not ended.
    CHECK((y + 1.0F).to_vector() == std::vector<float>{4, 4, 4, 4});
    auto all = std::async(std::launch::async, [] { wait_all(); });
    CHECK(all.wait_for(50ms) == std::future_status::timeout);  // wait_all covers it still
    done();
    all.get();
  }

  TEST_CASE("the registry serves the CPU and refuses devices this build has no backend for") {
    CHECK(detail::has_backend(device::cpu()));
    CHECK(detail::allocator_of(device::cpu()).delayed_bytes() == 64 * 1024);
    CHECK(detail::has_backend(device::cuda(0)) == (cuda_device_count() > 0));
    CHECK_FALSE(detail::has_backend(device::cuda(cuda_device_count())));
    CHECK_THROWS_AS(detail::allocator_of(device::cuda(cuda_device_count())), std::system_error);
    if (cuda_device_count() == 0) {
      CHECK_THROWS_AS(detail::make_backend(device::kind::cuda, detail::engine_options{}),
                      std::system_error);
    }
    auto cpu = detail::make_backend(device::kind::cpu, detail::engine_options{.worker_threads = 2});
    CHECK(cpu->concurrency() == 2);
    cpu->shutdown();
  }

  TEST_CASE("every op knows its device: its first written buffer's") {
    auto x = zeros({2});
    auto op = detail::make_op("copy", {x.storage()}, {zeros({2}).storage()});
    CHECK(op->device == device::cpu());
    CHECK(op->accesses.front().mode == detail::access_mode::write);
  }
}
