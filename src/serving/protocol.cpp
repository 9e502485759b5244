#include "serving/protocol.hpp"

#include "core/visit_dtype.hpp"
#include "serving/exact_json.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>

namespace cotensor::serving::protocol {
namespace {

namespace json = boost::json;

struct datatype_names {
  dtype type;
  std::string_view v2;
  std::string_view config;
};

constexpr datatype_names names[] = {
    {dtype::boolean, "BOOL", "TYPE_BOOL"},  {dtype::int32, "INT32", "TYPE_INT32"},
    {dtype::int64, "INT64", "TYPE_INT64"},  {dtype::float16, "FP16", "TYPE_FP16"},
    {dtype::bfloat16, "BF16", "TYPE_BF16"}, {dtype::float32, "FP32", "TYPE_FP32"},
    {dtype::float64, "FP64", "TYPE_FP64"},
};

// The `To` of the entry of `names` whose `From` is `key`, if there is one.
template <auto From, auto To, class Key>
auto translate(const Key& key) noexcept
    -> std::optional<std::remove_cvref_t<decltype(names[0].*To)>> {
  for (const auto& n : names) {
    if (n.*From == key) {
      return n.*To;
    }
  }
  return std::nullopt;
}

// The product of `shape`'s extents, or empty past `limit` (or for a negative extent).
std::optional<std::uint64_t> element_count(const std::vector<std::int64_t>& shape,
                                           std::uint64_t limit) {
  std::uint64_t n = 1;
  for (const auto e : shape) {
    if (e < 0) {
      return std::nullopt;
    }
    const auto u = static_cast<std::uint64_t>(e);
    if (u != 0 && n > limit / u) {
      return std::nullopt;
    }
    n *= u;
  }
  return n;
}

// Appends the JSON number or bool `v` to `out` as an element of `T`; false if it is not one.
template <class T>
bool append_element(const json::value& v, std::vector<std::byte>& out) {
  T x{};
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_bool()) {
      return false;
    }
    x = v.get_bool();
  } else if constexpr (std::is_integral_v<T>) {
    std::int64_t i = 0;
    if (v.is_int64()) {
      i = v.get_int64();
    } else if (v.is_uint64() && v.get_uint64() <= std::uint64_t(INT64_MAX)) {
      i = static_cast<std::int64_t>(v.get_uint64());
    } else {
      return false;
    }
    if (i < std::numeric_limits<T>::min() || i > std::numeric_limits<T>::max()) {
      return false;
    }
    x = static_cast<T>(i);
  } else {
    double d = 0;
    if (v.is_double()) {
      d = v.get_double();
    } else if (v.is_int64()) {
      d = static_cast<double>(v.get_int64());
    } else if (v.is_uint64()) {
      d = static_cast<double>(v.get_uint64());
    } else {
      return false;
    }
    if constexpr (std::is_same_v<T, double>) {
      x = d;
    } else {
      x = T(static_cast<float>(d));
    }
  }
  const auto at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &x, sizeof(T));
  return true;
}

// Flattens the (possibly nested) JSON array `data` into `out`, at most `limit` elements.
template <class T>
bool flatten(const json::value& data, std::vector<std::byte>& out, std::uint64_t limit) {
  if (const auto* a = data.if_array()) {
    for (const auto& v : *a) {
      if (!flatten<T>(v, out, limit)) {
        return false;
      }
    }
    return true;
  }
  return out.size() / sizeof(T) < limit && append_element<T>(data, out);
}

const json::object* object_at(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v ? v->if_object() : nullptr;
}

// `parameters.<key>` of `o` as a bool (absent: `fallback`); empty if present and not a bool.
std::optional<bool> bool_parameter(const json::object& o, std::string_view key, bool fallback) {
  const auto* p = object_at(o, "parameters");
  const auto* v = p ? p->if_contains(key) : nullptr;
  if (v == nullptr) {
    return fallback;
  }
  if (!v->is_bool()) {
    return std::nullopt;
  }
  return v->get_bool();
}

std::variant<decoded_request, request_error> bad(std::string message) {
  return request_error{400, std::move(message)};
}

}  // namespace

