// The forward passes of cotensor::lm::model: one sequence without a cache (model::logits, made
// of general ops: a [T, T] mask, attention head by head) and a generation step over the paged
// key/value cache (the language-model ops: RMSNorm, SwiGLU's gate, the q | k | v split into the
// cache with RoPE, paged_attention).

#include "cotensor/ops.hpp"

#include "frontend/split_into_cache.hpp"
#include "lm/model_impl.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace cotensor::lm {
namespace {

// Softmax(q · kᵀ · scale + mask) · v for one head.
tensor attend(const tensor& q, const tensor& k, const tensor& v, const tensor& mask, double scale) {
  return matmul(softmax(matmul(q, transpose(k)) * scale + mask), v);
}

}  // namespace

tensor model::impl::forward(std::span<const std::int32_t> ids) const {
  const auto t = static_cast<std::int64_t>(ids.size());
  if (t == 0 || t > positions) {
    throw std::invalid_argument("cotensor::lm::model::logits: " + std::to_string(t) +
                                " ids; the model takes 1 to " + std::to_string(positions));
  }
  std::vector<std::int64_t> index;
  for (const std::int32_t id : ids) {
    if (id < 0 || id >= vocab) {
      throw std::out_of_range("cotensor::lm::model::logits: id " + std::to_string(id) +
                              " is past the vocabulary (" + std::to_string(vocab) + ")");
    }
    index.push_back(id);
  }
  // The causal mask: 0 where a position may look (itself and before), −inf after.
  std::vector<float> mask_values(static_cast<std::size_t>(t * t), 0.0F);
  for (std::int64_t i = 0; i < t; ++i) {
    for (std::int64_t j = i + 1; j < t; ++j) {
      mask_values[static_cast<std::size_t>(i * t + j)] = -std::numeric_limits<float>::infinity();
    }
  }
  const tensor mask = from_vector(mask_values, {t, t}, where).astype(dtype);
  const tensor h = index_select(embed, 0, from_vector(index, {t}, where));
  const tensor last =
      kind == family::gpt2 ? gpt2_forward(h + slice(wpe, 0, 0, t), mask) : llama_forward(h, mask);
  return matmul(last, head).astype(cotensor::dtype::float32);
}

tensor model::impl::gpt2_forward(tensor h, const tensor& mask) const {
  const std::int64_t d = width;
  const std::int64_t hd = head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  for (const gpt2_block& b : gpt2_blocks) {
    const tensor qkv = matmul(layer_norm(h, b.ln1_w, b.ln1_b, eps), b.attn_w, b.attn_b);
    std::vector<tensor> outs;
    for (std::int64_t k = 0; k < heads; ++k) {
      outs.push_back(attend(slice(qkv, 1, k * hd, (k + 1) * hd),
                            slice(qkv, 1, d + k * hd, d + (k + 1) * hd),
                            slice(qkv, 1, 2 * d + k * hd, 2 * d + (k + 1) * hd), mask, scale));
    }
    h = h + matmul(concat(outs, 1), b.attn_proj_w, b.attn_proj_b);
    const tensor m = layer_norm(h, b.ln2_w, b.ln2_b, eps);
    h = h + matmul(gelu(matmul(m, b.fc_w, b.fc_b), true), b.mlp_proj_w, b.mlp_proj_b);
  }
  return layer_norm(h, norm_w, norm_b, eps);
}

tensor model::impl::llama_forward(tensor h, const tensor& mask) const {
  const std::int64_t t = h.shape()[0];
  const std::int64_t hd = head_dim;
  const std::int64_t half = hd / 2;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  // RoPE's cos and sin [t, hd]: position p, frequency θ^(−2i/hd), the halves alike.
  std::vector<float> cos_values(static_cast<std::size_t>(t * hd));
  std::vector<float> sin_values(cos_values.size());
  for (std::int64_t p = 0; p < t; ++p) {
    for (std::int64_t i = 0; i < half; ++i) {
      const float inv = static_cast<float>(
          1.0 / std::pow(rope_theta, static_cast<double>(2 * i) / static_cast<double>(hd)));
      const float angle = static_cast<float>(p) * inv;
      for (const std::int64_t j : {i, i + half}) {
        cos_values[static_cast<std::size_t>(p * hd + j)] = std::cos(angle);
        sin_values[static_cast<std::size_t>(p * hd + j)] = std::sin(angle);
      }
    }
  }
  const tensor cos_t = from_vector(cos_values, {t, hd}, where).astype(dtype);
  const tensor sin_t = from_vector(sin_values, {t, hd}, where).astype(dtype);
  const auto rope = [&](const tensor& x) {
    const tensor rotated = concat({slice(x, 1, half, hd) * -1.0, slice(x, 1, 0, half)}, 1);
    return x * cos_t + rotated * sin_t;
  };
  const std::int64_t group = heads / kv_heads;
  const std::int64_t q_out = heads * hd;
  const std::int64_t kv_out = kv_heads * hd;
  for (const llama_block& b : llama_blocks) {
    const tensor qkv = matmul(rms_norm(h, b.in_norm, eps), b.qkv_w, b.qkv_b);
    const tensor q = slice(qkv, 1, 0, q_out);
    const tensor k = slice(qkv, 1, q_out, q_out + kv_out);
    const tensor v = slice(qkv, 1, q_out + kv_out, q_out + 2 * kv_out);
    std::vector<tensor> keys;
    std::vector<tensor> values;
    for (std::int64_t g = 0; g < kv_heads; ++g) {
      keys.push_back(rope(slice(k, 1, g * hd, (g + 1) * hd)));
      values.push_back(slice(v, 1, g * hd, (g + 1) * hd));
    }
    std::vector<tensor> outs;
    for (std::int64_t n = 0; n < heads; ++n) {
      const tensor qn = rope(slice(q, 1, n * hd, (n + 1) * hd));
      const auto g = static_cast<std::size_t>(n / group);
      outs.push_back(attend(qn, keys[g], values[g], mask, scale));
    }
    h = h + matmul(concat(outs, 1), b.o_w);
    h = h + matmul(silu_and_mul(matmul(rms_norm(h, b.post_norm, eps), b.gate_up_w)), b.down_w);
  }
  return rms_norm(h, norm_w, eps);
}

