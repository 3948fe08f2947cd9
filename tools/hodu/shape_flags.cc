#include "shape_flags.h"

#include <cstdlib>

#include "core/error.h"

namespace hodu::cli {
namespace {

std::vector<int64_t> parse_dims(const std::string& text, const std::string& what) {
  std::vector<int64_t> dims;
  size_t at = 0;
  while (at <= text.size()) {
    size_t x = text.find_first_of("x,", at);
    std::string part = text.substr(at, x == std::string::npos ? std::string::npos : x - at);
    char* end = nullptr;
    long long v = std::strtoll(part.c_str(), &end, 10);
    HODU_CHECK(!part.empty() && end && *end == '\0' && v >= 0, ErrorCode::InvalidArgument,
               "{}: '{}' is not a shape like 1x3x224x224", what, text);
    dims.push_back(v);
    if (x == std::string::npos) break;
    at = x + 1;
  }
  return dims;
}

}  // namespace

void parse_shape_flags(const std::vector<std::string>& shapes, const std::vector<std::string>& dims,
                       compilers::c::CodegenOptions& o) {
  for (const auto& s : shapes) {
    auto eq = s.rfind('=');
    HODU_CHECK(eq != std::string::npos && eq > 0, ErrorCode::InvalidArgument,
               "--shape {}: expected NAME=1x3x224x224", s);
    o.input_shapes[s.substr(0, eq)] = parse_dims(s.substr(eq + 1), "--shape " + s);
  }
  for (const auto& s : dims) {
    auto eq = s.rfind('=');
    HODU_CHECK(eq != std::string::npos && eq > 0, ErrorCode::InvalidArgument, "--dim {}: expected NAME=VALUE", s);
    auto v = parse_dims(s.substr(eq + 1), "--dim " + s);
    HODU_CHECK(v.size() == 1, ErrorCode::InvalidArgument, "--dim {}: expected one number", s);
    o.dims[s.substr(0, eq)] = v[0];
  }
}

}  // namespace hodu::cli
