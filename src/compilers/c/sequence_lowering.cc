#include "compilers/c/sequence_lowering.h"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <set>

#include "core/error.h"
#include "passes/graph_utils.h"

namespace hodu::compilers::c {

bool is_sequence_op(const Node& n) {
  static const std::set<std::string> ops = {"SequenceEmpty",      "SequenceConstruct", "SequenceInsert",
                                            "SequenceErase",      "SequenceAt",        "SequenceLength",
                                            "ConcatFromSequence", "SplitToSequence",   "Optional",
                                            "OptionalGetElement", "OptionalHasElement"};
  return n.domain.empty() && ops.count(n.op_type) > 0;
}

void refuse_sequence_op(const Node& n) {
  fail(ErrorCode::Unsupported,
       "{}: not supported by compiled code: sequences and optionals compile only inside a graph, as the tensors they hold, when every element, "
       "position and split size is known at build time; here one is a model input or output, is read by a "
       "control-flow node or SequenceMap, or depends on data read while running (the C API carries tensors only)",
       n.describe());
}

namespace {

struct Lowerer {
  Graph& g;
  int64_t opset;
  std::map<std::string, std::vector<std::string>> seqs;        // sequence value → its elements
  std::map<std::string, std::optional<std::string>> optionals;  // optional value → its element
  std::vector<Node> out;
  int count = 0;

  bool lowered(const std::string& v) const { return seqs.count(v) || optionals.count(v); }
  std::string fresh(const Node& n) { return fmt::format("{}~s{}", n.outputs.empty() ? n.name : n.outputs[0], count++); }
  void op(const Node& of, const char* type, std::vector<std::string> in, std::vector<std::string> outs,
          std::vector<Attribute> attrs = {}) {
    Node n;
    n.name = of.name;
    n.op_type = type;
    n.inputs = std::move(in);
    n.outputs = std::move(outs);
    n.attributes = std::move(attrs);
    out.push_back(std::move(n));
  }
  std::string ints(const Node& of, const std::vector<int64_t>& v) {
    std::string name = fresh(of);
    g.set_initializer(name, Tensor::from_vector(DType::I64, {static_cast<int64_t>(v.size())}, v));
    return name;
  }
  // An op taking axes (or Split's sizes) as an input from opset 13, an attribute before.
  void op_with_ints(const Node& of, const char* type, const std::string& x, const char* attr,
                    const std::vector<int64_t>& v, std::vector<std::string> outs, std::vector<Attribute> attrs = {}) {
    if (opset >= 13) {
      op(of, type, {x, ints(of, v)}, std::move(outs), std::move(attrs));
    } else {
      attrs.push_back(Attribute::make_ints(attr, v));
      op(of, type, {x}, std::move(outs), std::move(attrs));
    }
  }
  std::optional<int64_t> constant_int(const std::string& v) const {
    const Tensor* t = v.empty() ? nullptr : g.initializer(v);
    if (!t || t->numel() != 1 || !dtype_is_integer(t->dtype())) return std::nullopt;
    return t->get_int64(0);
  }
  std::optional<int64_t> rank_of(const std::string& v) const {
    auto t = g.type_of(v);
    if (!t || !t->is_tensor() || !t->shape.rank_known()) return std::nullopt;
    return t->shape.rank();
  }

