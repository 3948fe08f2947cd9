// build_gradient_graph: reverse-mode differentiation as graph construction.
// The forward nodes are kept; walking them backward, each node on a path from a
// wrt value to the loss gets its rule (autodiff_rules_*.cc), which emits the
// nodes computing its inputs' gradients from its outputs' gradients. A value
// read by several nodes gets the Sum of their contributions. Rules use the
// forward types only to decide statically what they can (broadcast dims,
// static shapes); where dims are symbolic they emit Shape-based nodes, which
// fold away once an engine binds the input shapes.
#include "passes/autodiff.h"

#include <algorithm>
#include <unordered_set>

#include "core/error.h"
#include "ir/schema.h"
#include "passes/autodiff_rules.h"

namespace hodu::passes {
namespace autodiff {

const RuleTable& rule_table() {
  static const RuleTable table = [] {
    RuleTable t;
    add_math_rules(t);
    add_linalg_rules(t);
    add_tensor_rules(t);
    add_nn_rules(t);
    add_attention_rules(t);
    return t;
  }();
  return table;
}

class Differentiator {
 public:
  Differentiator(Graph& g, std::set<std::string> depends) : g_(g), depends_(std::move(depends)) {
    for (const auto& v : g.inputs) used_.insert(v.name);
    for (const auto& v : g.outputs) used_.insert(v.name);
    for (const auto& [k, v] : g.initializers) used_.insert(k);
    for (const auto& n : g.nodes) {
      used_.insert(n.name);
      for (const auto& o : n.outputs) used_.insert(o);
    }
  }

  Graph& g_;
  std::set<std::string> depends_;                          // float values that depend on a wrt value
  std::map<std::string, std::vector<std::string>> contributions_;
  std::map<std::string, std::string> finalized_;           // value → its summed gradient
  std::map<std::string, ValueType> grad_types_;            // gradient value → its value's type; set_type
  std::map<std::string, std::string> shapes_;              // value → Shape(value)
  std::map<std::pair<double, DType>, std::string> scalars_;
  std::unordered_set<std::string> used_;
  std::string prefix_ = "grad/";
  size_t counter_ = 0;

  std::string fresh(const std::string& stem) {
    std::string name = prefix_ + stem;
    while (used_.count(name)) name = prefix_ + stem + "_" + std::to_string(++counter_);
    used_.insert(name);
    return name;
  }

  std::optional<ValueType> type(const std::string& value) const {
    if (auto it = grad_types_.find(value); it != grad_types_.end()) return it->second;
    auto t = g_.type_of(value);
    if (t && t->kind == ValueType::Kind::Unknown) return std::nullopt;
    return t;
  }

