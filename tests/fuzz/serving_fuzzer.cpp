// The serving library's parsers on arbitrary bytes: the infer request decoder (JSON and
// Triton's binary tensor data, with and without Inference-Header-Content-Length) and the
// model repository's config.json parser. Neither may crash, read out of bounds or allocate
// what the body cannot back; what the decoder accepts must be consistent with the model's
// configuration, and must encode back into a response.
//
// The first byte picks the parser: 0 and 1 decode an infer request for a model of INT64
// [-1, 3] (0: no header length; 1: the header length is the text up to the first newline),
// 2 and 3 the same for a BOOL [2] model without batching, anything else parses a config.json.

#include "serving/config_file.hpp"
#include "serving/protocol.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace {

using namespace cotensor::serving;

model_config config_for(bool batched) {
  model_config c;
  c.name = "m";
  if (batched) {
    c.max_batch_size = 4;
    c.inputs = {{"x", cotensor::dtype::int64, {3}}};
    c.outputs = {{"y", cotensor::dtype::int64, {3}}};
  } else {
    c.inputs = {{"x", cotensor::dtype::boolean, {2}}};
    c.outputs = {{"y", cotensor::dtype::boolean, {2}}};
  }
  return c;
}

void check(bool ok) {
  if (!ok) {
    std::abort();
  }
}

void decode(std::string_view data, bool batched, bool with_length) {
  const model_config config = config_for(batched);
  std::optional<std::string_view> length;
  std::string_view body = data;
  if (with_length) {
    const auto nl = data.find('\n');
    length = data.substr(0, nl);
    body = nl == std::string_view::npos ? std::string_view{} : data.substr(nl + 1);
  }
  auto result = protocol::decode_infer_request(body, length, config);
  if (auto* e = std::get_if<protocol::request_error>(&result)) {
    check(e->status == 400 && !e->message.empty());
    return;
  }
  const auto& request = std::get<protocol::decoded_request>(result);
  check(request.inputs.size() == 1);
  const auto& in = request.inputs.front();
  std::size_t count = 1;
  for (const auto e : in.shape) {
    count *= static_cast<std::size_t>(e);
  }
  check(in.bytes.size() == count * cotensor::itemsize(config.inputs.front().datatype));
  check(in.bytes.size() <= body.size() * 8);  // nothing beyond what the body backs
  if (batched) {
    check(in.shape.size() == 2 && in.shape[0] == request.batch && request.batch >= 1 &&
          request.batch <= 4 && in.shape[1] == 3);
  } else {
    check(in.shape == std::vector<std::int64_t>{2});
  }
  std::vector<protocol::computed_output> outputs;
  for (const auto& want : request.outputs) {
    check(want.index == 0);
    outputs.push_back({want.index, in.shape, in.bytes, want.binary});
  }
  const auto encoded = protocol::encode_infer_response(config, 1, request.id, outputs);
  check(!encoded.body.empty());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) {
    return 0;
  }
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 8) {
  case 0:
  case 1:
    decode(rest, true, data[0] % 8 == 1);
    break;
  case 2:
  case 3:
    decode(rest, false, data[0] % 8 == 3);
    break;
  default:
    try {
      const auto m = parse_model_file(rest, "config.json");
      check(m.config.inputs.size() == 1 && m.config.outputs.size() == 1);
    } catch (const model_error&) {
    }
    break;
  }
  return 0;
}
