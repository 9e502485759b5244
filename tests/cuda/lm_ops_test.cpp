#include <cotensor/cotensor.hpp>

#include "compare.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

// The language-model ops on a GPU against the same ops on the CPU: rms_norm, rotary_embedding,
// scatter_rows and paged_attention, in float32, bfloat16, float16 and float64, with their
// out-of-range errors. Both compute halves in float and round once; the CPU's and CUDA's exp,
// cos and sin differ by an ulp or two, so float results agree within a few ulps and halves
// within one unit of their own last place. scatter_rows moves bytes: the same bits.

using namespace cotensor;
using namespace cotensor::test::cuda;

namespace {

constexpr dtype floats[] = {dtype::float32, dtype::bfloat16, dtype::float16, dtype::float64};

// A few units of the last place of the dtype's result (float64's ops compute in float here).
double rel_for(dtype t) {
  switch (t) {
  case dtype::float16:
    return 4e-3;
  case dtype::bfloat16:
    return 3e-2;
  default:
    return 1e-5;
  }
}

// `values` as dtype `t` in shape `s` on both devices (rounded once, on the CPU).
twin as_twin(const std::vector<float>& values, const shape& s, dtype t) {
  const tensor c = from_vector(values, s).astype(t);
  return {c, c.to(gpu)};
}

// int64 indices on both devices.
twin index_twin(std::vector<std::int64_t> v) {
  const auto n = static_cast<std::int64_t>(v.size());
  const tensor c = from_vector(std::move(v), {n});
  return {c, c.to(gpu)};
}

// The GPU result `g` against the CPU result `c`: same dtype and shape, each element within
// `rel` · max(1, |CPU's|) (0: the same value).
void check_near(const tensor& g, const tensor& c, double rel) {
  REQUIRE(g.device() == gpu);
  REQUIRE(c.device() == device::cpu());
  CHECK(g.dtype() == c.dtype());
  CHECK(g.shape() == c.shape());
  const auto got = g.to_vector<double>();
  const auto want = c.to_vector<double>();
  REQUIRE(got.size() == want.size());
  std::int64_t bad = 0;
  std::string first;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]);
    if (!(err <= rel * std::max(1.0, std::fabs(want[i])))) {  // a NaN fails too
      if (bad++ == 0) {
        first = "element " + std::to_string(i) + ": got " + std::to_string(got[i]) + ", want " +
                std::to_string(want[i]);
      }
    }
  }
  CHECK_MESSAGE(bad == 0, bad, " elements differ; ", first);
}

// Checks that `f()`'s op fails with std::out_of_range naming `op` when waited for.
template <class F>
void check_out_of_range(const char* op, F f) {
  try {
    f();
    FAIL("no exception");
  } catch (const std::out_of_range& e) {
    CHECK(std::string(e.what()).find(op) != std::string::npos);
  }
}

// A paged cache and the queries of a batch: `tokens` rows of `heads` heads over `kv_heads`
// key/value heads, in blocks of `block_size`.
struct attention_case {
  std::int64_t heads;
  std::int64_t kv_heads;
  std::int64_t head_dim;
  std::int64_t blocks;
  std::int64_t block_size;
  std::vector<std::int64_t> tables;  // [sequences, width]
  std::int64_t width;
  std::vector<std::int64_t> sequence;
  std::vector<std::int64_t> context;
};

struct attention_inputs {
  twin q;
  twin k;
  twin v;
  twin tables;
  twin sequence;
  twin context;
  double scale;
};

