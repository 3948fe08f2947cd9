#include "distributed/serving/infer_protocol.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/element_access.h"
#include "core/error.h"
#include "core/float_convert.h"
#include "distributed/serving/datatype.h"

namespace hodu::serving {
namespace {

using Json = nlohmann::json;
constexpr int kMaxNesting = 64;

[[noreturn]] void bad(const std::string& message) { throw Error(ErrorCode::InvalidArgument, message); }

Json parse_json_object(std::string_view text, const char* what) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // Parse again for the position of the error (the fast path above throws nothing).
    try {
      Json again = Json::parse(text.begin(), text.end());
    } catch (const Json::exception& e) {
      bad(fmt::format("{} is not valid JSON: {}", what, e.what()));
    }
    bad(fmt::format("{} is not valid JSON", what));
  }
  if (!j.is_object()) bad(fmt::format("{} must be a JSON object, not {}", what, j.type_name()));
  return j;
}

std::string string_field(const Json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) bad(fmt::format("{}: missing \"{}\"", where, key));
  if (!it->is_string()) bad(fmt::format("{}: \"{}\" must be a string, not {}", where, key, it->type_name()));
  return it->get<std::string>();
}

const Json* parameters_of(const Json& obj, const std::string& where) {
  auto it = obj.find("parameters");
  if (it == obj.end() || it->is_null()) return nullptr;
  if (!it->is_object()) bad(fmt::format("{}: \"parameters\" must be an object", where));
  return &*it;
}

std::optional<bool> bool_parameter(const Json* params, const char* key, const std::string& where) {
  if (!params) return std::nullopt;
  auto it = params->find(key);
  if (it == params->end()) return std::nullopt;
  if (!it->is_boolean()) bad(fmt::format("{}: parameter \"{}\" must be a boolean", where, key));
  return it->get<bool>();
}

std::optional<uint64_t> size_parameter(const Json* params, const char* key, const std::string& where) {
  if (!params) return std::nullopt;
  auto it = params->find(key);
  if (it == params->end()) return std::nullopt;
  if (!it->is_number_integer() || (it->is_number_integer() && !it->is_number_unsigned() && it->get<int64_t>() < 0))
    bad(fmt::format("{}: parameter \"{}\" must be a non-negative integer", where, key));
  return it->get<uint64_t>();
}

std::vector<int64_t> parse_shape(const Json& obj, const std::string& where) {
  auto it = obj.find("shape");
  if (it == obj.end()) bad(fmt::format("{}: missing \"shape\"", where));
  if (!it->is_array()) bad(fmt::format("{}: \"shape\" must be an array of integers", where));
  std::vector<int64_t> shape;
  for (const auto& d : *it) {
    if (!d.is_number_integer()) bad(fmt::format("{}: \"shape\" must hold integers, not {}", where, d.dump()));
    if (!d.is_number_unsigned() && d.get<int64_t>() < 0)
      bad(fmt::format("{}: \"shape\" has a negative dim {}", where, d.get<int64_t>()));
    uint64_t v = d.get<uint64_t>();
    if (v > (uint64_t{1} << 48)) bad(fmt::format("{}: dim {} of \"shape\" is too large", where, v));
    shape.push_back(static_cast<int64_t>(v));
  }
  return shape;
}

// Elements in `shape`, or an error when the product overflows.
uint64_t checked_numel(const std::vector<int64_t>& shape, const std::string& where) {
  uint64_t n = 1;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n) || n > (uint64_t{1} << 48))
      bad(fmt::format("{}: shape {} holds too many elements", where, shape_to_string(shape)));
  return n;
}

DType parse_dtype_field(const Json& obj, const std::string& where) {
  std::string name = string_field(obj, "datatype", where);
  auto dt = parse_datatype(name);
  if (!dt)
    bad(fmt::format("{}: unknown datatype \"{}\" (BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, "
                    "FP16, FP32, FP64, BF16, BYTES)",
                    where, name));
  return *dt;
}

void collect_leaves(const Json& j, int depth, std::vector<const Json*>& out, const std::string& where) {
  if (depth > kMaxNesting) bad(fmt::format("{}: \"data\" is nested too deeply", where));
  if (!j.is_array()) {
    out.push_back(&j);
    return;
  }
  for (const auto& e : j) collect_leaves(e, depth + 1, out, where);
}

double float_element(const Json& v, const std::string& where) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (s == "nan" || s == "-nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf" || s == "+inf" || s == "infinity") return std::numeric_limits<double>::infinity();
    if (s == "-inf" || s == "-infinity") return -std::numeric_limits<double>::infinity();
  }
  bad(fmt::format("{}: {} is not a number (NaN and infinities are the strings \"nan\", \"inf\", \"-inf\")", where,
                  v.dump()));
}