std::string_view datatype_name(dtype t) noexcept {
  return translate<&datatype_names::type, &datatype_names::v2>(t).value_or("UNKNOWN");
}

std::optional<dtype> parse_datatype(std::string_view name) noexcept {
  return translate<&datatype_names::v2, &datatype_names::type>(name);
}

std::string_view config_type_name(dtype t) noexcept {
  return translate<&datatype_names::type, &datatype_names::config>(t).value_or("TYPE_INVALID");
}

std::optional<dtype> parse_config_type(std::string_view name) noexcept {
  return translate<&datatype_names::config, &datatype_names::type>(name);
}

std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(s[i]);
  }
  return out + "]";
}

std::string error_body(std::string_view message) {
  return json::serialize(json::object{{"error", message}});
}

std::variant<decoded_request, request_error>
decode_infer_request(std::string_view body,
                     std::optional<std::string_view> header_length,
                     const model_config& config) {
  // The JSON header, and the binary tensor data after it.
  std::string_view header = body;
  std::string_view binary;
  if (header_length) {
    std::size_t n = 0;
    const auto* end = header_length->data() + header_length->size();
    const auto [p, ec] = std::from_chars(header_length->data(), end, n);
    if (ec != std::errc{} || p != end) {
      return bad("Inference-Header-Content-Length is not a number");
    }
    if (n > body.size()) {
      return bad("Inference-Header-Content-Length " + std::to_string(n) + " is past the body's " +
                 std::to_string(body.size()) + " bytes");
    }
    header = body.substr(0, n);
    binary = body.substr(n);
  }
  if (header.empty()) {
    return bad("empty request body");
  }
  boost::system::error_code ec;
  json::value doc = parse_exact_json(header, ec);
  if (ec) {
    return bad("malformed JSON: " + ec.message());
  }
  const auto* req = doc.if_object();
  if (req == nullptr) {
    return bad("the request is not a JSON object");
  }

  decoded_request out;
  if (const auto* id = req->if_contains("id")) {
    if (!id->is_string()) {
      return bad("'id' is not a string");
    }
    out.id = std::string(id->get_string());
  }
  const auto* inputs_value = req->if_contains("inputs");
  const auto* inputs = inputs_value ? inputs_value->if_array() : nullptr;
  if (inputs == nullptr) {
    return bad("the request has no 'inputs' array");
  }
  if (inputs->size() != config.inputs.size()) {
    return bad("model '" + config.name + "' takes " + std::to_string(config.inputs.size()) +
               " input(s), the request has " + std::to_string(inputs->size()));
  }

  const bool batched = config.max_batch_size > 0;
  out.inputs.resize(config.inputs.size());
  std::vector<bool> seen(config.inputs.size());
  std::size_t binary_offset = 0;
  for (const auto& item : *inputs) {
    const auto* in = item.if_object();
    if (in == nullptr) {
      return bad("an input is not a JSON object");
    }
    const auto* name_value = in->if_contains("name");
    if (name_value == nullptr || !name_value->is_string()) {
      return bad("an input has no 'name'");
    }
    const std::string_view name = name_value->get_string();
    const auto spec = std::ranges::find(config.inputs, name, &tensor_spec::name);
    if (spec == config.inputs.end()) {
      return bad("model '" + config.name + "' has no input '" + std::string(name) + "'");
    }
    const auto index = static_cast<std::size_t>(spec - config.inputs.begin());
    if (seen[index]) {
      return bad("input '" + std::string(name) + "' is given twice");
    }
    seen[index] = true;
    const std::string what = "input '" + std::string(name) + "'";

    const auto* datatype = in->if_contains("datatype");
    if (datatype == nullptr || !datatype->is_string()) {
      return bad(what + " has no 'datatype'");
    }
    if (datatype->get_string() != datatype_name(spec->datatype)) {
      return bad(what + " has datatype " + std::string(datatype->get_string()) +
                 ", the model takes " + std::string(datatype_name(spec->datatype)));
    }

    const auto* shape_value = in->if_contains("shape");
    const auto* shape = shape_value ? shape_value->if_array() : nullptr;
    if (shape == nullptr) {
      return bad(what + " has no 'shape' array");
    }
    auto& decoded = out.inputs[index];
    for (const auto& e : *shape) {
      if (!e.is_int64() && !(e.is_uint64() && e.get_uint64() <= std::uint64_t(INT64_MAX))) {
        return bad(what + ": the shape holds something other than an integer");
      }
      decoded.shape.push_back(e.to_number<std::int64_t>());
    }
    // The expected shape: [batch, dims...] or [dims...].
    const std::size_t lead = batched ? 1 : 0;
    bool fits = decoded.shape.size() == spec->dims.size() + lead &&
                std::equal(spec->dims.begin(), spec->dims.end(), decoded.shape.begin() + lead);
    if (fits && batched) {
      const auto b = decoded.shape[0];
      if (b < 1 || b > config.max_batch_size) {
        return bad(what + ": batch of " + std::to_string(b) + " rows; the model takes 1 to " +
                   std::to_string(config.max_batch_size));
      }
      if (index > 0 && b != out.batch) {
        return bad(what + ": batch of " + std::to_string(b) + " rows, the first input has " +
                   std::to_string(out.batch));
      }
      out.batch = b;
    }
    if (!fits) {
      std::vector<std::int64_t> expected = spec->dims;
      if (batched) {
        expected.insert(expected.begin(), -1);
      }
      return bad(what + " has shape " + shape_text(decoded.shape) + ", the model takes " +
                 shape_text(expected));
    }
    const std::size_t itemsize = cotensor::itemsize(spec->datatype);
    // Every element takes at least a byte of the body, whichever way it comes.
    const auto count = element_count(decoded.shape, body.size());
    if (!count) {
      return bad(what + ": shape " + shape_text(decoded.shape) + " holds more elements than the " +
                 "body has bytes");
    }

    const auto* parameters = object_at(*in, "parameters");
    const auto* binary_size = parameters ? parameters->if_contains("binary_data_size") : nullptr;
    if (binary_size != nullptr) {
      if (!header_length) {
        return bad(what +
                   " has binary_data_size but the request no Inference-Header-Content-Length");
      }
      if (!(binary_size->is_int64() && binary_size->get_int64() >= 0) &&
          !binary_size->is_uint64()) {
        return bad(what + ": binary_data_size is not a non-negative integer");
      }
      const auto n = binary_size->to_number<std::uint64_t>();
      if (n > binary.size() - binary_offset) {
        return bad(what + ": binary_data_size " + std::to_string(n) + " is past the body's end");
      }
      if (n != *count * itemsize) {
        return bad(what + ": binary_data_size " + std::to_string(n) + " disagrees with shape " +
                   shape_text(decoded.shape) + " of " + std::string(datatype_name(spec->datatype)) +
                   " (" + std::to_string(*count * itemsize) + " bytes)");
      }
      const auto* first = reinterpret_cast<const std::byte*>(binary.data() + binary_offset);
      decoded.bytes.assign(first, first + n);
      binary_offset += n;
      if (spec->datatype == dtype::boolean &&
          std::ranges::any_of(decoded.bytes, [](std::byte b) { return b > std::byte{1}; })) {
        return bad(what + ": a BOOL byte is neither 0 nor 1");
      }
      continue;
    }
    const auto* data = in->if_contains("data");
    if (data == nullptr) {
      return bad(what + " has neither 'data' nor a binary_data_size parameter");
    }
    decoded.bytes.reserve(*count * itemsize);
    const bool ok =
        cotensor::detail::visit_dtype(spec->datatype, [&]<class T>(cotensor::detail::type_tag<T>) {
          return flatten<T>(*data, decoded.bytes, *count);
        });
    if (!ok) {
      return bad(what + ": 'data' holds a value that is not " +
                 std::string(datatype_name(spec->datatype)) + " or more than shape " +
                 shape_text(decoded.shape) + " holds");
    }
    if (decoded.bytes.size() != *count * itemsize) {
      return bad(what + ": 'data' holds " + std::to_string(decoded.bytes.size() / itemsize) +
                 " values, shape " + shape_text(decoded.shape) + " holds " +
                 std::to_string(*count));
    }
  }
  if (binary_offset != binary.size()) {
    return bad("the body has " + std::to_string(binary.size() - binary_offset) +
               " bytes of binary data that no input claims");
  }

  // Outputs: those asked for, or every one.
  const auto default_binary = bool_parameter(*req, "binary_data_output", false);
  if (!default_binary) {
    return bad("parameter binary_data_output is not a bool");
  }
  if (const auto* outputs_value = req->if_contains("outputs")) {
    const auto* outputs = outputs_value->if_array();
    if (outputs == nullptr) {
      return bad("'outputs' is not an array");
    }
    for (const auto& item : *outputs) {
      const auto* o = item.if_object();
      const auto* name = o ? o->if_contains("name") : nullptr;
      if (name == nullptr || !name->is_string()) {
        return bad("a requested output has no 'name'");
      }
      const auto spec = std::ranges::find(config.outputs, std::string_view(name->get_string()),
                                          &tensor_spec::name);
      if (spec == config.outputs.end()) {
        return bad("model '" + config.name + "' has no output '" + std::string(name->get_string()) +
                   "'");
      }
      const auto index = static_cast<std::size_t>(spec - config.outputs.begin());
      if (std::ranges::find(out.outputs, index, &requested_output::index) != out.outputs.end()) {
        return bad("output '" + spec->name + "' is requested twice");
      }
      const auto binary_output = bool_parameter(*o, "binary_data", *default_binary);
      if (!binary_output) {
        return bad("output '" + spec->name + "': parameter binary_data is not a bool");
      }
      out.outputs.push_back({index, *binary_output});
    }
  } else {
    for (std::size_t i = 0; i < config.outputs.size(); ++i) {
      out.outputs.push_back({i, *default_binary});
    }
  }
  return out;
}

