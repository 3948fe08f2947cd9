// Printing tensors for `hodu run -f pretty`: `name: f32[2, 3] = [[1.5, 5], ...]`,
// numpy-like, with long dims cut to their first and last items and a count.
#pragma once
#include <string>

#include "core/runtime_value.h"

namespace hodu::cli {

// `edge_items`: items kept at each end of a dim longer than 2*edge_items+... (threshold).
std::string pretty_value(const std::string& name, const RuntimeValue& v, int64_t threshold = 1000, int edge_items = 3);
std::string format_element(const Tensor& t, int64_t flat_index);

}  // namespace hodu::cli
