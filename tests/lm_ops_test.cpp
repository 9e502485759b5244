// The language-model ops: rms_norm, rotary_embedding, silu_and_mul, scatter_rows and
// paged_attention, each
// against a reference computed here in double, with their errors.

#include <cotensor/cotensor.hpp>

#include "cpu/attention_chunk.hpp"
#include "frontend/split_into_cache.hpp"
#include "support/cpu_features.hpp"
#include "support/scoped_environment.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

using namespace cotensor;
using cotensor::test::cpu_has_avx512;
using cotensor::test::scoped_environment;

namespace {

std::vector<float> ramp(std::size_t n, float scale, float shift = 0.0F) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = std::sin(static_cast<float>(i) * scale + shift);
  }
  return v;
}

tensor index(std::vector<std::int64_t> v) {
  const auto n = static_cast<std::int64_t>(v.size());
  return from_vector(std::move(v), {n});
}

// softmax(q·kᵀ · scale)·v in double for row r, head h, of a paged cache laid out
// [blocks, block_size, kv_heads, hd] (`tables` rows of `width` blocks).
std::vector<double> attention_reference(const std::vector<float>& q,
                                        const std::vector<float>& k,
                                        const std::vector<float>& v,
                                        const std::vector<std::int64_t>& tables,
                                        std::int64_t width,
                                        std::int64_t sequence,
                                        std::int64_t keys,
                                        std::int64_t heads,
                                        std::int64_t kv_heads,
                                        std::int64_t hd,
                                        std::int64_t bs,
                                        std::int64_t r,
                                        std::int64_t h,
                                        double scale) {
  const std::int64_t g = h / (heads / kv_heads);
  std::vector<double> score;
  std::vector<std::size_t> slot;
  for (std::int64_t j = 0; j < keys; ++j) {
    const std::int64_t block = tables[static_cast<std::size_t>(sequence * width + j / bs)];
    const auto base = static_cast<std::size_t>(((block * bs + j % bs) * kv_heads + g) * hd);
    double dot = 0;
    for (std::int64_t i = 0; i < hd; ++i) {
      dot += static_cast<double>(q[static_cast<std::size_t>(r * heads * hd + h * hd + i)]) *
             k[base + static_cast<std::size_t>(i)];
    }
    score.push_back(dot * scale);
    slot.push_back(base);
  }
  const double top = *std::max_element(score.begin(), score.end());
  double total = 0;
  for (double& s : score) {
    s = std::exp(s - top);
    total += s;
  }
  std::vector<double> out(static_cast<std::size_t>(hd));
  for (std::int64_t i = 0; i < hd; ++i) {
    for (std::size_t j = 0; j < score.size(); ++j) {
      out[static_cast<std::size_t>(i)] +=
          score[j] / total * v[slot[j] + static_cast<std::size_t>(i)];
    }
  }
  return out;
}

// The floats of x rounded to dtype t and back.
std::vector<float> rounded(const std::vector<float>& x, dtype t) {
  const auto n = static_cast<std::int64_t>(x.size());
  return from_vector(x, {n}).astype(t).astype(dtype::float32).to_vector();
}

