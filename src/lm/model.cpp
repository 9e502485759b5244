// A Hugging Face model folder as a cotensor::lm::model (<cotensor/lm.hpp>): its config, its
// weights checked for shape and converted to the model's dtype, its end-of-sequence ids, its
// chat template. The
// forward passes are in forward.cpp.

#include "cotensor/io.hpp"
#include "cotensor/lm.hpp"
#include "cotensor/ops.hpp"

#include "io/json.hpp"
#include "lm/chat_template_value.hpp"
#include "lm/model_impl.hpp"

#include <cmath>
#include <fstream>
#include <iterator>
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
  return json::parse_file(file, "cotensor::lm::model");
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

// A special token of tokenizer_config.json: a string, or an AddedToken-like object's
// "content"; none for null or absent.
std::optional<std::string> special_token(const json::value& config, const char* key) {
  const json::value* v = config.find(key);
  if (v != nullptr && v->type == json::value::kind::object) {
    v = v->find("content");
  }
  if (v != nullptr && v->type == json::value::kind::string) {
    return v->text;
  }
  return std::nullopt;
}

// The folder's chat template: chat_template.jinja (transformers 5), else tokenizer_config.json's
// "chat_template" (a string, or a list of {name, template} whose "default" is used); and the
// special tokens it sees.
void read_chat_template(const std::filesystem::path& dir, model::impl& p) {
  const auto config_file = dir / "tokenizer_config.json";
  const json::value config =
      std::filesystem::exists(config_file) ? read_json(config_file) : json::value{};
  p.bos_token = special_token(config, "bos_token");
  p.eos_token = special_token(config, "eos_token");
  std::filesystem::path from = dir / "chat_template.jinja";
  std::string source;
  if (std::ifstream in(from, std::ios::binary); in) {
    source.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } else if (const json::value* t = config.find("chat_template"); t != nullptr) {
    from = config_file;
    if (t->type == json::value::kind::string) {
      source = t->text;
    } else if (t->type == json::value::kind::array) {
      const json::value* found = nullptr;
      for (const json::value& entry : t->items) {
        const json::value* name = entry.find("name");
        if (name != nullptr && name->text == "default") {
          found = entry.find("template");
        }
      }
      if (found == nullptr || found->type != json::value::kind::string) {
        refuse(config_file, "\"chat_template\" is a list without a \"default\" template");
      }
      source = found->text;
    } else if (t->type != json::value::kind::null) {
      refuse(config_file, "\"chat_template\" is neither a string nor a list of templates");
    } else {
      return;
    }
  } else {
    return;
  }
  try {
    p.chat = chat_template::parse(source);
  } catch (const std::invalid_argument& e) {
    refuse(from, e.what());
  }
}

}  // namespace

namespace {

// The tensors of a model folder, each checked for its shape and converted to the model's dtype.
class weight_reader {
public:
  weight_reader(std::filesystem::path dir, const load_options& options)
      : dir_(std::move(dir)), dtype_(options.dtype), all_(read_weights(dir_, options.device)) {}

  bool contains(const std::string& name) const { return all_.contains(name); }

  tensor get(const std::string& name, const shape& want) const {
    const auto it = all_.find(name);
    if (it == all_.end()) {
      refuse(dir_, "tensor " + name + " is missing from the model's safetensors");
    }
    if (it->second.shape() != want) {
      std::ostringstream what;
      what << "tensor " << name << " has shape " << it->second.shape() << ", not " << want;
      refuse(dir_, what.str());
    }
    return it->second.astype(dtype_);
  }