  // The gradient of `value`: the sum of its contributions ("" when none).
  std::string gradient(const std::string& value) {
    if (auto it = finalized_.find(value); it != finalized_.end()) return it->second;
    std::string out;
    auto it = contributions_.find(value);
    if (it != contributions_.end() && !it->second.empty()) {
      if (it->second.size() == 1) {
        out = it->second[0];
      } else {
        Node n;
        n.op_type = "Sum";
        n.name = fresh(value + "/sum");
        n.inputs = it->second;
        out = fresh(value + "/grad");
        n.outputs = {out};
        g_.nodes.push_back(std::move(n));
      }
      if (auto t = g_.type_of(value)) grad_types_[out] = *t;
    }
    finalized_[value] = out;
    return out;
  }
};

// ---- RuleContext -----------------------------------------------------------------

std::string RuleContext::dy(size_t i) const {
  if (!node_.has_output(i)) return "";
  return d_.gradient(node_.outputs[i]);
}

bool RuleContext::wants(size_t i) const { return node_.has_input(i) && d_.depends_.count(node_.inputs[i]); }

void RuleContext::give(size_t i, const std::string& grad) {
  if (!wants(i) || grad.empty()) return;
  const std::string& v = node_.inputs[i];
  if (d_.finalized_.count(v))
    fail(ErrorCode::Internal, "autodiff: {} gives a gradient to '{}' after it was used", node_.describe(), v);
  d_.contributions_[v].push_back(grad);
}

void RuleContext::give_broadcast(size_t i, const std::string& grad, const std::string& like) {
  if (!wants(i) || grad.empty()) return;
  give(i, sum_to(grad, like, node_.inputs[i]));
}

std::string RuleContext::forward_output(size_t i) {
  if (node_.has_output(i)) return node_.outputs[i];
  HODU_CHECK(index_ < d_.g_.nodes.size(), ErrorCode::Internal, "autodiff: {} has no output {}", node_.describe(), i);
  Node& fwd = d_.g_.nodes[index_];
  if (fwd.outputs.size() <= i) fwd.outputs.resize(i + 1);
  fwd.outputs[i] = d_.fresh(node_.name + "/output" + std::to_string(i));
  return fwd.outputs[i];
}

std::vector<std::string> RuleContext::emit_n(const std::string& op, std::vector<std::string> inputs,
                                             size_t n_outputs, std::vector<Attribute> attrs,
                                             const std::string& domain, std::vector<bool> wanted) {
  Node n;
  n.op_type = op;
  n.domain = domain;
  n.name = d_.fresh(node_.name + "/" + op);
  n.inputs = std::move(inputs);
  n.attributes = std::move(attrs);
  for (size_t k = 0; k < n_outputs; ++k)
    n.outputs.push_back(k < wanted.size() && !wanted[k] ? std::string() : d_.fresh(node_.name + "/" + op + "_out"));
  while (!n.outputs.empty() && n.outputs.back().empty()) n.outputs.pop_back();
  std::vector<std::string> outs = n.outputs;
  outs.resize(n_outputs);
  d_.g_.nodes.push_back(std::move(n));
  return outs;
}

std::string RuleContext::emit(const std::string& op, std::vector<std::string> inputs, std::vector<Attribute> attrs,
                              const std::string& domain) {
  return emit_n(op, std::move(inputs), 1, std::move(attrs), domain)[0];
}

std::string RuleContext::scalar(double v, DType dt) {
  auto key = std::make_pair(v, dt);
  if (auto it = d_.scalars_.find(key); it != d_.scalars_.end()) return it->second;
  std::string name = d_.fresh("const");
  Tensor t = Tensor::from_vector(DType::F64, {}, std::vector<double>{v});
  d_.g_.set_initializer(name, dt == DType::F64 ? t : t.cast(dt));
  d_.scalars_[key] = name;
  return name;
}

std::string RuleContext::scalar_like(double v, const std::string& value) { return scalar(v, dtype(value)); }

std::string RuleContext::ints(const std::vector<int64_t>& v) {
  std::string name = d_.fresh("ints");
  d_.g_.set_initializer(name, Tensor::from_vector(DType::I64, {static_cast<int64_t>(v.size())}, v));
  return name;
}

std::string RuleContext::shape_of(const std::string& value) {
  if (auto it = d_.shapes_.find(value); it != d_.shapes_.end()) return it->second;
  std::string s = emit("Shape", {value});
  d_.shapes_[value] = s;
  return s;
}

std::string RuleContext::zeros_like(const std::string& value) {
  return emit("Expand", {scalar_like(0, value), shape_of(value)});
}

const Tensor* RuleContext::constant(const std::string& value) const {
  if (value.empty() || d_.g_.input(value)) return nullptr;
  return d_.g_.initializer(value);
}

std::optional<ValueType> RuleContext::type(const std::string& value) const { return d_.type(value); }

void RuleContext::set_type(const std::string& value, ValueType t) { d_.grad_types_[value] = std::move(t); }

DType RuleContext::dtype(const std::string& value) const {
  auto t = type(value);
  if (t && t->is_tensor() && t->dtype != DType::Undefined) return t->dtype;
  // A value a rule made has the dtype of the node's gradients: that of its first output.
  if (!d_.g_.type_of(value) && node_.has_output(0))
    if (auto o = d_.type(node_.outputs[0]); o && o->is_tensor() && o->dtype != DType::Undefined) return o->dtype;
  unsupported(fmt::format("the dtype of '{}' is unknown", value));
}

std::optional<int64_t> RuleContext::rank(const std::string& value) const {
  auto t = type(value);
  if (!t || !t->is_tensor() || !t->shape.rank_known()) return std::nullopt;
  return t->shape.rank();
}

int64_t RuleContext::rank_or_fail(const std::string& value) const {
  auto r = rank(value);
  if (!r) unsupported(fmt::format("the rank of '{}' is unknown", value));
  return *r;
}

std::optional<int64_t> RuleContext::static_dim(const std::string& value, int64_t axis) const {
  auto t = type(value);
  if (!t || !t->is_tensor() || !t->shape.rank_known()) return std::nullopt;
  int64_t r = t->shape.rank();
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r || !t->shape[static_cast<size_t>(axis)].is_known()) return std::nullopt;
  return t->shape[static_cast<size_t>(axis)].value;
}

std::string RuleContext::reshape_like(const std::string& x, const std::string& like) {
  auto t = type(like);
  if (t && t->is_tensor())
    if (auto s = t->shape.to_static()) return emit("Reshape", {x, ints(*s)});
  return emit("Reshape", {x, shape_of(like)});
}

std::string RuleContext::sum_to(const std::string& grad, const std::string& like, const std::string& target) {
  auto tl = type(like), tt = type(target);
  if (!tl || !tt || !tl->is_tensor() || !tt->is_tensor() || !tl->shape.rank_known() || !tt->shape.rank_known())
    unsupported(fmt::format("the ranks of '{}' and '{}' are needed to sum a broadcast gradient", like, target));
  const auto& L = tl->shape.dims();
  const auto& T = tt->shape.dims();
  const size_t rl = L.size(), rt = T.size();
  if (rt > rl) fail(ErrorCode::Internal, "autodiff: {}: '{}' has a higher rank than '{}'", node_.describe(), target, like);
  std::vector<int64_t> axes;
  bool ambiguous = false;
  for (size_t k = 0; k < rl - rt; ++k) axes.push_back(static_cast<int64_t>(k));
  for (size_t k = 0; k < rt; ++k) {
    const Dim& dl = L[rl - rt + k];
    const Dim& dt = T[k];
    if (dt == dl && (dt.is_known() || dt.is_symbolic())) continue;  // same size: not broadcast
    if (dt.is_known() && dt.value == 1) {
      if (!(dl.is_known() && dl.value == 1)) axes.push_back(static_cast<int64_t>(rl - rt + k));
    } else if (dt.is_known() || (dl.is_known() && dl.value == 1)) {
      continue;  // target's dim is the output's (>1) or the output's is 1
    } else {
      ambiguous = true;
    }
  }
  if (ambiguous) {
    // Decided at run time: the axes where the shapes differ (target's shape padded with 1s).
    std::string st = shape_of(target);
    if (rl > rt) st = emit("Concat", {ints(std::vector<int64_t>(rl - rt, 1)), st}, {Attribute::make_int("axis", 0)});
    std::string diff = emit("Not", {emit("Equal", {shape_of(like), st})});
    std::string dyn_axes = emit("Reshape", {emit("NonZero", {diff}), ints({-1})});
    std::string s = emit("ReduceSum", {grad, dyn_axes},
                         {Attribute::make_int("keepdims", 1), Attribute::make_int("noop_with_empty_axes", 1)});
    return emit("Reshape", {s, shape_of(target)});
  }
  if (axes.empty()) return grad;
  std::string s = emit("ReduceSum", {grad, ints(axes)}, {Attribute::make_int("keepdims", 1)});
  if (rl > rt) {
    std::vector<int64_t> lead;
    for (size_t k = 0; k < rl - rt; ++k) lead.push_back(static_cast<int64_t>(k));
    s = emit("Squeeze", {s, ints(lead)});
  }
  return s;
}

void RuleContext::unsupported(const std::string& why) const {
  fail(ErrorCode::Unsupported, "cannot differentiate through {}: {}", node_.describe(), why);
}

}  // namespace autodiff

