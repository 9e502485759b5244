// The v2 metadata and configuration routes: the server's, and each model version's, in the
// shapes KServe's and Triton's clients read.

#include <cotensor/config.hpp>

#include "serving/handler_state.hpp"
#include "serving/protocol.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace cotensor::serving::detail {

namespace {

// `specs` as a list of objects, the metadata's or the config's: each its name, its dtype (under
// `type_key`, spelled by `type_name`) and its dims (under `dims_key`, after a -1 for the batch
// dimension when `batched`).
json::array spec_objects(const std::vector<tensor_spec>& specs,
                         std::string_view type_key,
                         std::string_view (*type_name)(dtype) noexcept,
                         std::string_view dims_key,
                         bool batched) {
  json::array out;
  for (const auto& s : specs) {
    json::array dims;
    if (batched) {
      dims.emplace_back(-1);
    }
    for (const auto e : s.dims) {
      dims.emplace_back(e);
    }
    out.emplace_back(json::object{
        {"name", s.name}, {type_key, type_name(s.datatype)}, {dims_key, std::move(dims)}});
  }
  return out;
}

}  // namespace

handler::response handler_state::server_metadata(const handler::request& req) const {
  json::object o;
  o["name"] = options_.server_name;
  o["version"] = std::to_string(COTENSOR_VERSION_MAJOR) + "." +
                 std::to_string(COTENSOR_VERSION_MINOR) + "." +
                 std::to_string(COTENSOR_VERSION_PATCH);
  o["extensions"] =
      json::array{"binary_tensor_data", "model_configuration", "statistics", "generate"};
  return reply(req, http::status::ok, json::serialize(o));
}

json::array handler_state::spec_list(const std::vector<tensor_spec>& specs, bool batched) {
  return spec_objects(specs, "datatype", protocol::datatype_name, "shape", batched);
}

handler::response handler_state::model_metadata(const handler::request& req,
                                                const served_model& s,
                                                bool all_versions) const {
  const auto& c = s.m->config();
  json::array versions;
  for (const auto v : all_versions ? repo_.versions(s.name) : std::vector{s.version}) {
    versions.emplace_back(std::to_string(v));
  }
  json::object o;
  o["name"] = c.name;
  o["versions"] = std::move(versions);
  o["platform"] = "cotensor";
  o["inputs"] = spec_list(c.inputs, c.max_batch_size > 0);
  o["outputs"] = spec_list(c.outputs, c.max_batch_size > 0);
  return reply(req, http::status::ok, json::serialize(o));
}

json::array handler_state::config_list(const std::vector<tensor_spec>& specs) {
  return spec_objects(specs, "data_type", protocol::config_type_name, "dims", false);
}

handler::response handler_state::model_config_json(const handler::request& req,
                                                   const served_model& s) const {
  const auto& c = s.m->config();
  json::object o;
  o["name"] = c.name;
  o["platform"] = "cotensor";
  o["backend"] = "cotensor";
  o["max_batch_size"] = c.max_batch_size;
  o["input"] = config_list(c.inputs);
  o["output"] = config_list(c.outputs);
  if (s.batch) {
    json::array preferred;
    for (const auto p : c.dynamic_batching->preferred_batch_size) {
      preferred.emplace_back(p);
    }
    o["dynamic_batching"] =
        json::object{{"max_queue_delay_microseconds", c.dynamic_batching->max_queue_delay.count()},
                     {"preferred_batch_size", std::move(preferred)}};
  }
  return reply(req, http::status::ok, json::serialize(o));
}

}  // namespace cotensor::serving::detail
