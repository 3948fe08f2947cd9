// The KServe v2 inference request and response bodies (JSON tensors), with the
// binary tensor data extension: the JSON object is followed by raw tensor
// bytes, its length given by the Inference-Header-Content-Length header, and
// each binary tensor carries parameters.binary_data_size. The server parses
// requests and encodes responses; the client (client.h) does the reverse.
// Every malformed body is an InvalidArgument error naming the field and input.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace hodu::serving {

inline constexpr const char* kHeaderLengthHeader = "Inference-Header-Content-Length";

using NamedTensor = std::pair<std::string, Tensor>;

struct RequestedOutput {
  std::string name;
  std::optional<bool> binary;  // parameters.binary_data; unset: the request's binary_data_output
};

struct InferRequest {
  std::optional<std::string> id;
  std::vector<NamedTensor> inputs;       // in request order
  std::vector<RequestedOutput> outputs;  // empty: every output of the model
  bool binary_data_output = false;       // parameters.binary_data_output
  bool output_binary(const RequestedOutput& o) const { return o.binary.value_or(binary_data_output); }
};

// Parses the value of Inference-Header-Content-Length against the body size.
size_t parse_header_length(std::string_view value, size_t body_size);

// `json_length`: from the Inference-Header-Content-Length header; without it
// the whole body is the JSON object.
InferRequest parse_infer_request(std::string_view body, std::optional<size_t> json_length);

struct ResponseOutput {
  std::string name;
  Tensor tensor;
  bool binary = false;
};

struct EncodedBody {
  std::string body;
  std::optional<size_t> json_length;  // set when binary data follows the JSON
};

// `version` empty: no model_version field; `id` unset: no id field.
EncodedBody encode_infer_response(const std::string& model, const std::string& version,
                                  const std::optional<std::string>& id, const std::vector<ResponseOutput>& outputs);

// The client's side. `binary_inputs`: send tensors as binary data (JSON otherwise);
// `outputs` empty: all outputs, each binary when `binary_outputs`.
EncodedBody encode_infer_request(const std::vector<NamedTensor>& inputs, bool binary_inputs,
                                 const std::vector<std::string>& outputs, bool binary_outputs,
                                 const std::optional<std::string>& id = std::nullopt);
struct InferResponse {
  std::string model_name, model_version;
  std::optional<std::string> id;
  std::vector<NamedTensor> outputs;
};
InferResponse parse_infer_response(std::string_view body, std::optional<size_t> json_length);

// {"error": "message"}
std::string error_json(std::string_view message);

}  // namespace hodu::serving