attention_inputs inputs_for(const attention_case& a, dtype t, std::uint32_t seed) {
  const auto tokens = static_cast<std::int64_t>(a.sequence.size());
  const shape cache{a.blocks, a.block_size, a.kv_heads, a.head_dim};
  const auto sequences = static_cast<std::int64_t>(a.tables.size()) / a.width;
  const tensor tables = from_vector(a.tables, {sequences, a.width});
  // Queries up to ±3: scores spread enough that the running maximum moves.
  return {as_twin(uniform(tokens * a.heads * a.head_dim, seed, -3.0F, 3.0F),
                  {tokens, a.heads * a.head_dim}, t),
          as_twin(uniform(cache.numel(), seed + 1, -1.0F, 1.0F), cache, t),
          as_twin(uniform(cache.numel(), seed + 2, -1.0F, 1.0F), cache, t),
          {tables, tables.to(gpu)},
          index_twin(a.sequence),
          index_twin(a.context),
          1.0 / std::sqrt(static_cast<double>(a.head_dim))};
}

tensor attend_cpu(const attention_inputs& in) {
  return paged_attention(in.q.cpu, in.k.cpu, in.v.cpu, in.tables.cpu, in.sequence.cpu,
                         in.context.cpu, in.scale);
}
tensor attend_gpu(const attention_inputs& in) {
  return paged_attention(in.q.gpu, in.k.gpu, in.v.gpu, in.tables.gpu, in.sequence.gpu,
                         in.context.gpu, in.scale);
}

// Three layouts: 4 query heads over 2 key/value heads (head_dim a multiple of 16), 2 over 1
// with 160 elements (more than one per thread), 3 over 3 with 40 (a partial set of lanes); the
// contexts take one key, a partial block, whole blocks, more keys than a tile (32) and a full
// table, rows of one sequence in a batch with others.
const attention_case attention_cases[] = {
    {.heads = 4,
     .kv_heads = 2,
     .head_dim = 64,
     .blocks = 24,
     .block_size = 4,
     .tables = {3, 0, 4, 9, 10, 11, 12, 13, 14, 15, 2, 1, 5, 6, 7, 8, 16, 17, 18, 19},
     .width = 10,
     .sequence = {0, 1, 0, 0, 1, 1},
     .context = {1, 7, 37, 40, 33, 8}},
    {.heads = 2,
     .kv_heads = 1,
     .head_dim = 160,
     .blocks = 6,
     .block_size = 16,
     .tables = {5, 0, 3, 1},
     .width = 2,
     .sequence = {1, 0, 1},
     .context = {32, 17, 3}},
    {.heads = 3,
     .kv_heads = 3,
     .head_dim = 40,
     .blocks = 9,
     .block_size = 5,
     .tables = {8, 7, 6, 5, 4, 3, 2, 1, 0},
     .width = 9,
     .sequence = {0, 0},
     .context = {45, 11}},
};

}  // namespace

