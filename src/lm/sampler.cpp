// Token sampling (sampler.hpp): temperature, then top-k, then top-p over the softmax, then one
// uniform number from Philox-4x32-10 (counter: the token's index, key: the seed) walked along
// the kept tokens' cumulative probabilities. Ties go to the lower id everywhere.

#include "lm/sampler.hpp"

#include "kernels/philox_normal.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace cotensor::lm {
namespace {

// A uniform double in [0, 1) from 53 bits of Philox block (n, 0, 0, 0) under `seed`.
double uniform(std::uint64_t seed, std::uint64_t n) {
  const detail::philox::block c{static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(n >> 32),
                                0, 0};
  const detail::philox::block r = detail::philox::generate(c, static_cast<std::uint32_t>(seed),
                                                           static_cast<std::uint32_t>(seed >> 32));
  const std::uint64_t bits = (std::uint64_t{r.x0} << 21) ^ (r.x1 >> 11);
  return static_cast<double>(bits & ((std::uint64_t{1} << 53) - 1)) * 0x1.0p-53;
}

[[noreturn]] void refuse_non_finite() {
  throw std::runtime_error("cotensor::lm::generator: the model's logits are not finite "
                           "(NaN or infinity)");
}

// Four floats, and four lanes' masks (all ones or zeros), as GCC's and Clang's vector
// extensions hold them: SSE2 registers on any x86-64, without intrinsics.
using float4 = float __attribute__((vector_size(16)));
using mask4 = std::int32_t __attribute__((vector_size(16)));

float4 load4(const float* p) {
  float4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// What one pass over a row finds: its largest logit, and whether every logit is below
// +infinity and not NaN.
struct row_scan {
  float top;
  bool finite;
};

// One pass, 16 lanes at a time in four vectors: a vocabulary of 50,257 in ~11 us, where an
// element-by-element loop, which waits on each comparison, took ~76 (16 rows a step, on the
// scheduler's thread between two steps, while the workers wait for the next).
row_scan scan(std::span<const float> logits) {
  const std::size_t n = logits.size();
  const float* x = logits.data();
  const float4 inf = {INFINITY, INFINITY, INFINITY, INFINITY};
  float4 top[4];
  mask4 finite[4];
  for (int u = 0; u < 4; ++u) {
    top[u] = -inf;
    finite[u] = mask4{} - 1;  // all ones
  }
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int u = 0; u < 4; ++u) {
      const float4 v = load4(x + i + 4 * u);
      finite[u] &= v < inf;
      top[u] = v > top[u] ? v : top[u];
    }
  }
  row_scan r{-INFINITY, true};
  for (int u = 0; u < 4; ++u) {
    for (int l = 0; l < 4; ++l) {
      r.finite = r.finite && finite[u][l] != 0;
      r.top = top[u][l] > r.top ? top[u][l] : r.top;
    }
  }
  for (; i < n; ++i) {
    r.finite = r.finite && x[i] < INFINITY;
    r.top = x[i] > r.top ? x[i] : r.top;
  }
  return r;
}

// The lowest id whose logit equals `top` (a logit of the row, from scan): 16 compared at once
// until a block holds it, then that block's first.
std::int32_t first_equal(std::span<const float> logits, float top) {
  const std::size_t n = logits.size();
  const float* x = logits.data();
  const float4 t = {top, top, top, top};
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const mask4 hit = (load4(x + i) == t) | (load4(x + i + 4) == t) | (load4(x + i + 8) == t) |
                      (load4(x + i + 12) == t);
    if ((hit[0] | hit[1] | hit[2] | hit[3]) != 0) {
      break;
    }
  }
  while (i < n && x[i] != top) {
    ++i;
  }
  return static_cast<std::int32_t>(i);
}

// Orders ids of `logits` most likely first, the lower id first among equals.
auto likelier(std::span<const float> logits) {
  return [logits](std::int32_t a, std::int32_t b) {
    const float la = logits[static_cast<std::size_t>(a)];
    const float lb = logits[static_cast<std::size_t>(b)];
    return la > lb || (la == lb && a < b);
  };
}

}  // namespace

