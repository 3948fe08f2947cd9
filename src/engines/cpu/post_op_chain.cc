#include "engines/cpu/post_op_chain.h"

#include <limits>
#include <map>
#include <optional>

#include "passes/graph_utils.h"

namespace hodu::cpu {
namespace {

using alg = dnnl::algorithm;
constexpr size_t kMaxPostOps = 16;  // oneDNN 2.6 takes up to 32 post-ops in all

// value op c (or c op value when `value_first` is false) as one eltwise post-op: alpha * value + beta,
// or a clip.
std::optional<EltwisePostOp> linear(const std::string& op, bool value_first, float c) {
  if (op == "Add") return EltwisePostOp{alg::eltwise_linear, 1.0f, c};
  if (op == "Mul") return EltwisePostOp{alg::eltwise_linear, c, 0.0f};
  if (op == "Sub") return value_first ? EltwisePostOp{alg::eltwise_linear, 1.0f, -c} : EltwisePostOp{alg::eltwise_linear, -1.0f, c};
  if (op == "Div" && value_first && c != 0.0f) return EltwisePostOp{alg::eltwise_linear, 1.0f / c, 0.0f};
  // Max/Min with a constant as a one-sided clip (openWakeWord's embedding: conv, LeakyRelu,
  // Max(x, -0.4); the unfused Max kept the conv's output plain below AVX-512, with reorders and a
  // reference pooling after it).
  constexpr float inf = std::numeric_limits<float>::infinity();
  if (op == "Max") return EltwisePostOp{alg::eltwise_clip_v2, c, inf};
  if (op == "Min") return EltwisePostOp{alg::eltwise_clip_v2, -inf, c};
  return std::nullopt;
}

// A one-input activation of the standard domain as post-ops (empty: none).
std::vector<EltwisePostOp> unary(const Graph& g, const Node& n) {
  const std::string& op = n.op_type;
  if (!n.domain.empty() || (n.inputs.size() != 1 && op != "Clip")) return {};
  if (op == "Relu") return {{alg::eltwise_relu, 0, 0}};
  if (op == "LeakyRelu") return {{alg::eltwise_relu, n.get_float("alpha", 0.01f), 0}};
  if (op == "Sigmoid") return {{alg::eltwise_logistic, 0, 0}};
  if (op == "Tanh") return {{alg::eltwise_tanh, 0, 0}};
  if (op == "HardSwish") return {{alg::eltwise_hardswish, 0, 0}};
  if (op == "HardSigmoid")
    return {{alg::eltwise_linear, n.get_float("alpha", 0.2f), n.get_float("beta", 0.5f)}, {alg::eltwise_clip_v2, 0, 1}};
  if (op == "Abs") return {{alg::eltwise_abs, 0, 0}};
  if (op == "Neg") return {{alg::eltwise_linear, -1, 0}};
  if (op == "Elu") return {{alg::eltwise_elu, n.get_float("alpha", 1.0f), 0}};
  if (op == "Exp") return {{alg::eltwise_exp, 0, 0}};
  if (op == "Sqrt") return {{alg::eltwise_sqrt, 0, 0}};
  if (op == "Clip") {
    auto a = passes::as_activation(g, n);
    if (!a || a->params.size() != 2) return {};
    return {{alg::eltwise_clip_v2, a->params[0], a->params[1]}};
  }
  return {};
}

// The value of a one-element f32 constant of rank at most `rank` (it broadcasts nothing).
std::optional<float> scalar_of(const Graph& g, const std::string& name, int64_t rank) {
  const Tensor* t = passes::constant_of(g, name);
  if (!t || t->dtype() != DType::F32 || t->numel() != 1 || t->rank() > rank) return std::nullopt;
  return t->contiguous().data<float>()[0];
}

// Node `n` reading `v` (of rank `rank`) as post-ops (empty: not expressible).
std::vector<EltwisePostOp> node_ops(const Graph& g, const Node& n, const std::string& v, int64_t rank) {
  if (n.outputs.size() != 1) return {};
  if (n.domain.empty() && n.inputs.size() == 2 && (n.inputs[0] == v) != (n.inputs[1] == v)) {
    const bool first = n.inputs[0] == v;
    auto c = scalar_of(g, first ? n.inputs[1] : n.inputs[0], rank);
    if (!c) return {};
    auto op = linear(n.op_type, first, *c);
    if (!op) return {};
    return {*op};
  }
  if (n.domain == "hodu" && n.op_type == "FusedElementwise") {
    const Graph* body = n.get_graph("body");
    if (!body || body->inputs.size() != n.inputs.size() || body->outputs.size() != 1) return {};
    std::string cur;  // the body's name of the value flowing through
    std::map<std::string, float> scalars;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.inputs[i] == v) {
        if (!cur.empty()) return {};  // v read twice: not a chain
        cur = body->inputs[i].name;
      } else if (auto c = scalar_of(g, n.inputs[i], rank)) {
        scalars[body->inputs[i].name] = *c;
      } else {
        return {};
      }
    }
    for (const auto& [name, t] : body->initializers)
      if (!scalars.count(name) && name != cur) {
        if (t.dtype() != DType::F32 || t.numel() != 1 || t.rank() > rank) return {};
        scalars[name] = t.contiguous().data<float>()[0];
      }
    if (cur.empty()) return {};
    std::vector<EltwisePostOp> ops;
    for (const auto& bn : body->nodes) {
      if (bn.outputs.size() != 1) return {};
      std::vector<EltwisePostOp> step;
      if (bn.inputs.size() == 1 && bn.inputs[0] == cur) {
        step = unary(*body, bn);
      } else if (bn.domain.empty() && bn.inputs.size() == 2 && (bn.inputs[0] == cur) != (bn.inputs[1] == cur)) {
        const bool first = bn.inputs[0] == cur;
        auto c = scalars.find(first ? bn.inputs[1] : bn.inputs[0]);
        if (c == scalars.end()) return {};
        if (auto op = linear(bn.op_type, first, c->second)) step = {*op};
      }
      if (step.empty()) return {};
      ops.insert(ops.end(), step.begin(), step.end());
      cur = bn.outputs[0];
    }
    if (body->outputs[0].name != cur) return {};
    return ops;
  }
  if (n.inputs.empty() || n.inputs[0] != v) return {};
  return unary(g, n);
}

}  // namespace