void store_integer(DType dt, void* base, int64_t i, const Json& v, const std::string& where) {
  auto out_of_range = [&] {
    bad(fmt::format("{}: {} does not fit {}", where, v.dump(), *datatype_name(dt)));
  };
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    uint64_t max = dt == DType::U64 ? ~uint64_t{0}
                   : dtype_is_signed(dt) ? (uint64_t{1} << (dtype_bits(dt) - 1)) - 1
                                         : (uint64_t{1} << dtype_bits(dt)) - 1;
    if (u > max) out_of_range();
    store_from_uint64(dt, base, i, u);
  } else if (v.is_number_integer()) {
    int64_t s = v.get<int64_t>();
    if (!dtype_is_signed(dt)) out_of_range();
    int bits = dtype_bits(dt);
    if (bits < 64 && (s < -(int64_t{1} << (bits - 1)) || s >= (int64_t{1} << (bits - 1)))) out_of_range();
    store_from_int64(dt, base, i, s);
  } else {
    bad(fmt::format("{}: {} is not an integer ({} data)", where, v.dump(), *datatype_name(dt)));
  }
}

// A tensor from JSON "data" (flat or nested, row-major).
Tensor tensor_from_json_data(const Json& data, DType dt, const std::vector<int64_t>& shape, const std::string& where) {
  std::vector<const Json*> leaves;
  collect_leaves(data, 0, leaves, where);
  uint64_t numel = checked_numel(shape, where);
  if (leaves.size() != numel)
    bad(fmt::format("{}: shape {} holds {} elements but \"data\" has {}", where, shape_to_string(shape), numel,
                    leaves.size()));
  if (dt == DType::String) {
    std::vector<std::string> values;
    values.reserve(leaves.size());
    for (const Json* v : leaves) {
      if (!v->is_string()) bad(fmt::format("{}: BYTES data must be strings, not {}", where, v->dump()));
      values.push_back(v->get<std::string>());
    }
    return Tensor::from_strings(shape, values);
  }
  Tensor t = Tensor::empty(dt, shape);
  void* base = t.raw_data();
  int64_t n = static_cast<int64_t>(numel);
  if (dt == DType::Bool) {
    auto* p = static_cast<uint8_t*>(base);
    for (int64_t i = 0; i < n; ++i) {
      const Json& v = *leaves[i];
      if (v.is_boolean()) p[i] = v.get<bool>() ? 1 : 0;
      else if (v.is_number_integer() && (v.get<int64_t>() == 0 || v.get<int64_t>() == 1)) p[i] = static_cast<uint8_t>(v.get<int64_t>());
      else bad(fmt::format("{}: {} is not a boolean (BOOL data)", where, v.dump()));
    }
  } else if (dt == DType::F32) {
    auto* p = static_cast<float*>(base);
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(float_element(*leaves[i], where));
  } else if (dtype_is_float(dt)) {
    for (int64_t i = 0; i < n; ++i) store_from_double(dt, base, i, float_element(*leaves[i], where));
  } else {
    for (int64_t i = 0; i < n; ++i) store_integer(dt, base, i, *leaves[i], where);
  }
  return t;
}

// A tensor from the binary extension's bytes.
Tensor tensor_from_binary(std::string_view bytes, DType dt, const std::vector<int64_t>& shape, const std::string& where) {
  uint64_t numel = checked_numel(shape, where);
  if (dt == DType::String) {
    std::vector<std::string> values;
    size_t pos = 0;
    while (pos < bytes.size()) {
      if (bytes.size() - pos < 4) bad(fmt::format("{}: BYTES binary data ends inside an element's length", where));
      uint32_t len;
      std::memcpy(&len, bytes.data() + pos, 4);  // little-endian, as the hosts hodu runs on
      pos += 4;
      if (len > bytes.size() - pos)
        bad(fmt::format("{}: BYTES element {} claims {} bytes but {} remain", where, values.size(), len,
                        bytes.size() - pos));
      if (values.size() >= numel)
        bad(fmt::format("{}: BYTES binary data holds more than the {} elements of shape {}", where, numel,
                        shape_to_string(shape)));
      values.emplace_back(bytes.data() + pos, len);
      pos += len;
    }
    if (values.size() != numel)
      bad(fmt::format("{}: shape {} holds {} elements but the BYTES binary data has {}", where, shape_to_string(shape),
                      numel, values.size()));
    return Tensor::from_strings(shape, values);
  }
  uint64_t expected = numel * datatype_element_size(dt);
  if (bytes.size() != expected)
    bad(fmt::format("{}: binary_data_size is {} bytes but shape {} of {} needs {}", where, bytes.size(),
                    shape_to_string(shape), *datatype_name(dt), expected));
  Tensor t = Tensor::from_bytes(dt, shape, bytes.data(), bytes.size());
  if (dt == DType::Bool) {
    const auto* p = static_cast<const uint8_t*>(t.raw_data());
    for (uint64_t i = 0; i < numel; ++i)
      if (p[i] > 1) bad(fmt::format("{}: BOOL element {} is the byte {} (0 or 1 expected)", where, i, p[i]));
  }
  return t;
}

