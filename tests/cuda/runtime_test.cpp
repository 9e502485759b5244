#include "cotensor/runtime.hpp"

#include <cotensor/cotensor.hpp>

#include "compare.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

// The runtime with GPU work: its counters come back to rest once GPU work has ended, GPU
// memory is given back as tensors are dropped, and every engine configuration runs GPU ops.

using namespace cotensor;
using namespace cotensor::test::cuda;

namespace {

// A little of everything on the GPU, checked against the CPU; for the engine configurations.
void check_mixed_program() {
  const auto a = uniform_twin({64, 32}, 1, -1.0F, 1.0F);
  const auto b = uniform_twin({32}, 2, 0.5F, 2.0F);
  auto g = a.gpu / b.gpu - 0.5F;
  auto c = a.cpu / b.cpu - 0.5F;
  g += a.gpu;
  c += a.cpu;
  check_ulps(relu(g), relu(c));
  check_ulps(transpose(g), transpose(c));
  const auto back = g.to(device::cpu()).to(gpu) * 2.0F;
  check_ulps(back, c * 2.0F);
  const auto got = sum(g, 1).to_vector();
  const auto want = sum(c, 1).to_vector();
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5));
  }
}

}  // namespace

TEST_SUITE("cuda.runtime") {
  TEST_CASE("after wait_all, GPU work leaves no op alive and none in flight" *
            doctest::timeout(30)) {
    wait_all();
    const auto before = runtime::current().stats();
    std::vector<tensor> kept;
    {
      auto x = randn({1 << 20}, gpu);
      for (int i = 0; i < 100; ++i) {
        x = sigmoid(x) * 2.0F - 1.0F;
        (void)matmul(reshape(x, {1024, 1024}), reshape(x, {1024, 1024}));  // dropped at once
      }
      kept.push_back(x);
      kept.push_back(sum(x));
    }
    wait_all();
    const auto after = runtime::current().stats();
    CHECK(after.issued >= before.issued + 300);
    CHECK(after.completed == after.issued);
    CHECK(after.in_flight == 0);
    CHECK(after.live_ops == 0);
    CHECK(after.live_buffers == before.live_buffers + 2);  // the two kept
    kept.clear();
    CHECK(runtime::current().stats().live_buffers == before.live_buffers);
    CHECK(runtime::current().stats().live_buffer_bytes == before.live_buffer_bytes);
  }

  TEST_CASE("200 GPU tensors of 64 MiB made and dropped in turn never run out of memory" *
            doctest::timeout(60)) {
    wait_all();
    const auto before = runtime::current().stats().live_buffer_bytes;
    constexpr std::int64_t n = std::int64_t{16} << 20;  // 64 MiB of floats
    std::vector<tensor> sums;
    for (int i = 0; i < 200; ++i) {
      const tensor big = full({n}, static_cast<float>(i % 8), gpu);
      sums.push_back(mean(big + 1.0F));  // two 64 MiB buffers, both dropped at once
    }
    for (std::size_t i = 0; i < sums.size(); ++i) {
      CAPTURE(i);
      CHECK(sums[i].item() == doctest::Approx(static_cast<float>(i % 8) + 1.0F).epsilon(1e-6));
    }
    sums.clear();
    wait_all();
    CHECK(runtime::current().stats().live_buffer_bytes == before);
  }

  TEST_CASE("a window of live 64 MiB GPU tensors, oldest dropped first, reuses memory" *
            doctest::timeout(60)) {
    wait_all();
    const auto before = runtime::current().stats().live_buffer_bytes;
    constexpr std::int64_t n = std::int64_t{16} << 20;
    std::vector<tensor> window(8);
    std::vector<float> written(window.size());
    for (int i = 0; i < 200; ++i) {
      const auto slot = static_cast<std::size_t>(i) % window.size();
      window[slot] = full({n}, static_cast<float>(i), gpu);  // drops the oldest
      written[slot] = static_cast<float>(i);
      if (i % 50 == 49) {
        // Every buffer of the window holds what was written last into it.
        for (std::size_t k = 0; k < window.size(); ++k) {
          CAPTURE(i);
          CAPTURE(k);
          CHECK(mean(window[k]).item() == doctest::Approx(written[k]).epsilon(1e-6));
        }
      }
    }
    window.clear();
    wait_all();
    CHECK(runtime::current().stats().live_buffer_bytes == before);
  }

  TEST_CASE("every engine configuration runs GPU ops correctly" * doctest::timeout(60)) {
    SUBCASE("synchronous") {
      runtime rt({.synchronous = true});
      check_mixed_program();
    }
    SUBCASE("no ops run at their call") {
      runtime rt({.inline_small_ops = false});
      check_mixed_program();
    }
    SUBCASE("one worker, one op in flight") {
      runtime rt({.worker_threads = 1, .max_in_flight = 1});
      check_mixed_program();
    }
    SUBCASE("the default runtime") { check_mixed_program(); }
  }
}