std::vector<EltwisePostOp> eltwise_ops_of(const dnnl::post_ops& po) {
  std::vector<EltwisePostOp> ops;
  for (int i = 0; i < po.len(); ++i) {
    if (po.kind(i) != dnnl::primitive::kind::eltwise) continue;
    EltwisePostOp op{alg::undef};
    float scale;
    po.get_params_eltwise(i, scale, op.alg, op.alpha, op.beta);
    ops.push_back(op);
  }
  return ops;
}

PostOpChain post_op_chain(const PlanBuilder& b, const std::string& y, const std::vector<EltwisePostOp>& before) {
  PostOpChain chain;
  const Graph& g = b.graph();
  auto t = b.static_type(y);
  if (!t || t->first != DType::F32) return chain;
  const int64_t rank = static_cast<int64_t>(t->second.size());
  // oneDNN 2.6's post-op injectors keep one alpha/beta per eltwise algorithm: a second
  // eltwise_linear (or clip, relu) with other parameters computed with the first one's (conv +
  // x*0.75 + (-0.4) was off by 0.8). Consecutive linears are composed into one; a linear that
  // would repeat with other parameters runs as binary mul/add post-ops; any other algorithm
  // repeated with other parameters ends the chain.
  auto clash = [&](const std::vector<EltwisePostOp>& ops, size_t i) {
    std::vector<EltwisePostOp> all = before;
    all.insert(all.end(), ops.begin(), ops.begin() + static_cast<std::ptrdiff_t>(i));
    for (const auto& o : all)
      if (!o.binary && o.alg == ops[i].alg && (o.alpha != ops[i].alpha || o.beta != ops[i].beta)) return true;
    return false;
  };
  std::string v = y;
  for (;;) {
    const std::vector<size_t>& r = b.readers(v);
    if (r.size() != 1 || g.output(v)) break;
    const Node& n = g.nodes[r[0]];
    auto ot = b.static_type(n.outputs.empty() ? std::string() : n.outputs[0]);
    if (!ot || ot->first != DType::F32 || ot->second != t->second || g.output(n.outputs[0])) break;
    auto add = node_ops(g, n, v, rank);
    if (add.empty()) break;
    std::vector<EltwisePostOp> ops = chain.ops;
    bool ok = true;
    for (const auto& op : add) {
      if (op.alg == alg::eltwise_linear && !ops.empty() && ops.back().alg == alg::eltwise_linear) {
        EltwisePostOp& last = ops.back();  // a2 (a1 x + b1) + b2
        last.beta = op.alpha * last.beta + op.beta;
        last.alpha *= op.alpha;
      } else {
        ops.push_back(op);
      }
      EltwisePostOp& last = ops.back();
      if (!last.binary && clash(ops, ops.size() - 1)) {
        if (last.alg == alg::eltwise_linear) last.binary = true;
        else ok = false;
      }
    }
    size_t count = 0;
    for (const auto& op : ops) count += op.binary ? 2 : 1;
    if (!ok || count > kMaxPostOps) break;
    chain.nodes.push_back(&n);
    chain.ops = std::move(ops);
    v = n.outputs[0];
  }
  if (!chain.nodes.empty()) chain.output = v;
  return chain;
}

void append_post_ops(dnnl::post_ops& po, const std::vector<EltwisePostOp>& ops, int rank,
                     std::vector<std::pair<int, float>>& operands) {
  const dnnl::memory::desc one(dnnl::memory::dims(static_cast<size_t>(rank), 1), dnnl::memory::data_type::f32,
                               dnnl::memory::dims(static_cast<size_t>(rank), 1));
  for (const auto& op : ops) {
    if (!op.binary) {
      po.append_eltwise(1.0f, op.alg, op.alpha, op.beta);
      continue;
    }
    po.append_binary(alg::binary_mul, one);
    operands.emplace_back(DNNL_ARG_ATTR_MULTIPLE_POST_OP(po.len() - 1) | DNNL_ARG_SRC_1, op.alpha);
    po.append_binary(alg::binary_add, one);
    operands.emplace_back(DNNL_ARG_ATTR_MULTIPLE_POST_OP(po.len() - 1) | DNNL_ARG_SRC_1, op.beta);
  }
}

}  // namespace hodu::cpu
