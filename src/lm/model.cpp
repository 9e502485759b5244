// A Hugging Face model folder as a cotensor::lm::model (<cotensor/lm.hpp>): GPT-2 so far, its
// forward pass composed of the public ops (no cache): embedding lookups, layer norms, matmuls,
// causal attention head by head (scores, mask, softmax, weighted sum), gelu_new, the tied head.

#include "cotensor/io.hpp"
#include "cotensor/lm.hpp"
#include "cotensor/ops.hpp"

#include "io/json.hpp"

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

namespace cotensor::lm {

namespace json = ::cotensor::detail::json;

namespace {

[[noreturn]] void refuse(const std::filesystem::path& file, const std::string& what) {
  throw std::runtime_error("cotensor::lm::model: " + file.string() + ": " + what);
}

json::value read_json(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    refuse(file, "cannot open it");
  }
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const std::exception& e) {
    refuse(file, std::string("not JSON: ") + e.what());
  }
}

std::int64_t whole(const std::filesystem::path& file, const json::value& config, const char* key) {
  const json::value* v = config.find(key);
  const auto n = v != nullptr ? v->as_index() : std::nullopt;
  if (!n || *n == 0) {
    refuse(file, std::string("\"") + key + "\" is missing or not a positive whole number");
  }
  return *n;
}

double number(const json::value& config, const char* key, double otherwise) {
  const json::value* v = config.find(key);
  return v != nullptr && v->type == json::value::kind::number ? std::stod(v->text) : otherwise;
}

// Every tensor of the folder's safetensors: model.safetensors, or the shards of its index.
std::map<std::string, tensor> read_weights(const std::filesystem::path& dir, device d) {
  std::vector<std::filesystem::path> files;
  const auto index = dir / "model.safetensors.index.json";
  if (std::filesystem::exists(index)) {
    const json::value root = read_json(index);
    const json::value* map = root.find("weight_map");
    if (map == nullptr || map->type != json::value::kind::object) {
      refuse(index, "no \"weight_map\" object");
    }
    std::set<std::string> shards;
    for (const auto& [name, file] : map->members) {
      shards.insert(file.text);
    }
    for (const auto& shard : shards) {
      files.push_back(dir / shard);
    }
  } else {
    files.push_back(dir / "model.safetensors");
  }
  std::map<std::string, tensor> weights;
  for (const auto& file : files) {
    if (!std::filesystem::exists(file)) {
      refuse(file, "missing");
    }
    for (auto& [name, t] : load_safetensors(file, d).tensors) {
      weights.insert_or_assign(name, std::move(t));
    }
  }
  return weights;
}

}  // namespace

struct model::impl {
  struct block {
    tensor ln1_w, ln1_b, attn_w, attn_b, attn_proj_w, attn_proj_b;
    tensor ln2_w, ln2_b, fc_w, fc_b, mlp_proj_w, mlp_proj_b;
  };

  std::string architecture;
  lm::tokenizer tok;
  std::int64_t vocab = 0;
  std::int64_t positions = 0;
  std::int64_t width = 0;
  std::int64_t heads = 0;
  double eps = 1e-5;
  cotensor::dtype dtype = cotensor::dtype::float32;
  device where = device::cpu();
  tensor wte, wpe, head, lnf_w, lnf_b;
  std::vector<block> blocks;

  impl(lm::tokenizer t) : tok(std::move(t)) {}
  tensor forward(std::span<const std::int32_t> ids) const;
};

model::model(std::shared_ptr<const impl> p) noexcept : impl_(std::move(p)) {}

