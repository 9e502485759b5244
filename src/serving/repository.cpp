// Models from a Triton-style model repository: feed-forward networks over safetensors weights,
// and the registry a handler serves.

#include <cotensor/io.hpp>
#include <cotensor/ops.hpp>

#include "serving/config_file.hpp"
#include "serving/lm_folder.hpp"
#include "serving/protocol.hpp"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <set>
#include <sstream>

namespace cotensor::serving {

model::~model() = default;

cotensor::device model::placement() const noexcept { return cotensor::device::cpu(); }

namespace {

struct layer {
  layer_config config;
  tensor weight;  // linear: transposed to [in, out]
  tensor bias;
};

bool is_float(dtype t) {
  return t == dtype::float16 || t == dtype::bfloat16 || t == dtype::float32 || t == dtype::float64;
}

// The input in the weight's dtype, when both are floats or the input is bool/integer (a
// network computes in its weights' dtype).
tensor in_dtype_of(const tensor& x, const tensor& w) {
  return x.dtype() == w.dtype() ? x : x.astype(w.dtype());
}

tensor apply(const layer& l, const tensor& x) {
  switch (l.config.kind) {
  case layer_kind::linear: {
    tensor in = in_dtype_of(x, l.weight);
    const bool vector = in.rank() == 1;
    if (vector) {
      in = reshape(in, {1, in.shape()[0]});
    }
    tensor y = matmul(in, l.weight);
    if (l.bias.defined()) {
      y = y + l.bias;
    }
    return vector ? reshape(y, {y.shape()[1]}) : y;
  }
  case layer_kind::relu:
    return relu(x);
  case layer_kind::gelu:
    return gelu(x, l.config.tanh_approximate);
  case layer_kind::tanh:
    return tanh(x);
  case layer_kind::sigmoid:
    return sigmoid(x);
  case layer_kind::softmax:
    return softmax(x);
  case layer_kind::layer_norm:
    return layer_norm(in_dtype_of(x, l.weight), l.weight, l.bias, l.config.eps);
  case layer_kind::embedding: {
    if (x.dtype() != dtype::int64) {
      throw std::invalid_argument("embedding: the ids must be INT64");
    }
    std::vector<std::int64_t> out;
    for (std::size_t i = 0; i < x.rank(); ++i) {
      out.push_back(x.shape()[i]);
    }
    out.push_back(l.weight.shape()[1]);
    const tensor rows = index_select(l.weight, 0, reshape(x, {x.numel()}));
    return reshape(rows, shape(out));
  }
  }
  return x;
}

std::string layer_name(const layer_config& l, std::size_t i) {
  static constexpr const char* names[] = {"linear",  "relu",    "gelu",       "tanh",
                                          "sigmoid", "softmax", "layer_norm", "embedding"};
  return "layers[" + std::to_string(i) + "] (" + names[static_cast<int>(l.kind)] + ")";
}

class sequential_model final : public model {
public:
  sequential_model(model_config config, std::vector<layer> layers, cotensor::device placement)
      : config_(std::move(config)), layers_(std::move(layers)), placement_(placement) {}

  const model_config& config() const noexcept override { return config_; }
  cotensor::device placement() const noexcept override { return placement_; }

  std::vector<tensor> forward(const std::vector<tensor>& inputs) const override {
    tensor x = inputs.at(0);
    for (const auto& l : layers_) {
      x = apply(l, x);
    }
    const dtype out = config_.outputs.front().datatype;
    return {x.dtype() == out ? x : x.astype(out)};
  }

  // The same pass, layer by layer, naming the layer that refuses the shapes; the shapes and
  // dtypes are checked when each op is issued, so nothing needs to run for that.
  tensor trial(const tensor& input, const std::string& file) const {
    tensor x = input;
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      try {
        x = apply(layers_[i], x);
      } catch (const std::exception& e) {
        throw model_error(file + ": " + layer_name(layers_[i].config, i) + ": " + e.what());
      }
    }
    return x;
  }

private:
  model_config config_;
  std::vector<layer> layers_;
  cotensor::device placement_;
};

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    throw model_error(p.string() + ": cannot be read");
  }
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::int64_t> extents(const tensor& t) {
  std::vector<std::int64_t> out(t.rank());
  for (std::size_t i = 0; i < t.rank(); ++i) {
    out[i] = t.shape()[i];
  }
  return out;
}

std::string shape_text(const tensor& t) { return protocol::shape_text(extents(t)); }