encoded_response encode_infer_response(const model_config& config,
                                       std::int64_t version,
                                       const std::optional<std::string>& id,
                                       const std::vector<computed_output>& outputs) {
  json::object res;
  res["model_name"] = config.name;
  res["model_version"] = std::to_string(version);
  if (id) {
    res["id"] = *id;
  }
  json::array list;
  std::size_t binary_bytes = 0;
  for (const auto& o : outputs) {
    const auto& spec = config.outputs[o.index];
    json::object entry;
    entry["name"] = spec.name;
    entry["datatype"] = datatype_name(spec.datatype);
    json::array shape;
    for (const auto e : o.shape) {
      shape.emplace_back(e);
    }
    entry["shape"] = std::move(shape);
    if (o.binary) {
      entry["parameters"] = json::object{{"binary_data_size", o.bytes.size()}};
      binary_bytes += o.bytes.size();
    } else {
      json::array data;
      cotensor::detail::visit_dtype(spec.datatype, [&]<class T>(cotensor::detail::type_tag<T>) {
        const std::size_t n = o.bytes.size() / sizeof(T);
        data.reserve(n);
        for (std::size_t i = 0; i < n; ++i) {
          T x;
          std::memcpy(&x, o.bytes.data() + i * sizeof(T), sizeof(T));
          if constexpr (std::is_same_v<T, bool> || std::is_integral_v<T>) {
            data.emplace_back(x);
          } else {
            data.emplace_back(static_cast<double>(x));
          }
        }
        return true;
      });
      entry["data"] = std::move(data);
    }
    list.emplace_back(std::move(entry));
  }
  res["outputs"] = std::move(list);
  encoded_response out;
  out.body = json::serialize(res);
  if (binary_bytes > 0 || std::ranges::any_of(outputs, &computed_output::binary)) {
    out.header_length = out.body.size();
    out.body.reserve(out.body.size() + binary_bytes);
    for (const auto& o : outputs) {
      if (o.binary) {
        out.body.append(reinterpret_cast<const char*>(o.bytes.data()), o.bytes.size());
      }
    }
  }
  return out;
}

}  // namespace cotensor::serving::protocol
