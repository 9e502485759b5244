// A decode step's matrix products alone: the 48 products of GPT-2 small's layers (per layer
// 768 x 2304, 768 x 768, 768 x 3072 and 3072 x 768, the weights [in, out] as GPT-2 stores them;
// 12 layers, 170 MB of bfloat16 weights, more than the caches hold) for a batch of m rows, each
// product waited for, as the row-path GEMM (cpu/gemm_rows_avx512.cpp) runs them in a step of m
// sequences. Prints, per dtype and m, the median milliseconds for all 48 and the weights' bytes
// read per second (to set beside `cotensor_bench_lm --triad`): `matmul` with the weights as they
// are (B read in place for up to 64 rows), and `_packed`, the weights laid out once as the
// language models hold them (detail::packed_matrix: the GEMM's panels, the same bits). Then the
// step's attention over the cache alone: `paged_attention` of m rows over 12 layers' bfloat16
// caches of GPT-2 small's shape (12 heads of 64), each row's 224 keys in 16-key blocks spread at
// random through the cache, one layer's output the next one's queries: the median milliseconds
// for the 12 and the cache's bytes read per second.
//
//   cotensor_bench_lm_products [--repeat N] [--quick]   (--quick: layers of width 64, one run)

#include <cotensor/cotensor.hpp>

#include "../common.hpp"
#include "frontend/packed_matmul.hpp"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

int main(int argc, char** argv) try {
  using namespace cotensor;
  const auto opts = cotensor_bench::parse_options("cotensor_bench_lm_products", argc, argv);
  const std::int64_t hidden = opts.quick ? 64 : 768;
  const std::int64_t layers = opts.quick ? 2 : 12;
  const struct {
    std::int64_t k;
    std::int64_t n;
  } shapes[] = {{hidden, 3 * hidden}, {hidden, hidden}, {hidden, 4 * hidden}, {4 * hidden, hidden}};
  for (const dtype t : {dtype::float32, dtype::bfloat16}) {
    for (const std::int64_t m : {1, 6, 16, 32}) {
      std::vector<tensor> weights;
      std::vector<tensor> inputs;
      double bytes = 0;
      for (std::int64_t l = 0; l < layers; ++l) {
        for (const auto s : shapes) {
          weights.push_back(randn({s.k, s.n}).astype(t));
          inputs.push_back(randn({m, s.k}).astype(t));
          bytes += static_cast<double>(s.k * s.n) * static_cast<double>(itemsize(t));
        }
      }
      const std::vector<detail::packed_matrix> packed(weights.begin(), weights.end());
      wait_all();
      const auto report = [&](const std::string& suffix, const auto& product) {
        const double seconds = cotensor_bench::median_seconds(opts.repeat, [&] {
          const auto start = cotensor_bench::clock_type::now();
          for (std::size_t i = 0; i < weights.size(); ++i) {
            product(i).wait();
          }
          return cotensor_bench::seconds_since(start);
        });
        const std::string figure =
            std::string("products_") + std::string(name(t)) + "_rows" + std::to_string(m) + suffix;
        cotensor_bench::print((figure + "_ms").c_str(), seconds * 1e3);
        cotensor_bench::print((figure + "_weight_gb_s").c_str(), bytes / seconds / 1e9);
      };
      report("", [&](std::size_t i) { return matmul(inputs[i], weights[i]); });
      report("_packed", [&](std::size_t i) { return detail::matmul(inputs[i], packed[i]); });
    }
  }
  const std::int64_t heads = opts.quick ? 2 : 12;
  const std::int64_t head_dim = 64;
  const std::int64_t keys = opts.quick ? 32 : 224;
  const std::int64_t block = 16;
  for (const std::int64_t m : {1, 16}) {
    const std::int64_t per_row = (keys + block - 1) / block;
    std::vector<std::int64_t> blocks(static_cast<std::size_t>(m * per_row));
    std::iota(blocks.begin(), blocks.end(), std::int64_t{0});
    std::shuffle(blocks.begin(), blocks.end(), std::mt19937(7));
    std::vector<std::int64_t> sequence(static_cast<std::size_t>(m));
    std::iota(sequence.begin(), sequence.end(), std::int64_t{0});
    const tensor table = from_vector(blocks, {m, per_row});
    const tensor rows = from_vector(sequence, {m});
    const tensor context = from_vector(std::vector<std::int64_t>(sequence.size(), keys), {m});
    std::vector<tensor> k_cache;
    std::vector<tensor> v_cache;
    for (std::int64_t l = 0; l < layers; ++l) {
      k_cache.push_back(randn({m * per_row, block, heads, head_dim}).astype(dtype::bfloat16));
      v_cache.push_back(randn({m * per_row, block, heads, head_dim}).astype(dtype::bfloat16));
    }
    const tensor q0 = randn({m, heads * head_dim}).astype(dtype::bfloat16);
    wait_all();
    const double seconds = cotensor_bench::median_seconds(opts.repeat, [&] {
      const auto start = cotensor_bench::clock_type::now();
      tensor q = q0;
      for (std::int64_t l = 0; l < layers; ++l) {
        q = paged_attention(q, k_cache[static_cast<std::size_t>(l)],
                            v_cache[static_cast<std::size_t>(l)], table, rows, context, 0.125);
      }
      q.wait();
      return cotensor_bench::seconds_since(start);
    });
    const double bytes = static_cast<double>(layers * m * keys * 2 * heads * head_dim * 2);
    const std::string figure =
        "attention_bfloat16_rows" + std::to_string(m) + "_keys" + std::to_string(keys);
    cotensor_bench::print((figure + "_ms").c_str(), seconds * 1e3);
    cotensor_bench::print((figure + "_cache_gb_s").c_str(), bytes / seconds / 1e9);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "cotensor_bench_lm_products: %s\n", e.what());
  return 1;
}
