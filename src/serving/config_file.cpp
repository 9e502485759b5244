#include "serving/config_file.hpp"

#include "serving/protocol.hpp"

#include <boost/json.hpp>

#include <array>

namespace cotensor::serving {
namespace {

namespace json = boost::json;

constexpr std::int64_t max_extent = std::int64_t{1} << 31;
constexpr std::int64_t max_batch = std::int64_t{1} << 20;

struct op_name {
  std::string_view name;
  layer_kind kind;
  bool weight;  // needs a weight tensor
};

constexpr std::array<op_name, 8> ops = {{
    {"linear", layer_kind::linear, true},
    {"relu", layer_kind::relu, false},
    {"gelu", layer_kind::gelu, false},
    {"tanh", layer_kind::tanh, false},
    {"sigmoid", layer_kind::sigmoid, false},
    {"softmax", layer_kind::softmax, false},
    {"layer_norm", layer_kind::layer_norm, true},
    {"embedding", layer_kind::embedding, true},
}};

class reader {
public:
  explicit reader(const std::string& file) : file_(file) {}

  [[noreturn]] void fail(const std::string& field, const std::string& why) const {
    throw model_error(file_ + ": " + field + ": " + why);
  }

  const json::value&
  need(const json::object& o, std::string_view key, const std::string& at) const {
    const auto* v = o.if_contains(key);
    if (v == nullptr) {
      fail(at + std::string(key), "missing");
    }
    return *v;
  }

  std::string string(const json::object& o, std::string_view key, const std::string& at) const {
    const auto& v = need(o, key, at);
    if (!v.is_string()) {
      fail(at + std::string(key), "not a string");
    }
    return std::string(v.get_string());
  }

  std::int64_t
  integer(const json::value& v, const std::string& field, std::int64_t lo, std::int64_t hi) const {
    if (!v.is_int64() && !v.is_uint64()) {
      fail(field, "not an integer");
    }
    if (v.is_uint64() && v.get_uint64() > std::uint64_t(hi)) {
      fail(field, "above " + std::to_string(hi));
    }
    const auto i = v.to_number<std::int64_t>();
    if (i < lo || i > hi) {
      fail(field, std::to_string(i) + " is outside [" + std::to_string(lo) + ", " +
                      std::to_string(hi) + "]");
    }
    return i;
  }

  std::vector<tensor_spec> specs(const json::object& root, std::string_view key) const {
    const auto& v = need(root, key, "");
    const auto* a = v.if_array();
    if (a == nullptr || a->size() != 1) {
      fail(std::string(key), "expected an array of exactly one tensor (the served networks "
                             "have one input and one output)");
    }
    std::vector<tensor_spec> out;
    for (std::size_t i = 0; i < a->size(); ++i) {
      const std::string at = std::string(key) + "[" + std::to_string(i) + "].";
      const auto* o = (*a)[i].if_object();
      if (o == nullptr) {
        fail(at.substr(0, at.size() - 1), "not an object");
      }
      tensor_spec s;
      s.name = string(*o, "name", at);
      if (s.name.empty()) {
        fail(at + "name", "empty");
      }
      const auto type = string(*o, "data_type", at);
      const auto t = protocol::parse_config_type(type);
      if (!t) {
        fail(at + "data_type", "'" + type +
                                   "' is not one of TYPE_BOOL, TYPE_INT32, TYPE_INT64, "
                                   "TYPE_FP16, TYPE_BF16, TYPE_FP32, TYPE_FP64");
      }
      s.datatype = *t;
      const auto* dims = need(*o, "dims", at).if_array();
      if (dims == nullptr || dims->size() > 8) {
        fail(at + "dims", "expected an array of at most 8 extents");
      }
      for (std::size_t d = 0; d < dims->size(); ++d) {
        s.dims.push_back(
            integer((*dims)[d], at + "dims[" + std::to_string(d) + "]", 1, max_extent));
      }
      out.push_back(std::move(s));
    }
    return out;
  }

