#pragma once

// The Open Inference Protocol's infer request and response bodies (KServe v2 REST, with Triton's
// binary tensor data extension), decoded and encoded apart from any socket or model run, so the
// decoder can be fuzzed and tested on its own.

#include <cotensor/dtype.hpp>
#include <cotensor/serving.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace cotensor::serving::protocol {

/// "BOOL", "INT32", ... "FP64": the v2 datatype of `t`.
std::string_view datatype_name(dtype t) noexcept;
/// The dtype of a v2 datatype string; empty for one we do not serve (e.g. "UINT8", "BYTES").
std::optional<dtype> parse_datatype(std::string_view name) noexcept;
/// "TYPE_FP32" and so on: the data_type of Triton's model configuration.
std::string_view config_type_name(dtype t) noexcept;
std::optional<dtype> parse_config_type(std::string_view name) noexcept;

/// A request that cannot be served: `status` 400 or 404 and the message of `{"error": ...}`.
struct request_error {
  int status = 400;
  std::string message;
};

/// One input of a decoded request, in the order of the model's configured inputs.
struct decoded_input {
  std::vector<std::int64_t> shape;
  /// Row-major little-endian elements of the configured dtype (bool: one byte, 0 or 1).
  std::vector<std::byte> bytes;
};

/// One requested output, in the order of the model's configured outputs.
struct requested_output {
  std::size_t index = 0;  // into the model's configured outputs
  bool binary = false;
};

struct decoded_request {
  std::optional<std::string> id;
  std::vector<decoded_input> inputs;
  std::vector<requested_output> outputs;
  /// Rows of the batch dimension (1 when the model does not batch).
  std::int64_t batch = 1;
};

/// Decodes an infer request body for a model configured as `config`. `header_length` is the
/// value of the `Inference-Header-Content-Length` header, if the request has one (unparsed:
/// a value that is not a number is a 400). Every size is checked against the body before
/// anything is allocated for it.
std::variant<decoded_request, request_error>
decode_infer_request(std::string_view body,
                     std::optional<std::string_view> header_length,
                     const model_config& config);

/// One computed output for the response: its configured index, shape and the elements as
/// `decoded_input::bytes` lays them out.
struct computed_output {
  std::size_t index = 0;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> bytes;
  bool binary = false;
};

/// The response body and, when an output is binary, the JSON header's length (the value of the
/// response's `Inference-Header-Content-Length`).
struct encoded_response {
  std::string body;
  std::optional<std::size_t> header_length;
};

encoded_response encode_infer_response(const model_config& config,
                                       std::int64_t version,
                                       const std::optional<std::string>& id,
                                       const std::vector<computed_output>& outputs);

/// "[1, 16]": a shape as the error messages show it.
std::string shape_text(const std::vector<std::int64_t>& s);

/// `{"error": message}`.
std::string error_body(std::string_view message);

}  // namespace cotensor::serving::protocol
