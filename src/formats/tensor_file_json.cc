// .json tensors: {"name": {"dtype": "f32", "shape": [2, 3], "data": [...]}, ...}
// or one bare {"dtype", "shape", "data"} object. `data` is flat (row-major) or
// nested; `shape` may be left out when nested data shows it. NaN and Inf are
// the strings "nan", "inf", "-inf"; complex elements are [re, im] pairs.
// Writers print floats in their shortest exact form (0.1f is "0.1").
#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>

#include "core/element_access.h"
#include "core/float_convert.h"
#include "formats/tensor_files.h"

namespace hodu {
namespace {

using Json = nlohmann::ordered_json;
constexpr int kMaxNesting = 64;

bool is_tensor_object(const Json& j) {
  return j.is_object() && j.contains("dtype") && j["dtype"].is_string() && j.contains("data");
}

bool is_complex_leaf(const Json& j) {
  return j.is_array() && j.size() == 2 && !j[0].is_array() && !j[1].is_array();
}

// Collects the leaves of (possibly nested) data, row-major.
void flatten(const Json& j, bool complex_leaves, int depth, std::vector<const Json*>& out, const std::string& what) {
  HODU_CHECK(depth <= kMaxNesting, ErrorCode::InvalidArgument, "{}: data is nested too deeply", what);
  if (!j.is_array() || (complex_leaves && is_complex_leaf(j))) {
    out.push_back(&j);
    return;
  }
  for (const auto& e : j) flatten(e, complex_leaves, depth + 1, out, what);
}

// The shape that nested data shows (every level must be regular).
std::vector<int64_t> nested_shape(const Json& j, bool complex_leaves, const std::string& what) {
  std::vector<int64_t> shape;
  const Json* level = &j;
  while (level->is_array() && !(complex_leaves && is_complex_leaf(*level))) {
    HODU_CHECK(shape.size() < kMaxNesting, ErrorCode::InvalidArgument, "{}: data is nested too deeply", what);
    shape.push_back(static_cast<int64_t>(level->size()));
    if (level->empty()) break;
    level = &(*level)[0];
  }
  return shape;
}

double parse_float_element(const Json& v, const std::string& what) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "-nan") return -std::numeric_limits<double>::quiet_NaN();
    if (s == "inf" || s == "+inf" || s == "infinity") return std::numeric_limits<double>::infinity();
    if (s == "-inf" || s == "-infinity") return -std::numeric_limits<double>::infinity();
  }
  fail(ErrorCode::InvalidArgument, "{}: {} is not a number (NaN and Inf are written \"nan\", \"inf\", \"-inf\")", what,
       v.dump());
}

// Integers must be exact and in range for the dtype.
void store_integer_element(Tensor& t, int64_t i, const Json& v, const std::string& what) {
  DType dt = t.dtype();
  auto out_of_range = [&] {
    fail(ErrorCode::InvalidArgument, "{}: {} does not fit {}", what, v.dump(), dtype_name(dt));
  };
  if (v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0)) {
    uint64_t u = v.get<uint64_t>();
    uint64_t max = dt == DType::U64 ? ~uint64_t{0}
                                   : dtype_is_signed(dt) ? (uint64_t{1} << (dtype_bits(dt) - 1)) - 1
                                                         : (uint64_t{1} << dtype_bits(dt)) - 1;
    if (u > max) out_of_range();
    store_from_uint64(dt, t.raw_data(), i, u);
    return;
  }
  if (v.is_number_integer()) {
    int64_t s = v.get<int64_t>();
    if (!dtype_is_signed(dt)) out_of_range();
    if (dt != DType::I64 && s < -(int64_t{1} << (dtype_bits(dt) - 1))) out_of_range();
    store_from_int64(dt, t.raw_data(), i, s);
    return;
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    HODU_CHECK(std::trunc(d) == d && std::fabs(d) < 9.007199254740992e15, ErrorCode::InvalidArgument,
               "{}: {} is not an integer ({} tensor)", what, v.dump(), dtype_name(dt));
    Json as_int = static_cast<int64_t>(d);
    store_integer_element(t, i, as_int, what);
    return;
  }
  fail(ErrorCode::InvalidArgument, "{}: {} is not an integer ({} tensor)", what, v.dump(), dtype_name(dt));
}

void store_element(Tensor& t, int64_t i, const Json& v, const std::string& what) {
  DType dt = t.dtype();
  void* base = t.raw_data();
  if (dt == DType::String) {
    HODU_CHECK(v.is_string(), ErrorCode::InvalidArgument, "{}: {} is not a string", what, v.dump());
    t.string_data()[i] = v.get<std::string>();
  } else if (dt == DType::Bool) {
    HODU_CHECK(v.is_boolean() || (v.is_number_integer() && (v.get<int64_t>() == 0 || v.get<int64_t>() == 1)),
               ErrorCode::InvalidArgument, "{}: {} is not a bool", what, v.dump());
    static_cast<uint8_t*>(base)[i] = v.is_boolean() ? v.get<bool>() : v.get<int64_t>() != 0;
  } else if (dtype_is_integer(dt)) {
    store_integer_element(t, i, v, what);
  } else if (dt == DType::C64 || dt == DType::C128) {
    double re = 0, im = 0;
    if (is_complex_leaf(v)) {
      re = parse_float_element(v[0], what);
      im = parse_float_element(v[1], what);
    } else {
      re = parse_float_element(v, what);
    }
    if (dt == DType::C64) {
      float parts[2] = {static_cast<float>(re), static_cast<float>(im)};
      std::memcpy(static_cast<char*>(base) + i * sizeof parts, parts, sizeof parts);
    } else {
      double parts[2] = {re, im};
      std::memcpy(static_cast<char*>(base) + i * sizeof parts, parts, sizeof parts);
    }
  } else if (dt == DType::F8E8M0) {
    // Nearest, so that every printed value (2^-127 included) reads back to its code.
    static_cast<uint8_t*>(base)[i] = f32_to_f8e8m0(static_cast<float>(parse_float_element(v, what)), true, true);
  } else {
    store_from_double(dt, base, i, parse_float_element(v, what));
  }
}