// paged_attention of 13 rows (a prompt chunk of sequence 0, then decode rows) against the
// reference in double, and each row alone against its bits among the others.
// Checks a paged attention over chunks of keys against the reference, each row alone against
// its prompt tile's bits, and returns its float32 outputs.
std::vector<float>
check_chunked_attention(std::int64_t hd, dtype t, std::int64_t heads, std::int64_t kv_heads) {
  const std::int64_t bs = 8;
  const std::int64_t blocks = 12;
  const auto kv = static_cast<std::size_t>(blocks * bs * kv_heads * hd);
  const auto kvals = rounded(ramp(kv, 0.013F), t);
  const auto vvals = rounded(ramp(kv, 0.029F, 0.5F), t);
  const tensor kc = from_vector(kvals, {blocks, bs, kv_heads, hd}).astype(t);
  const tensor vc = from_vector(vvals, {blocks, bs, kv_heads, hd}).astype(t);
  const std::vector<std::int64_t> tables{7, 2, 9, 0, 4, 1, 3, 5, 6, 8, 10, 11};
  std::vector<std::int64_t> seq(11, 0);
  std::vector<std::int64_t> ctx;
  for (std::int64_t r = 0; r < 11; ++r) {
    ctx.push_back(32 + r);
  }
  seq.insert(seq.end(), {1, 0, 1, 0});
  ctx.insert(ctx.end(), {37, 41, 20, 48});
  const std::int64_t rows = 15;
  const auto qv = rounded(ramp(static_cast<std::size_t>(rows * heads * hd), 0.07F, 0.3F), t);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const tensor q = from_vector(qv, {rows, heads * hd}).astype(t);
  const tensor table = from_vector(tables, {2, 6});
  const auto out = paged_attention(q, kc, vc, table, index(seq), index(ctx), scale)
                       .astype(dtype::float32)
                       .to_vector();
  const double tol = t == dtype::bfloat16 ? 1e-2 : t == dtype::float16 ? 3e-3 : 1e-5;
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto s = static_cast<std::size_t>(r);
    for (std::int64_t h = 0; h < heads; ++h) {
      const auto want = attention_reference(qv, kvals, vvals, tables, 6, seq[s], ctx[s], heads,
                                            kv_heads, hd, bs, r, h, scale);
      for (std::int64_t i = 0; i < hd; ++i) {
        CHECK(out[static_cast<std::size_t>(r * heads * hd + h * hd + i)] ==
              doctest::Approx(want[static_cast<std::size_t>(i)]).epsilon(tol));
      }
    }
    // The row alone (a tile of one) gives the bits it had in its prompt's tile.
    const auto alone = paged_attention(slice(q, 0, r, r + 1), kc, vc, table, index({seq[s]}),
                                       index({ctx[s]}), scale)
                           .astype(dtype::float32)
                           .to_vector();
    for (std::int64_t i = 0; i < heads * hd; ++i) {
      CHECK(alone[static_cast<std::size_t>(i)] ==
            out[static_cast<std::size_t>(r * heads * hd + i)]);
    }
  }
  return out;
}

}  // namespace

