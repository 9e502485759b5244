#include "cotensor/random.hpp"

#include "frontend/frontend.hpp"

#include <mutex>
#include <string>
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

tensor randn(shape s, device d) { return randn(std::move(s), dtype::float32, d); }

tensor randn(shape s, dtype t, device d) {
  if (!is_floating(t)) {
    detail::throw_invalid("randn", "needs a float dtype, got " + std::string(name(t)));
  }
  const detail::kernel_table& k =
      detail::kernels_checked("randn", d, t, &detail::kernel_table::randn_dtypes);
  auto out = detail::allocate("randn", s, d, t);
  const auto next = next_stream();
  const std::uint64_t seed = next.first;
  const std::uint64_t stream = next.second;
  detail::issue("randn", {}, {out}, [k = &k, t, p = out.get(), n = s.numel(), seed, stream] {
    k->randn({.t = t, .out = p->raw(), .n = n, .seed = seed, .stream = stream});
  });
  return {detail::internal, std::move(out), std::move(s)};
}

void manual_seed(std::uint64_t seed) {
  std::lock_guard lock(mutex_);
  seed_ = seed;
  calls_ = 0;
}

}  // namespace cotensor
