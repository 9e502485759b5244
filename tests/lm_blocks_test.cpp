// The generator's parts on their own (src/lm/): the cache's block bookkeeping and prefix cache
// (kv_blocks), and token sampling (sampler).

#include "lm/kv_blocks.hpp"
#include "lm/sampler.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

using cotensor::lm::kv_blocks;
using cotensor::lm::sampling_params;

TEST_SUITE("lm.blocks") {
  TEST_CASE("blocks are held, released, found by their prefix and reused oldest first") {
    kv_blocks pool(3);
    CHECK(pool.available() == 3);
    const std::vector<std::int32_t> ids{1, 2, 3, 4, 5, 6, 7, 8, 9};  // blocks of 4: 2 full
    const std::int64_t a = pool.allocate();
    const std::int64_t b = pool.allocate();
    CHECK(pool.used() == 2);
    CHECK(pool.find(ids, 4).empty());  // nothing published yet
    pool.publish(a, -1, std::span(ids).first(4));
    pool.publish(b, a, std::span(ids).subspan(4, 4));
    CHECK(pool.find(ids, 4) == std::vector<std::int64_t>{a, b});
    // Another second block, or another first one, is not found.
    const std::vector<std::int32_t> other{1, 2, 3, 4, 5, 6, 7, 0};
    CHECK(pool.find(other, 4) == std::vector<std::int64_t>{a});
    const std::vector<std::int32_t> first_differs{0, 2, 3, 4, 5, 6, 7, 8};
    CHECK(pool.find(first_differs, 4).empty());
    // Released, they stay findable and available; held again, they are used.
    pool.release(a);
    pool.release(b);
    CHECK(pool.used() == 0);
    CHECK(pool.available() == 3);
    CHECK(pool.find(ids, 4) == std::vector<std::int64_t>{a, b});
    pool.hold(b);
    CHECK(pool.held(b));
    CHECK(pool.used() == 1);
    pool.release(b);  // released last again: a is the least recently released
    // New blocks come from the free one first, then the least recently released (a).
    const std::int64_t c = pool.allocate();
    CHECK(c != a);
    CHECK(c != b);
    CHECK(pool.allocate() == a);
    CHECK(pool.find(ids, 4).empty());  // a's prefix is gone
    // a holds the same ids again, published anew: b, computed after a's former use, is not
    // taken as following it (its keys were computed after other contents, for all the pool
    // knows), so a colliding hash could never chain a wrong block either.
    pool.publish(a, -1, std::span(ids).first(4));
    CHECK(pool.find(ids, 4) == std::vector<std::int64_t>{a});
  }

  TEST_CASE("a block whose prefix was not published is not published") {
    kv_blocks pool(2);
    const std::vector<std::int32_t> ids{1, 2, 3, 4};
    const std::int64_t a = pool.allocate();
    const std::int64_t b = pool.allocate();
    pool.publish(b, a, std::span(ids).subspan(2, 2));  // a is not published
    CHECK(pool.find(ids, 2).empty());
  }

  TEST_CASE("sampling: greedy, top-k and top-p keep the likeliest, ties to the lower id") {
    const std::vector<float> logits{1.0F, 3.0F, 3.0F, 2.0F, -1.0F};
    CHECK(cotensor::lm::sample(logits, {.temperature = 0.0F}, 1, 0) == 1);
    // top_k 2 keeps ids 1 and 2; top_p 0.5 keeps id 1 alone (the first of the equal pair).
    for (std::uint64_t n = 0; n < 50; ++n) {
      const auto k2 = cotensor::lm::sample(logits, {.temperature = 1.0F, .top_k = 2}, 9, n);
      CHECK((k2 == 1 || k2 == 2));
      CHECK(cotensor::lm::sample(logits, {.temperature = 1.0F, .top_p = 0.3F}, 9, n) == 1);
    }
    // A seed and a counter give one token.
    const sampling_params hot{.temperature = 2.0F};
    CHECK(cotensor::lm::sample(logits, hot, 5, 17) == cotensor::lm::sample(logits, hot, 5, 17));
    // Non-finite logits are refused rather than sorted.
    std::vector<float> bad = logits;
    bad[3] = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_AS(cotensor::lm::sample(bad, hot, 1, 0), std::runtime_error);
    bad[3] = std::numeric_limits<float>::infinity();
    CHECK_THROWS_AS(cotensor::lm::sample(bad, {.temperature = 0.0F}, 1, 0), std::runtime_error);
  }

  TEST_CASE("sampling over a whole vocabulary picks as sorting every token in double would: "
            "temperature, top-k, top-p and the likeliest ids for log-probabilities") {
    // 50,257 logits, peaked (a normal's tail, as a model's) and flat, with ties across the
    // likeliest: against a reference that sorts every id and weighs it in double.
    std::mt19937 rng(3);
    // Flat with one far-off logit and a few -infinity (masked) ones, too: top-p's bins start
    // where the weights are 0, not at the least logit.
    for (const float spread : {3.0F, 0.3F, -0.3F}) {
      CAPTURE(spread);
      std::normal_distribution<float> normal(0.0F, std::abs(spread));
      std::vector<float> logits(50257);
      for (float& x : logits) {
        x = normal(rng);
      }
      if (spread < 0.0F) {
        logits[123] = -1000.0F;
        for (const std::size_t at : {std::size_t{5}, std::size_t{40000}, std::size_t{50256}}) {
          logits[at] = -INFINITY;
        }
      }
      std::vector<std::int32_t> order(logits.size());
      std::iota(order.begin(), order.end(), 0);
      const auto by_logit = [&](std::int32_t a, std::int32_t b) {
        const float la = logits[static_cast<std::size_t>(a)];
        const float lb = logits[static_cast<std::size_t>(b)];
        return la > lb || (la == lb && a < b);
      };
      std::ranges::sort(order, by_logit);
      // Ties: the 3rd and the 40th likeliest take the 2nd's and the 39th's logit.
      for (const std::size_t at : {std::size_t{2}, std::size_t{39}}) {
        logits[static_cast<std::size_t>(order[at])] =
            logits[static_cast<std::size_t>(order[at - 1])];
      }
      std::ranges::sort(order, by_logit);
      const float top = logits[static_cast<std::size_t>(order[0])];
      // The reference: the kept ids in order and their weights, or nullopt when u · total lies
      // too near a boundary to call.
      const auto reference = [&](const sampling_params& p,
                                 double u) -> std::optional<std::int32_t> {
        std::vector<std::int32_t> kept = order;
        if (p.top_k > 0) {
          kept.resize(static_cast<std::size_t>(p.top_k));
        }
        std::vector<double> w;
        for (const std::int32_t id : kept) {
          w.push_back(std::exp((static_cast<double>(logits[static_cast<std::size_t>(id)]) - top) /
                               static_cast<double>(p.temperature)));
        }
        double total = std::accumulate(w.begin(), w.end(), 0.0);
        if (p.top_p < 1.0F) {
          double sum = 0.0;
          std::size_t n = 0;
          while (n < w.size() && sum < static_cast<double>(p.top_p) * total) {
            sum += w[n++];
          }
          if (std::abs(sum - w[n - 1] - static_cast<double>(p.top_p) * total) < 1e-6 * total) {
            return std::nullopt;  // the nucleus's edge
          }
          kept.resize(n);
          w.resize(n);
          total = sum;
        }
        if (p.top_k == 0) {
          // No top-k: the kept ids walked in their own order.
          std::vector<std::pair<std::int32_t, double>> by_id;
          for (std::size_t i = 0; i < kept.size(); ++i) {
            by_id.emplace_back(kept[i], w[i]);
          }
          std::ranges::sort(by_id);
          for (std::size_t i = 0; i < kept.size(); ++i) {
            std::tie(kept[i], w[i]) = by_id[i];
          }
        }
        double sum = 0.0;
        for (std::size_t i = 0; i < kept.size(); ++i) {
          sum += w[i];
          if (std::abs(u * total - sum) < 1e-6 * total) {
            return std::nullopt;
          }
          if (u * total < sum) {
            return kept[i];
          }
        }
        return std::nullopt;
      };
      const sampling_params params[] = {{.temperature = 1.0F},
                                        {.temperature = 0.8F, .top_p = 0.95F},
                                        {.temperature = 1.3F, .top_p = 0.5F},
                                        {.temperature = 0.8F, .top_k = 50},
                                        {.temperature = 0.7F, .top_k = 40, .top_p = 0.9F},
                                        {.temperature = 1.0F, .top_k = 3}};
      for (const sampling_params& p : params) {
        CAPTURE(p.temperature);
        CAPTURE(p.top_k);
        CAPTURE(p.top_p);
        int called = 0;
        for (int k = 0; k < 200; ++k) {
          const double u = (k + 0.5) / 200.0;
          CAPTURE(u);
          if (const auto want = reference(p, u)) {
            ++called;
            CHECK(cotensor::lm::pick(logits, top, p, u) == *want);
          }
        }
        CHECK(called > 150);
      }
      // Every logit equal (or -infinity), and a vocabulary of one: the first ids, in order.
      std::vector<float> equal(40, 2.0F);
      equal[3] = -INFINITY;
      for (const double u : {0.0, 0.3, 0.999}) {
        const auto id = cotensor::lm::pick(equal, 2.0F, {.temperature = 1.0F, .top_p = 0.1F}, u);
        CHECK((id >= 0 && id <= 4 && id != 3));  // 4 of the 39 (0.1 of their weight)
        CHECK(cotensor::lm::pick(std::vector<float>{0.5F}, 0.5F, {.top_p = 0.5F}, u) == 0);
      }
      // Logits a denormal apart: top-p's bins stay finite; the nucleus (half of 100 equally
      // likely tokens, the likeliest first) never reaches the least likely, id 9.
      std::vector<float> close(100, 0.0F);
      close[7] = 1e-45F;
      close[9] = -1e-45F;
      for (const double u : {0.0, 0.5, 0.999}) {
        const auto id = cotensor::lm::pick(close, 1e-45F, {.temperature = 1.0F, .top_p = 0.5F}, u);
        CHECK((id >= 0 && id <= 50 && id != 9));
      }
      // A temperature so small that its inverse leaves float's range: the likeliest, filtered
      // or not (not NaN weights).
      for (const sampling_params& p : {sampling_params{.temperature = 1e-39F},
                                       sampling_params{.temperature = 1e-39F, .top_k = 5},
                                       sampling_params{.temperature = 1e-39F, .top_p = 0.9F}}) {
        for (const double u : {0.0, 0.5, 0.999}) {
          CHECK(cotensor::lm::pick(logits, top, p, u) == order[0]);
        }
      }
      // The likeliest ids, in order, ties to the lower id.
      for (const int k : {0, 1, 2, 3, 20}) {
        const auto lp = cotensor::lm::logprobs_of(logits, order[5], k);
        REQUIRE(lp.top.size() == static_cast<std::size_t>(k));
        for (std::size_t i = 0; i < lp.top.size(); ++i) {
          CHECK(lp.top[i].id == order[i]);
        }
      }
    }
  }

  TEST_CASE("greedy sampling over a whole vocabulary: the first largest logit wherever it lies, "
            "non-finite logits refused anywhere") {
    // Rows scanned 16 logits at a time with a tail: the largest in the blocks, in the tail, tied
    // across blocks, +0 tied with -0, all -infinity; NaN and +infinity in a block and in the tail.
    for (const std::size_t n : {std::size_t{37}, std::size_t{50257}}) {
      CAPTURE(n);
      std::vector<float> row(n);
      for (std::size_t i = 0; i < n; ++i) {
        row[i] = std::sin(0.7F * static_cast<float>(i)) - 2.0F;  // below -1, above -3
      }
      const auto greedy = [&](const std::vector<float>& r) {
        return cotensor::lm::sample(r, {.temperature = 0.0F}, 1, 0);
      };
      const auto first_largest = [](const std::vector<float>& r) {
        std::size_t best = 0;
        for (std::size_t i = 1; i < r.size(); ++i) {
          best = r[i] > r[best] ? i : best;
        }
        return static_cast<std::int32_t>(best);
      };
      CHECK(greedy(row) == first_largest(row));
      for (const std::size_t at : {std::size_t{0}, std::size_t{5}, std::size_t{17}, n - 3, n - 1}) {
        CAPTURE(at);
        auto r = row;
        r[at] = 4.0F;
        CHECK(greedy(r) == static_cast<std::int32_t>(at));
        r[n - 2] = 4.0F;  // a tie later: the lower id stays
        CHECK(greedy(r) == static_cast<std::int32_t>(std::min(at, n - 2)));
        auto nan = row;
        nan[at] = std::numeric_limits<float>::quiet_NaN();
        CHECK_THROWS_AS(greedy(nan), std::runtime_error);
        nan[at] = std::numeric_limits<float>::infinity();
        CHECK_THROWS_AS(greedy(nan), std::runtime_error);
        nan[at] = -std::numeric_limits<float>::infinity();  // finite enough: never picked
        CHECK(greedy(nan) == first_largest(nan));
      }
      auto zeros = row;
      zeros[20] = -0.0F;
      zeros[n - 1] = 0.0F;  // equal to -0: the first wins
      CHECK(greedy(zeros) == 20);
      const std::vector<float> low(n, -std::numeric_limits<float>::infinity());
      CHECK(greedy(low) == 0);
    }
    // A greedy step's rows as the workers give them (argmax and max): the same refusal.
    CHECK(cotensor::lm::is_greedy({.temperature = 0.0F}));
    CHECK(cotensor::lm::is_greedy({.temperature = 0.7F, .top_k = 1}));
    CHECK_FALSE(cotensor::lm::is_greedy({.temperature = 0.7F}));
    CHECK(cotensor::lm::pick_greedy(7, 3.5F) == 7);
    CHECK(cotensor::lm::pick_greedy(0, -std::numeric_limits<float>::infinity()) == 0);
    CHECK_THROWS_AS(cotensor::lm::pick_greedy(2, std::numeric_limits<float>::quiet_NaN()),
                    std::runtime_error);
    CHECK_THROWS_AS(cotensor::lm::pick_greedy(2, std::numeric_limits<float>::infinity()),
                    std::runtime_error);
  }
}