TEST_SUITE("ops.lm") {
  TEST_CASE("rms_norm scales each row by its root mean square and the weight") {
    const auto xv = ramp(3 * 8, 0.7F);
    const auto wv = ramp(8, 0.3F, 1.0F);
    const auto y = rms_norm(from_vector(xv, {3, 8}), from_vector(wv, {8}), 1e-6).to_vector();
    for (int r = 0; r < 3; ++r) {
      double squares = 0;
      for (int j = 0; j < 8; ++j) {
        squares += static_cast<double>(xv[r * 8 + j]) * xv[r * 8 + j];
      }
      const double inv = 1.0 / std::sqrt(squares / 8 + 1e-6);
      for (int j = 0; j < 8; ++j) {
        CHECK(y[r * 8 + j] == doctest::Approx(xv[r * 8 + j] * inv * wv[j]).epsilon(1e-6));
      }
    }
    CHECK(rms_norm(from_vector(xv, {2, 3, 4}), from_vector(ramp(4, 1.0F), {4})).shape() ==
          shape{2, 3, 4});
    CHECK_THROWS_AS(rms_norm(from_vector(xv, {3, 8}), from_vector(wv, {8}).astype(dtype::float64)),
                    std::invalid_argument);
    CHECK_THROWS_AS(rms_norm(from_vector(xv, {3, 8}), from_vector(ramp(4, 1.0F), {4})),
                    std::invalid_argument);
  }

  TEST_CASE("rotary_embedding rotates each head's halves by its row's position") {
    const std::int64_t heads = 2;
    const std::int64_t hd = 6;
    const auto xv = ramp(static_cast<std::size_t>(3 * heads * hd), 0.9F);
    const std::vector<std::int64_t> pos{0, 5, 17};
    const double theta = 500.0;
    const auto y =
        rotary_embedding(from_vector(xv, {3, heads * hd}), index(pos), hd, theta).to_vector();
    for (std::size_t r = 0; r < 3; ++r) {
      for (std::int64_t h = 0; h < heads; ++h) {
        for (std::int64_t i = 0; i < hd / 2; ++i) {
          const double angle =
              static_cast<double>(pos[r]) * std::pow(theta, -2.0 * static_cast<double>(i) / hd);
          const std::size_t at = r * heads * hd + static_cast<std::size_t>(h * hd + i);
          const double x0 = xv[at];
          const double x1 = xv[at + static_cast<std::size_t>(hd / 2)];
          CHECK(y[at] ==
                doctest::Approx(x0 * std::cos(angle) - x1 * std::sin(angle)).epsilon(1e-5));
          CHECK(y[at + static_cast<std::size_t>(hd / 2)] ==
                doctest::Approx(x1 * std::cos(angle) + x0 * std::sin(angle)).epsilon(1e-5));
        }
      }
    }
    // Position 0 is the identity.
    CHECK(y[0] == xv[0]);
    const tensor x = from_vector(xv, {3, heads * hd});
    CHECK_THROWS_AS(rotary_embedding(x, index(pos), 5), std::invalid_argument);
    CHECK_THROWS_AS(rotary_embedding(x, index({0, 1}), hd), std::invalid_argument);
    CHECK_THROWS_AS(rotary_embedding(x, index(pos), hd, 0.0), std::invalid_argument);
  }

  TEST_CASE("silu_and_mul gates each row's second half by silu of its first") {
    // Rows of 2 × 700: more than a block of 512, and chunks that end inside a row.
    const std::int64_t rows = 37;
    const std::int64_t n = 700;
    const auto xv = ramp(static_cast<std::size_t>(rows * 2 * n), 0.013F);
    std::vector<float> scaled(xv.size());
    std::transform(xv.begin(), xv.end(), scaled.begin(), [](float v) { return 12.0F * v; });
    const tensor x = from_vector(scaled, {rows, 2 * n});
    const tensor y = silu_and_mul(x);
    CHECK(y.shape() == shape{rows, n});
    const auto yv = y.to_vector();
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t j = 0; j < n; ++j) {
        const double g = scaled[static_cast<std::size_t>(r * 2 * n + j)];
        const double u = scaled[static_cast<std::size_t>(r * 2 * n + n + j)];
        const double want = g / (1.0 + std::exp(-g)) * u;
        CHECK(yv[static_cast<std::size_t>(r * n + j)] ==
              doctest::Approx(want).epsilon(1e-5).scale(1e-30));
      }
    }
    // float32: the bits of the three ops apart.
    const tensor g = slice(x, 1, 0, n);
    const tensor u = slice(x, 1, n, 2 * n);
    CHECK(yv == (g * sigmoid(g) * u).to_vector());
    // float64 likewise; bfloat16 and float16 round once, near float32's.
    const tensor xd = x.astype(dtype::float64);
    const tensor gd = slice(xd, 1, 0, n);
    CHECK(silu_and_mul(xd).to_vector<double>() ==
          (gd * sigmoid(gd) * slice(xd, 1, n, 2 * n)).to_vector<double>());
    for (const dtype t : {dtype::bfloat16, dtype::float16}) {
      CAPTURE(t);
      const auto h = silu_and_mul(x.astype(t)).astype(dtype::float32).to_vector();
      const auto want = silu_and_mul(x.astype(t).astype(dtype::float32))
                            .astype(t)
                            .astype(dtype::float32)
                            .to_vector();
      CHECK(h == want);
    }
    // Leading axes are rows; a zero extent is empty.
    CHECK(silu_and_mul(reshape(x, {rows, 1, 2 * n})).to_vector() == yv);
    CHECK(silu_and_mul(zeros({0, 4})).shape() == shape{0, 2});
    CHECK_THROWS_AS(silu_and_mul(zeros({3, 5})), std::invalid_argument);
    CHECK_THROWS_AS(silu_and_mul(zeros({3, 4}, dtype::int32)), std::invalid_argument);
    CHECK_THROWS_AS(silu_and_mul(from_vector(std::vector<float>{1.0F}, {})), std::invalid_argument);
  }

  TEST_CASE("split_into_cache is slices, rotary_embedding and scatter_rows in one op") {
    // 5 tokens of 3 query heads and 1 key/value head of 6 (a tail of 3 past no full 16), and of
    // 4 query heads of 64: q | k | v to the queries and 12 cache rows, rotated or not.
    for (const auto& [hd, heads] : {std::pair<std::int64_t, std::int64_t>{6, 3}, {64, 4}}) {
      for (const dtype t : {dtype::float32, dtype::bfloat16, dtype::float16, dtype::float64}) {
        for (const bool rotate : {false, true}) {
          CAPTURE(hd);
          CAPTURE(t);
          CAPTURE(rotate);
          const std::int64_t q_width = heads * hd;
          const std::int64_t kv_width = hd;
          const tensor qkv = (randn({5, q_width + 2 * kv_width}) * 2.0).astype(t);
          const tensor slots = index({7, 0, 11, 3, 4});
          const tensor positions = index({0, 9, 40, 2, 1000});
          const detail::split_rotary rotary{positions, hd, 1e4};
          const tensor k_cache = (randn({3, 4, 1, hd})).astype(t);
          const tensor v_cache = (randn({3, 4, 1, hd})).astype(t);
          const tensor k_want = k_cache * 1.0;
          const tensor v_want = v_cache * 1.0;
          const auto issued = runtime::current().stats().issued;
          const tensor q = detail::split_into_cache(qkv, q_width, kv_width, slots, k_cache, v_cache,
                                                    rotate ? &rotary : nullptr);
          CHECK(runtime::current().stats().issued == issued + 1);  // one op on the CPU
          tensor q_want = slice(qkv, 1, 0, q_width);
          tensor key = slice(qkv, 1, q_width, q_width + kv_width);
          if (rotate) {
            q_want = rotary_embedding(q_want, positions, hd, 1e4);
            key = rotary_embedding(key, positions, hd, 1e4);
          }
          scatter_rows(k_want, slots, key);
          scatter_rows(v_want, slots, slice(qkv, 1, q_width + kv_width, q_width + 2 * kv_width));
          CHECK(q.shape() == shape{5, q_width});
          CHECK(q.astype(dtype::float64).to_vector<double>() ==
                q_want.astype(dtype::float64).to_vector<double>());
          CHECK(k_cache.astype(dtype::float64).to_vector<double>() ==
                k_want.astype(dtype::float64).to_vector<double>());
          CHECK(v_cache.astype(dtype::float64).to_vector<double>() ==
                v_want.astype(dtype::float64).to_vector<double>());
        }
      }
    }
    // A slot outside the cache or written twice fails the op, and the caches it writes.
    const tensor qkv = randn({2, 12});
    const tensor outside = zeros({4, 4});
    CHECK_THROWS_AS(
        detail::split_into_cache(qkv, 4, 4, index({1, 4}), outside, zeros({4, 4})).wait(),
        std::out_of_range);
    CHECK_THROWS_AS(outside.wait(), std::out_of_range);
    const tensor twice = zeros({4, 4});
    CHECK_THROWS_AS(detail::split_into_cache(qkv, 4, 4, index({2, 2}), twice, zeros({4, 4})).wait(),
                    std::invalid_argument);
    CHECK_THROWS_AS(twice.wait(), std::invalid_argument);
    const tensor cache = zeros({4, 4});
    const tensor other = zeros({4, 4});
    // Shapes that do not fit, at the call.
    CHECK_THROWS_AS(detail::split_into_cache(qkv, 4, 3, index({0, 1}), cache, other),
                    std::invalid_argument);
    CHECK_THROWS_AS(detail::split_into_cache(qkv, 4, 4, index({0}), cache, other),
                    std::invalid_argument);
    CHECK_THROWS_AS(detail::split_into_cache(qkv, 4, 4, index({0, 1}), zeros({3, 5}), other),
                    std::invalid_argument);
    const tensor positions = index({0, 1});
    const detail::split_rotary odd{positions, 3, 1e4};
    CHECK_THROWS_AS(detail::split_into_cache(qkv, 4, 4, index({0, 1}), cache, other, &odd),
                    std::invalid_argument);
  }

  TEST_CASE("scatter_rows writes rows in place, ordered with the ops around it") {
    tensor cache = zeros({4, 2, 3});  // 8 rows of 3
    const tensor before = cache * 1.0;
    scatter_rows(cache, index({6, 1}), from_vector({1, 2, 3, 4, 5, 6}, {2, 3}));
    const tensor after = cache * 1.0;
    const auto b = before.to_vector();
    const auto a = after.to_vector();
    CHECK(std::all_of(b.begin(), b.end(), [](float v) { return v == 0.0F; }));
    CHECK(a[3] == 4.0F);
    CHECK(a[5] == 6.0F);
    CHECK(a[18] == 1.0F);
    CHECK(a[20] == 3.0F);
    CHECK(sum(after).item<float>() == 21.0F);
    // An index outside the destination fails the op, writing nothing.
    scatter_rows(cache, index({0, 8}), from_vector({9, 9, 9, 9, 9, 9}, {2, 3}));
    CHECK_THROWS_AS(cache.wait(), std::out_of_range);
    CHECK_THROWS_AS(scatter_rows(cache, index({0}), from_vector({1, 2, 3, 4, 5}, {1, 5})),
                    std::invalid_argument);
    CHECK_THROWS_AS(
        scatter_rows(cache, index({0}), from_vector({1, 2, 3}, {1, 3}).astype(dtype::float64)),
        std::invalid_argument);
  }

  TEST_CASE("paged_attention is softmax(q·kᵀ)·v over each row's keys, block by block") {
    // Two sequences in a cache of 5 blocks of 2 slots; 4 query heads share 2 key/value heads.
    const std::int64_t heads = 4;
    const std::int64_t kv_heads = 2;
    const std::int64_t hd = 4;
    const std::int64_t blocks = 5;
    const std::int64_t bs = 2;
    const auto kv = static_cast<std::size_t>(blocks * bs * kv_heads * hd);
    const auto kvals = ramp(kv, 0.37F);
    const auto vvals = ramp(kv, 0.53F, 0.5F);
    const tensor kc = from_vector(kvals, {blocks, bs, kv_heads, hd});
    const tensor vc = from_vector(vvals, {blocks, bs, kv_heads, hd});
    // Sequence 0 has blocks 3, 0, 4; sequence 1 has block 2.
    const std::vector<std::int64_t> tables{3, 0, 4, 2, 0, 0};
    const std::vector<std::int64_t> seq{0, 1, 0};
    const std::vector<std::int64_t> ctx{5, 2, 1};
    const auto qv = ramp(static_cast<std::size_t>(3 * heads * hd), 0.21F, 0.3F);
    const double scale = 0.5;
    const auto out = paged_attention(from_vector(qv, {3, heads * hd}), kc, vc,
                                     from_vector(tables, {2, 3}), index(seq), index(ctx), scale)
                         .to_vector();
    for (std::int64_t r = 0; r < 3; ++r) {
      for (std::int64_t h = 0; h < heads; ++h) {
        const auto want = attention_reference(qv, kvals, vvals, tables, 3, seq[r], ctx[r], heads,
                                              kv_heads, hd, bs, r, h, scale);
        for (std::int64_t i = 0; i < hd; ++i) {
          CHECK(out[static_cast<std::size_t>(r * heads * hd + h * hd + i)] ==
                doctest::Approx(want[static_cast<std::size_t>(i)]).epsilon(1e-5));
        }
      }
    }
    // A row's result does not depend on the rows beside it.
    const auto alone = paged_attention(slice(from_vector(qv, {3, heads * hd}), 0, 0, 1), kc, vc,
                                       from_vector(tables, {2, 3}), index({0}), index({5}), scale)
                           .to_vector();
    for (std::size_t i = 0; i < alone.size(); ++i) {
      CHECK(alone[i] == out[i]);
    }
    // A context past the table, or a block past the cache, fails the op.
    const tensor q1 = slice(from_vector(qv, {3, heads * hd}), 0, 0, 1);
    CHECK_THROWS_AS(
        paged_attention(q1, kc, vc, from_vector(tables, {2, 3}), index({0}), index({7}), scale)
            .wait(),
        std::out_of_range);
    CHECK_THROWS_AS(paged_attention(q1, kc, vc, from_vector({9, 0, 0}, {1, 3}).astype(dtype::int64),
                                    index({0}), index({1}), scale)
                        .wait(),
                    std::out_of_range);
    // Heads that do not divide, or caches of another shape, are refused at the call.
    CHECK_THROWS_AS(paged_attention(from_vector(ramp(12, 1.0F), {1, 12}), kc, vc,
                                    from_vector(tables, {2, 3}), index({0}), index({1}), scale),
                    std::invalid_argument);
    CHECK_THROWS_AS(paged_attention(q1, kc, reshape(vc, {blocks, bs, 1, 8}),
                                    from_vector(tables, {2, 3}), index({0}), index({1}), scale),
                    std::invalid_argument);
  }

  TEST_CASE("paged_attention over chunks of keys: head sizes 64, 72 and 80, a prompt's tile and "
            "a row alone alike, in every kernel") {
    // 20 to 48 keys (chunks of 16 and a partial one); query heads over key/value heads 4 over 4
    // (GPT-2's kind), 4 over 2 (one group of heads at once), 6 over 3 (a group and a part, and a
    // row alone split into pieces of heads that start past the first key/value head) and 8 over
    // 2 (four heads sharing one transposed block), 14 over 2 (Qwen2.5's groups of 7, a row's
    // heads together) and 16 over 1 (a group in two halves of 8); sequence 0's 11 rows are a
    // prompt chunk (tiles of 8 rows and of 3), then four decode rows of sequences 1 and 0 in
    // turn (rows alone). COTENSOR_ATTENTION=generic computes tiles and rows alone in plain C++;
    // auto and avx512, where the CPU has AVX-512 and the head size is a multiple of 16 (not 72), in
    // registers (cpu/attention_avx512.cpp): the same bits either way, checked against generic.
    std::vector<const char*> kernels{"generic", "auto"};
    if (cpu_has_avx512()) {
      kernels.push_back("avx512");
    } else {
      MESSAGE("no AVX-512 here: every kernel below is the generic one");
    }
    std::map<std::tuple<std::int64_t, dtype, std::int64_t, std::int64_t>, std::vector<float>>
        generic;  // each case's outputs with the generic kernel: every kernel gives these bits
    for (const char* kernel : kernels) {
      const scoped_environment forced("COTENSOR_ATTENTION", kernel);
      for (const std::int64_t hd : {64, 72, 80}) {
        for (const dtype t : {dtype::float32, dtype::bfloat16, dtype::float16}) {
          for (const auto& [heads, kv_heads] : {std::pair<std::int64_t, std::int64_t>{4, 4},
                                                {4, 2},
                                                {6, 3},
                                                {8, 2},
                                                {14, 2},
                                                {16, 1}}) {
            CAPTURE(kernel);
            CAPTURE(hd);
            CAPTURE(t);
            CAPTURE(heads);
            CAPTURE(kv_heads);
            const auto out = check_chunked_attention(hd, t, heads, kv_heads);
            const auto key = std::tuple{hd, t, heads, kv_heads};
            if (std::string_view(kernel) == "generic") {
              generic[key] = out;
            } else {  // bit for bit (== would take -0 for +0)
              const auto& want = generic.at(key);
              REQUIRE(out.size() == want.size());
              CHECK(std::memcmp(out.data(), want.data(), out.size() * sizeof(float)) == 0);
            }
          }
        }
      }
      // With one worker a row alone is one piece of all its heads; with three, two pieces (4
      // heads of 8, 7 of 14); with five, three pieces of 14 (5, 5 and 4 heads: groups split).
      for (const unsigned workers : {1U, 3U, 5U}) {
        CAPTURE(kernel);
        CAPTURE(workers);
        const runtime rt({.worker_threads = workers});
        check_chunked_attention(64, dtype::bfloat16, 8, 2);
        check_chunked_attention(64, dtype::bfloat16, 14, 2);
      }
    }
    // Which rows run in registers: AVX-512, a head size a multiple of 16, not float64.
    CHECK(detail::cpu::attention_rows_avx512(dtype::bfloat16, 64) == cpu_has_avx512());
    CHECK(detail::cpu::attention_rows_avx512(dtype::float16, 128) == cpu_has_avx512());
    CHECK_FALSE(detail::cpu::attention_rows_avx512(dtype::float32, 72));
    CHECK_FALSE(detail::cpu::attention_rows_avx512(dtype::float64, 64));
    {
      const scoped_environment forced("COTENSOR_ATTENTION", "generic");
      CHECK_FALSE(detail::cpu::attention_rows_avx512(dtype::bfloat16, 64));
    }
    // A kernel that is not one, or one this CPU cannot run, fails the op naming it.
    const tensor kc = zeros({2, 8, 1, 16});
    const tensor q = zeros({1, 16});
    const auto attend = [&] {
      return paged_attention(q, kc, kc, from_vector(std::vector<std::int64_t>{0, 1}, {1, 2}),
                             index({0}), index({3}), 0.25)
          .wait();
    };
    {
      const scoped_environment forced("COTENSOR_ATTENTION", "fastest");
      CHECK_THROWS_WITH_AS(attend(), doctest::Contains("COTENSOR_ATTENTION"), std::exception);
    }
    if (!cpu_has_avx512()) {
      const scoped_environment forced("COTENSOR_ATTENTION", "avx512");
      CHECK_THROWS_WITH_AS(attend(), doctest::Contains("AVX-512"), std::exception);
    }
  }

  TEST_CASE("the language-model ops in bfloat16 and float16 stay near float32") {
    const auto xv = ramp(4 * 16, 0.41F);
    const tensor x = from_vector(xv, {4, 16});
    const tensor w = from_vector(ramp(16, 0.2F, 1.0F), {16});
    const tensor pos = index({0, 3, 9, 40});
    for (const dtype t : {dtype::bfloat16, dtype::float16}) {
      CAPTURE(t);
      const double tol = t == dtype::bfloat16 ? 2e-2 : 2e-3;
      const auto a = rms_norm(x.astype(t), w.astype(t)).astype(dtype::float32).to_vector();
      const auto b = rms_norm(x, w).to_vector();
      const auto c = rotary_embedding(x.astype(t), pos, 8).astype(dtype::float32).to_vector();
      const auto d = rotary_embedding(x, pos, 8).to_vector();
      for (std::size_t i = 0; i < a.size(); ++i) {
        CHECK(std::abs(a[i] - b[i]) <= tol * (1 + std::abs(b[i])));
        CHECK(std::abs(c[i] - d[i]) <= tol * (1 + std::abs(d[i])));
      }
    }
  }
}
