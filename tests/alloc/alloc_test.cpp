// Once warm, issuing and running ops calls no global allocator: op nodes, kernels' closures
// and buffers come from the engine's pools (oneTBB's scalable allocator), and the frontend
// builds shapes on the stack. Every call to malloc, calloc, realloc, aligned allocation and
// operator new (which ends in malloc) in the whole process is counted, backend workers
// included.

#include <cotensor/cotensor.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

extern "C" {
void* __libc_malloc(std::size_t size);
void* __libc_calloc(std::size_t count, std::size_t size);
void* __libc_realloc(void* p, std::size_t size);
void* __libc_memalign(std::size_t alignment, std::size_t size);
}

namespace {

std::atomic<std::int64_t> allocations{0};

void count() noexcept { allocations.fetch_add(1, std::memory_order_relaxed); }

}  // namespace

// glibc's own entry points stay reachable as __libc_*: these replace the public ones for the
// whole process, libcotensor, libtbb and libstdc++ included.
extern "C" {
void* malloc(std::size_t size) {
  count();
  return __libc_malloc(size);
}
void* calloc(std::size_t n, std::size_t size) {
  count();
  return __libc_calloc(n, size);
}
void* realloc(void* p, std::size_t size) {
  count();
  return __libc_realloc(p, size);
}
void* memalign(std::size_t alignment, std::size_t size) {
  count();
  return __libc_memalign(alignment, size);
}
void* aligned_alloc(std::size_t alignment, std::size_t size) {
  count();
  return __libc_memalign(alignment, size);
}
int posix_memalign(void** out, std::size_t alignment, std::size_t size) {
  count();
  void* p = __libc_memalign(alignment, size);
  if (p == nullptr) {
    return ENOMEM;
  }
  *out = p;
  return 0;
}
}

using namespace cotensor;

namespace {

// Calls to the global allocator while `f` runs.
template <class F>
std::int64_t allocations_in(F&& f) {
  const std::int64_t before = allocations.load();
  f();
  return allocations.load() - before;
}

// The ops of an MLP's forward pass and an SGD step, on small tensors, `n` times.
void mlp_steps(int n, const tensor& x, const tensor& w, const tensor& b, tensor& acc) {
  for (int i = 0; i < n; ++i) {
    tensor h = relu(matmul(x, w) + b);  // matmul, then a row vector broadcast over the rows
    tensor loss = mean(h * h);
    acc += sum(h, 0) * 0.5F;
    acc -= loss;
    tensor t = transpose(h);
    tensor z = exp(-t) / (1.0F + t * t);
    (void)z;
  }
}

}  // namespace

TEST_SUITE("alloc") {
  TEST_CASE("the counting allocator sees allocations" * doctest::timeout(20)) {
    // Guards the test itself: if the replacement were not in effect, every count would be 0.
    CHECK(allocations_in([] {
            std::vector<float> v(1000);
            (void)v;
          }) >= 1);
  }

  TEST_CASE("10,000 ops waited once allocate nothing from the global heap" * doctest::timeout(60)) {
    runtime rt;
    const tensor x = randn({8, 16});
    const tensor w = randn({16, 32});
    const tensor b = randn({32});
    tensor acc = zeros({32});
    mlp_steps(500, x, w, b, acc);  // warm the pools of every thread
    wait_all();
    const auto n = allocations_in([&] {
      mlp_steps(1000, x, w, b, acc);  // 12,000 ops
      wait_all();
    });
    MESSAGE("global allocations for 12,000 ops and one wait_all: " << n);
    // wait_all itself may allocate once (the list of finished waits).
    CHECK(n <= 2);
    CHECK(std::isfinite(acc.sum().item()));
  }

  TEST_CASE("the chapter's increment loop allocates nothing, waited once or after each op" *
            doctest::timeout(60)) {
    runtime rt;
    const tensor x = ones({1, 2});
    tensor y;
    for (int i = 0; i < 1000; ++i) {
      y = x + 1.0F;
      y.wait();
    }
    wait_all();
    const auto async = allocations_in([&] {
      for (int i = 0; i < 10000; ++i) {
        y = x + 1.0F;
      }
      wait_all();
    });
    const auto sync = allocations_in([&] {
      for (int i = 0; i < 10000; ++i) {
        y = x + 1.0F;
        y.wait();
      }
    });
    CHECK(async <= 2);
    CHECK(sync == 0);
    CHECK(y.to_vector() == std::vector<float>{2.0F, 2.0F});
  }

  TEST_CASE("large ops allocate nothing either" * doctest::timeout(60)) {
    runtime rt;
    const tensor a = randn({300, 300});
    tensor c;
    auto step = [&] {
      c = matmul(a, a);
      c = randn({300, 300}) + c;
      c = map(c, [](float v) { return v * 0.5F; });
    };
    for (int i = 0; i < 20; ++i) {
      step();
    }
    wait_all();
    const auto n = allocations_in([&] {
      for (int i = 0; i < 100; ++i) {
        step();
      }
      wait_all();
    });
    CHECK(n <= 2);
  }
}