void check_servable(const model_config& c) {
  if (c.name.empty() || c.inputs.empty() || c.outputs.empty()) {
    throw std::invalid_argument("serving: a model needs a name, inputs and outputs");
  }
  std::set<std::string> seen;
  for (const auto* specs : {&c.inputs, &c.outputs}) {
    for (const auto& s : *specs) {
      if (s.name.empty() || !seen.insert(s.name).second) {
        throw std::invalid_argument("serving: model '" + c.name + "': tensor name '" + s.name +
                                    "' is empty or not unique");
      }
      if (std::ranges::any_of(s.dims, [](std::int64_t e) { return e < 1; })) {
        throw std::invalid_argument("serving: model '" + c.name + "': tensor '" + s.name +
                                    "' has an extent below 1");
      }
    }
  }
  if (c.max_batch_size < 0) {
    throw std::invalid_argument("serving: model '" + c.name + "': negative max_batch_size");
  }
}

}  // namespace

std::shared_ptr<model>
load_model(const std::filesystem::path& folder, std::int64_t version, cotensor::device placement) {
  const auto config_path = folder / "config.json";
  const std::string config_file = config_path.string();
  if (!std::filesystem::is_regular_file(config_path)) {
    throw model_error(config_file + ": missing");
  }
  model_file m = parse_model_file(read_file(config_path), config_file);
  const std::string folder_name = folder.filename().string();
  if (m.config.name != folder_name) {
    throw model_error(config_file + ": name: '" + m.config.name + "' is not the folder's name '" +
                      folder_name + "'");
  }
  const auto weights_path = folder / std::to_string(version) / "model.safetensors";
  const std::string weights_file = weights_path.string();
  const bool needs_weights =
      std::ranges::any_of(m.layers, [](const layer_config& l) { return !l.weight.empty(); });

  std::vector<layer> layers;
  safetensors_file weights;
  if (needs_weights || std::filesystem::exists(weights_path)) {
    try {
      weights = load_safetensors(weights_path, placement);
    } catch (const std::exception& e) {
      throw model_error(e.what());
    }
  }
  auto tensor_named = [&](const std::string& name, const std::string& field) -> tensor {
    if (!weights.contains(name)) {
      throw model_error(weights_file + ": no tensor '" + name + "' (" + config_file + ": " + field +
                        ")");
    }
    const tensor& t = weights.at(name);
    if (!is_float(t.dtype())) {
      throw model_error(weights_file + ": tensor '" + name + "' is " +
                        std::string(cotensor::name(t.dtype())) + ", not a float dtype (" +
                        config_file + ": " + field + ")");
    }
    return t;
  };
  std::optional<dtype> weight_dtype;
  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    const auto& c = m.layers[i];
    const std::string at = "layers[" + std::to_string(i) + "]";
    layer l{c, {}, {}};
    if (!c.weight.empty()) {
      l.weight = tensor_named(c.weight, at + ".weight");
      const std::size_t rank = c.kind == layer_kind::layer_norm ? 1 : 2;
      if (l.weight.rank() != rank) {
        throw model_error(weights_file + ": tensor '" + c.weight + "' has shape " +
                          shape_text(l.weight) + ", " + at + " needs rank " + std::to_string(rank) +
                          " (" + config_file + ")");
      }
      if (weight_dtype && *weight_dtype != l.weight.dtype()) {
        throw model_error(weights_file + ": tensor '" + c.weight + "' is " +
                          std::string(cotensor::name(l.weight.dtype())) + ", an earlier one " +
                          std::string(cotensor::name(*weight_dtype)) + " (one dtype per model)");
      }
      weight_dtype = l.weight.dtype();
    }
    if (!c.bias.empty()) {
      l.bias = tensor_named(c.bias, at + ".bias");
      const auto extent = l.weight.shape()[0];  // linear's out, layer_norm's features
      if (l.bias.rank() != 1 || l.bias.shape()[0] != extent || l.bias.dtype() != l.weight.dtype()) {
        throw model_error(weights_file + ": tensor '" + c.bias + "' has shape " +
                          shape_text(l.bias) + " and dtype " +
                          std::string(cotensor::name(l.bias.dtype())) + ", " + at + " needs [" +
                          std::to_string(extent) + "] of its weight's dtype (" + config_file + ")");
      }
    }
    if (c.kind == layer_kind::linear) {
      l.weight = transpose(l.weight);  // [out, in] as PyTorch stores it -> [in, out]
    }
    layers.push_back(std::move(l));
  }

  auto model = std::make_shared<sequential_model>(m.config, std::move(layers), placement);
  // A trial pass over zeros: the layers must turn the configured input into the configured
  // output (and the weights must have been read whole).
  std::vector<std::int64_t> in_shape = m.config.inputs.front().dims;
  std::vector<std::int64_t> out_shape = m.config.outputs.front().dims;
  if (m.config.max_batch_size > 0) {
    in_shape.insert(in_shape.begin(), 1);
    out_shape.insert(out_shape.begin(), 1);
  }
  const tensor zeros =
      cotensor::zeros(shape(in_shape), m.config.inputs.front().datatype, placement);
  tensor y = model->trial(zeros, config_file);
  if (extents(y) != out_shape) {
    throw model_error(config_file + ": output[0].dims: the layers give shape " + shape_text(y) +
                      ", the configuration says " + protocol::shape_text(out_shape));
  }
  try {
    y.wait();
  } catch (const std::exception& e) {
    throw model_error(weights_file + ": " + e.what());
  }
  return model;
}

