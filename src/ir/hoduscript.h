// HoduScript: a readable text form of a model that round-trips exactly
// (grammar in docs/hoduscript.md).
#pragma once
#include <string>
#include <string_view>

#include "ir/graph.h"

namespace hodu {

std::string print_hoduscript(const Model& model);
// InvalidModel with line:column on a syntax error.
Model parse_hoduscript(std::string_view text, const std::string& what = "<text>");

}  // namespace hodu