tensor model::impl::step(const step_inputs& in, const kv_cache& cache) const {
  const std::int64_t hd = head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  // Each layer's keys and values go from its q | k | v product to their slots (rotated where
  // the model rotates them), with its queries split off; the attention reads them back by block.
  const auto attend_cached = [&](std::size_t layer, const tensor& qkv, std::int64_t q_width,
                                 std::int64_t kv_width, const detail::split_rotary* rotary) {
    const tensor q = detail::split_into_cache(qkv, q_width, kv_width, in.slots, cache.keys[layer],
                                              cache.values[layer], rotary);
    return paged_attention(q, cache.keys[layer], cache.values[layer], in.block_tables, in.sequence,
                           in.context, scale);
  };
  // Past the last layer's attention only the rows whose logits the step returns are needed: the
  // layer's output projection and MLP, the final norm and the head take just those rows (for a
  // step of prompt chunks, most of one layer's products), as llama.cpp's last layer does. A step
  // whose every row is sampled (decode only: logit_rows is 0, 1, ..., t - 1) selects none. The
  // ops after the selection work row by row, with the same bits whatever the other rows.
  const bool every_row = in.logit_rows.shape()[0] == in.ids.shape()[0];
  const auto last_rows = [&](std::size_t layer, std::size_t layers, const tensor& x) {
    return layer + 1 < layers || every_row ? x : index_select(x, 0, in.logit_rows);
  };
  tensor h = index_select(embed, 0, in.ids);
  if (kind == family::gpt2) {
    const std::int64_t d = width;
    const std::size_t layers = gpt2_blocks.size();
    h = h + index_select(wpe, 0, in.positions);
    for (std::size_t l = 0; l < layers; ++l) {
      const gpt2_block& b = gpt2_blocks[l];
      const tensor qkv = matmul(layer_norm(h, b.ln1_w, b.ln1_b, eps), b.attn_w, b.attn_b);
      const tensor a = last_rows(l, layers, attend_cached(l, qkv, d, d, nullptr));
      h = last_rows(l, layers, h) + matmul(a, b.attn_proj_w, b.attn_proj_b);
      const tensor m = layer_norm(h, b.ln2_w, b.ln2_b, eps);
      h = h + matmul(gelu(matmul(m, b.fc_w, b.fc_b), true), b.mlp_proj_w, b.mlp_proj_b);
    }
    h = layer_norm(h, norm_w, norm_b, eps);
  } else {
    const std::int64_t q_out = heads * hd;
    const std::int64_t kv_out = kv_heads * hd;
    const std::size_t layers = llama_blocks.size();
    const detail::split_rotary rotary{in.positions, hd, rope_theta};
    for (std::size_t l = 0; l < layers; ++l) {
      const llama_block& b = llama_blocks[l];
      const tensor qkv = matmul(cotensor::rms_norm(h, b.in_norm, eps), b.qkv_w, b.qkv_b);
      const tensor a = last_rows(l, layers, attend_cached(l, qkv, q_out, kv_out, &rotary));
      h = last_rows(l, layers, h) + matmul(a, b.o_w);
      const tensor m = cotensor::rms_norm(h, b.post_norm, eps);
      h = h + matmul(silu_and_mul(matmul(m, b.gate_up_w)), b.down_w);
    }
    h = cotensor::rms_norm(h, norm_w, eps);
  }
  return matmul(h, head);
}

}  // namespace cotensor::lm
