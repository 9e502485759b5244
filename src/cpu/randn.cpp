// Standard normal samples from the counter-based Philox-4x32-10 generator and Box-Muller.

#include "cpu/kernels.hpp"

#include <Random123/boxmuller.hpp>
#include <Random123/philox.h>

#include <algorithm>

namespace cotensor::detail::cpu {

void randn(float* out, std::int64_t n, std::uint64_t seed, std::uint64_t stream) {
  const std::int64_t blocks = (n + 3) / 4;
  parallel_chunks(blocks, (1 << 15) / 4, [&](std::int64_t lo, std::int64_t hi) {
    r123::Philox4x32 rng;
    const r123::Philox4x32::key_type key = {
        {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)}};
    for (std::int64_t blk = lo; blk < hi; ++blk) {
      const auto ublk = static_cast<std::uint64_t>(blk);
      const r123::Philox4x32::ctr_type ctr = {
          {static_cast<std::uint32_t>(ublk), static_cast<std::uint32_t>(ublk >> 32),
           static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32)}};
      const auto r = rng(ctr, key);
      const auto p = r123::boxmuller(r[0], r[1]);
      const auto q = r123::boxmuller(r[2], r[3]);
      const float values[4] = {p.x, p.y, q.x, q.y};
      const std::int64_t base = blk * 4;
      const std::int64_t count = std::min<std::int64_t>(4, n - base);
      for (std::int64_t j = 0; j < count; ++j) {
        out[base + j] = values[j];
      }
    }
  });
}

}  // namespace cotensor::detail::cpu