model model::load(const std::filesystem::path& dir, load_options options) {
  if (options.dtype != dtype::float32 && options.dtype != dtype::bfloat16 &&
      options.dtype != dtype::float16) {
    throw std::invalid_argument("cotensor::lm::model::load: dtype " +
                                std::string(name(options.dtype)) +
                                " is not float32, bfloat16 or float16");
  }
  const auto config_file = dir / "config.json";
  const json::value config = read_json(config_file);
  const json::value* archs = config.find("architectures");
  if (archs == nullptr || archs->items.empty() ||
      archs->items[0].type != json::value::kind::string) {
    refuse(config_file, "no \"architectures\"");
  }
  const std::string arch = archs->items[0].text;
  if (arch != "GPT2LMHeadModel") {
    refuse(config_file, "architecture \"" + arch + "\" is not supported (GPT2LMHeadModel so far)");
  }
  if (const json::value* act = config.find("activation_function");
      act != nullptr && act->text != "gelu_new") {
    refuse(config_file, "activation \"" + act->text + "\" is not supported (gelu_new)");
  }
  auto p = std::make_shared<impl>(lm::tokenizer::from_file(dir / "tokenizer.json"));
  p->architecture = arch;
  p->vocab = whole(config_file, config, "vocab_size");
  p->positions = whole(config_file, config, "n_positions");
  p->width = whole(config_file, config, "n_embd");
  p->heads = whole(config_file, config, "n_head");
  p->eps = number(config, "layer_norm_epsilon", 1e-5);
  p->dtype = options.dtype;
  p->where = options.device;
  if (p->width % p->heads != 0) {
    refuse(config_file, "n_embd is not a multiple of n_head");
  }
  const std::int64_t layers = whole(config_file, config, "n_layer");
  const json::value* inner_v = config.find("n_inner");
  const std::int64_t inner =
      inner_v != nullptr && inner_v->as_index() ? *inner_v->as_index() : 4 * p->width;

  const std::map<std::string, tensor> weights = read_weights(dir, options.device);
  // GPT2LMHeadModel's names start with "transformer."; GPT2Model's without.
  const std::string prefix = weights.contains("transformer.wte.weight") ? "transformer." : "";
  const auto get = [&](const std::string& name, shape want) {
    const auto it = weights.find(prefix + name);
    if (it == weights.end()) {
      refuse(dir, "tensor " + prefix + name + " is missing from the model's safetensors");
    }
    if (it->second.shape() != want) {
      std::ostringstream what;
      what << "tensor " << prefix << name << " has shape " << it->second.shape() << ", not "
           << want;
      refuse(dir, what.str());
    }
    return it->second.astype(options.dtype);
  };
  const std::int64_t d = p->width;
  p->wte = get("wte.weight", {p->vocab, d});
  p->wpe = get("wpe.weight", {p->positions, d});
  p->head = transpose(p->wte);  // tied: logits = h · wteᵀ
  p->lnf_w = get("ln_f.weight", {d});
  p->lnf_b = get("ln_f.bias", {d});
  for (std::int64_t l = 0; l < layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    p->blocks.push_back(
        {get(h + "ln_1.weight", {d}), get(h + "ln_1.bias", {d}),
         get(h + "attn.c_attn.weight", {d, 3 * d}), get(h + "attn.c_attn.bias", {3 * d}),
         get(h + "attn.c_proj.weight", {d, d}), get(h + "attn.c_proj.bias", {d}),
         get(h + "ln_2.weight", {d}), get(h + "ln_2.bias", {d}),
         get(h + "mlp.c_fc.weight", {d, inner}), get(h + "mlp.c_fc.bias", {inner}),
         get(h + "mlp.c_proj.weight", {inner, d}), get(h + "mlp.c_proj.bias", {d})});
  }
  if (static_cast<std::int64_t>(p->tok.vocab_size()) > p->vocab) {
    refuse(dir / "tokenizer.json", "the tokenizer has more ids than the model's vocab_size");
  }
  return model(std::move(p));
}

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
  const std::int64_t d = width;
  const std::int64_t hd = d / heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));

  tensor h = index_select(wte, 0, from_vector(index, {t}, where)) + slice(wpe, 0, 0, t);
  for (const block& b : blocks) {
    const tensor qkv = matmul(layer_norm(h, b.ln1_w, b.ln1_b, eps), b.attn_w) + b.attn_b;
    std::vector<tensor> outs;
    for (std::int64_t k = 0; k < heads; ++k) {
      const tensor q = slice(qkv, 1, k * hd, (k + 1) * hd);
      const tensor key = slice(qkv, 1, d + k * hd, d + (k + 1) * hd);
      const tensor v = slice(qkv, 1, 2 * d + k * hd, 2 * d + (k + 1) * hd);
      const tensor p = softmax(matmul(q, transpose(key)) * scale + mask);
      outs.push_back(matmul(p, v));
    }
    h = h + (matmul(concat(outs, 1), b.attn_proj_w) + b.attn_proj_b);
    const tensor m = layer_norm(h, b.ln2_w, b.ln2_b, eps);
    h = h + (matmul(gelu(matmul(m, b.fc_w) + b.fc_b, true), b.mlp_proj_w) + b.mlp_proj_b);
  }
  return matmul(layer_norm(h, lnf_w, lnf_b, eps), head).astype(cotensor::dtype::float32);
}

const lm::tokenizer& model::tokenizer() const noexcept { return impl_->tok; }

tensor model::logits(std::span<const std::int32_t> ids) const { return impl_->forward(ids); }

std::string_view model::architecture() const noexcept { return impl_->architecture; }

std::int64_t model::context_length() const noexcept { return impl_->positions; }

}  // namespace cotensor::lm