  std::vector<layer_config> layers(const json::object& root) const {
    const auto* v = root.if_contains("layers");
    if (v == nullptr) {
      fail("layers", "missing (an empty array serves the input as the output)");
    }
    const auto* a = v->if_array();
    if (a == nullptr) {
      fail("layers", "not an array");
    }
    std::vector<layer_config> out;
    for (std::size_t i = 0; i < a->size(); ++i) {
      const std::string at = "layers[" + std::to_string(i) + "].";
      const auto* o = (*a)[i].if_object();
      if (o == nullptr) {
        fail(at.substr(0, at.size() - 1), "not an object");
      }
      const auto name = string(*o, "op", at);
      const auto* op = std::ranges::find(ops, name, &op_name::name);
      if (op == ops.end()) {
        fail(at + "op", "'" + name +
                            "' is not one of linear, relu, gelu, tanh, sigmoid, softmax, "
                            "layer_norm, embedding");
      }
      layer_config l;
      l.kind = op->kind;
      if (op->weight) {
        l.weight = string(*o, "weight", at);
      }
      if (l.kind == layer_kind::layer_norm ||
          (l.kind == layer_kind::linear && o->contains("bias"))) {
        l.bias = string(*o, "bias", at);
      }
      if (l.kind == layer_kind::layer_norm && o->contains("eps")) {
        const auto& eps = o->at("eps");
        if (!eps.is_number() || eps.to_number<double>() <= 0) {
          fail(at + "eps", "not a positive number");
        }
        l.eps = eps.to_number<double>();
      }
      if (l.kind == layer_kind::gelu && o->contains("approximate")) {
        const auto approximate = string(*o, "approximate", at);
        if (approximate != "none" && approximate != "tanh") {
          fail(at + "approximate", "'" + approximate + "' is neither \"none\" nor \"tanh\"");
        }
        l.tanh_approximate = approximate == "tanh";
      }
      out.push_back(std::move(l));
    }
    return out;
  }

private:
  const std::string& file_;
};

}  // namespace

model_file parse_model_file(std::string_view text, const std::string& file) {
  const reader r(file);
  boost::system::error_code ec;
  json::value doc = json::parse(text, ec);
  if (ec) {
    throw model_error(file + ": not JSON: " + ec.message());
  }
  const auto* root = doc.if_object();
  if (root == nullptr) {
    throw model_error(file + ": not a JSON object");
  }
  model_file m;
  m.config.name = r.string(*root, "name", "");
  if (const auto* b = root->if_contains("max_batch_size")) {
    m.config.max_batch_size = r.integer(*b, "max_batch_size", 0, max_batch);
  }
  m.config.inputs = r.specs(*root, "input");
  m.config.outputs = r.specs(*root, "output");
  if (const auto* v = root->if_contains("dynamic_batching")) {
    const auto* o = v->if_object();
    if (o == nullptr) {
      r.fail("dynamic_batching", "not an object");
    }
    if (m.config.max_batch_size == 0) {
      r.fail("dynamic_batching", "needs max_batch_size > 0");
    }
    dynamic_batching_config d;
    if (const auto* delay = o->if_contains("max_queue_delay_microseconds")) {
      d.max_queue_delay = std::chrono::microseconds(
          r.integer(*delay, "dynamic_batching.max_queue_delay_microseconds", 0, 10'000'000));
    }
    if (const auto* p = o->if_contains("preferred_batch_size")) {
      const auto* a = p->if_array();
      if (a == nullptr) {
        r.fail("dynamic_batching.preferred_batch_size", "not an array");
      }
      for (std::size_t i = 0; i < a->size(); ++i) {
        d.preferred_batch_size.push_back(
            r.integer((*a)[i], "dynamic_batching.preferred_batch_size[" + std::to_string(i) + "]",
                      1, m.config.max_batch_size));
      }
    }
    m.config.dynamic_batching = std::move(d);
  }
  m.layers = r.layers(*root);
  return m;
}

}  // namespace cotensor::serving