// One tensor object ({name, shape, datatype, parameters, data}) of a request's
// inputs or a response's outputs. `binary` is the region after the JSON; `used`
// advances over the bytes this tensor takes from it.
NamedTensor parse_tensor_object(const Json& obj, const std::string& kind, size_t index, std::string_view binary,
                                bool has_binary, size_t& used) {
  std::string where = fmt::format("{}[{}]", kind, index);
  if (!obj.is_object()) bad(fmt::format("{} must be an object, not {}", where, obj.type_name()));
  std::string name = string_field(obj, "name", where);
  where = fmt::format("{} '{}'", kind == "inputs" ? "input" : "output", name);
  std::vector<int64_t> shape = parse_shape(obj, where);
  DType dt = parse_dtype_field(obj, where);
  const Json* params = parameters_of(obj, where);
  auto binary_size = size_parameter(params, "binary_data_size", where);
  auto data = obj.find("data");
  if (binary_size) {
    if (!has_binary)
      bad(fmt::format("{} has parameters.binary_data_size but the request has no {} header", where,
                      kHeaderLengthHeader));
    if (data != obj.end()) bad(fmt::format("{} has both \"data\" and parameters.binary_data_size", where));
    if (*binary_size > binary.size() - used)
      bad(fmt::format("{}: binary_data_size {} runs past the end of the body ({} bytes of binary data left)", where,
                      *binary_size, binary.size() - used));
    std::string_view bytes = binary.substr(used, *binary_size);
    used += *binary_size;
    return {name, tensor_from_binary(bytes, dt, shape, where)};
  }
  if (data == obj.end()) bad(fmt::format("{}: missing \"data\" (or parameters.binary_data_size)", where));
  return {name, tensor_from_json_data(*data, dt, shape, where)};
}

// ---- encoding ----

void append_float(std::string& out, double v) {
  if (std::isnan(v)) out += "\"nan\"";
  else if (std::isinf(v)) out += v > 0 ? "\"inf\"" : "\"-inf\"";
  else fmt::format_to(std::back_inserter(out), "{}", v);
}

void append_json_data(std::string& out, const Tensor& t) {
  out += '[';
  int64_t n = t.numel();
  DType dt = t.dtype();
  if (dt == DType::String) {
    const std::string* s = t.string_data();
    for (int64_t i = 0; i < n; ++i) {
      if (i) out += ',';
      out += Json(s[i]).dump(-1, ' ', false, Json::error_handler_t::replace);
    }
  } else if (dt == DType::F32) {
    const float* p = t.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      if (i) out += ',';
      if (std::isfinite(p[i])) fmt::format_to(std::back_inserter(out), "{}", p[i]);  // shortest exact float
      else append_float(out, p[i]);
    }
  } else if (dt == DType::F16 || dt == DType::BF16) {
    const auto* p = static_cast<const uint16_t*>(t.raw_data());
    for (int64_t i = 0; i < n; ++i) {
      if (i) out += ',';
      float f = dt == DType::F16 ? f16_to_f32(p[i]) : bf16_to_f32(p[i]);
      if (std::isfinite(f)) fmt::format_to(std::back_inserter(out), "{}", f);
      else append_float(out, f);
    }
  } else if (dt == DType::F64) {
    const double* p = t.data<double>();
    for (int64_t i = 0; i < n; ++i) {
      if (i) out += ',';
      append_float(out, p[i]);
    }
  } else if (dt == DType::Bool) {
    const auto* p = static_cast<const uint8_t*>(t.raw_data());
    for (int64_t i = 0; i < n; ++i) out += i ? (p[i] ? ",true" : ",false") : (p[i] ? "true" : "false");
  } else if (dt == DType::U64) {
    for (int64_t i = 0; i < n; ++i) {
      if (i) out += ',';
      fmt::format_to(std::back_inserter(out), "{}", load_as_uint64(dt, t.raw_data(), i));
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      if (i) out += ',';
      fmt::format_to(std::back_inserter(out), "{}", load_as_int64(dt, t.raw_data(), i));
    }
  }
  out += ']';
}

