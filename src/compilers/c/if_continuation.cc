#include "compilers/c/if_continuation.h"

#include <fmt/format.h>

#include <cstring>
#include <memory>
#include <optional>
#include <set>

#include "compilers/c/graph_prep.h"
#include "compilers/c/sym_int.h"
#include "core/error.h"
#include "ir/schema.h"
#include "ir/topological_order.h"
#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::compilers::c {
namespace {

// Bounds: how deep Ifs nest while the branches are tried, and how many nodes one If may take
// in (its continuation is copied into both branches).
constexpr int kMaxDepth = 6;
constexpr size_t kMaxMoved = 4096;

using Types = std::vector<std::optional<ValueType>>;

// What a branch gives: each output's type (nullopt where it cannot be told) and the constant
// it folds to, if any (Silero's "is the input 2-D?" once its rank is known).
struct Outputs {
  Types types;
  std::vector<std::optional<Tensor>> constants;
};

// A graph whose nested graphs are its own (attributes hold shared pointers; a moved node's are
// renamed in place).
std::shared_ptr<Graph> deep_copy(const Graph& g) {
  auto c = std::make_shared<Graph>(g);
  for (auto& n : c->nodes)
    for (auto& a : n.attributes) {
      if (a.g) a.g = deep_copy(*a.g);
      for (auto& s : a.graphs) s = deep_copy(*s);
    }
  return c;
}

Node deep_copy(const Node& n) {
  Node c = n;
  for (auto& a : c.attributes) {
    if (a.g) a.g = deep_copy(*a.g);
    for (auto& s : a.graphs) s = deep_copy(*s);
  }
  return c;
}

// The values a body reads from the graphs around it (its nested graphs' own values left out).
std::set<std::string> outer_reads(const Graph& body) {
  std::set<std::string> defined, reads;
  for (const auto& v : body.inputs) defined.insert(v.name);
  for (const auto& [name, t] : body.initializers) defined.insert(name);
  for (const auto& n : body.nodes) {
    reads.insert(n.inputs.begin(), n.inputs.end());
    for (const auto& a : n.attributes) {
      if (a.g)
        for (const auto& r : outer_reads(*a.g)) reads.insert(r);
      for (const auto& sg : a.graphs)
        for (const auto& r : outer_reads(*sg)) reads.insert(r);
    }
    defined.insert(n.outputs.begin(), n.outputs.end());
  }
  for (const auto& o : body.outputs) reads.insert(o.name);
  std::set<std::string> out;
  for (const auto& r : reads)
    if (!r.empty() && !defined.count(r)) out.insert(r);
  return out;
}

bool same_constant(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape() || a.dtype() == DType::String) return false;
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

bool rank_unknown(const std::optional<ValueType>& t) { return t && t->is_tensor() && !t->shape.rank_known(); }

// Two branches' types of one output: the rank both give (dims where they agree), unknown rank
// where they differ.
std::optional<ValueType> merge(const std::optional<ValueType>& a, const std::optional<ValueType>& b) {
  if (!a || !b || !a->is_tensor() || !b->is_tensor() || a->dtype != b->dtype) return std::nullopt;
  if (!a->shape.rank_known() || !b->shape.rank_known() || a->shape.rank() != b->shape.rank())
    return ValueType::tensor(a->dtype, Shape::unknown_rank());
  std::vector<Dim> d;
  for (int64_t k = 0; k < a->shape.rank(); ++k) d.push_back(a->shape[k] == b->shape[k] ? a->shape[k] : Dim::unknown());
  return ValueType::tensor(a->dtype, Shape(std::move(d)));
}

// nullopt when the branch cannot run at these shapes.
using BranchTypes = std::optional<Outputs>;

// Nesting of the branch preparations under way on this thread (they prepare their own Ifs).
thread_local int t_depth = 0;

// The output types of `body` run inside `context`, its graph prepared as compile_body's nested
// library will be (prepare_graph: shapes bound, constants and Ifs on constants folded, its own
// divergent Ifs reconciled, every shape inferred). Like emit_if, a branch whose preparation
// finds it malformed at these shapes (InvalidModel, InvalidArgument: an LSTM fed rank 5, a
// Squeeze of a dim of 2) cannot run.
BranchTypes branch_types(const Graph& body, const Graph& context, const Model& model) {
  Outputs unknown{Types(body.outputs.size()), std::vector<std::optional<Tensor>>(body.outputs.size())};
  if (t_depth >= kMaxDepth) return unknown;
  Model sub;
  sub.opset_imports = model.opset_imports;
  Graph& w = sub.graph;
  w.name = body.name;
  for (const auto& [name, t] : body.initializers) w.set_initializer(name, t);
  for (const auto& r : outer_reads(body)) {
    if (const Tensor* t = passes::constant_of(context, r)) {
      w.set_initializer(r, *t);
      continue;
    }
    auto t = context.type_of(r);
    if (!t || !t->is_tensor() || !t->shape.rank_known()) return unknown;
    w.inputs.push_back(Value{r, *t, {}});
  }
  w.nodes = body.nodes;
  w.outputs = body.outputs;
  for (auto& o : w.outputs) o.type = ValueType{};  // inferred afresh, as compile_body does
  // Dims the branch's shapes share with the context keep their names; the rest are its own.
  std::set<std::string> shared;
  for (const auto& v : w.inputs)
    for (const auto& d : v.type.shape.dims())
      if (d.is_symbolic()) shared.insert(d.symbol);
  ++t_depth;
  struct Leave {
    ~Leave() { --t_depth; }
  } leave;
  try {
    SymTable table;
    SymScope scope(table);
    PreparedGraph p = prepare_graph(sub, {}, {});
    Outputs out;
    for (const auto& o : p.graph.outputs) {
      auto t = p.graph.type_of(o.name);
      // Dims as the branch's sizes have them: constants, or one of the dims it shares with the
      // context (the batch); any other a dim the If's code sets after the branch ran.
      auto sym = p.sym.shapes.find(o.name);
      if (t && t->is_tensor() && sym != p.sym.shapes.end() &&
          static_cast<int64_t>(sym->second.size()) == t->shape.rank())
        for (size_t d = 0; d < sym->second.size(); ++d) {
          const SymInt& v = sym->second[d];
          const auto& terms = v.terms();
          Dim dim = Dim::unknown();
          if (v.known())
            dim = Dim(v.value());
          else if (terms.size() == 1 && terms[0].coef == 1 && terms[0].atoms.size() == 1 &&
                   shared.count(table.atom(terms[0].atoms[0]).name))
            dim = Dim::sym(table.atom(terms[0].atoms[0]).name);
          t->shape[static_cast<int64_t>(d)] = dim;
        }
      else if (t && t->is_tensor() && t->shape.rank_known())
        for (auto& d : t->shape.dims())
          if (d.is_symbolic() && !shared.count(d.symbol)) d = Dim::unknown();
      out.types.push_back(t);
      if (const Tensor* c = passes::constant_of(p.graph, o.name))
        out.constants.push_back(c->contiguous());
      else
        out.constants.emplace_back();
    }
    return out;
  } catch (const Error& e) {
    if (e.code() == ErrorCode::InvalidModel || e.code() == ErrorCode::InvalidArgument) return std::nullopt;
    return unknown;
  }
}

// Moves the nodes `readers` (indices after the If at `at`) into both of its branches: each
// branch computes them from its own outputs, under fresh names, and the If gives their outputs.
void move_into_branches(Graph& g, size_t at, const std::set<size_t>& readers) {
  std::set<std::string> names = passes::value_names(g, true);
  Node& n = g.nodes[at];
  std::vector<std::string> moved_outputs;
  for (size_t j : readers)
    for (const auto& o : g.nodes[j].outputs)
      if (!o.empty()) moved_outputs.push_back(o);
  for (const char* which : {"then_branch", "else_branch"}) {
    Attribute* a = n.attr(which);
    auto b = std::make_shared<Graph>(*a->g);  // its own node list; nested graphs untouched
    // What the moved nodes read of the If's outputs (and of each other's) is the branch's own.
    std::map<std::string, std::string> local;
    for (size_t k = 0; k < n.outputs.size() && k < b->outputs.size(); ++k)
      if (!n.outputs[k].empty()) local[n.outputs[k]] = b->outputs[k].name;
    for (size_t j : readers) {
      Graph one;
      one.nodes.push_back(deep_copy(g.nodes[j]));
      for (const auto& [from, to] : local) passes::replace_uses(one, from, to);
      Node m = std::move(one.nodes[0]);
      for (auto& o : m.outputs) {
        if (o.empty()) continue;
        std::string fresh = fmt::format("{}/{}", o, which);
        while (names.count(fresh)) fresh += "_";
        names.insert(fresh);
        local[o] = fresh;
        o = fresh;
      }
      b->nodes.push_back(std::move(m));
    }
    for (const auto& o : moved_outputs) b->outputs.push_back(Value{local[o], {}, {}});
    a->g = b;
  }
  for (const auto& o : moved_outputs) n.outputs.push_back(o);
  passes::erase_nodes(g, readers);
}

// Drops output `k` of the If at `at` (nothing reads it).
void drop_output(Graph& g, size_t at, size_t k) {
  Node& n = g.nodes[at];
  n.outputs.erase(n.outputs.begin() + static_cast<std::ptrdiff_t>(k));
  for (const char* which : {"then_branch", "else_branch"}) {
    Attribute* a = n.attr(which);
    auto b = std::make_shared<Graph>(*a->g);
    b->outputs.erase(b->outputs.begin() + static_cast<std::ptrdiff_t>(k));
    a->g = b;
  }
}

int find_node(const Graph& g, const std::string& name, const std::string& first_output) {
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].name == name && !g.nodes[i].outputs.empty() && g.nodes[i].outputs[0] == first_output)
      return static_cast<int>(i);
  return -1;
}