Tensor tensor_from_json_value(const Json& j, const std::string& what) {
  HODU_CHECK(is_tensor_object(j), ErrorCode::InvalidArgument,
             "{}: a tensor is an object with \"dtype\" (a string) and \"data\"", what);
  std::string dtype_text = j["dtype"].get<std::string>();
  auto dtype = parse_dtype(dtype_text);
  HODU_CHECK(dtype.has_value(), ErrorCode::InvalidArgument, "{}: unknown dtype '{}'", what, dtype_text);
  for (const auto& [key, value] : j.items())
    HODU_CHECK(key == "dtype" || key == "shape" || key == "data", ErrorCode::InvalidArgument,
               "{}: unexpected key \"{}\" (a tensor has dtype, shape, data)", what, key);
  bool complex = dtype_is_complex(*dtype);
  const Json& data = j["data"];
  std::vector<int64_t> shape;
  if (j.contains("shape")) {
    const Json& s = j["shape"];
    HODU_CHECK(s.is_array() && s.size() <= kMaxNesting, ErrorCode::InvalidArgument,
               "{}: \"shape\" must be a list of dims", what);
    for (const auto& d : s) {
      HODU_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0, ErrorCode::InvalidArgument,
                 "{}: dim {} in \"shape\" is not a non-negative integer", what, d.dump());
      shape.push_back(d.get<int64_t>());
    }
  } else {
    shape = nested_shape(data, complex, what);
  }
  int64_t n = tensor_files::checked_numel(shape, what);
  std::vector<const Json*> leaves;
  flatten(data, complex, 0, leaves, what);
  HODU_CHECK(static_cast<int64_t>(leaves.size()) == n, ErrorCode::InvalidArgument,
             "{}: shape {} needs {} values, \"data\" has {}", what, shape_to_string(shape), n, leaves.size());
  Tensor t = Tensor::empty(*dtype, shape);
  for (int64_t i = 0; i < n; ++i) store_element(t, i, *leaves[i], what);
  return t;
}

Json parse_json(std::string_view text, const std::string& what) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorCode::InvalidArgument, "{}: invalid JSON: {}", what, e.what());
  }
}

std::string format_float(double v, bool single) {
  if (std::isnan(v)) return std::signbit(v) ? "\"-nan\"" : "\"nan\"";
  if (v == 0 && std::signbit(v)) return "-0.0";  // "-0" would parse back as the integer 0
  if (std::isinf(v)) return v > 0 ? "\"inf\"" : "\"-inf\"";
  return single ? fmt::format("{}", static_cast<float>(v)) : fmt::format("{}", v);
}

std::string json_string(const std::string& s) {
  return Json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

Tensor tensor_from_json(std::string_view text, const std::string& what) {
  return tensor_from_json_value(parse_json(text, what), what);
}

std::string tensor_to_json(const Tensor& tensor) {
  Tensor t = tensor.contiguous();
  DType dt = t.dtype();
  std::string out = fmt::format("{{\"dtype\": \"{}\", \"shape\": [{}], \"data\": [", dtype_name(dt),
                                fmt::join(t.shape(), ", "));
  const void* base = dt == DType::String ? nullptr : t.raw_data();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (i) out += ", ";
    if (dt == DType::String) {
      out += json_string(t.string_data()[i]);
    } else if (dt == DType::Bool) {
      out += static_cast<const uint8_t*>(base)[i] ? "true" : "false";
    } else if (dt == DType::U64) {
      out += fmt::format("{}", load_as_uint64(dt, base, i));
    } else if (dtype_is_integer(dt)) {
      out += fmt::format("{}", load_as_int64(dt, base, i));
    } else if (dt == DType::C64) {
      const auto* p = static_cast<const float*>(base) + 2 * i;
      out += fmt::format("[{}, {}]", format_float(p[0], true), format_float(p[1], true));
    } else if (dt == DType::C128) {
      const auto* p = static_cast<const double*>(base) + 2 * i;
      out += fmt::format("[{}, {}]", format_float(p[0], false), format_float(p[1], false));
    } else {
      out += format_float(load_as_double(dt, base, i), dt != DType::F64);
    }
  }
  return out + "]}";
}

namespace tensor_files {

NamedTensors read_json_tensors(std::string_view text, const std::string& what) {
  Json j = parse_json(text, what);
  HODU_CHECK(j.is_object(), ErrorCode::InvalidArgument, "{}: expected a JSON object of tensors", what);
  if (is_tensor_object(j)) return {{"", tensor_from_json_value(j, what)}};
  NamedTensors out;
  for (const auto& [name, value] : j.items())
    out.emplace_back(name, tensor_from_json_value(value, fmt::format("{} (tensor '{}')", what, name)));
  return out;
}

std::string write_json_tensors(const NamedTensors& tensors) {
  if (tensors.size() == 1 && tensors[0].first.empty()) return tensor_to_json(tensors[0].second) + "\n";
  std::string out = "{";
  for (size_t i = 0; i < tensors.size(); ++i)
    out += fmt::format("{}\n  {}: {}", i ? "," : "", json_string(tensors[i].first), tensor_to_json(tensors[i].second));
  return out + "\n}\n";
}

}  // namespace tensor_files
}  // namespace hodu
