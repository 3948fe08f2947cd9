// Float work between a DequantizeLinear and the next QuantizeLinear → byte tables on the integers.
//
// Quantized graphs keep float ops between their integer ones: ORT's QOperator format writes
// QLinearConv → DequantizeLinear → Relu → QuantizeLinear, a MaxPool or a Concat of such branches
// before the Q. The Q's result depends only on the 8-bit values the DQs read, so:
//   - each DQ leaf, the elementwise ops on its way up and the Q map 256 byte values to 256 byte
//     values: a table (hodu's LookupTable), computed once by the interpreter's own kernels, so
//     each entry is exactly what the float graph gives for that byte (none when it is the identity);
//   - Concat only moves elements: Q(Concat(f(a), g(b))) = Concat(Q(f(a)), Q(g(b)));
//   - MaxPool commutes with what follows it up to the Q when that is non-decreasing on the values
//     the pool can see, which are finitely many and checked one by one.
// The graph then runs on bytes: LookupTable per leaf, MaxPool and Concat on the integers; the
// float values, their DQs (where nothing else reads them) and the Q go.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "engines/interp/kernel.h"
#include "ir/schema.h"
#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::passes {
namespace {

bool is_8bit(DType t) { return t == DType::U8 || t == DType::I8; }

// Elementwise ops whose only non-constant input is the value on the way up (scalar constants
// otherwise), so that they act on each element alone and keep its shape.
bool unary_elementwise(const std::string& op) {
  static const std::set<std::string> ops = {
      "Relu",  "LeakyRelu", "Sigmoid", "Tanh",  "HardSigmoid", "HardSwish", "Elu",     "Selu",     "Celu",
      "Softplus", "Softsign", "Abs",   "Neg",   "Exp",         "Log",       "Sqrt",    "Reciprocal", "Floor",
      "Ceil",  "Round",     "Identity", "Erf",  "Gelu",        "Mish",      "ThresholdedRelu", "Sign", "Shrink"};
  return ops.count(op) > 0;
}
bool binary_elementwise(const std::string& op) {
  static const std::set<std::string> ops = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "PRelu", "Clip"};
  return ops.count(op) > 0;
}

// A per-tensor DequantizeLinear / QuantizeLinear: constant scale, constant (or no) zero point.
bool per_tensor_quantization(const Graph& g, const Node& n) {
  if (!n.domain.empty() || n.get_int("block_size", 0) != 0 || n.inputs.size() < 2) return false;
  const Tensor* s = constant_of(g, n.inputs[1]);
  if (!s || s->numel() != 1) return false;
  if (n.has_input(2)) {
    const Tensor* z = constant_of(g, n.inputs[2]);
    if (!z || z->numel() != 1) return false;
  }
  return true;
}

DType dtype_of(const Graph& g, const std::string& v) {
  if (const Tensor* t = constant_of(g, v)) return t->dtype();
  if (auto t = g.type_of(v); t && t->is_tensor()) return t->dtype;
  return DType::Undefined;
}

// One node of the float tree under a QuantizeLinear.
struct Part {
  enum Kind { Leaf, Elementwise, Pool, Concat } kind = Leaf;
  const Node* node = nullptr;  // the DQ of a leaf, else the float node
  size_t chain_input = 0;      // Elementwise: the input on the way down
  std::vector<int> below;      // parts whose values this one reads
  int above = -1;              // the part reading this one (-1: the Q)
  Tensor values;               // every value this part's output can take (1-D)
};

class Rewriter {
 public:
  explicit Rewriter(Graph& g) : g_(g), uses_(use_counts(g)) {}

  // The nodes replacing the tree under Q (whose output they end in), or nothing.
  std::optional<std::vector<Node>> rewrite(const Node& q, std::set<size_t>& removed) {
    parts_.clear();
    q_ = &q;
    qdt_ = q.has_input(2) ? dtype_of(g_, q.inputs[2]) : DType::U8;
    if (!is_8bit(qdt_)) return std::nullopt;
    if (int64_t odt = q.get_int("output_dtype", 0); odt != 0 && odt != dtype_to_onnx(qdt_)) return std::nullopt;
    const int root = collect(q.inputs[0], -1);
    if (root < 0) return std::nullopt;
    try {
      for (size_t i = parts_.size(); i-- > 0;) evaluate_values(static_cast<int>(i));
      for (size_t i = 0; i < parts_.size(); ++i)
        if (parts_[i].kind == Part::Pool && !monotone_above(static_cast<int>(i))) return std::nullopt;
    } catch (const Error&) {
      return std::nullopt;  // an op the interpreter refuses on these values: leave the graph as it is
    }
    std::vector<Node> out;
    std::string y = build(root, out);
    if (out.empty() || out.back().outputs[0] != y) {
      // The Q gives back a DQ's own integers: an Identity keeps the Q's output name.
      Node id;
      id.name = q.name + "/same_integers";
      id.op_type = "Identity";
      id.inputs = {y};
      id.outputs = {q.outputs[0]};
      out.push_back(std::move(id));
    } else {
      out.back().outputs[0] = q.outputs[0];
    }
    for (const Part& p : parts_)
      if (p.kind != Part::Leaf) removed.insert(index_of(*p.node));
    removed.insert(index_of(q));
    return out;
  }

