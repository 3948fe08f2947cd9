// A value's type as JSON, as `hodu info --json` and a .hodupkg's metadata write it:
// {"name", "type": "f32[batch, 3]", "dtype": "f32", "shape": [ "batch", 3 ]} — dims as
// numbers, symbols by name, null when unknown; "shape": null for an unknown rank; dtype and
// shape for tensors only.
#pragma once
#include <nlohmann/json.hpp>

#include "ir/graph.h"

namespace hodu {

nlohmann::ordered_json value_to_json(const Value& v);
// The tensor type of such JSON ({"dtype", "shape"}); a default (Unknown) ValueType when it
// has no dtype. InvalidArgument for an unknown dtype.
ValueType value_type_from_json(const nlohmann::json& j);

}  // namespace hodu
