#include <cotensor/cotensor.hpp>

#include "compare.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <thread>
#include <vector>

// The engine's ordering of GPU work: long chains issued without waiting (any op run out of
// order on its stream, or a write overtaking a read, changes the final value), and work that
// crosses between the CPU and the GPU, interleaved, in both directions.

using namespace cotensor;
using namespace cotensor::test::cuda;

TEST_SUITE("cuda.ordering") {
  TEST_CASE("10000 in-place additions issued without waiting all land, in order" *
            doctest::timeout(60)) {
    for (const std::int64_t n : {std::int64_t{1}, std::int64_t{1} << 20}) {
      CAPTURE(n);
      auto x = zeros({n}, gpu);
      for (int i = 0; i < 10000; ++i) {
        x += 1.0F;
      }
      CHECK(read_back(x) == std::vector<float>(static_cast<std::size_t>(n), 10000.0F));
    }
  }

  TEST_CASE("a chain of 10000 new buffers, each from the last, ends with the right value" *
            doctest::timeout(60)) {
    // Every step reads the previous buffer and drops it: a buffer freed and reused before the
    // GPU has read it would show up in the result.
    auto x = zeros({1 << 16}, gpu);
    for (int i = 0; i < 10000; ++i) {
      x = x * 1.0F + 1.0F;
    }
    CHECK(read_back(x) == std::vector<float>(1 << 16, 10000.0F));
  }

  TEST_CASE("reads and writes of one buffer keep their order: each read sees the write before" *
            doctest::timeout(60)) {
    // Snapshot i must hold i, although the writes that follow it were issued before any wait.
    auto x = zeros({1 << 14}, gpu);
    std::vector<tensor> snapshots;
    for (int i = 0; i < 200; ++i) {
      snapshots.push_back(x * 1.0F);  // a read of x...
      x += 1.0F;                      // ...then a write that must wait for it
    }
    for (std::size_t i = 0; i < snapshots.size(); ++i) {
      CAPTURE(i);
      CHECK(snapshots[i].to_vector() == std::vector<float>(1 << 14, static_cast<float>(i)));
    }
    CHECK(x.to_vector() == std::vector<float>(1 << 14, 200.0F));
  }

  TEST_CASE("CPU ops consume copies of GPU results and GPU ops copies of CPU results, "
            "interleaved" *
            doctest::timeout(60)) {
    // Each round: a GPU op on a copy of the CPU value, a CPU op on a copy of that, and an
    // in-place op on each side between them, all issued before any wait. With small integers
    // every step is exact, so the result is known.
    const std::int64_t n = 1 << 16;
    const auto start = uniform(n, 9, -100.0F, 100.0F);
    std::vector<float> want(start);
    for (auto& v : want) {
      v = static_cast<float>(static_cast<int>(v));
    }
    std::vector<float> expected = want;
    tensor on_cpu = from_vector(want, {n});
    tensor on_gpu = zeros({n}, gpu);
    for (int round = 0; round < 50; ++round) {
      on_gpu = on_cpu.to(gpu) + 3.0F;  // GPU reads what the CPU made
      on_cpu += 1000.0F;               // must not reach the copy just issued
      on_gpu *= 2.0F;
      on_cpu = on_gpu.to(device::cpu()) - 4.0F;  // CPU reads what the GPU made
      on_gpu -= 1e6F;                            // must not reach that copy
      on_cpu = on_cpu / 2.0F;                    // back to v + 1
    }
    for (auto& v : expected) {
      v += 50.0F;
    }
    CHECK(on_cpu.to_vector() == expected);
    auto last_gpu = expected;
    for (auto& v : last_gpu) {
      v = 2.0F * (v - 1.0F + 3.0F) - 1e6F;
    }
    CHECK(read_back(on_gpu) == last_gpu);
  }

  TEST_CASE("binary ops mix operands computed on the CPU and copied over with GPU results" *
            doctest::timeout(60)) {
    const auto a = uniform_twin({300, 200}, 11, -1.0F, 1.0F);
    const auto b = uniform_twin({200}, 12, 0.5F, 2.0F);
    // The GPU side takes its right operand from a CPU computation, and the CPU side from a GPU
    // one; both must equal the single-device result.
    const tensor gpu_mixed = a.gpu * (b.cpu * 3.0F).to(gpu) + a.gpu;
    const tensor cpu_mixed = a.cpu * (b.gpu * 3.0F).to(device::cpu()) + a.cpu;
    const tensor reference = a.cpu * (b.cpu * 3.0F) + a.cpu;
    check_ulps(gpu_mixed, reference);
    CHECK(same_bits(cpu_mixed.to_vector(), reference.to_vector()));
  }

  TEST_CASE("GPU ops issued from several threads at once all complete correctly" *
            doctest::timeout(60)) {
    std::vector<tensor> results(4);
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < results.size(); ++t) {
      threads.emplace_back([&results, t] {
        auto x = full({1 << 12}, static_cast<float>(t), gpu);
        for (int i = 0; i < 500; ++i) {
          x += 1.0F;
        }
        results[t] = x;
      });
    }
    for (auto& th : threads) {
      th.join();
    }
    for (std::size_t t = 0; t < results.size(); ++t) {
      CAPTURE(t);
      CHECK(read_back(results[t]) == std::vector<float>(1 << 12, static_cast<float>(t) + 500));
    }
  }
}
