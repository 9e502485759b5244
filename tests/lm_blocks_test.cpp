// The generator's parts on their own (src/lm/): the cache's block bookkeeping and prefix cache
// (kv_blocks), and token sampling (sampler).

#include "lm/kv_blocks.hpp"
#include "lm/sampler.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
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
