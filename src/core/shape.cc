#include "core/shape.h"

#include <fmt/format.h>

namespace hodu {

std::string Dim::to_string() const {
  if (is_known()) return std::to_string(value);
  if (!symbol.empty()) return symbol;
  return "?";
}

Shape Shape::from(const std::vector<int64_t>& dims) {
  std::vector<Dim> d(dims.begin(), dims.end());
  return Shape(std::move(d));
}

bool Shape::is_static() const {
  if (!rank_known_) return false;
  for (const auto& d : dims_)
    if (!d.is_known()) return false;
  return true;
}

std::optional<std::vector<int64_t>> Shape::to_static() const {
  if (!is_static()) return std::nullopt;
  std::vector<int64_t> out;
  out.reserve(dims_.size());
  for (const auto& d : dims_) out.push_back(d.value);
  return out;
}

std::optional<int64_t> Shape::numel() const {
  auto s = to_static();
  if (!s) return std::nullopt;
  return shape_numel(*s);
}

std::string Shape::to_string() const {
  if (!rank_known_) return "<unknown rank>";
  std::string out = "[";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) out += ", ";
    out += dims_[i].to_string();
  }
  return out + "]";
}

std::string shape_to_string(const std::vector<int64_t>& dims) {
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

int64_t shape_numel(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (auto d : dims) n *= d;
  return n;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(dims.size());
  int64_t s = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = s;
    s *= dims[i] > 0 ? dims[i] : 1;
  }
  return strides;
}

}  // namespace hodu
