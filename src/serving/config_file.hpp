#pragma once

// A model folder's config.json: Triton's model configuration as JSON plus the layers of a
// feed-forward network. Parsed apart from the weights so the parser can be fuzzed on its own.

#include <cotensor/serving.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace cotensor::serving {

enum class layer_kind { linear, relu, gelu, tanh, sigmoid, softmax, layer_norm, embedding };

struct layer_config {
  layer_kind kind = layer_kind::relu;
  std::string weight;  // safetensors names; empty where the layer has none
  std::string bias;
  double eps = 1e-5;              // layer_norm
  bool tanh_approximate = false;  // gelu
};

struct model_file {
  model_config config;
  std::vector<layer_config> layers;
};

/// Parses config.json's `text`; `file` names it in errors. Throws `model_error` naming the file
/// and the field. Checks what the text alone decides: one input and one output, known data
/// types, positive dims (at most 8, each at most 2^31), a batch size in [0, 2^20], known layer
/// ops with the tensors they need.
model_file parse_model_file(std::string_view text, const std::string& file);

}  // namespace cotensor::serving
