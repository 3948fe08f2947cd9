#include "ir/model_check.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "core/error.h"
#include "ir/schema.h"
#include "ir/verifier.h"

namespace hodu {
namespace {

std::string op_label(const Node& n) { return n.domain.empty() ? n.op_type : n.domain + "." + n.op_type; }

// More elements than any machine holds: 2^62.
constexpr int64_t kMaxElements = int64_t{1} << 62;

bool too_large(const Shape& s) {
  if (!s.rank_known()) return false;
  int64_t n = 1;
  for (const auto& d : s.dims()) {
    if (!d.is_known()) continue;
    if (d.value > 0 && n > kMaxElements / d.value) return true;
    n *= std::max<int64_t>(d.value, 1);
  }
  return false;
}

void check_sizes(const Graph& g, std::vector<ModelProblem>& out) {
  for (const auto& v : g.inputs)
    if (v.type.is_tensor() && too_large(v.type.shape))
      out.push_back({"", "", fmt::format("graph '{}': input '{}' has shape {}: more than 2^62 elements", g.name,
                                         v.name, v.type.shape.to_string())});
  for (const auto& [name, t] : g.value_types)
    if (t.is_tensor() && too_large(t.shape))
      out.push_back({"", "", fmt::format("graph '{}': value '{}' would have shape {}: more than 2^62 elements",
                                         g.name, name, t.shape.to_string())});
}

// Inputs sharing a type variable ("T") must have one dtype, and it must be allowed.
void check_type_constraints(const Graph& g, const std::map<std::string, int64_t>& opsets,
                            std::vector<ModelProblem>& out) {
  for (const auto& n : g.nodes) {
    for (const auto& a : n.attributes) {
      if (a.g) check_type_constraints(*a.g, opsets, out);
      for (const auto& sg : a.graphs)
        if (sg) check_type_constraints(*sg, opsets, out);
    }
    if (!n.domain.empty()) continue;  // hodu's fused ops and other domains: their kernels check
    const OpSchema* schema = SchemaRegistry::instance().find(n.domain, n.op_type);
    if (!schema || schema->inputs.empty()) continue;
    std::map<std::string, std::pair<DType, size_t>> bound;  // type variable → (dtype, first input)
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.inputs[i].empty()) continue;
      const FormalParameter& f = schema->inputs[std::min(i, schema->inputs.size() - 1)];
      if (f.option == FormalParameter::Option::Variadic && !f.homogeneous) continue;
      auto t = g.type_of(n.inputs[i]);
      if (!t || !t->is_tensor() || t->dtype == DType::Undefined) continue;
      auto c = std::find_if(schema->type_constraints.begin(), schema->type_constraints.end(),
                            [&](const TypeConstraint& tc) { return tc.name == f.type_str; });
      if (c == schema->type_constraints.end()) continue;
      std::string tensor_type = fmt::format("tensor({})", dtype_onnx_name(t->dtype));
      if (std::find(c->allowed.begin(), c->allowed.end(), tensor_type) == c->allowed.end()) {
        out.push_back({n.name, op_label(n),
                       fmt::format("{}: input {} '{}' is {}, which {} does not take ({} allows {})", n.describe(), i,
                                   n.inputs[i], dtype_onnx_name(t->dtype), n.op_type, f.type_str,
                                   fmt::join(c->allowed, ", "))});
        continue;
      }
      auto [it, fresh] = bound.emplace(f.type_str, std::make_pair(t->dtype, i));
      if (!fresh && it->second.first != t->dtype)
        out.push_back({n.name, op_label(n),
                       fmt::format("{}: inputs {} ({}) and {} ({}) must have the same type {}", n.describe(),
                                   it->second.second, dtype_onnx_name(it->second.first), i,
                                   dtype_onnx_name(t->dtype), f.type_str)});
    }
  }
}

}  // namespace

std::vector<ModelProblem> find_model_problems(const Model& model) {
  std::vector<ModelProblem> out;
  try {
    verify_model(model);
  } catch (const Error& e) {
    // Structure is broken (a dangling input, a cycle, an unknown attribute kind):
    // inference over it would only repeat the same problem.
    out.push_back({"", "", e.what()});
    return out;
  }
  check_sizes(model.graph, out);
  Graph g = model.graph;
  for (auto& p : infer_types_collecting_problems(g)) out.push_back({p.node, p.op, p.message});
  check_type_constraints(g, model.opset_imports, out);
  check_sizes(g, out);
  // The same value can be reported before and after inference: keep one of each.
  std::vector<ModelProblem> unique;
  for (auto& p : out)
    if (std::none_of(unique.begin(), unique.end(), [&](const ModelProblem& q) { return q.message == p.message; }))
      unique.push_back(std::move(p));
  return unique;
}

}  // namespace hodu