  // One sequence or optional op rewritten; false when it cannot be (the graph stays as it is).
  bool lower(const Node& n) {
    const std::string& op_type = n.op_type;
    auto seq_in = [&](size_t i) -> const std::vector<std::string>* {
      auto it = n.has_input(i) ? seqs.find(n.inputs[i]) : seqs.end();
      return it == seqs.end() ? nullptr : &it->second;
    };
    // A position: optional input i (default `def`), in [-size, size + extra) normalized.
    auto position = [&](size_t i, int64_t size, int64_t def, int64_t extra) -> std::optional<int64_t> {
      int64_t p = def;
      if (n.has_input(i)) {
        auto c = constant_int(n.inputs[i]);
        if (!c) return std::nullopt;
        p = *c;
      }
      if (p < -size || p >= size + extra) return std::nullopt;
      return p < 0 ? p + size : p;
    };
    if (op_type == "SequenceEmpty") {
      seqs[n.outputs[0]] = {};
    } else if (op_type == "SequenceConstruct") {
      for (const auto& i : n.inputs)
        if (lowered(i)) return false;
      seqs[n.outputs[0]] = n.inputs;
    } else if (op_type == "SequenceInsert") {
      const auto* s = seq_in(0);
      if (!s || !n.has_input(1) || lowered(n.inputs[1])) return false;
      auto p = position(2, static_cast<int64_t>(s->size()), static_cast<int64_t>(s->size()), 1);
      if (!p) return false;
      auto v = *s;
      v.insert(v.begin() + *p, n.inputs[1]);
      seqs[n.outputs[0]] = v;
    } else if (op_type == "SequenceErase") {
      const auto* s = seq_in(0);
      if (!s || s->empty()) return false;
      auto p = position(1, static_cast<int64_t>(s->size()), -1, 0);
      if (!p) return false;
      auto v = *s;
      v.erase(v.begin() + *p);
      seqs[n.outputs[0]] = v;
    } else if (op_type == "SequenceAt") {
      const auto* s = seq_in(0);
      if (!s) return false;
      auto p = position(1, static_cast<int64_t>(s->size()), 0, 0);
      if (!p || !n.has_input(1)) return false;
      op(n, "Identity", {(*s)[*p]}, {n.outputs[0]});
    } else if (op_type == "SequenceLength") {
      const auto* s = seq_in(0);
      if (!s) return false;
      g.set_initializer(n.outputs[0], Tensor::scalar(DType::I64, static_cast<int64_t>(s->size())));
    } else if (op_type == "ConcatFromSequence") {
      const auto* s = seq_in(0);
      if (!s || s->empty()) return false;
      const int64_t axis = n.get_int("axis", 0);
      std::vector<std::string> parts = *s;
      if (n.get_int("new_axis", 0) != 0)
        for (auto& p : parts) {
          std::string u = fresh(n);
          op_with_ints(n, "Unsqueeze", p, "axes", {axis}, {u});
          p = u;
        }
      op(n, "Concat", parts, {n.outputs[0]}, {Attribute::make_int("axis", axis)});
    } else if (op_type == "SplitToSequence") {
      auto r = rank_of(n.inputs[0]);
      if (!r || *r == 0) return false;
      int64_t axis = n.get_int("axis", 0);
      if (axis < -*r || axis >= *r) return false;
      if (axis < 0) axis += *r;
      const Dim d = g.type_of(n.inputs[0])->shape[axis];  // (type_of returns a copy)
      std::vector<int64_t> sizes;
      bool squeeze = false;
      if (!n.has_input(1)) {
        if (!d.is_known()) return false;
        sizes.assign(static_cast<size_t>(d.value), 1);
        squeeze = n.get_int("keepdims", 1) == 0;
      } else {
        const Tensor* t = g.initializer(n.inputs[1]);
        if (!t || !dtype_is_integer(t->dtype()) || t->rank() > 1) return false;
        if (t->rank() == 0) {
          int64_t c = t->get_int64(0);
          if (!d.is_known() || c <= 0) return false;
          for (int64_t left = d.value; left > 0; left -= c) sizes.push_back(std::min(c, left));
        } else {
          sizes = t->to_int64s();
        }
      }
      if (sizes.empty()) return false;
      std::vector<std::string> parts;
      for (size_t k = 0; k < sizes.size(); ++k) parts.push_back(fresh(n));
      op_with_ints(n, "Split", n.inputs[0], "split", sizes, parts, {Attribute::make_int("axis", axis)});
      if (squeeze)
        for (auto& p : parts) {
          std::string q = fresh(n);
          op_with_ints(n, "Squeeze", p, "axes", {axis}, {q});
          p = q;
        }
      seqs[n.outputs[0]] = parts;
    } else if (op_type == "Optional") {
      if (n.has_input(0) && lowered(n.inputs[0])) return false;
      optionals[n.outputs[0]] = n.has_input(0) ? std::optional<std::string>(n.inputs[0]) : std::nullopt;
    } else if (op_type == "OptionalGetElement" || op_type == "OptionalHasElement") {
      std::optional<std::string> element;
      if (n.has_input(0)) {
        if (seqs.count(n.inputs[0])) return false;
        auto it = optionals.find(n.inputs[0]);
        if (it != optionals.end()) element = it->second;
        else if (auto t = g.type_of(n.inputs[0]); t && t->is_tensor()) element = n.inputs[0];  // a plain tensor
        else return false;
      }
      if (op_type == "OptionalHasElement") {
        g.set_initializer(n.outputs[0], Tensor::scalar(DType::Bool, element.has_value()));
      } else {
        if (!element) return false;  // an empty optional's element: the interpreter's error
        op(n, "Identity", {*element}, {n.outputs[0]});
      }
    } else {
      return false;
    }
    return true;
  }
};

}  // namespace

bool lower_sequences(Graph& g, int64_t opset) {
  bool changed = false;
  // Bodies of control flow first, each on its own (copied: the model's graph shares them).
  for (auto& n : g.nodes)
    for (auto& a : n.attributes) {
      if (!a.g) continue;
      auto copy = std::make_shared<Graph>(*a.g);
      if (lower_sequences(*copy, opset)) {
        a.g = copy;
        changed = true;
      }
    }
  bool any = false;
  for (const auto& n : g.nodes) any = any || is_sequence_op(n);
  if (!any) return changed;
  Lowerer L{g, opset, {}, {}, {}, 0};
  for (const auto& n : g.nodes) {
    if (is_sequence_op(n)) {
      if (!L.lower(n)) return changed;
      continue;
    }
    // Any other reader of a lowered value (a control-flow node reads outer values too).
    for (const auto& in : passes::has_subgraph(n) ? passes::reads_of(n) : std::set<std::string>(n.inputs.begin(), n.inputs.end()))
      if (!in.empty() && L.lowered(in)) return changed;
    L.out.push_back(n);
  }
  for (const auto& o : g.outputs)
    if (L.lowered(o.name)) return changed;
  // Types of the values that are gone; the initializers of a failed attempt are unread.
  for (const auto& [name, elems] : L.seqs) g.value_types.erase(name);
  for (const auto& [name, elem] : L.optionals) g.value_types.erase(name);
  g.nodes = std::move(L.out);
  return true;
}

}  // namespace hodu::compilers::c
