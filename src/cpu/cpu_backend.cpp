#include "cpu/cpu_backend.hpp"

#include "cotensor/config.hpp"

#include "cpu/kernels.hpp"
#include "cpu/worker_pool.hpp"

#if !COTENSOR_STD_THREADS
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>
#endif

#include <algorithm>
#include <memory>
#include <mutex>
#include <thread>

namespace cotensor::detail::cpu {
namespace {

// oneTBB keeps a slot for a joining caller thread and starts at most max_allowed_parallelism - 1
// workers; our callers only enqueue, so raise the process-wide limit to workers + 1. With
// several active global_control objects oneTBB applies the smallest, so a runtime that needs
// more replaces the one in force; the limit never goes down while the process lives.
void raise_parallelism([[maybe_unused]] unsigned workers) {
#if !COTENSOR_STD_THREADS
  static std::mutex mutex;
  static std::unique_ptr<tbb::global_control> control;
  static std::size_t value = 0;
  std::lock_guard lock(mutex);
  const std::size_t wanted = std::size_t{workers} + 1;
  if (wanted > value) {
    auto next =
        std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, wanted);
    control = std::move(next);
    value = wanted;
  }
#endif
}

/// What runs the ops: a oneTBB arena, or in the TSan build (COTENSOR_STD_THREADS) a
/// std::thread pool with the same interface. Chosen at compile time: no indirection.
#if COTENSOR_STD_THREADS
using arena = worker_pool;
#else
using arena = tbb::task_arena;
#endif

class cpu_backend final : public backend {
public:
  explicit cpu_backend(unsigned workers)
      : workers_(workers != 0 ? workers : std::max(1U, std::thread::hardware_concurrency())) {
    raise_parallelism(workers_);
    arena_.initialize(static_cast<int>(workers_), 0);  // no slot kept for a joining caller
  }

  void submit(op_node* op) noexcept override { enqueue<run_op>(op); }
  void execute(op_node* op) noexcept override {
    arena_.execute([op] { run_op(op); });
  }
  void submit_retire(op_node* op) noexcept override { enqueue<retire_op>(op); }

  unsigned concurrency() const noexcept override { return workers_; }

  void shutdown() noexcept override { arena_.terminate(); }

private:
  // Queues `step(op)` for a worker. oneTBB's enqueue allocates its task: out of memory, the
  // step runs here instead of never.
  template <void (*Step)(op_node*) noexcept>
  void enqueue(op_node* op) noexcept {
    try {
      arena_.enqueue([op] { Step(op); });
    } catch (...) {
      arena_.execute([op] { Step(op); });
    }
  }

  unsigned workers_;
  arena arena_;
};

}  // namespace

std::unique_ptr<backend> make_backend(const engine_options& options) {
  return std::make_unique<cpu_backend>(options.worker_threads);
}

}  // namespace cotensor::detail::cpu