void append_binary(std::string& out, const Tensor& t) {
  if (t.dtype() == DType::String) {
    const std::string* s = t.string_data();
    for (int64_t i = 0; i < t.numel(); ++i) {
      HODU_CHECK(s[i].size() <= std::numeric_limits<uint32_t>::max(), ErrorCode::Unsupported,
                 "a BYTES element of {} bytes does not fit the binary extension's 4-byte length", s[i].size());
      uint32_t len = static_cast<uint32_t>(s[i].size());
      out.append(reinterpret_cast<const char*>(&len), 4);
      out += s[i];
    }
    return;
  }
  out.append(static_cast<const char*>(t.raw_data()), t.nbytes());
}

size_t binary_size(const Tensor& t) {
  if (t.dtype() != DType::String) return t.nbytes();
  size_t n = 0;
  const std::string* s = t.string_data();
  for (int64_t i = 0; i < t.numel(); ++i) n += 4 + s[i].size();
  return n;
}

std::string_view checked_datatype(const Tensor& t, const std::string& name) {
  auto dt = datatype_name(t.dtype());
  HODU_CHECK(dt, ErrorCode::Unsupported, "tensor '{}' is {}, which has no KServe v2 datatype", name,
             dtype_name(t.dtype()));
  return *dt;
}

// {"name": .., "datatype": .., "shape": [..], then "parameters" or "data"}, and the
// binary bytes appended to `binary`.
void append_tensor_object(std::string& out, std::string& binary, const std::string& name, const Tensor& tensor,
                          bool as_binary) {
  Tensor t = tensor.contiguous();
  out += "{\"name\":";
  out += Json(name).dump(-1, ' ', false, Json::error_handler_t::replace);
  fmt::format_to(std::back_inserter(out), ",\"datatype\":\"{}\",\"shape\":[{}]", checked_datatype(t, name),
                 fmt::join(t.shape(), ","));
  if (as_binary) {
    fmt::format_to(std::back_inserter(out), ",\"parameters\":{{\"binary_data_size\":{}}}}}", binary_size(t));
    append_binary(binary, t);
  } else {
    out += ",\"data\":";
    append_json_data(out, t);
    out += '}';
  }
}

EncodedBody finish(std::string json, std::string binary) {
  EncodedBody e;
  if (!binary.empty()) {
    e.json_length = json.size();
    json += binary;
  }
  e.body = std::move(json);
  return e;
}

}  // namespace

size_t parse_header_length(std::string_view value, size_t body_size) {
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  while (!value.empty() && value.back() == ' ') value.remove_suffix(1);
  uint64_t n = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (ec != std::errc() || end != value.data() + value.size())
    bad(fmt::format("{} header \"{}\" is not a non-negative integer", kHeaderLengthHeader, value));
  if (n > body_size)
    bad(fmt::format("{} header says {} bytes of JSON but the body has {} bytes", kHeaderLengthHeader, n, body_size));
  return static_cast<size_t>(n);
}

InferRequest parse_infer_request(std::string_view body, std::optional<size_t> json_length) {
  size_t jl = json_length.value_or(body.size());
  HODU_CHECK(jl <= body.size(), ErrorCode::InvalidArgument, "{} {} exceeds the body size {}", kHeaderLengthHeader, jl,
             body.size());
  Json j = parse_json_object(body.substr(0, jl), "the inference request");
  std::string_view binary = body.substr(jl);
  InferRequest r;
  if (auto it = j.find("id"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) bad(fmt::format("\"id\" must be a string, not {}", it->dump()));
    r.id = it->get<std::string>();
  }
  const Json* params = parameters_of(j, "the request");
  r.binary_data_output = bool_parameter(params, "binary_data_output", "the request").value_or(false);
  if (params && params->contains("classification"))
    throw Error(ErrorCode::Unsupported, "parameter \"classification\" (Triton's classification extension) is not supported");
  auto inputs = j.find("inputs");
  if (inputs == j.end()) bad("the inference request has no \"inputs\"");
  if (!inputs->is_array()) bad("\"inputs\" must be an array");
  size_t used = 0;
  for (size_t i = 0; i < inputs->size(); ++i) {
    auto named = parse_tensor_object((*inputs)[i], "inputs", i, binary, json_length.has_value(), used);
    for (const auto& [n, _] : r.inputs)
      if (n == named.first) bad(fmt::format("input '{}' is given twice", n));
    r.inputs.push_back(std::move(named));
  }
  if (used != binary.size())
    bad(fmt::format("the body has {} bytes after the JSON but the inputs' binary_data_size add up to {}",
                    binary.size(), used));
  if (auto outs = j.find("outputs"); outs != j.end() && !outs->is_null()) {
    if (!outs->is_array()) bad("\"outputs\" must be an array");
    for (size_t i = 0; i < outs->size(); ++i) {
      const Json& o = (*outs)[i];
      std::string where = fmt::format("outputs[{}]", i);
      if (!o.is_object()) bad(fmt::format("{} must be an object", where));
      RequestedOutput ro;
      ro.name = string_field(o, "name", where);
      const Json* op = parameters_of(o, where);
      ro.binary = bool_parameter(op, "binary_data", "output '" + ro.name + "'");
      if (op && op->contains("classification"))
        throw Error(ErrorCode::Unsupported, "output '" + ro.name + "': parameter \"classification\" is not supported");
      for (const auto& prev : r.outputs)
        if (prev.name == ro.name) bad(fmt::format("output '{}' is requested twice", ro.name));
      r.outputs.push_back(std::move(ro));
    }
  }
  return r;
}

