// Google Benchmark micro-benchmarks of the engine's fixed costs, on a (1, 2) tensor whose
// kernel is negligible, so that each figure is the engine's overhead alone:
//
//   BM_enqueue_small_op  t1: issuing `y = x + 1` without waiting (validation, allocation,
//                        dependency bookkeeping, handing the op to oneTBB)
//   BM_issue_wait        t1 + t2 + t3: issuing one op and blocking in `wait()` until it ends
//                        (dependency resolution, dispatch, completion wake-up of the caller)
//   BM_chain_100         100 dependent ops `y = y + 1`, then one wait: each op can start only
//                        when the previous one has ended, so this is the engine's latency from
//                        one op's end to its successor's start (items/s counts ops)
//
// Runs on a runtime with no in-flight bound, so that the enqueue figure is not throttled by the
// backend. Usage: cotensor_bench_micro [Google Benchmark flags, e.g. --benchmark_filter=chain]

#include "cotensor/cotensor.hpp"

#include <benchmark/benchmark.h>

#include <cstdint>

namespace {

void BM_enqueue_small_op(benchmark::State& state) {
  const auto x = cotensor::ones({1, 2});
  x.wait();
  std::int64_t pending = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(x + 1.0F);
    // Drain now and then, off the clock, so the queue (and memory) stays small.
    if (++pending == 4096) {
      state.PauseTiming();
      cotensor::wait_all();
      pending = 0;
      state.ResumeTiming();
    }
  }
  cotensor::wait_all();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_enqueue_small_op);

void BM_issue_wait(benchmark::State& state) {
  const auto x = cotensor::ones({1, 2});
  x.wait();
  for (auto _ : state) {
    (x + 1.0F).wait();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_issue_wait)->UseRealTime();

void BM_chain_100(benchmark::State& state) {
  constexpr int length = 100;
  const auto x = cotensor::ones({1, 2});
  x.wait();
  for (auto _ : state) {
    auto y = x;
    for (int i = 0; i < length; ++i) {
      y = y + 1.0F;
    }
    y.wait();
  }
  state.SetItemsProcessed(state.iterations() * length);
}
BENCHMARK(BM_chain_100)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
    return 2;
  }
  auto options = cotensor::runtime_options::from_environment();
  options.max_in_flight = 0;
  cotensor::runtime rt(options);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
