#pragma once

// The inside of a cotensor::lm::model, shared by its loader (model.cpp), its forward passes
// (forward.cpp) and the generator (generator.cpp).

#include "cotensor/lm.hpp"
#include "cotensor/tensor.hpp"

#include "frontend/packed_matmul.hpp"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace cotensor::lm {

/// The key/value cache's tensors: per layer, keys and values [blocks, block_size, kv_heads,
/// head_dim] in the model's dtype on its device.
struct kv_cache {
  std::vector<tensor> keys;
  std::vector<tensor> values;
};

/// One step's tokens (int64 tensors on the model's device): per token its id, position, cache
/// slot (block · block_size + offset), row of `block_tables` and number of keys it sees; the
/// block tables [sequences, width]; and the tokens whose logits the step returns.
struct step_inputs {
  tensor ids, positions, slots, sequence, context, block_tables, logit_rows;
};

struct model::impl {
  enum class family : std::uint8_t { gpt2, llama };
  // The weights of the products, x · w with w [in, out], laid out once for the device's GEMM
  // (detail::packed_matrix: the same bits as matmul with w).
  using linear = detail::packed_matrix;
  struct gpt2_block {
    tensor ln1_w, ln1_b;
    linear attn_w;
    tensor attn_b;
    linear attn_proj_w;
    tensor attn_proj_b, ln2_w, ln2_b;
    linear fc_w;
    tensor fc_b;
    linear mlp_proj_w;
    tensor mlp_proj_b;
  };
  // Linear weights transposed at load ([in, out]): x · w. The query, key and value projections
  // are one product (their columns side by side, q | k | v), and so are the gate and up
  // projections (gate | up, silu_and_mul's halves): fewer, wider products. qkv_b is empty
  // where the model has no biases (zeros for one it lacks beside others).
  struct llama_block {
    tensor in_norm;
    linear qkv_w;
    tensor qkv_b;
    linear o_w;
    tensor post_norm;
    linear gate_up_w, down_w;
  };

  family kind = family::gpt2;
  std::string architecture;
  lm::tokenizer tok;
  std::int64_t vocab = 0;
  std::int64_t positions = 0;
  std::int64_t width = 0;
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;
  double eps = 1e-5;
  double rope_theta = 10000.0;
  cotensor::dtype dtype = cotensor::dtype::float32;
  device where = device::cpu();
  tensor embed, wpe;
  linear head;
  tensor norm_w, norm_b;
  std::vector<gpt2_block> gpt2_blocks;
  std::vector<llama_block> llama_blocks;

  std::vector<std::int32_t> eos;
  // The chat template (chat_template.jinja, else tokenizer_config.json's) and the special
  // tokens it sees (tokenizer_config.json's bos_token and eos_token; none where absent).
  std::optional<lm::chat_template> chat;
  std::optional<std::string> bos_token, eos_token;

  explicit impl(lm::tokenizer t) : tok(std::move(t)) {}
  /// The logits of one sequence, no cache (model::logits).
  tensor forward(std::span<const std::int32_t> ids) const;
  /// One generation step over the cache: writes the keys and values of `in`'s tokens into
  /// `cache` and returns the logits [in.logit_rows, vocab] in the model's dtype.
  tensor step(const step_inputs& in, const kv_cache& cache) const;

private:
  tensor gpt2_forward(tensor h, const tensor& mask) const;
  tensor llama_forward(tensor h, const tensor& mask) const;
};

}  // namespace cotensor::lm
