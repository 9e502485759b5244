// Token sampling (sampler.hpp): temperature, then top-k, then top-p over the softmax, then one
// uniform number from Philox-4x32-10 (counter: the token's index, key: the seed) walked along
// the kept tokens' cumulative probabilities. Ties go to the lower id everywhere.

#include "lm/sampler.hpp"

#include "cpu/kernels.hpp"
#include "kernels/philox_normal.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
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

// The least logit above -infinity (`top` when there is none below it), 16 at a time.
float least_finite(std::span<const float> logits, float top) {
  const std::size_t n = logits.size();
  const float* x = logits.data();
  const float4 none = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
  const float4 start = {top, top, top, top};
  float4 low[4] = {start, start, start, start};
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int u = 0; u < 4; ++u) {
      const float4 v = load4(x + i + 4 * u);
      const float4 finite = v > none ? v : start;
      low[u] = finite < low[u] ? finite : low[u];
    }
  }
  float out = top;
  for (int u = 0; u < 4; ++u) {
    for (int l = 0; l < 4; ++l) {
      out = std::min(out, low[u][l]);
    }
  }
  for (; i < n; ++i) {
    out = x[i] > -INFINITY ? std::min(out, x[i]) : out;
  }
  return out;
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

// The total of e^((x − top) · scale) over the logits (top their largest: each weight in
// [0, 1]), the argument in double and rounded to float (a tiny temperature's scale, or its
// product, past float's range gives -inf, so a weight of 0, not NaN), the exponential in float
// on libmvec's exp (within 4 ulp: cpu::unary_span), summed in double in 8 lanes (a fixed
// order); each weight also into `weights` when it is not null. A block at a time, so the row
// is read once.
double exp_sum(std::span<const float> logits, double top, double scale, float* weights = nullptr) {
  constexpr std::size_t block = 1024;
  float scratch[block];
  double lane[8] = {};
  for (std::size_t b = 0; b < logits.size(); b += block) {
    const std::size_t m = std::min(block, logits.size() - b);
    float* w = weights != nullptr ? weights + b : scratch;
    for (std::size_t j = 0; j < m; ++j) {
      w[j] = static_cast<float>((static_cast<double>(logits[b + j]) - top) * scale);
    }
    detail::cpu::unary_span(detail::unary_op::exp, w, w, static_cast<std::int64_t>(m));
    for (std::size_t j = 0; j < m; ++j) {
      lane[j % 8] += static_cast<double>(w[j]);
    }
  }
  double total = 0.0;
  for (const double l : lane) {
    total += l;
  }
  return total;
}

// The `k` likeliest ids of `logits` (finite), likeliest first, the lower id first among
// equals: one pass keeping them in a heap whose front is the least likely kept, 16 logits
// compared at once against it. A later id enters only above it (at equal logits the kept lower
// id wins), which few do: ~25 us for 50,257 logits where sorting an index vector took ~150.
std::vector<std::int32_t> likeliest(std::span<const float> logits, std::size_t k) {
  const auto higher = likelier(logits);
  std::vector<std::int32_t> heap;
  heap.reserve(k);
  const std::size_t n = logits.size();
  const float* x = logits.data();
  const auto offer = [&](std::size_t i) {
    const auto id = static_cast<std::int32_t>(i);
    if (heap.size() < k) {
      heap.push_back(id);
      std::push_heap(heap.begin(), heap.end(), higher);
    } else if (higher(id, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), higher);
      heap.back() = id;
      std::push_heap(heap.begin(), heap.end(), higher);
    }
  };
  std::size_t i = 0;
  if (k > 0) {
    for (; i < n && heap.size() < k; ++i) {
      offer(i);
    }
    for (; i + 16 <= n; i += 16) {
      const float least = x[static_cast<std::size_t>(heap.front())];
      const float4 t = {least, least, least, least};
      const mask4 above = (load4(x + i) > t) | (load4(x + i + 4) > t) | (load4(x + i + 8) > t) |
                          (load4(x + i + 12) > t);
      if ((above[0] | above[1] | above[2] | above[3]) != 0) {
        for (std::size_t j = i; j < i + 16; ++j) {
          offer(j);
        }
      }
    }
    for (; i < n; ++i) {
      offer(i);
    }
  }
  std::sort_heap(heap.begin(), heap.end(), higher);
  return heap;
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
  if (p.max_tokens < 0) {
    refuse("max_tokens must be 0 or more");
  }
  for (const auto& [asked, name] :
       {std::pair{p.logprobs, "logprobs"}, std::pair{p.prompt_logprobs, "prompt_logprobs"}}) {
    if (asked && (*asked < 0 || *asked > max_logprobs)) {
      refuse(std::string(name) + " must be in [0, " + std::to_string(max_logprobs) + "]");
    }
  }
  for (const std::string& s : p.stop) {
    if (s.empty()) {
      refuse("a stop text is empty");
    }
  }
  for (const auto& [value, name] : {std::pair{p.presence_penalty, "presence_penalty"},
                                    std::pair{p.frequency_penalty, "frequency_penalty"}}) {
    if (!(value >= -2.0F && value <= 2.0F)) {
      refuse(std::string(name) + " must be in [-2, 2]");
    }
  }
  if (!(p.repetition_penalty > 0.0F) || std::isinf(p.repetition_penalty)) {
    refuse("repetition_penalty must be finite and above 0");
  }
  std::vector<std::int32_t> biased;
  biased.reserve(p.logit_bias.size());
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0) {
      refuse("logit_bias has a negative id (" + std::to_string(id) + ")");
    }
    if (!(bias >= -100.0F && bias <= 100.0F)) {
      refuse("logit_bias of id " + std::to_string(id) + " must be in [-100, 100]");
    }
    biased.push_back(id);
  }
  std::ranges::sort(biased);
  if (const auto twice = std::ranges::adjacent_find(biased); twice != biased.end()) {
    refuse("logit_bias has id " + std::to_string(*twice) + " twice");
  }
}

