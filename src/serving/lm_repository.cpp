// The language models of a repository: Hugging Face model folders beside the Triton-style ones,
// each with its optional cotensor.json (dtype, device, the generator's limits).

#include "serving/lm_folder.hpp"

#include <boost/json.hpp>

#include <array>
#include <fstream>
#include <limits>
#include <sstream>

namespace cotensor::serving {

namespace detail {

namespace {

namespace json = boost::json;

std::optional<json::value> read_json(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    return std::nullopt;
  }
  std::ostringstream text;
  text << in.rdbuf();
  boost::system::error_code ec;
  json::value v = json::parse(text.str(), ec);
  if (ec) {
    throw model_error(file.string() + ": not valid JSON: " + ec.message());
  }
  return v;
}

cotensor::device device_named(std::string_view s, const std::string& file) {
  if (s == "cpu") {
    return cotensor::device::cpu();
  }
  if (s == "cuda") {
    return cotensor::device::cuda(0);
  }
  if (s.starts_with("cuda:") && s.size() > 5 &&
      s.substr(5).find_first_not_of("0123456789") == std::string_view::npos && s.size() < 9) {
    return cotensor::device::cuda(std::stoi(std::string(s.substr(5))));
  }
  throw model_error(file + ": device: '" + std::string(s) + "' is not cpu, cuda or cuda:N");
}

// Reads cotensor.json's `text` into `load` and `options`.
void read_options(const json::object& o,
                  const std::string& file,
                  lm::load_options& load,
                  language_model_options& options) {
  auto& g = options.generator;
  const auto count = [&](const json::value& v, std::string_view key) -> std::uint64_t {
    if (!v.is_int64() || v.get_int64() < 1) {
      throw model_error(file + ": " + std::string(key) + ": must be a positive integer");
    }
    return static_cast<std::uint64_t>(v.get_int64());
  };
  for (const auto& [key, v] : o) {
    if (key == "dtype") {
      const std::string_view d = v.is_string() ? std::string_view(v.get_string()) : "";
      if (d == "float32") {
        load.dtype = dtype::float32;
      } else if (d == "bfloat16") {
        load.dtype = dtype::bfloat16;
      } else if (d == "float16") {
        load.dtype = dtype::float16;
      } else {
        throw model_error(file + ": dtype: must be \"float32\", \"bfloat16\" or \"float16\"");
      }
    } else if (key == "device") {
      if (!v.is_string()) {
        throw model_error(file + ": device: must be a string");
      }
      load.device = device_named(v.get_string(), file);
    } else if (key == "max_running") {
      g.max_running = count(v, key);
    } else if (key == "max_waiting") {
      g.max_waiting = count(v, key);
    } else if (key == "kv_cache_bytes") {
      g.kv_cache_bytes = count(v, key);
    } else if (key == "context_length") {
      g.context_length = static_cast<std::int64_t>(count(v, key));
    } else if (key == "block_size") {
      g.block_size = static_cast<std::int64_t>(count(v, key));
    } else if (key == "token_budget") {
      g.token_budget = static_cast<std::int64_t>(count(v, key));
    } else if (key == "prefill_chunk") {
      g.prefill_chunk = static_cast<std::int64_t>(count(v, key));
    } else if (key == "max_unread") {
      g.max_unread = count(v, key);
    } else if (key == "default_max_tokens") {
      options.default_max_tokens = count(v, key);
    } else if (key == "prefix_caching") {
      if (!v.is_bool()) {
        throw model_error(file + ": prefix_caching: must be true or false");
      }
      g.prefix_caching = v.get_bool();
    } else {
      throw model_error(
          file + ": unknown key '" + std::string(key) +
          "' (known: dtype, device, max_running, max_waiting, kv_cache_bytes, "
          "context_length, block_size, token_budget, prefill_chunk, max_unread, prefix_caching, "
          "default_max_tokens)");
    }
  }
}

}  // namespace

std::shared_ptr<language_model> load_language_model_folder(const std::filesystem::path& folder,
                                                           const std::string& name,
                                                           cotensor::device placement) {
  const auto config = read_json(folder / "config.json");
  if (!config || !config->is_object() || !config->get_object().contains("architectures")) {
    return nullptr;  // not a Hugging Face model folder
  }
  lm::load_options load{.dtype = dtype::float32, .device = placement};
  language_model_options options;
  const auto settings_file = folder / "cotensor.json";
  if (const auto settings = read_json(settings_file)) {
    if (!settings->is_object()) {
      throw model_error(settings_file.string() + ": must be a JSON object");
    }
    read_options(settings->get_object(), settings_file.string(), load, options);
  }
  lm::model m = [&] {
    try {
      return lm::model::load(folder, load);
    } catch (const std::exception& e) {
      throw model_error(e.what());
    }
  }();
  if (options.generator.context_length > m.context_length()) {
    throw model_error(settings_file.string() + ": context_length " +
                      std::to_string(options.generator.context_length) + " is past the model's " +
                      std::to_string(m.context_length()));
  }
  // The weights are read asynchronously: one position's logits wait for them, and prove the
  // model runs on its device before it is served.
  try {
    const std::array<std::int32_t, 1> first{0};
    m.logits(first).wait();
  } catch (const std::exception& e) {
    throw model_error((folder / "model.safetensors").string() + ": " + e.what());
  }
  return std::make_shared<language_model>(language_model{name, std::move(m), options});
}

}  // namespace detail

void model_repository::add_language_model(std::string name,
                                          lm::model m,
                                          language_model_options options) {
  if (name.empty()) {
    throw std::invalid_argument("model_repository::add_language_model: an empty name");
  }
  if (models_.contains(name) || language_models_.contains(name)) {
    throw std::invalid_argument("model_repository::add_language_model: '" + name +
                                "' is served already");
  }
  auto l = std::make_shared<const language_model>(language_model{name, std::move(m), options});
  language_models_.emplace(std::move(name), std::move(l));
}

const language_model* model_repository::find_language_model(std::string_view name) const {
  const auto it = language_models_.find(name);
  return it == language_models_.end() ? nullptr : it->second.get();
}

std::vector<std::string> model_repository::language_model_names() const {
  std::vector<std::string> out;
  for (const auto& [name, l] : language_models_) {
    out.push_back(name);
  }
  return out;
}

}  // namespace cotensor::serving