TEST_SUITE("cuda.lm") {
  TEST_CASE("rms_norm of every float dtype matches the CPU" * doctest::timeout(60)) {
    for (const dtype t : floats) {
      CAPTURE(name(t));
      const double rel = rel_for(t);
      const twin x = as_twin(uniform(7 * 300, 41, -3.0F, 3.0F), {7, 300}, t);
      const twin w = as_twin(uniform(300, 42, 0.5F, 1.5F), {300}, t);
      check_near(rms_norm(x.gpu, w.gpu), rms_norm(x.cpu, w.cpu), rel);
      check_near(rms_norm(x.gpu, w.gpu, 1e-2), rms_norm(x.cpu, w.cpu, 1e-2), rel);
      // Rank 3, rows shorter than a block.
      const twin y = as_twin(uniform(2 * 3 * 24, 43, -1.0F, 1.0F), {2, 3, 24}, t);
      const twin v = as_twin(uniform(24, 44, -2.0F, 2.0F), {24}, t);
      check_near(rms_norm(y.gpu, v.gpu, 1e-5), rms_norm(y.cpu, v.cpu, 1e-5), rel);
    }
  }

  TEST_CASE("rotary_embedding of every float dtype matches the CPU" * doctest::timeout(60)) {
    const twin positions = index_twin({0, 1, 2, 17, 100, 1000, 4095, 30000, 5});
    for (const dtype t : floats) {
      CAPTURE(name(t));
      const double rel = rel_for(t);
      const twin x = as_twin(uniform(9 * 4 * 64, 51, -2.0F, 2.0F), {9, 4 * 64}, t);
      check_near(rotary_embedding(x.gpu, positions.gpu, 64),
                 rotary_embedding(x.cpu, positions.cpu, 64), rel);
      check_near(rotary_embedding(x.gpu, positions.gpu, 128, 1e6),
                 rotary_embedding(x.cpu, positions.cpu, 128, 1e6), rel);
      const twin small = as_twin(uniform(9 * 2 * 6, 52, -1.0F, 1.0F), {9, 2 * 6}, t);
      check_near(rotary_embedding(small.gpu, positions.gpu, 6, 500.0),
                 rotary_embedding(small.cpu, positions.cpu, 6, 500.0), rel);
    }
  }

  TEST_CASE("silu_and_mul of every float dtype matches the CPU" * doctest::timeout(60)) {
    for (const dtype t : floats) {
      CAPTURE(name(t));
      const twin x = as_twin(uniform(9 * 2 * 700, 61, -8.0F, 8.0F), {9, 2 * 700}, t);
      check_near(silu_and_mul(x.gpu), silu_and_mul(x.cpu), rel_for(t));
      const twin y = as_twin(uniform(2 * 3 * 10, 62, -3.0F, 3.0F), {2, 3, 10}, t);
      check_near(silu_and_mul(y.gpu), silu_and_mul(y.cpu), rel_for(t));
    }
  }

  TEST_CASE("scatter_rows writes the CPU's bytes in place, the last of repeated indices" *
            doctest::timeout(60)) {
    // Rows of 3 elements: 6 bytes for the halves, 3 for bool, neither a multiple of 8.
    for (const dtype t : {dtype::float32, dtype::bfloat16, dtype::float16, dtype::float64,
                          dtype::int32, dtype::int64, dtype::boolean}) {
      CAPTURE(name(t));
      const twin dst = as_twin(uniform(8 * 3, 61, -5.0F, 5.0F), {4, 2, 3}, t);
      const twin rows = as_twin(uniform(5 * 3, 62, -5.0F, 5.0F), {5, 3}, t);
      const twin index = index_twin({6, 1, 6, 0, 7});
      const tensor before = dst.gpu.astype(dtype::float64);  // issued first: the old rows
      scatter_rows(dst.cpu, index.cpu, rows.cpu);
      scatter_rows(dst.gpu, index.gpu, rows.gpu);
      check_near(dst.gpu, dst.cpu, 0.0);
      CHECK(before.to_vector<double>() == from_vector(uniform(8 * 3, 61, -5.0F, 5.0F), {4, 2, 3})
                                              .astype(t)
                                              .astype(dtype::float64)
                                              .to_vector<double>());
    }
    // Many rows of a key/value cache's width, a permutation into a larger cache.
    const twin cache =
        as_twin(uniform(1000 * 128, 63, -1.0F, 1.0F), {1000, 2, 64}, dtype::bfloat16);
    const twin rows = as_twin(uniform(300 * 128, 64, -1.0F, 1.0F), {300, 2, 64}, dtype::bfloat16);
    std::vector<std::int64_t> slots;
    for (std::int64_t r = 0; r < 300; ++r) {
      slots.push_back(r * 337 % 1000);
    }
    const twin index = index_twin(slots);
    scatter_rows(cache.cpu, index.cpu, rows.cpu);
    scatter_rows(cache.gpu, index.gpu, rows.gpu);
    check_near(cache.gpu, cache.cpu, 0.0);
  }

  TEST_CASE("scatter_rows fails with std::out_of_range for an index outside the destination" *
            doctest::timeout(60)) {
    for (const std::vector<std::int64_t>& bad :
         {std::vector<std::int64_t>{0, 8}, std::vector<std::int64_t>{-1, 2}}) {
      const tensor dst = zeros({4, 2, 3}, gpu);
      scatter_rows(dst, from_vector(bad, {2}, gpu), ones({2, 3}, gpu));
      check_out_of_range("scatter_rows", [&] { dst.wait(); });
    }
  }

  TEST_CASE("paged_attention of every float dtype matches the CPU" * doctest::timeout(120)) {
    std::uint32_t seed = 70;
    for (const attention_case& a : attention_cases) {
      for (const dtype t : floats) {
        CAPTURE(a.head_dim);
        CAPTURE(name(t));
        const attention_inputs in = inputs_for(a, t, seed += 3);
        check_near(attend_gpu(in), attend_cpu(in), rel_for(t));
      }
    }
  }

  TEST_CASE("paged_attention on a GPU: a row's bits do not depend on the other rows or the run" *
            doctest::timeout(60)) {
    const attention_case& a = attention_cases[0];
    for (const dtype t : {dtype::float32, dtype::bfloat16}) {
      CAPTURE(name(t));
      const attention_inputs in = inputs_for(a, t, 90);
      const auto batch = attend_gpu(in).to_vector<double>();
      CHECK(attend_gpu(in).to_vector<double>() == batch);
      const auto width = a.heads * a.head_dim;
      for (std::int64_t r = 0; r < static_cast<std::int64_t>(a.sequence.size()); ++r) {
        CAPTURE(r);
        const tensor q = slice(in.q.gpu, 0, r, r + 1);
        const auto alone =
            paged_attention(q, in.k.gpu, in.v.gpu, in.tables.gpu,
                            from_vector(std::vector<std::int64_t>{a.sequence[r]}, {1}, gpu),
                            from_vector(std::vector<std::int64_t>{a.context[r]}, {1}, gpu),
                            in.scale)
                .to_vector<double>();
        const auto from = batch.begin() + r * width;
        CHECK(std::equal(alone.begin(), alone.end(), from, from + width));
      }
    }
  }

  TEST_CASE("paged_attention fails with std::out_of_range for a sequence, context or block out "
            "of range" *
            doctest::timeout(60)) {
    const attention_case& a = attention_cases[0];
    const attention_inputs in = inputs_for(a, dtype::float32, 95);
    const auto attend = [&](std::vector<std::int64_t> tables, std::vector<std::int64_t> sequence,
                            std::vector<std::int64_t> context) {
      const auto sequences = static_cast<std::int64_t>(tables.size()) / a.width;
      const auto tokens = static_cast<std::int64_t>(sequence.size());
      const tensor q = slice(in.q.gpu, 0, 0, tokens);
      return paged_attention(q, in.k.gpu, in.v.gpu, from_vector(tables, {sequences, a.width}, gpu),
                             from_vector(sequence, {tokens}, gpu),
                             from_vector(context, {tokens}, gpu), in.scale);
    };
    // Within range, with the table's last entries out of it but not reached: computes.
    std::vector<std::int64_t> tables = a.tables;
    tables[9] = 99;
    CHECK_NOTHROW(attend(tables, {0, 1}, {36, 40}).wait());
    // One bad row in the batch fails the op.
    check_out_of_range("paged_attention", [&] { attend(tables, {0, 1}, {37, 40}).wait(); });
    check_out_of_range("paged_attention", [&] { attend(a.tables, {1, 2}, {3, 3}).wait(); });
    check_out_of_range("paged_attention", [&] { attend(a.tables, {-1, 0}, {3, 3}).wait(); });
    check_out_of_range("paged_attention", [&] { attend(a.tables, {0, 0}, {0, 3}).wait(); });
    check_out_of_range("paged_attention", [&] { attend(a.tables, {0, 0}, {3, 41}).wait(); });
    tables = a.tables;
    tables[0] = -1;
    check_out_of_range("paged_attention", [&] { attend(tables, {1, 0}, {3, 1}).wait(); });
    tables[0] = 24;
    check_out_of_range("paged_attention", [&] { attend(tables, {1, 0}, {3, 1}).wait(); });
  }
}
