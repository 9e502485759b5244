#include "cotensor/random.hpp"

#include "frontend.hpp"

#include <atomic>

namespace cotensor {
namespace {

std::atomic<std::uint64_t> seed_{0};
std::atomic<std::uint64_t> calls_{0};  // randn calls since the last manual_seed

}  // namespace

tensor randn(shape s, device d) {
  auto out = detail::allocate("randn", s, d);
  const std::uint64_t seed = seed_.load(std::memory_order_relaxed);
  const std::uint64_t stream = calls_.fetch_add(1, std::memory_order_relaxed);
  detail::issue("randn", {}, {out}, [p = out->data(), n = s.numel(), seed, stream] {
    detail::cpu::randn(p, n, seed, stream);
  });
  return {std::move(out), std::move(s)};
}

void manual_seed(std::uint64_t seed) {
  seed_.store(seed, std::memory_order_relaxed);
  calls_.store(0, std::memory_order_relaxed);
}

}  // namespace cotensor