void model_repository::add(std::shared_ptr<const model> m, std::int64_t version) {
  if (!m) {
    throw std::invalid_argument("model_repository::add: null model");
  }
  if (version < 1) {
    throw std::invalid_argument("model_repository::add: version " + std::to_string(version) +
                                " is not positive");
  }
  check_servable(m->config());
  if (language_models_.contains(m->config().name)) {
    throw std::invalid_argument("model_repository::add: '" + m->config().name +
                                "' is a language model's name");
  }
  auto& versions = models_[m->config().name];
  if (!versions.emplace(version, std::move(m)).second) {
    throw std::invalid_argument("model_repository::add: a duplicate version " +
                                std::to_string(version));
  }
}

std::vector<model_repository::failure>
model_repository::load_repository(const std::filesystem::path& dir, cotensor::device placement) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    throw model_error(dir.string() + ": not a directory");
  }
  std::vector<std::filesystem::path> folders;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.is_directory()) {
      folders.push_back(entry.path());
    }
  }
  if (ec) {
    throw model_error(dir.string() + ": " + ec.message());
  }
  std::ranges::sort(folders);
  std::vector<failure> failures;
  for (const auto& folder : folders) {
    const std::string name = folder.filename().string();
    try {
      if (auto l = detail::load_language_model_folder(folder, name, placement)) {
        if (models_.contains(name) || language_models_.contains(name)) {
          throw model_error(name + ": a model of this name is already served");
        }
        language_models_.emplace(name, std::move(l));
        continue;
      }
      std::vector<std::int64_t> versions;
      for (const auto& entry : std::filesystem::directory_iterator(folder)) {
        const std::string v = entry.path().filename().string();
        std::int64_t n = 0;
        const auto [p, e] = std::from_chars(v.data(), v.data() + v.size(), n);
        if (entry.is_directory() && e == std::errc{} && p == v.data() + v.size() && n > 0) {
          versions.push_back(n);
        }
      }
      if (versions.empty()) {
        throw model_error((folder / "").string() + ": no version folder (1/, 2/, ...)");
      }
      std::ranges::sort(versions);
      std::vector<std::pair<std::int64_t, std::shared_ptr<model>>> loaded;
      for (const auto v : versions) {
        loaded.emplace_back(v, load_model(folder, v, placement));
      }
      if (models_.contains(name)) {
        throw model_error(name + ": a model of this name is already served");
      }
      for (auto& [v, m] : loaded) {
        add(std::move(m), v);
      }
    } catch (const std::exception& e) {
      failures.push_back({name, e.what()});
    }
  }
  return failures;
}

std::shared_ptr<const model> model_repository::find(std::string_view name,
                                                    std::int64_t version) const {
  const auto it = models_.find(name);
  if (it == models_.end() || it->second.empty()) {
    return nullptr;
  }
  if (version == 0) {
    return it->second.rbegin()->second;
  }
  const auto v = it->second.find(version);
  return v == it->second.end() ? nullptr : v->second;
}

std::vector<std::int64_t> model_repository::versions(std::string_view name) const {
  std::vector<std::int64_t> out;
  if (const auto it = models_.find(name); it != models_.end()) {
    for (const auto& [v, m] : it->second) {
      out.push_back(v);
    }
  }
  return out;
}

std::vector<std::string> model_repository::names() const {
  std::vector<std::string> out;
  for (const auto& [name, versions] : models_) {
    out.push_back(name);
  }
  return out;
}

}  // namespace cotensor::serving
