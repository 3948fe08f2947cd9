#include "engines/cpu/subgraph.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::cpu {
namespace {

// After this many plans for different input shapes (a loop whose carried values grow), the next
// new shape gets one plan with the varying dims left symbolic, used for every later shape.
constexpr size_t kMaxShapePlans = 8;

void collect_free(const Graph& g, std::vector<std::string>& out, std::set<std::string>& seen) {
  std::set<std::string> defined;
  for (const auto& v : g.inputs) defined.insert(v.name);
  for (const auto& [name, t] : g.initializers) defined.insert(name);
  for (const auto& n : g.nodes)
    for (const auto& o : n.outputs) defined.insert(o);
  auto use = [&](const std::string& name) {
    if (!name.empty() && !defined.count(name) && seen.insert(name).second) out.push_back(name);
  };
  for (const auto& n : g.nodes) {
    for (const auto& in : n.inputs) use(in);
    for (const auto& a : n.attributes) {
      std::vector<const Graph*> nested;
      if (a.g) nested.push_back(a.g.get());
      for (const auto& sg : a.graphs) nested.push_back(sg.get());
      for (const Graph* sg : nested) {
        std::vector<std::string> inner;
        std::set<std::string> inner_seen;
        collect_free(*sg, inner, inner_seen);
        for (const auto& name : inner) use(name);
      }
    }
  }
  for (const auto& o : g.outputs) use(o.name);
}

ValueType type_of_value(const RuntimeValue& v, const std::vector<int64_t>* shape) {
  if (v.is_tensor()) {
    Shape s = Shape::unknown_rank();
    if (shape) {
      std::vector<Dim> dims;
      for (int64_t d : *shape) dims.push_back(d < 0 ? Dim::sym("?") : Dim(d));
      s = Shape(std::move(dims));
    }
    return ValueType::tensor(v.tensor.dtype(), s);
  }
  DType elem = v.elem_dtype;
  if (v.is_sequence()) {
    if (elem == DType::Undefined && !v.sequence.empty()) elem = v.sequence[0].dtype();
    return ValueType::sequence(ValueType::tensor(elem, Shape::unknown_rank()));
  }
  if (v.kind == RuntimeValue::Kind::OptionalEmpty)
    return ValueType::optional(ValueType::tensor(elem, Shape::unknown_rank()));
  return ValueType();
}

}  // namespace

std::vector<std::string> free_values(const Graph& g) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  collect_free(g, out, seen);
  return out;
}

Subgraph::Subgraph(PlanBuilder& b, const Graph& body, const PlanOptions& options)
    : body_(body), options_(options), engine_(b.engine()) {
  const Model& parent = b.model();
  base_.ir_version = parent.ir_version;
  base_.opset_imports = parent.opset_imports;
  base_.producer_name = parent.producer_name;
  base_.producer_version = parent.producer_version;
  // Weights shared with the parent stay: a body's packing must not release them.
  options_.release_weights = false;
  for (const auto& name : free_values(body)) {
    if (const Tensor* t = passes::constant_of(b.graph(), name)) outer_constants_.emplace_back(name, *t);
    else outer_.push_back(name);
  }
}

bool Subgraph::matches(const Entry& e, const std::vector<RuntimeValue>& inputs) const {
  for (size_t i = 0; i < inputs.size(); ++i) {
    const RuntimeValue& v = inputs[i];
    const auto& [dtype, shape] = e.key[i];
    if (!v.is_tensor()) {
      if (shape.size() != 1 || shape[0] != -1) return false;
      continue;
    }
    if (v.tensor.dtype() != dtype) return false;
    const auto& s = v.tensor.shape();
    if (e.fixed.empty()) {
      if (s != shape) return false;
      continue;
    }
    if (!e.fixed[i]) continue;
    if (s.size() != shape.size()) return false;
    for (size_t d = 0; d < s.size(); ++d)
      if (shape[d] >= 0 && s[d] != shape[d]) return false;
  }
  return true;
}