 private:
  // The rank of a value's type, -1 when unknown.
  int64_t rank_of(const std::string& v) const {
    auto t = g_.type_of(v);
    return t && t->is_tensor() && t->shape.rank_known() ? t->shape.rank() : -1;
  }

  size_t index_of(const Node& n) const { return static_cast<size_t>(&n - g_.nodes.data()); }

  // The part computing float value v (read by part `above`), or -1 when v is not a tree of the
  // ops above whose inner values only the tree reads.
  int collect(const std::string& v, int above) {
    if (parts_.size() >= 64) return -1;
    const int p = g_.producer_of(v);
    if (p < 0) return -1;
    const Node& n = g_.nodes[static_cast<size_t>(p)];
    if (!n.domain.empty()) return -1;
    const int me = static_cast<int>(parts_.size());
    Part part;
    part.node = &n;
    part.above = above;
    if (n.op_type == "DequantizeLinear") {
      if (!per_tensor_quantization(g_, n) || !is_8bit(dtype_of(g_, n.inputs[0]))) return -1;
      parts_.push_back(std::move(part));
      return me;
    }
    // An inner float value: the tree alone reads it.
    if (is_graph_output(g_, v) || uses_[v] != 1 || n.outputs[0] != v) return -1;
    for (size_t k = 1; k < n.outputs.size(); ++k)
      if (!n.outputs[k].empty()) return -1;  // MaxPool's Indices
    std::vector<std::string> down;
    if (n.op_type == "Concat") {
      part.kind = Part::Concat;
      down = n.inputs;
    } else if (n.op_type == "MaxPool") {
      if (rank_of(n.inputs[0]) != 4) return -1;  // the engine's integer max pool: 2-D windows
      part.kind = Part::Pool;
      down = {n.inputs[0]};
    } else if (unary_elementwise(n.op_type) || binary_elementwise(n.op_type)) {
      part.kind = Part::Elementwise;
      int chain = -1;
      const int64_t rank = std::max<int64_t>(rank_of(v), 0);
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        if (n.inputs[i].empty()) continue;
        const Tensor* c = constant_of(g_, n.inputs[i]);
        if (!c) {
          if (chain >= 0) return -1;
          chain = static_cast<int>(i);
        } else if (c->numel() != 1 || c->rank() > rank) {
          return -1;
        }
      }
      if (chain < 0 || (unary_elementwise(n.op_type) && n.inputs.size() != 1)) return -1;
      part.chain_input = static_cast<size_t>(chain);
      down = {n.inputs[part.chain_input]};
    } else {
      return -1;
    }
    parts_.push_back(std::move(part));
    for (const std::string& d : down) {
      const int c = collect(d, me);
      if (c < 0) return -1;
      parts_[static_cast<size_t>(me)].below.push_back(c);
    }
    return me;
  }

  // Node n run by the interpreter on `in` as its input i (its other inputs: their constants).
  Tensor apply(const Node& n, size_t i, const Tensor& in) const {
    interp::KernelFn fn = interp::OpTable::instance().find(n.domain, n.op_type);
    if (!fn) throw Error(ErrorCode::Unsupported, "no kernel");
    std::vector<RuntimeValue> held(n.inputs.size());
    interp::KernelContext ctx{n, {}, {}, 1, 0, {}};
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      if (k == i) held[k] = RuntimeValue(in);
      else if (!n.inputs[k].empty()) held[k] = RuntimeValue(*constant_of(g_, n.inputs[k]));
      ctx.inputs.push_back(n.inputs[k].empty() ? nullptr : &held[k]);
    }
    ctx.outputs.resize(n.outputs.size());
    fn(ctx);
    if (!ctx.outputs[0].is_tensor()) throw Error(ErrorCode::Unsupported, "not a tensor");
    return ctx.outputs[0].tensor;
  }

  // Every byte of dtype dt, by its bit pattern 0..255.
  static Tensor all_bytes(DType dt) {
    std::vector<uint8_t> v(256);
    std::iota(v.begin(), v.end(), 0);
    return Tensor::from_bytes(dt, {256}, v.data(), v.size());
  }

  void evaluate_values(int i) {
    Part& p = parts_[static_cast<size_t>(i)];
    switch (p.kind) {
      case Part::Leaf: p.values = apply(*p.node, 0, all_bytes(dtype_of(g_, p.node->inputs[0]))); break;
      case Part::Elementwise: p.values = apply(*p.node, p.chain_input, part(p.below[0]).values); break;
      case Part::Pool: p.values = part(p.below[0]).values; break;
      case Part::Concat: {
        int64_t n = 0;
        for (int b : p.below) n += part(b).values.numel();
        p.values = Tensor::empty(part(p.below[0]).values.dtype(), {n});
        for (int64_t at = 0; int b : p.below) {
          const Tensor& v = part(b).values;
          for (int64_t k = 0; k < v.numel(); ++k) p.values.set_double(at++, v.get_double(k));
        }
        break;
      }
    }
  }

  const Part& part(int i) const { return parts_[static_cast<size_t>(i)]; }

  // `values` (the output of part i) through the elementwise parts above i and the Q.
  Tensor to_integers(int i, Tensor values) const {
    for (int a = part(i).above; a >= 0; a = part(a).above)
      if (part(a).kind == Part::Elementwise) values = apply(*part(a).node, part(a).chain_input, values);
    return apply(*q_, 0, values);
  }

  // Whether what follows pool part i up to the Q never decreases over the values it can see.
  bool monotone_above(int i) const {
    const Tensor& v = part(i).values;
    auto x = v.to_doubles();
    for (double d : x)
      if (std::isnan(d)) return false;
    auto y = to_integers(i, v).to_doubles();
    std::vector<size_t> order(x.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
    for (size_t k = 1; k < order.size(); ++k)
      if (y[order[k]] < y[order[k - 1]]) return false;
    return true;
  }

  // The integer value standing for part i's output quantized, its nodes appended to out.
  std::string build(int i, std::vector<Node>& out) {
    const Part& p = part(i);
    if (p.kind == Part::Elementwise) return build(p.below[0], out);
    if (p.kind == Part::Leaf) {
      const std::string& x = p.node->inputs[0];
      Tensor table = to_integers(i, p.values);
      const DType xdt = dtype_of(g_, x);
      bool identity = xdt == qdt_;
      auto t = table.to_int64s();
      for (int b = 0; identity && b < 256; ++b)
        identity = t[static_cast<size_t>(b)] == (qdt_ == DType::U8 ? b : static_cast<int8_t>(b));
      if (identity) return x;
      std::string name = g_.unique_name(q_->name + "/table");
      g_.set_initializer(name, table);
      Node n;
      n.name = g_.unique_name(p.node->name + "/as_lookup");
      n.op_type = "LookupTable";
      n.domain = "hodu";
      n.inputs = {x, name};
      n.outputs = {g_.unique_name(x + "/looked_up")};
      out.push_back(n);
      return n.outputs[0];
    }
    Node n = *p.node;
    n.name = p.node->name + "/on_integers";
    n.inputs.clear();
    for (int b : p.below) n.inputs.push_back(build(b, out));
    n.outputs = {g_.unique_name(p.node->outputs[0] + "/integers")};
    out.push_back(n);
    return n.outputs[0];
  }

  Graph& g_;
  std::map<std::string, int> uses_;
  std::vector<Part> parts_;
  const Node* q_ = nullptr;
  DType qdt_ = DType::U8;
};