namespace {

bool is_float(DType t) { return dtype_is_float(t) && !dtype_is_complex(t); }

std::string rule_key(const std::string& domain, const std::string& op) { return domain.empty() ? op : domain + "." + op; }

// hodu.FusedElementwise nodes (an optimized graph's fused loops) replaced by their body's ops, so
// each op gets its own rule: body inputs and outputs become the node's, the rest is renamed
// "<node>/<name>" (constants become initializers of the graph).
void inline_fused_elementwise(Graph& g) {
  if (std::none_of(g.nodes.begin(), g.nodes.end(), [](const Node& n) {
        return n.domain == "hodu" && n.op_type == "FusedElementwise";
      }))
    return;
  std::vector<Node> nodes;
  for (auto& n : g.nodes) {
    const Graph* body = n.domain == "hodu" && n.op_type == "FusedElementwise" ? n.get_graph("body") : nullptr;
    if (!body || body->inputs.size() != n.inputs.size() || body->outputs.size() != n.outputs.size()) {
      nodes.push_back(std::move(n));
      continue;
    }
    std::map<std::string, std::string> rename;
    for (size_t i = 0; i < n.inputs.size(); ++i) rename[body->inputs[i].name] = n.inputs[i];
    for (size_t i = 0; i < n.outputs.size(); ++i) rename[body->outputs[i].name] = n.outputs[i];
    auto name_of = [&](const std::string& v) {
      if (v.empty()) return v;
      auto it = rename.find(v);
      if (it != rename.end()) return it->second;
      return rename[v] = n.name + "/" + v;
    };
    for (const auto& [name, t] : body->initializers) g.set_initializer(name_of(name), t);
    for (const Node& b : body->nodes) {
      Node c = b;
      c.name = n.name + "/" + b.name;
      for (auto& v : c.inputs) v = name_of(v);
      for (auto& v : c.outputs) v = name_of(v);
      nodes.push_back(std::move(c));
    }
  }
  g.nodes = std::move(nodes);
}

}  // namespace

