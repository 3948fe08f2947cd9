#include "compilers/c/half_widening.h"

#include <fmt/format.h>

#include <set>

namespace hodu::compilers::c {
namespace {

bool is_half(const Graph& g, const std::string& v) {
  if (v.empty()) return false;
  auto t = g.type_of(v);
  return t && t->is_tensor() && (t->dtype == DType::F16 || t->dtype == DType::BF16);
}

Node cast(const Node& of, const std::string& in, const std::string& out, DType to) {
  Node c;
  c.name = of.name;
  c.op_type = "Cast";
  c.inputs = {in};
  c.outputs = {out};
  c.attributes = {Attribute::make_int("to", dtype_to_onnx(to))};
  return c;
}

}  // namespace

bool widen_half_ops(Graph& g) {
  static const std::set<std::string> ops = {"Conv",          "MaxPool", "AveragePool", "GlobalAveragePool",
                                            "GlobalMaxPool", "MatMul",  "Gemm"};
  bool changed = false;
  std::vector<Node> out;
  out.reserve(g.nodes.size());
  for (const auto& n : g.nodes) {
    if (!n.domain.empty() || !ops.count(n.op_type) || !is_half(g, n.inputs.empty() ? "" : n.inputs[0])) {
      out.push_back(n);
      continue;
    }
    Node wide = n;
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (is_half(g, n.inputs[i])) {
        wide.inputs[i] = fmt::format("{}~f32", n.inputs[i]);
        if (!g.type_of(wide.inputs[i])) out.push_back(cast(n, n.inputs[i], wide.inputs[i], DType::F32));
        auto t = *g.type_of(n.inputs[i]);
        t.dtype = DType::F32;
        g.value_types[wide.inputs[i]] = t;
      }
    std::vector<Node> narrow;
    for (size_t k = 0; k < n.outputs.size(); ++k)
      if (is_half(g, n.outputs[k])) {
        wide.outputs[k] = fmt::format("{}~f32", n.outputs[k]);
        auto t = *g.type_of(n.outputs[k]);
        narrow.push_back(cast(n, wide.outputs[k], n.outputs[k], t.dtype));
        t.dtype = DType::F32;
        g.value_types[wide.outputs[k]] = t;
      }
    out.push_back(std::move(wide));
    out.insert(out.end(), narrow.begin(), narrow.end());
    changed = true;
  }
  g.nodes = std::move(out);
  return changed;
}

}  // namespace hodu::compilers::c