EncodedBody encode_infer_response(const std::string& model, const std::string& version,
                                  const std::optional<std::string>& id, const std::vector<ResponseOutput>& outputs) {
  std::string out = "{\"model_name\":" + Json(model).dump(-1, ' ', false, Json::error_handler_t::replace);
  if (!version.empty()) out += ",\"model_version\":" + Json(version).dump();
  if (id) out += ",\"id\":" + Json(*id).dump(-1, ' ', false, Json::error_handler_t::replace);
  out += ",\"outputs\":[";
  std::string binary;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (i) out += ',';
    append_tensor_object(out, binary, outputs[i].name, outputs[i].tensor, outputs[i].binary);
  }
  out += "]}";
  return finish(std::move(out), std::move(binary));
}

EncodedBody encode_infer_request(const std::vector<NamedTensor>& inputs, bool binary_inputs,
                                 const std::vector<std::string>& outputs, bool binary_outputs,
                                 const std::optional<std::string>& id) {
  std::string out = "{";
  if (id) out += "\"id\":" + Json(*id).dump(-1, ' ', false, Json::error_handler_t::replace) + ",";
  if (outputs.empty() && binary_outputs) out += "\"parameters\":{\"binary_data_output\":true},";
  out += "\"inputs\":[";
  std::string binary;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (i) out += ',';
    append_tensor_object(out, binary, inputs[i].first, inputs[i].second, binary_inputs);
  }
  out += "]";
  if (!outputs.empty()) {
    out += ",\"outputs\":[";
    for (size_t i = 0; i < outputs.size(); ++i)
      fmt::format_to(std::back_inserter(out), "{}{{\"name\":{},\"parameters\":{{\"binary_data\":{}}}}}", i ? "," : "",
                     Json(outputs[i]).dump(), binary_outputs);
    out += "]";
  }
  out += "}";
  return finish(std::move(out), std::move(binary));
}

InferResponse parse_infer_response(std::string_view body, std::optional<size_t> json_length) {
  size_t jl = json_length.value_or(body.size());
  HODU_CHECK(jl <= body.size(), ErrorCode::InvalidArgument, "{} {} exceeds the body size {}", kHeaderLengthHeader, jl,
             body.size());
  Json j = parse_json_object(body.substr(0, jl), "the inference response");
  InferResponse r;
  if (auto it = j.find("model_name"); it != j.end() && it->is_string()) r.model_name = it->get<std::string>();
  if (auto it = j.find("model_version"); it != j.end() && it->is_string()) r.model_version = it->get<std::string>();
  if (auto it = j.find("id"); it != j.end() && it->is_string()) r.id = it->get<std::string>();
  auto outs = j.find("outputs");
  if (outs == j.end() || !outs->is_array()) bad("the inference response has no \"outputs\" array");
  std::string_view binary = body.substr(jl);
  size_t used = 0;
  for (size_t i = 0; i < outs->size(); ++i)
    r.outputs.push_back(parse_tensor_object((*outs)[i], "outputs", i, binary, json_length.has_value(), used));
  return r;
}

std::string error_json(std::string_view message) {
  return "{\"error\":" + Json(std::string(message)).dump(-1, ' ', false, Json::error_handler_t::replace) + "}";
}

}  // namespace hodu::serving
