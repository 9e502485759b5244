#include "cotensor/random.hpp"

#include "frontend.hpp"

#include <mutex>
#include <utility>

namespace cotensor {
namespace {

// The seed and the number of randn calls since it was set change together.
std::mutex mutex_;
std::uint64_t seed_ = 0;
std::uint64_t calls_ = 0;

std::pair<std::uint64_t, std::uint64_t> next_stream() {
  std::lock_guard lock(mutex_);
  return {seed_, calls_++};
}

}  // namespace

tensor randn(shape s, device d) {
  auto out = detail::allocate("randn", s, d);
  const auto next = next_stream();
  const std::uint64_t seed = next.first;
  const std::uint64_t stream = next.second;
  detail::issue("randn", {}, {out},
                [k = &detail::kernels_for(d), p = out.get(), n = s.numel(), seed, stream] {
                  k->randn(p->data(), n, seed, stream);
                });
  return {std::move(out), std::move(s)};
}

void manual_seed(std::uint64_t seed) {
  std::lock_guard lock(mutex_);
  seed_ = seed;
  calls_ = 0;
}

}  // namespace cotensor