bool same_constant(const Graph& g, const Node& a, const Node& b, size_t i) {
  if (a.has_input(i) != b.has_input(i)) return false;
  if (!a.has_input(i) || a.inputs[i] == b.inputs[i]) return true;
  const Tensor *x = constant_of(g, a.inputs[i]), *y = constant_of(g, b.inputs[i]);
  return x && y && tensors_bitwise_equal(*x, *y);
}

// QuantizeLinears of one value with equal constants (ORT's quantizer writes one per reader: a
// fire module's two expand convs) as one, so that the value has one reader.
bool merge_equal_quantizations(Graph& g) {
  std::set<size_t> removed;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& a = g.nodes[i];
    if (removed.count(i) || a.op_type != "QuantizeLinear" || !a.domain.empty() || a.inputs.empty()) continue;
    for (size_t j = i + 1; j < g.nodes.size(); ++j) {
      Node& b = g.nodes[j];
      if (removed.count(j) || b.op_type != "QuantizeLinear" || !b.domain.empty() || b.inputs.size() != a.inputs.size() ||
          b.inputs[0] != a.inputs[0] || b.attributes != a.attributes || is_graph_output(g, b.outputs[0]))
        continue;
      if (!same_constant(g, a, b, 1) || !same_constant(g, a, b, 2)) continue;
      replace_uses(g, b.outputs[0], a.outputs[0]);
      removed.insert(j);
    }
  }
  erase_nodes(g, removed);
  return !removed.empty();
}

}  // namespace

bool fuse_quantized_lookups(Graph& g) {
  // A float model (nearly every one) pays nothing: no type inference without a QuantizeLinear.
  if (std::none_of(g.nodes.begin(), g.nodes.end(),
                   [](const Node& n) { return n.op_type == "QuantizeLinear" && n.domain.empty(); }))
    return false;
  const bool merged = merge_equal_quantizations(g);
  infer_types(g);  // the shapes and integer types the trees check
  Rewriter r(g);
  std::set<size_t> removed;
  std::map<size_t, std::vector<Node>> replace;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& q = g.nodes[k];
    if (q.op_type != "QuantizeLinear" || !per_tensor_quantization(g, q)) continue;
    std::set<size_t> mine;
    auto nodes = r.rewrite(q, mine);
    if (!nodes) continue;
    removed.insert(mine.begin(), mine.end());
    replace[k] = std::move(*nodes);
  }
  if (replace.empty()) return merged;
  // The integer nodes take the Q's place (after everything they read).
  splice_nodes(g, removed, replace);
  eliminate_dead_code(g);
  infer_types(g);
  return true;
}

}  // namespace hodu::passes