bool adjusts_logits(const sampling_params& p) noexcept {
  return !p.logit_bias.empty() || p.presence_penalty != 0.0F || p.frequency_penalty != 0.0F ||
         p.repetition_penalty != 1.0F;
}

void adjust_logits(std::span<float> logits,
                   const sampling_params& p,
                   std::span<const std::int32_t> prompt,
                   std::span<const std::int32_t> generated) {
  for (const auto& [id, bias] : p.logit_bias) {
    logits[static_cast<std::size_t>(id)] += bias;
  }
  if (p.repetition_penalty != 1.0F) {
    std::vector<bool> seen(logits.size());
    for (const std::span<const std::int32_t> ids : {prompt, generated}) {
      for (const std::int32_t id : ids) {
        const auto i = static_cast<std::size_t>(id);
        if (!seen[i]) {
          seen[i] = true;
          // Held within float's range: a tiny or huge penalty must not make a finite logit
          // infinite (a logit that is not finite stays so, for sample to refuse or weigh 0).
          float& x = logits[i];
          if (std::isfinite(x)) {
            x = std::clamp(x > 0.0F ? x / p.repetition_penalty : x * p.repetition_penalty,
                           -std::numeric_limits<float>::max(), std::numeric_limits<float>::max());
          }
        }
      }
    }
  }
  if (p.frequency_penalty != 0.0F || p.presence_penalty != 0.0F) {
    std::vector<std::int32_t> sorted(generated.begin(), generated.end());
    std::ranges::sort(sorted);
    for (auto run = sorted.begin(); run != sorted.end();) {
      const auto end = std::ranges::upper_bound(run, sorted.end(), *run);
      float& x = logits[static_cast<std::size_t>(*run)];
      x -= p.frequency_penalty * static_cast<float>(end - run);
      x -= p.presence_penalty;
      run = end;
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
  return pick(logits, row.top, p, uniform(seed, n));
}

std::int32_t pick(std::span<const float> logits, float top, const sampling_params& p, double u) {
  const double scale = 1.0 / static_cast<double>(p.temperature);
  const std::size_t vocab = logits.size();
  // The index into weights `w` where u · `total` falls, their sums taken in order; the last
  // weight above 0 should rounding leave their sum short of it (`total` may be summed in
  // another order).
  const auto walk = [u](std::span<const float> w, double total) {
    const double target = u * total;
    double sum = 0.0;
    for (std::size_t i = 0; i < w.size(); ++i) {
      sum += static_cast<double>(w[i]);
      if (target < sum) {
        return i;
      }
    }
    std::size_t last = w.size() - 1;
    while (last > 0 && !(w[last] > 0.0F)) {
      --last;
    }
    return last;
  };
  // The shortest prefix of `order` (likeliest first) whose weight reaches top_p · `total`, and
  // that prefix's weight; all of it when rounding keeps the sum short.
  const auto nucleus = [&p](std::span<const float> w, double total) {
    const double goal = static_cast<double>(p.top_p) * total;
    double sum = 0.0;
    for (std::size_t i = 0; i < w.size(); ++i) {
      sum += static_cast<double>(w[i]);
      if (sum >= goal) {
        return std::pair{i + 1, sum};
      }
    }
    return std::pair{w.size(), sum};
  };
  if (p.top_k > 0 && static_cast<std::size_t>(p.top_k) < vocab) {
    const std::vector<std::int32_t> ids = likeliest(logits, static_cast<std::size_t>(p.top_k));
    std::vector<float> w(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const auto x = static_cast<double>(logits[static_cast<std::size_t>(ids[i])]);
      w[i] = static_cast<float>((x - static_cast<double>(top)) * scale);
    }
    detail::cpu::unary_span(detail::unary_op::exp, w.data(), w.data(),
                            static_cast<std::int64_t>(w.size()));
    double total = std::accumulate(w.begin(), w.end(), 0.0);
    std::size_t kept = ids.size();
    if (p.top_p < 1.0F) {
      std::tie(kept, total) = nucleus(w, total);
    }
    return ids[walk(std::span(w).first(kept), total)];
  }
  // Every token: weights in id order, and their total.
  std::vector<float> w(vocab);
  const double total = exp_sum(logits, static_cast<double>(top), scale, w.data());
  if (p.top_p >= 1.0F) {
    return static_cast<std::int32_t>(walk(w, total));
  }
  // The nucleus: the shortest prefix of the order (likeliest first) that weighs top_p · total.
  // The logits' range in bins (a bin holds an interval of logits, so equal logits share one
  // and a higher bin holds only likelier tokens): the bins' weights from the top say which bin
  // the nucleus ends in; every token of a higher bin is in it, and only the tokens of that bin
  // are sorted, to find where it ends. Then the kept tokens are walked in id order. No sort of
  // the vocabulary: a flat distribution's nucleus is most of it (a sort took ~5 ms a token).
  const double goal = static_cast<double>(p.top_p) * total;
  constexpr int bins = 1024;  // 8 KB of sums
  // From the least logit, or from where the weights are 0 (e^-104 is below float's least
  // denormal), so that one far-off logit does not widen every bin; a logit below goes to bin 0.
  // In double: a range of denormals' width would make float's bins / (top - low) infinite.
  double low = least_finite(logits, top);
  if (const double floor = static_cast<double>(top) - 104.0 / scale;
      floor > low && floor < static_cast<double>(top)) {
    low = floor;
  }
  // 0 only when every finite logit is the largest.
  const double per_bin =
      static_cast<double>(top) > low ? bins / (static_cast<double>(top) - low) : 0.0;
  std::vector<std::uint16_t> bin(vocab);
  std::array<double, bins> mass{};
  for (std::size_t i = 0; i < vocab; ++i) {
    const float x = logits[i];
    const int b =
        static_cast<double>(x) > low
            ? std::min(static_cast<int>((static_cast<double>(x) - low) * per_bin), bins - 1)
            : 0;
    bin[i] = static_cast<std::uint16_t>(b);
    mass[static_cast<std::size_t>(b)] += static_cast<double>(w[i]);
  }
  int edge = bins - 1;  // the bin the nucleus ends in
  double above = 0.0;   // the weight of the bins above it
  for (; edge > 0 && above + mass[static_cast<std::size_t>(edge)] < goal; --edge) {
    above += mass[static_cast<std::size_t>(edge)];
  }
  std::vector<std::int32_t> ids;
  for (std::size_t i = 0; i < vocab; ++i) {
    if (bin[i] == edge) {
      ids.push_back(static_cast<std::int32_t>(i));
    }
  }
  if (per_bin > 0.0) {  // else every logit is one (or -infinity, of weight 0): ids in order
    std::sort(ids.begin(), ids.end(), likelier(logits));
  }
  double kept_total = above;
  for (const std::int32_t id : ids) {
    kept_total += static_cast<double>(w[static_cast<std::size_t>(id)]);
    bin[static_cast<std::size_t>(id)] = static_cast<std::uint16_t>(edge + 1);  // kept
    if (kept_total >= goal) {
      break;
    }
  }
  // The kept tokens (in a bin above the edge now) walked in id order.
  for (std::size_t i = 0; i < vocab; ++i) {
    w[i] = bin[i] > edge ? w[i] : 0.0F;
  }
  return static_cast<std::int32_t>(walk(w, kept_total));
}

token_logprobs logprobs_of(std::span<const float> logits, std::int32_t id, int top) {
  const row_scan row = scan(logits);
  if (!row.finite) {
    refuse_non_finite();
  }
  const float largest = row.top;
  const double log_total =
      static_cast<double>(largest) + std::log(exp_sum(logits, static_cast<double>(largest), 1.0));
  const auto logprob = [&](std::int32_t i) {
    return static_cast<float>(static_cast<double>(logits[static_cast<std::size_t>(i)]) - log_total);
  };
  token_logprobs out{.logprob = logprob(id), .top = {}};
  const auto n = std::min(static_cast<std::size_t>(std::max(top, 0)), logits.size());
  out.top.reserve(n);
  for (const std::int32_t i : likeliest(logits, n)) {
    out.top.push_back({.id = i, .logprob = logprob(i)});
  }
  return out;
}

}  // namespace cotensor::lm
