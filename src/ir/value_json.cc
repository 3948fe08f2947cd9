#include "ir/value_json.h"

#include "core/error.h"

namespace hodu {

nlohmann::ordered_json value_to_json(const Value& v) {
  nlohmann::ordered_json o;
  o["name"] = v.name;
  o["type"] = v.type.to_string();
  if (v.type.kind != ValueType::Kind::Tensor) return o;
  o["dtype"] = std::string(dtype_name(v.type.dtype));
  if (!v.type.shape.rank_known()) {
    o["shape"] = nullptr;
    return o;
  }
  nlohmann::ordered_json dims = nlohmann::ordered_json::array();
  for (const auto& d : v.type.shape.dims()) {
    if (d.is_known()) dims.push_back(d.value);
    else if (d.is_symbolic()) dims.push_back(d.symbol);
    else dims.push_back(nullptr);
  }
  o["shape"] = dims;
  return o;
}

ValueType value_type_from_json(const nlohmann::json& j) {
  if (!j.contains("dtype")) return {};
  const std::string name = j.at("dtype").get<std::string>();
  auto dt = parse_dtype(name);
  HODU_CHECK(dt.has_value(), ErrorCode::InvalidArgument, "unknown dtype '{}'", name);
  Shape shape;
  if (j.contains("shape") && j.at("shape").is_array()) {
    std::vector<Dim> dims;
    for (const auto& d : j.at("shape")) {
      if (d.is_number_integer()) dims.emplace_back(d.get<int64_t>());
      else if (d.is_string()) dims.push_back(Dim::sym(d.get<std::string>()));
      else dims.push_back(Dim::unknown());
    }
    shape = Shape(std::move(dims));
  }
  return ValueType::tensor(*dt, std::move(shape));
}

}  // namespace hodu