Plan& Subgraph::plan_for(const std::vector<RuntimeValue>& inputs) {
  HODU_CHECK(inputs.size() == body_.inputs.size() + outer_.size(), ErrorCode::Internal,
             "subgraph '{}' takes {} inputs, got {}", body_.name, body_.inputs.size() + outer_.size(), inputs.size());
  ++tick_;
  if (last_ < entries_.size() && matches(*entries_[last_], inputs)) {
    entries_[last_]->used = tick_;
    return *entries_[last_]->plan;
  }
  for (size_t i = 0; i < entries_.size(); ++i)
    if (matches(*entries_[i], inputs)) {
      last_ = i;
      entries_[i]->used = tick_;
      return *entries_[i]->plan;
    }
  if (entries_.size() >= kMaxShapePlans && !generic_refused_) {
    int per_shape = 0;  // fallbacks a plan for concrete shapes has (ops with no cpu kernel at all)
    for (const auto& old : entries_) per_shape = std::max(per_shape, old->plan->fallback_count());
    Entry& e = build(inputs, true);
    if (e.plan->fallback_count() <= per_shape) {
      e.used = tick_;
      last_ = entries_.size() - 1;
      return *e.plan;
    }
    // A node of the free-dim plan would run on the interpreter's kernel where the per-shape
    // plans have a kernel (a conv of free height): plans per shape instead, the least recently
    // used one dropped for each new shape.
    entries_.pop_back();
    generic_refused_ = true;
  }
  if (entries_.size() >= kMaxShapePlans) {
    size_t oldest = 0;
    for (size_t i = 1; i < entries_.size(); ++i)
      if (entries_[i]->used < entries_[oldest]->used) oldest = i;
    entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(oldest));
  }
  Entry& e = build(inputs, false);
  e.used = tick_;
  last_ = entries_.size() - 1;
  return *e.plan;
}

Subgraph::Entry& Subgraph::build(const std::vector<RuntimeValue>& inputs, bool generic) {
  auto e = std::make_unique<Entry>();
  for (const auto& v : inputs)
    e->key.emplace_back(v.is_tensor() ? v.tensor.dtype() : DType::Undefined,
                        v.is_tensor() ? v.tensor.shape() : std::vector<int64_t>{-1});
  if (generic) {
    // Dims that differ from any earlier plan's are left symbolic (-1).
    e->fixed.assign(inputs.size(), 1);
    for (const auto& old : entries_)
      for (size_t i = 0; i < inputs.size(); ++i) {
        auto& shape = e->key[i].second;
        const auto& was = old->key[i].second;
        if (!inputs[i].is_tensor()) continue;
        if (was.size() != shape.size()) e->fixed[i] = 0;
        else
          for (size_t d = 0; d < shape.size(); ++d)
            if (was[d] != shape[d]) shape[d] = -1;
      }
  }
  auto m = std::make_unique<Model>(base_);
  Graph& g = m->graph;
  g.name = body_.name;
  g.nodes = body_.nodes;
  g.outputs = body_.outputs;
  g.initializers = body_.initializers;
  g.value_types = body_.value_types;
  // The body's declared shapes hold for the shapes it was traced or declared at: a Loop's
  // carried value declared [0, 320, 320] grows each iteration (torch's paste-masks loop). Only
  // the dtypes and ranks are kept; the passes infer the shapes again from this plan's inputs.
  for (auto& [name, t] : g.value_types)
    if (t.is_tensor() && t.shape.rank_known())
      t.shape = Shape(std::vector<Dim>(static_cast<size_t>(t.shape.rank()), Dim::unknown()));
  for (const auto& [name, t] : outer_constants_) g.set_initializer(name, t);
  std::map<std::string, std::vector<int64_t>> shapes;
  auto add_input = [&](const std::string& name, size_t i) {
    const auto& shape = e->key[i].second;
    bool known = inputs[i].is_tensor() && (e->fixed.empty() || e->fixed[i]);
    g.inputs.push_back({name, type_of_value(inputs[i], known ? &shape : nullptr), ""});
    g.value_types.erase(name);
    bool is_static = known && std::none_of(shape.begin(), shape.end(), [](int64_t d) { return d < 0; });
    if (is_static) shapes[name] = shape;
  };
  for (size_t i = 0; i < body_.inputs.size(); ++i) add_input(body_.inputs[i].name, i);
  for (size_t i = 0; i < outer_.size(); ++i) add_input(outer_[i], body_.inputs.size() + i);
  passes::optimize(*m, {options_.opt_level, shapes});
  e->plan = std::make_unique<Plan>(*m, shapes, options_, engine_);
  e->model = std::move(m);
  entries_.push_back(std::move(e));
  return *entries_.back();
}

std::vector<const Plan*> Subgraph::plans() const {
  std::vector<const Plan*> out;
  for (const auto& e : entries_) out.push_back(e->plan.get());
  return out;
}

}  // namespace hodu::cpu