std::vector<std::string> differentiable_ops() {
  std::vector<std::string> out;
  for (const auto& [k, rule] : autodiff::rule_table()) out.push_back(rule_key(k.first, k.second));
  return out;
}

Graph build_gradient_graph(const Graph& forward, const GradientRequest& request) {
  Graph g = forward;
  inline_fused_elementwise(g);
  try {
    infer_types(g);
  } catch (const Error& e) {
    throw e.with_context("autodiff: the forward graph's types: ");
  }
  auto value_exists = [&](const std::string& v) { return g.input(v) || g.initializer(v) || g.producer_of(v) >= 0; };
  auto float_type = [&](const std::string& v, const char* what) {
    auto t = g.type_of(v);
    if (t && t->is_tensor() && t->dtype != DType::Undefined && !is_float(t->dtype))
      fail(ErrorCode::InvalidArgument, "autodiff: {} '{}' has dtype {}; gradients need a float tensor", what, v,
           dtype_name(t->dtype));
  };
  if (request.loss.empty()) fail(ErrorCode::InvalidArgument, "autodiff: no loss value named");
  if (!value_exists(request.loss))
    fail(ErrorCode::InvalidArgument, "autodiff: the loss '{}' is not a value of graph '{}'", request.loss, g.name);
  float_type(request.loss, "the loss");
  if (request.wrt.empty()) fail(ErrorCode::InvalidArgument, "autodiff: no value to differentiate with respect to");
  std::set<std::string> wrt_seen;
  for (const auto& w : request.wrt) {
    if (!g.input(w) && !g.initializer(w))
      fail(ErrorCode::InvalidArgument, "autodiff: wrt '{}' is neither an input nor an initializer of graph '{}'", w,
           g.name);
    if (!wrt_seen.insert(w).second) fail(ErrorCode::InvalidArgument, "autodiff: wrt names '{}' twice", w);
    float_type(w, "wrt");
    if (value_exists("grad." + w) || g.output("grad." + w))
      fail(ErrorCode::InvalidArgument, "autodiff: the graph already has a value 'grad.{}'", w);
  }

  // Float values that depend on a wrt value.
  std::set<std::string> depends(request.wrt.begin(), request.wrt.end());
  for (const auto& n : g.nodes) {
    bool d = false;
    for (const auto& in : n.inputs) d = d || (!in.empty() && depends.count(in));
    if (!d) continue;
    for (const auto& o : n.outputs) {
      if (o.empty()) continue;
      auto t = g.type_of(o);
      if (!t || !t->is_tensor() || t->dtype == DType::Undefined || is_float(t->dtype)) depends.insert(o);
    }
  }

  const size_t n_forward = g.nodes.size();
  autodiff::Differentiator d(g, depends);
  const std::string seed_name = "grad." + request.loss;
  if (depends.count(request.loss)) {
    auto lt = g.type_of(request.loss);
    if (request.seed_input) {
      if (value_exists(seed_name)) fail(ErrorCode::InvalidArgument, "autodiff: the graph already has a value '{}'", seed_name);
      g.inputs.push_back(Value{seed_name, lt ? *lt : ValueType{}, "dL/d" + request.loss});
      d.used_.insert(seed_name);
      d.contributions_[request.loss].push_back(seed_name);
    } else {
      Node seed_node;
      seed_node.name = "autodiff/seed";
      autodiff::RuleContext ctx(d, seed_node);
      std::string one;
      if (lt && lt->is_tensor() && lt->shape.is_static()) {
        auto dims = *lt->shape.to_static();
        std::string name = d.fresh("seed");
        Tensor t = Tensor::from_vector(DType::F64, dims, std::vector<double>(static_cast<size_t>(shape_numel(dims)), 1.0));
        g.set_initializer(name, lt->dtype == DType::F64 ? t : t.cast(lt->dtype));
        one = name;
      } else {
        one = ctx.emit("Expand", {ctx.scalar_like(1, request.loss), ctx.shape_of(request.loss)});
      }
      d.contributions_[request.loss].push_back(one);
    }
    if (lt) d.grad_types_[seed_name] = *lt;
  } else if (request.seed_input) {
    auto lt = g.type_of(request.loss);
    g.inputs.push_back(Value{seed_name, lt ? *lt : ValueType{}, "dL/d" + request.loss});
  }

  const auto& rules = autodiff::rule_table();
  for (size_t k = n_forward; k-- > 0;) {
    const Node n = g.nodes[k];  // a copy: rules append to g.nodes
    bool has_grad = false;
    for (const auto& o : n.outputs) has_grad = has_grad || (!o.empty() && d.contributions_.count(o));
    if (!has_grad) continue;
    bool wanted = false;
    for (const auto& in : n.inputs) wanted = wanted || (!in.empty() && depends.count(in));
    if (!wanted) continue;
    std::string domain = canonical_domain(n.domain);
    auto it = rules.find({domain, n.op_type});
    if (it == rules.end())
      fail(ErrorCode::Unsupported, "autodiff: cannot differentiate through {}: no gradient rule for op '{}'{}",
           n.describe(), n.op_type, domain.empty() ? "" : " of domain '" + domain + "'");
    autodiff::RuleContext ctx(d, n, k);
    it->second(ctx);
  }

  for (const auto& w : request.wrt) {
    Node wn;
    wn.name = "autodiff/" + w;
    autodiff::RuleContext ctx(d, wn);
    std::string grad = d.gradient(w);
    if (grad.empty()) grad = ctx.zeros_like(w);
    Node id;
    id.op_type = "Identity";
    id.name = d.fresh(w + "/output");
    id.inputs = {grad};
    id.outputs = {"grad." + w};
    g.nodes.push_back(std::move(id));
    auto t = g.type_of(w);
    g.outputs.push_back(Value{"grad." + w, t ? *t : ValueType{}, "dL/d" + w});
  }
  try {
    infer_types(g);
  } catch (const Error& e) {
    throw Error(ErrorCode::Internal, std::string("autodiff built an inconsistent graph: ") + e.what());
  }
  return g;
}

}  // namespace hodu::passes
