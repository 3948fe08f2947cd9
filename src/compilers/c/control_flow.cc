#include "compilers/c/control_flow.h"

#include <fmt/format.h>

#include <atomic>
#include <map>

#include "core/error.h"

namespace hodu::compilers::c {
namespace {

// A body's nodes as nodes of the outer graph: every name the body defines (its inputs, its
// initializers, its nodes' outputs) gets a suffix of its own, in the body and in the
// subgraphs nested in it; names the body reads from outside stay.
struct Spliced {
  std::vector<Node> nodes;
  std::vector<std::string> inputs, outputs;  // the body's, renamed
};

void rename_in(Graph& body, const std::map<std::string, std::string>& ren);

void rename_node(Node& n, const std::map<std::string, std::string>& ren) {
  for (auto* list : {&n.inputs, &n.outputs})
    for (auto& v : *list)
      if (auto it = ren.find(v); it != ren.end()) v = it->second;
  for (auto& a : n.attributes) {
    if (a.kind == Attribute::Kind::Graph && a.g) {
      a.g = std::make_shared<Graph>(*a.g);  // the attribute's graph may be shared with the model
      rename_in(*a.g, ren);
    }
    if (a.kind == Attribute::Kind::Graphs)
      for (auto& sg : a.graphs)
        if (sg) {
          sg = std::make_shared<Graph>(*sg);
          rename_in(*sg, ren);
        }
  }
}

void rename_in(Graph& body, const std::map<std::string, std::string>& ren) {
  for (auto& n : body.nodes) rename_node(n, ren);
  for (auto& o : body.outputs)
    if (auto it = ren.find(o.name); it != ren.end()) o.name = it->second;
}

std::string next_tag() {
  static std::atomic<int> counter{0};
  return fmt::format("~cf{}", counter++);
}

Spliced splice(Graph& g, const Graph& body) {
  const std::string tag = next_tag();
  std::map<std::string, std::string> ren;
  auto local = [&](const std::string& v) {
    if (!v.empty()) ren[v] = v + tag;
  };
  for (const auto& in : body.inputs) local(in.name);
  for (const auto& [name, t] : body.initializers) local(name);
  for (const auto& n : body.nodes)
    for (const auto& o : n.outputs) local(o);
  Spliced s;
  for (const auto& [name, t] : body.initializers) g.set_initializer(ren.at(name), t);
  for (const auto& [name, t] : body.value_types) {
    auto it = ren.find(name);
    if (it != ren.end()) g.value_types[it->second] = t;
  }
  for (const auto& in : body.inputs) {
    s.inputs.push_back(ren.at(in.name));
    if (in.type.kind != ValueType::Kind::Unknown && !g.value_types.count(s.inputs.back()))
      g.value_types[s.inputs.back()] = in.type;
  }
  for (const auto& n : body.nodes) {
    s.nodes.push_back(n);
    rename_node(s.nodes.back(), ren);
  }
  for (const auto& o : body.outputs) {
    auto it = ren.find(o.name);
    s.outputs.push_back(it == ren.end() ? o.name : it->second);
    if (o.type.kind != ValueType::Kind::Unknown && !g.value_types.count(s.outputs.back()) &&
        !g.initializer(s.outputs.back()))
      g.value_types[s.outputs.back()] = o.type;
  }
  return s;
}

const Graph& body_of(const Node& n, const char* attr) {
  const Graph* b = n.get_graph(attr);
  HODU_CHECK(b, ErrorCode::InvalidModel, "{}: graph attribute '{}' is missing", n.describe(), attr);
  return *b;
}

}  // namespace

bool inline_constant_ifs(Graph& g) {
  bool changed = false;
  std::vector<Node> out;
  for (const auto& n : g.nodes) {
    const Tensor* c = n.domain.empty() && n.op_type == "If" && n.has_input(0) ? g.initializer(n.inputs[0]) : nullptr;
    if (!c || c->numel() != 1) {
      out.push_back(n);
      continue;
    }
    const bool taken = c->get_double(0) != 0;
    Spliced b = splice(g, body_of(n, taken ? "then_branch" : "else_branch"));
    HODU_CHECK(b.outputs.size() == n.outputs.size(), ErrorCode::InvalidModel,
               "{}: the {} branch yields {} values for {} outputs", n.describe(), taken ? "then" : "else",
               b.outputs.size(), n.outputs.size());
    out.insert(out.end(), b.nodes.begin(), b.nodes.end());
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      if (n.outputs[k].empty()) continue;
      Node id;
      id.name = n.name;
      id.op_type = "Identity";
      id.inputs = {b.outputs[k]};
      id.outputs = {n.outputs[k]};
      out.push_back(id);
    }
    changed = true;
  }
  g.nodes = std::move(out);
  return changed;
}

void require_no_control_flow(const Graph& g) {
  for (const auto& n : g.nodes) {
    if (!n.domain.empty() || (n.op_type != "If" && n.op_type != "Loop" && n.op_type != "Scan")) continue;
    fail(ErrorCode::Unsupported,
         "{}: control flow is not supported by compiled code yet ({} {}); an If compiles when its condition "
         "is known at build time (from constants, or from shapes bound with --shape/--dim); run this model "
         "on the cpu engine (hodu run MODEL)",
         n.describe(), n.op_type,
         n.op_type == "If" ? "whose condition is known only at run time" : "with a body run while running");
  }
}

}  // namespace hodu::compilers::c