  // A linear layer's weight [out, in], transposed for x · w.
  tensor linear(const std::string& name, std::int64_t out, std::int64_t in) const {
    return transpose(get(name, {out, in}));
  }

private:
  std::filesystem::path dir_;
  cotensor::dtype dtype_;
  std::map<std::string, tensor> all_;
};

}  // namespace

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
  const bool gpt2 = arch == "GPT2LMHeadModel";
  if (!gpt2 && arch != "LlamaForCausalLM" && arch != "Qwen2ForCausalLM" &&
      arch != "MistralForCausalLM") {
    refuse(config_file, "architecture \"" + arch +
                            "\" is not supported (GPT2LMHeadModel, LlamaForCausalLM, "
                            "Qwen2ForCausalLM, MistralForCausalLM)");
  }
  auto p = std::make_shared<impl>(lm::tokenizer::from_file(dir / "tokenizer.json"));
  read_chat_template(dir, *p);  // before the weights: a bad template fails fast
  p->architecture = arch;
  p->kind = gpt2 ? impl::family::gpt2 : impl::family::llama;
  p->dtype = options.dtype;
  p->where = options.device;
  p->vocab = whole(config_file, config, "vocab_size");
  const weight_reader weights(dir, options);
  if (gpt2) {
    if (const json::value* act = config.find("activation_function");
        act != nullptr && act->text != "gelu_new") {
      refuse(config_file, "activation \"" + act->text + "\" is not supported (gelu_new)");
    }
    p->positions = whole(config_file, config, "n_positions");
    p->width = whole(config_file, config, "n_embd");
    p->heads = whole(config_file, config, "n_head");
    p->kv_heads = p->heads;
    p->eps = number(config, "layer_norm_epsilon", 1e-5);
    if (p->width % p->heads != 0) {
      refuse(config_file, "n_embd is not a multiple of n_head");
    }
    p->head_dim = p->width / p->heads;
    const std::int64_t layers = whole(config_file, config, "n_layer");
    const json::value* inner_v = config.find("n_inner");
    const std::int64_t inner =
        inner_v != nullptr && inner_v->as_index() ? *inner_v->as_index() : 4 * p->width;
    // GPT2LMHeadModel's names start with "transformer."; GPT2Model's without.
    const std::string pre = weights.contains("transformer.wte.weight") ? "transformer." : "";
    const std::int64_t d = p->width;
    const auto get = [&](const std::string& n, shape want) { return weights.get(pre + n, want); };
    p->embed = get("wte.weight", {p->vocab, d});
    p->wpe = get("wpe.weight", {p->positions, d});
    p->head = transpose(p->embed);  // tied: logits = h · wteᵀ
    p->norm_w = get("ln_f.weight", {d});
    p->norm_b = get("ln_f.bias", {d});
    for (std::int64_t l = 0; l < layers; ++l) {
      const std::string h = "h." + std::to_string(l) + ".";
      p->gpt2_blocks.push_back(
          {get(h + "ln_1.weight", {d}), get(h + "ln_1.bias", {d}),
           get(h + "attn.c_attn.weight", {d, 3 * d}), get(h + "attn.c_attn.bias", {3 * d}),
           get(h + "attn.c_proj.weight", {d, d}), get(h + "attn.c_proj.bias", {d}),
           get(h + "ln_2.weight", {d}), get(h + "ln_2.bias", {d}),
           get(h + "mlp.c_fc.weight", {d, inner}), get(h + "mlp.c_fc.bias", {inner}),
           get(h + "mlp.c_proj.weight", {inner, d}), get(h + "mlp.c_proj.bias", {d})});
    }
  } else {
    if (const json::value* act = config.find("hidden_act"); act != nullptr && act->text != "silu") {
      refuse(config_file, "hidden_act \"" + act->text + "\" is not supported (silu)");
    }
    // RoPE: rope_theta at the top (transformers 4) or in rope_parameters (5); no scaling.
    const json::value* rope = config.find("rope_parameters");
    if (rope == nullptr) {
      rope = config.find("rope_scaling");
    }
    if (rope != nullptr && rope->type == json::value::kind::object) {
      const json::value* type = rope->find("rope_type");
      if (type != nullptr && type->text != "default") {
        refuse(config_file, "RoPE type \"" + type->text + "\" is not supported (default)");
      }
    }
    p->rope_theta = number(config, "rope_theta",
                           rope != nullptr ? number(*rope, "rope_theta", 10000.0) : 10000.0);
    if (const json::value* window = config.find("use_sliding_window");
        window != nullptr && window->boolean) {
      refuse(config_file, "a sliding window is not supported");
    }
    p->positions = whole(config_file, config, "max_position_embeddings");
    p->width = whole(config_file, config, "hidden_size");
    p->heads = whole(config_file, config, "num_attention_heads");
    const json::value* kv = config.find("num_key_value_heads");
    p->kv_heads = kv != nullptr && kv->as_index() ? *kv->as_index() : p->heads;
    const json::value* hd = config.find("head_dim");
    p->head_dim = hd != nullptr && hd->as_index() ? *hd->as_index() : p->width / p->heads;
    if (p->kv_heads == 0 || p->heads % p->kv_heads != 0 || p->head_dim % 2 != 0) {
      refuse(config_file, "the heads (num_attention_heads, num_key_value_heads, head_dim) do not "
                          "divide evenly");
    }
    p->eps = number(config, "rms_norm_eps", 1e-6);
    const std::int64_t layers = whole(config_file, config, "num_hidden_layers");
    const std::int64_t inner = whole(config_file, config, "intermediate_size");
    const std::int64_t d = p->width;
    const std::int64_t q_out = p->heads * p->head_dim;
    const std::int64_t kv_out = p->kv_heads * p->head_dim;
    p->embed = weights.get("model.embed_tokens.weight", {p->vocab, d});
    p->head = weights.contains("lm_head.weight") ? weights.linear("lm_head.weight", p->vocab, d)
                                                 : transpose(p->embed);  // tied
    p->norm_w = weights.get("model.norm.weight", {d});
    for (std::int64_t l = 0; l < layers; ++l) {
      const std::string h = "model.layers." + std::to_string(l) + ".";
      const std::string attn = h + "self_attn.";
      // q | k | v side by side, and their biases (zeros for a missing one) where any is there.
      tensor qkv_b;
      if (weights.contains(attn + "q_proj.bias") || weights.contains(attn + "k_proj.bias") ||
          weights.contains(attn + "v_proj.bias")) {
        std::vector<tensor> biases;
        for (const auto& [name, extent] :
             {std::pair{"q_proj.bias", q_out}, std::pair{"k_proj.bias", kv_out},
              std::pair{"v_proj.bias", kv_out}}) {
          biases.push_back(weights.contains(attn + name) ? weights.get(attn + name, {extent})
                                                         : zeros({extent}, p->dtype, p->where));
        }
        qkv_b = concat(biases);
      }
      p->llama_blocks.push_back({weights.get(h + "input_layernorm.weight", {d}),
                                 concat({weights.linear(attn + "q_proj.weight", q_out, d),
                                         weights.linear(attn + "k_proj.weight", kv_out, d),
                                         weights.linear(attn + "v_proj.weight", kv_out, d)},
                                        1),
                                 qkv_b, weights.linear(attn + "o_proj.weight", d, q_out),
                                 weights.get(h + "post_attention_layernorm.weight", {d}),
                                 concat({weights.linear(h + "mlp.gate_proj.weight", inner, d),
                                         weights.linear(h + "mlp.up_proj.weight", inner, d)},
                                        1),
                                 weights.linear(h + "mlp.down_proj.weight", d, inner)});
    }
  }
  // eos_token_id: generation_config.json's, else config.json's; a number or a list.
  const auto generation_file = dir / "generation_config.json";
  const json::value generation =
      std::filesystem::exists(generation_file) ? read_json(generation_file) : json::value{};
  const json::value* eos = generation.find("eos_token_id");
  if (eos == nullptr) {
    eos = config.find("eos_token_id");
  }
  if (eos != nullptr) {
    const std::vector<json::value> one{*eos};
    for (const json::value& id : eos->type == json::value::kind::array ? eos->items : one) {
      const auto n = id.as_index();
      if (id.type != json::value::kind::null && (!n || *n >= p->vocab)) {
        refuse(config_file, "eos_token_id is not an id of the vocabulary");
      }
      if (n) {
        p->eos.push_back(static_cast<std::int32_t>(*n));
      }
    }
  }
  if (static_cast<std::int64_t>(p->tok.vocab_size()) > p->vocab) {
    refuse(dir / "tokenizer.json", "the tokenizer has more ids than the model's vocab_size");
  }
  return model(std::move(p));
}

const lm::tokenizer& model::tokenizer() const noexcept { return impl_->tok; }

tensor model::logits(std::span<const std::int32_t> ids) const { return impl_->forward(ids); }

std::string_view model::architecture() const noexcept { return impl_->architecture; }

std::int64_t model::context_length() const noexcept { return impl_->positions; }

std::int64_t model::vocab_size() const noexcept { return impl_->vocab; }

std::span<const std::int32_t> model::eos_token_ids() const noexcept { return impl_->eos; }

const chat_template* model::chat_template() const noexcept {
  return impl_->chat ? &*impl_->chat : nullptr;
}

std::string model::render_chat(std::span<const chat_message> messages,
                               bool add_generation_prompt) const {
  if (!impl_->chat) {
    throw std::logic_error("cotensor::lm::model::render_chat: the model has no chat template");
  }
  return impl_->chat->impl_->render(messages, add_generation_prompt,
                                    impl_->bos_token ? &*impl_->bos_token : nullptr,
                                    impl_->eos_token ? &*impl_->eos_token : nullptr);
}

}  // namespace cotensor::lm
