// The IR verifier: structure (SSA, defined-before-use, cycles, dangling
// values) and schema conformance (known op, arity, attribute kinds, required
// attributes). Subgraphs are checked with the enclosing scopes visible.
#include "ir/verifier.h"

#include <functional>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "ir/schema.h"

namespace hodu {

namespace {

[[noreturn]] void invalid(const std::string& msg) { throw Error(ErrorCode::InvalidModel, msg); }

std::string graph_label(const Graph& g) { return g.name.empty() ? std::string("graph") : fmt::format("graph '{}'", g.name); }

bool kind_compatible(Attribute::Kind have, Attribute::Kind want) {
  using K = Attribute::Kind;
  if (have == want) return true;
  if (want == K::Float && have == K::Int) return true;  // tolerated by Node::get_float
  if (want == K::SparseTensor && have == K::Tensor) return true;
  return false;
}

void check_schema(const Node& n, const std::map<std::string, int64_t>* opsets) {
  const auto& reg = SchemaRegistry::instance();
  std::string domain = canonical_domain(n.domain);
  int opset = 1 << 30;
  if (opsets) {
    auto it = opsets->find(domain);
    if (it == opsets->end() && domain.empty()) it = opsets->find("ai.onnx");
    // The graph is in canonical (newest) form whatever the file declared, so
    // the newest schema is the one that applies; opsets only bound custom domains.
    (void)it;
  }
  const OpSchema* s = reg.find(domain, n.op_type, opset);
  if (!s) {
    if (reg.versions(domain, n.op_type).empty())
      invalid(fmt::format("{}: unknown op '{}' in domain '{}'", n.describe(), n.op_type,
                          domain.empty() ? "ai.onnx" : domain));
    invalid(fmt::format("{}: op '{}' has no version <= {} in domain '{}'", n.describe(), n.op_type, opset,
                        domain.empty() ? "ai.onnx" : domain));
  }
  // Arity: trailing omitted ("") optional inputs/outputs do not count.
  auto count = [](const std::vector<std::string>& v) {
    size_t k = v.size();
    while (k > 0 && v[k - 1].empty()) --k;
    return static_cast<int64_t>(k);
  };
  int64_t ni = count(n.inputs), no = count(n.outputs);
  int64_t ni_raw = static_cast<int64_t>(n.inputs.size()), no_raw = static_cast<int64_t>(n.outputs.size());
  auto range = [](int lo, int hi) {
    return hi == INT32_MAX ? fmt::format("at least {}", lo) : lo == hi ? fmt::format("{}", lo) : fmt::format("{} to {}", lo, hi);
  };
  if (ni_raw < s->min_inputs || ni > s->max_inputs)
    invalid(fmt::format("{}: has {} inputs, {} (version {}) takes {}", n.describe(), ni_raw, n.op_type,
                        s->since_version, range(s->min_inputs, s->max_inputs)));
  if (no_raw < s->min_outputs || no > s->max_outputs)
    invalid(fmt::format("{}: has {} outputs, {} (version {}) gives {}", n.describe(), no_raw, n.op_type,
                        s->since_version, range(s->min_outputs, s->max_outputs)));
  // Required (non-optional) inputs must not be omitted.
  for (size_t i = 0; i < s->inputs.size() && i < n.inputs.size(); ++i)
    if (s->inputs[i].option == FormalParameter::Option::Single && n.inputs[i].empty())
      invalid(fmt::format("{}: required input {} ('{}') is empty", n.describe(), i, s->inputs[i].name));
  for (const auto& a : n.attributes) {
    const AttributeSchema* as = s->attribute(a.name);
    if (!as) {
      if (!a.ref_attr_name.empty()) continue;
      invalid(fmt::format("{}: unknown attribute '{}' for {} (version {})", n.describe(), a.name, n.op_type,
                          s->since_version));
    }
    if (as->kind != Attribute::Kind::Undefined && a.kind != Attribute::Kind::Undefined &&
        !kind_compatible(a.kind, as->kind))
      invalid(fmt::format("{}: attribute '{}' is {}, expected {}", n.describe(), a.name,
                          attribute_kind_name(a.kind), attribute_kind_name(as->kind)));
  }
  for (const auto& as : s->attributes)
    if (as.required && !n.has_attr(as.name))
      invalid(fmt::format("{}: required attribute '{}' of {} is missing", n.describe(), as.name, n.op_type));
  // Constant: exactly one value attribute.
  if (domain.empty() && n.op_type == "Constant" && n.attributes.size() != 1)
    invalid(fmt::format("{}: Constant needs exactly one value attribute, has {}", n.describe(), n.attributes.size()));
}

// Names a cycle among nodes (by a DFS over producer edges), for the message.
std::string find_cycle(const Graph& g) {
  std::unordered_map<std::string, size_t> producer;
  for (size_t k = 0; k < g.nodes.size(); ++k)
    for (const auto& o : g.nodes[k].outputs)
      if (!o.empty()) producer.emplace(o, k);
  std::vector<int> state(g.nodes.size(), 0);
  std::vector<size_t> stack;
  std::string found;
  std::function<bool(size_t)> dfs = [&](size_t k) -> bool {
    state[k] = 1;
    stack.push_back(k);
    for (const auto& in : g.nodes[k].inputs) {
      auto it = producer.find(in);
      if (it == producer.end()) continue;
      size_t p = it->second;
      if (state[p] == 1) {
        std::string names;
        bool on = false;
        for (size_t s : stack) {
          if (s == p) on = true;
          if (on) names += (names.empty() ? "" : " -> ") + g.nodes[s].describe();
        }
        found = names + " -> " + g.nodes[p].describe();
        return true;
      }
      if (state[p] == 0 && dfs(p)) return true;
    }
    stack.pop_back();
    state[k] = 2;
    return false;
  };
  for (size_t k = 0; k < g.nodes.size() && found.empty(); ++k)
    if (state[k] == 0) dfs(k);
  return found;
}

void verify(const Graph& g, const std::vector<const std::unordered_set<std::string>*>& outer,
            const std::map<std::string, int64_t>* opsets) {
  std::unordered_set<std::string> defined;
  auto in_outer = [&](const std::string& n) {
    for (auto* s : outer)
      if (s->count(n)) return true;
    return false;
  };
  for (const auto& v : g.inputs) {
    if (v.name.empty()) invalid(fmt::format("{}: a graph input has an empty name", graph_label(g)));
    if (!defined.insert(v.name).second)
      invalid(fmt::format("{}: graph input '{}' is listed twice", graph_label(g), v.name));
  }
  std::unordered_set<std::string> inits;
  for (const auto& [name, t] : g.initializers) {
    if (!inits.insert(name).second)
      invalid(fmt::format("{}: initializer '{}' is listed twice", graph_label(g), name));
    defined.insert(name);  // an initializer may also be an (overridable) input
  }
  // Every value produced by some node, to tell "used before defined" from "never defined".
  std::unordered_map<std::string, size_t> producer;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    for (const auto& o : n.outputs) {
      if (o.empty()) continue;
      if (defined.count(o) && !producer.count(o))
        invalid(fmt::format("{}: output '{}' has the name of a graph input or initializer", n.describe(), o));
      auto [it, fresh] = producer.emplace(o, k);
      if (!fresh)
        invalid(fmt::format("{}: output '{}' is already produced by {} (values must have one producer)", n.describe(),
                            o, g.nodes[it->second].describe()));
    }
  }
  bool cycle_checked = false;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    check_schema(n, opsets);
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const std::string& in = n.inputs[i];
      if (in.empty() || defined.count(in) || in_outer(in)) continue;
      auto it = producer.find(in);
      if (it == producer.end())
        invalid(fmt::format("{}: input {} '{}' is not produced by any node, nor a graph input, initializer or "
                            "outer-scope value (dangling)",
                            n.describe(), i, in));
      if (!cycle_checked) {
        cycle_checked = true;
        std::string c = find_cycle(g);
        if (!c.empty()) invalid(fmt::format("{}: cycle: {}", graph_label(g), c));
      }
      invalid(fmt::format("{}: input {} '{}' is used before {} produces it (nodes must be in topological order)",
                          n.describe(), i, in, g.nodes[it->second].describe()));
    }
    // Subgraphs see everything defined so far in this graph and the outer scopes.
    for (const auto& a : n.attributes) {
      std::vector<const Graph*> subs;
      if (a.kind == Attribute::Kind::Graph && a.g) subs.push_back(a.g.get());
      if (a.kind == Attribute::Kind::Graphs)
        for (const auto& sg : a.graphs)
          if (sg) subs.push_back(sg.get());
      for (const Graph* sg : subs) {
        auto inner = outer;
        inner.push_back(&defined);
        try {
          verify(*sg, inner, opsets);
        } catch (const Error& e) {
          throw e.with_context(fmt::format("{}: attribute '{}': ", n.describe(), a.name));
        }
      }
    }
    for (const auto& o : n.outputs)
      if (!o.empty()) defined.insert(o);
  }
  std::unordered_set<std::string> outs;
  for (const auto& v : g.outputs) {
    if (v.name.empty()) invalid(fmt::format("{}: a graph output has an empty name", graph_label(g)));
    if (!defined.count(v.name) && !in_outer(v.name))
      invalid(fmt::format("{}: output '{}' is not produced by any node, nor a graph input or initializer (dangling)",
                          graph_label(g), v.name));
  }
}

}  // namespace

void verify_graph(const Graph& graph, const std::set<std::string>& outer_scope) {
  std::unordered_set<std::string> outer(outer_scope.begin(), outer_scope.end());
  verify(graph, {&outer}, nullptr);
}

void verify_model(const Model& model) { verify(model.graph, {}, &model.opset_imports); }

}  // namespace hodu
