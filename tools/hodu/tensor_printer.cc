#include "tensor_printer.h"

#include <fmt/format.h>

#include <cmath>

namespace hodu::cli {

std::string format_element(const Tensor& t, int64_t i) {
  DType d = t.dtype();
  if (d == DType::String) return fmt::format("\"{}\"", t.contiguous().string_data()[i]);
  if (d == DType::Bool) return t.get_int64(i) ? "true" : "false";
  if (dtype_is_float(d) || dtype_is_complex(d)) {
    double v = t.get_double(i);
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    if (d == DType::F64) return fmt::format("{}", v);
    return fmt::format("{}", static_cast<float>(v));
  }
  if (d == DType::U64) return fmt::format("{}", static_cast<uint64_t>(t.get_int64(i)));
  return fmt::format("{}", t.get_int64(i));
}

namespace {

void print_dim(const Tensor& t, size_t dim, int64_t base, bool cut, int edge, std::string& out) {
  const auto& shape = t.shape();
  int64_t n = shape[dim];
  int64_t stride = 1;
  for (size_t k = dim + 1; k < shape.size(); ++k) stride *= shape[k];
  out += '[';
  bool elide = cut && n > 2 * edge;
  for (int64_t i = 0; i < n; ++i) {
    if (elide && i == edge) {
      out += "..., ";
      i = n - edge - 1;
      continue;
    }
    if (dim + 1 == shape.size()) out += format_element(t, base + i);
    else print_dim(t, dim + 1, base + i * stride, cut, edge, out);
    if (i + 1 < n) out += ", ";
  }
  out += ']';
}

std::string pretty_tensor(const Tensor& t, int64_t threshold, int edge) {
  if (t.rank() == 0) return format_element(t, 0);
  std::string body;
  bool cut = t.numel() > threshold;
  print_dim(t, 0, 0, cut, edge, body);
  if (cut) body += fmt::format(" ({} elements)", t.numel());
  return body;
}

}  // namespace

std::string pretty_value(const std::string& name, const RuntimeValue& v, int64_t threshold, int edge) {
  switch (v.kind) {
    case RuntimeValue::Kind::Tensor:
      return fmt::format("{}: {} = {}", name, v.tensor.type_string(), pretty_tensor(v.tensor, threshold, edge));
    case RuntimeValue::Kind::Sequence: {
      std::string s = fmt::format("{}: seq[{}] = [", name, v.sequence.size());
      for (size_t i = 0; i < v.sequence.size(); ++i)
        s += fmt::format("{}{} = {}", i ? ", " : "", v.sequence[i].type_string(),
                         pretty_tensor(v.sequence[i], threshold, edge));
      return s + "]";
    }
    case RuntimeValue::Kind::OptionalEmpty:
      return name + ": optional = none";
    default:
      return name + ": (no value)";
  }
}

}  // namespace hodu::cli