// Reconciles the If at `at` (which follows the If as the graph is re-sorted).
void reconcile_if(Graph& g, size_t at, const Model& model, bool& changed) {
  const Graph before = g;
  const bool changed_before = changed;
  // Left as it was: graph_prep's shapes refuse it, naming it.
  auto give_up = [&] {
    g = before;
    changed = changed_before;
  };
  size_t moved = 0;
  while (true) {
    Node& n = g.nodes[at];
    const Graph* tb = n.get_graph("then_branch");
    const Graph* eb = n.get_graph("else_branch");
    if (!tb || !eb || tb->outputs.size() != n.outputs.size() || eb->outputs.size() != n.outputs.size()) return;
    auto t = branch_types(*tb, g, model);
    auto e = branch_types(*eb, g, model);
    if (!t && !e) return;  // emit_if makes it a run-time error
    std::vector<size_t> divergent;
    Types merged;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      std::optional<ValueType> m = !t ? e->types[k] : !e ? t->types[k] : merge(t->types[k], e->types[k]);
      if (!n.outputs[k].empty() && (!m || rank_unknown(m))) divergent.push_back(k);
      merged.push_back(m);
    }
    if (divergent.empty()) {
      // The type the branches agree on: inference alone cannot see through their rank tests,
      // nor past a node of a branch that cannot run. Inference keeps it where it knows less.
      for (size_t k = 0; k < n.outputs.size(); ++k) {
        if (n.outputs[k].empty() || !merged[k]) continue;
        auto now = g.type_of(n.outputs[k]);
        bool more = rank_unknown(now);
        if (now && now->is_tensor() && now->shape.rank_known() && now->shape.rank() == merged[k]->shape.rank())
          for (int64_t d = 0; d < now->shape.rank(); ++d)
            more = more || (!now->shape[d].is_known() && !now->shape[d].is_symbolic() &&
                            (merged[k]->shape[d].is_known() || merged[k]->shape[d].is_symbolic()));
        if (!more) continue;
        g.value_types[n.outputs[k]] = *merged[k];
        changed = true;
      }
      // An output every branch that can run folds to the same constant is that constant: the
      // graph after the If folds on (a rank test moved in with the nodes it decided).
      for (size_t k = n.outputs.size(); k-- > 0;) {
        const std::string o = g.nodes[at].outputs[k];
        std::optional<Tensor> c;
        bool same = !o.empty() && !passes::is_graph_output(g, o);
        for (const BranchTypes* b : {&t, &e}) {
          if (!*b || !same) continue;
          const auto& bc = (*b)->constants[k];
          same = bc && (!c || same_constant(*c, *bc));
          if (same) c = bc;
        }
        if (!same || !c) continue;
        drop_output(g, at, k);
        g.set_initializer(o, *c);
        g.value_types.erase(o);
        changed = true;
      }
      return;
    }
    // Divergent outputs nothing reads go; what reads the others moves into the branches.
    std::set<std::string> wanted;
    std::set<size_t> readers;
    bool stuck = false;
    for (size_t k : divergent) {
      const std::string& o = n.outputs[k];
      if (passes::is_graph_output(g, o)) stuck = true;
      wanted.insert(o);
    }
    for (size_t j = at + 1; j < g.nodes.size(); ++j)
      for (const auto& r : passes::reads_of(g.nodes[j]))
        if (wanted.count(r)) readers.insert(j);
    // With them go the nodes they read that are computed from the If's outputs (else the If
    // would read what it makes: Silero's rank test Shape → Size → Equal → Not deciding an If
    // that reads the same value).
    std::set<std::string> after_if(n.outputs.begin(), n.outputs.end());
    std::map<std::string, size_t> made_by;
    for (size_t j = at + 1; j < g.nodes.size(); ++j) {
      bool depends = false;
      for (const auto& r : passes::reads_of(g.nodes[j])) depends = depends || after_if.count(r);
      for (const auto& o : g.nodes[j].outputs) {
        if (o.empty()) continue;
        made_by[o] = j;
        if (depends) after_if.insert(o);
      }
    }
    for (std::vector<size_t> todo(readers.begin(), readers.end()); !todo.empty();) {
      size_t j = todo.back();
      todo.pop_back();
      for (const auto& r : passes::reads_of(g.nodes[j])) {
        auto p = made_by.find(r);
        if (p != made_by.end() && after_if.count(r) && readers.insert(p->second).second) todo.push_back(p->second);
      }
    }
    if (stuck || moved + readers.size() > kMaxMoved) {
      give_up();
      return;
    }
    if (readers.empty()) {
      for (auto k = divergent.rbegin(); k != divergent.rend(); ++k) drop_output(g, at, *k);
      changed = true;
      continue;
    }
    moved += readers.size();
    const std::string name = n.name, first = n.outputs.empty() ? "" : n.outputs[0];
    // Types inferred before the move no longer hold for the values it renames.
    for (const auto& o : n.outputs) g.value_types.erase(o);
    for (size_t j : readers)
      for (const auto& o : g.nodes[j].outputs) g.value_types.erase(o);
    move_into_branches(g, at, readers);
    // What the moved nodes read may be made after the If: sorted, the If comes after it.
    if (!sort_topologically(g)) {
      give_up();
      return;
    }
    int i = find_node(g, name, first);
    if (i < 0) {
      give_up();
      return;
    }
    at = static_cast<size_t>(i);
    // Drops the If's outputs nothing reads any more.
    for (size_t k = g.nodes[at].outputs.size(); k-- > 0;) {
      const std::string& o = g.nodes[at].outputs[k];
      if (o.empty() || passes::is_graph_output(g, o)) continue;
      bool read = false;
      for (size_t j = at + 1; j < g.nodes.size() && !read; ++j) read = passes::reads_of(g.nodes[j]).count(o) > 0;
      if (!read) drop_output(g, at, k);
    }
    infer_types(g);
    changed = true;
  }
}

}  // namespace

bool reconcile_divergent_ifs(Graph& g, const Model& model, std::set<std::string>& tried) {
  bool changed = false;
  infer_types(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (!n.domain.empty() || n.op_type != "If") continue;
    bool divergent = false;
    for (const auto& o : n.outputs) divergent = divergent || (!o.empty() && rank_unknown(g.type_of(o)));
    if (!divergent || !tried.insert(n.name + "\n" + (n.outputs.empty() ? "" : n.outputs[0])).second) continue;
    // One at a time: what it makes constant folds before the next is looked at.
    reconcile_if(g, i, model, changed);
    if (changed) return true;
  }
  return false;
}

}  // namespace hodu::compilers::c