void check_sampling(const sampling_params& p) {
  const auto refuse = [](const std::string& what) {
    throw std::invalid_argument("cotensor::lm::generator::submit: " + what);
  };
  if (!(p.temperature >= 0.0F) || std::isinf(p.temperature)) {
    refuse("temperature must be finite and 0 or more");
  }
  if (p.top_k < 0) {
    refuse("top_k must be 0 (off) or more");
  }
  if (!(p.top_p > 0.0F && p.top_p <= 1.0F)) {
    refuse("top_p must be in (0, 1]");
  }
  if (p.max_tokens < 1) {
    refuse("max_tokens must be 1 or more");
  }
  if (p.logprobs && (*p.logprobs < 0 || *p.logprobs > max_logprobs)) {
    refuse("logprobs must be in [0, " + std::to_string(max_logprobs) + "]");
  }
  for (const std::string& s : p.stop) {
    if (s.empty()) {
      refuse("a stop text is empty");
    }
  }
}

bool is_greedy(const sampling_params& p) noexcept { return p.temperature == 0.0F || p.top_k == 1; }

std::int32_t pick_greedy(std::int64_t first_largest, float largest) {
  if (!(largest < INFINITY)) {
    refuse_non_finite();
  }
  return static_cast<std::int32_t>(first_largest);
}

std::int32_t sample(std::span<const float> logits,
                    const sampling_params& p,
                    std::uint64_t seed,
                    std::uint64_t n) {
  const row_scan row = scan(logits);
  if (!row.finite) {  // NaN or +inf: no order, no probabilities
    refuse_non_finite();
  }
  if (is_greedy(p)) {
    return first_equal(logits, row.top);  // ties to the lower id
  }
  // The candidates, most likely first when a filter needs an order.
  std::vector<std::int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  const auto higher = likelier(logits);
  if (p.top_k > 0 && static_cast<std::size_t>(p.top_k) < ids.size()) {
    const auto k = static_cast<std::ptrdiff_t>(p.top_k);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), higher);
    ids.resize(static_cast<std::size_t>(k));
  } else if (p.top_p < 1.0F) {
    std::sort(ids.begin(), ids.end(), higher);
  }
  const double inv_t = 1.0 / static_cast<double>(p.temperature);
  double top = -INFINITY;
  for (const std::int32_t id : ids) {
    top = std::max(top, static_cast<double>(logits[static_cast<std::size_t>(id)]) * inv_t);
  }
  std::vector<double> weight(ids.size());
  double total = 0.0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    weight[i] =
        std::exp(static_cast<double>(logits[static_cast<std::size_t>(ids[i])]) * inv_t - top);
    total += weight[i];
  }
  std::size_t kept = ids.size();
  if (p.top_p < 1.0F) {  // `ids` are in order here (sorted, or top-k's sorted prefix)
    double sum = 0.0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      sum += weight[i];
      if (sum >= static_cast<double>(p.top_p) * total) {
        kept = i + 1;
        break;
      }
    }
    total =
        std::accumulate(weight.begin(), weight.begin() + static_cast<std::ptrdiff_t>(kept), 0.0);
  }
  const double target = uniform(seed, n) * total;
  double sum = 0.0;
  for (std::size_t i = 0; i < kept; ++i) {
    sum += weight[i];
    if (target < sum) {
      return ids[i];
    }
  }
  return ids[kept - 1];
}

token_logprobs logprobs_of(std::span<const float> logits, std::int32_t id, int top) {
  const double largest = static_cast<double>(scan(logits).top);
  double total = 0.0;
  for (const float x : logits) {
    total += std::exp(static_cast<double>(x) - largest);
  }
  const double log_total = largest + std::log(total);
  const auto logprob = [&](std::int32_t i) {
    return static_cast<float>(static_cast<double>(logits[static_cast<std::size_t>(i)]) - log_total);
  };
  token_logprobs out{.logprob = logprob(id), .top = {}};
  const auto n = std::min(static_cast<std::size_t>(std::max(top, 0)), logits.size());
  if (n == 0) {
    return out;
  }
  std::vector<std::int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(),
                    likelier(logits));
  out.top.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    out.top.push_back({.id = ids[i], .logprob = logprob(ids[i])});
  }
  return out;
}

}  // namespace cotensor::lm
