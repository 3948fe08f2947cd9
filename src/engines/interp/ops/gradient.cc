// Gradient (ai.onnx.preview.training): reverse-mode differentiation of the part
// of the enclosing graph that computes `y` from `xs` (and the constants `zs`).
// The kernel finds the nodes between xs/zs and y, evaluates them forward at the
// Gradient node's inputs (ctx.run_subgraph), then walks them backward from
// dy/dy = 1 with one rule per op, summing the contributions to each value and
// reducing broadcast dimensions back to the input's shape. Math is in double;
// each gradient is rounded to its x's dtype at the end. An op on the path from
// xs to y without a rule is Unsupported, naming the op.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "engines/interp/ops/op_utils.h"

namespace hodu::interp {
namespace {

// A dense row-major array of doubles: the working type of the backward pass.
struct DArray {
  std::vector<int64_t> shape;
  std::vector<double> v;

  int64_t numel() const { return static_cast<int64_t>(v.size()); }
  static DArray filled(std::vector<int64_t> shape, double x) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return {std::move(shape), std::vector<double>(static_cast<size_t>(n), x)};
  }
  static DArray of(const Tensor& t) { return {t.shape(), t.to_doubles()}; }
};

// out[i] = f(a[bcast], b[bcast]) over the broadcast shape of a and b.
template <typename F>
DArray zip(const KernelContext& ctx, const DArray& a, const DArray& b, F f) {
  std::vector<int64_t> shape = broadcast_shapes(ctx, a.shape, b.shape);
  auto oa = broadcast_offsets(a.shape, shape), ob = broadcast_offsets(b.shape, shape);
  DArray out{shape, std::vector<double>(oa.size())};
  for (size_t i = 0; i < oa.size(); ++i) out.v[i] = f(a.v[static_cast<size_t>(oa[i])], b.v[static_cast<size_t>(ob[i])]);
  return out;
}

template <typename F>
DArray map(const DArray& a, F f) {
  DArray out = a;
  for (double& x : out.v) x = f(x);
  return out;
}

// Sums a gradient of a broadcast result back to the shape of the operand that was broadcast.
DArray unbroadcast(const DArray& g, const std::vector<int64_t>& shape) {
  if (g.shape == shape) return g;
  auto off = broadcast_offsets(shape, g.shape);
  DArray out = DArray::filled(shape, 0.0);
  for (size_t i = 0; i < off.size(); ++i) out.v[static_cast<size_t>(off[i])] += g.v[i];
  return out;
}

// Broadcasts `a` to `shape` (which it must broadcast to).
DArray expand(const DArray& a, const std::vector<int64_t>& shape) {
  auto off = broadcast_offsets(a.shape, shape);
  DArray out{shape, std::vector<double>(off.size())};
  for (size_t i = 0; i < off.size(); ++i) out.v[i] = a.v[static_cast<size_t>(off[i])];
  return out;
}

DArray transpose(const DArray& a, const std::vector<int64_t>& perm) {
  const size_t r = a.shape.size();
  std::vector<int64_t> in_strides(r, 1), out_shape(r);
  for (size_t d = r; d-- > 1;) in_strides[d - 1] = in_strides[d] * a.shape[d];
  for (size_t d = 0; d < r; ++d) out_shape[d] = a.shape[static_cast<size_t>(perm[d])];
  DArray out{out_shape, std::vector<double>(a.v.size())};
  std::vector<int64_t> idx(r, 0);
  for (size_t i = 0; i < out.v.size(); ++i) {
    int64_t src = 0;
    for (size_t d = 0; d < r; ++d) src += idx[d] * in_strides[static_cast<size_t>(perm[d])];
    out.v[i] = a.v[static_cast<size_t>(src)];
    for (size_t d = r; d-- > 0;) {
      if (++idx[d] < out_shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

// Swaps the last two axes (rank >= 2).
DArray swap_last2(const DArray& a) {
  std::vector<int64_t> perm(a.shape.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return transpose(a, perm);
}

// Batched matrix product with numpy broadcasting of the batch dims (both rank >= 2).
DArray matmul(const KernelContext& ctx, const DArray& a, const DArray& b) {
  const size_t ra = a.shape.size(), rb = b.shape.size();
  const int64_t m = a.shape[ra - 2], k = a.shape[ra - 1], n = b.shape[rb - 1];
  if (b.shape[rb - 2] != k) ctx.fail(ErrorCode::Internal, "gradient MatMul: inner dimensions {} and {}", k, b.shape[rb - 2]);
  std::vector<int64_t> ba(a.shape.begin(), a.shape.end() - 2), bb(b.shape.begin(), b.shape.end() - 2);
  std::vector<int64_t> batch = broadcast_shapes(ctx, ba, bb);
  auto oa = broadcast_offsets(ba, batch), ob = broadcast_offsets(bb, batch);
  std::vector<int64_t> shape = batch;
  shape.push_back(m);
  shape.push_back(n);
  DArray out = DArray::filled(shape, 0.0);
  for (size_t p = 0; p < oa.size(); ++p) {
    const double* A = a.v.data() + oa[p] * m * k;
    const double* B = b.v.data() + ob[p] * k * n;
    double* C = out.v.data() + static_cast<int64_t>(p) * m * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t q = 0; q < k; ++q)
        for (int64_t j = 0; j < n; ++j) C[i * n + j] += A[i * k + q] * B[q * n + j];
  }
  return out;
}

DArray reshaped(DArray a, std::vector<int64_t> shape) {
  a.shape = std::move(shape);
  return a;
}

// ---- the differentiated subgraph ---------------------------------------------------

struct Tape {
  std::vector<const Node*> nodes;                // forward order
  std::map<std::string, Tensor> values;          // forward value of every input/output of the nodes
  std::set<std::string> needs_grad;              // values that depend on some x
};

// Nodes computing y from xs/zs (graph order), stopping at xs/zs and at values with no producer.
std::vector<const Node*> collect_nodes(const KernelContext& ctx, const Graph& g, const std::string& y,
                                       const std::set<std::string>& leaves) {
  std::map<std::string, int> producer;
  for (size_t k = 0; k < g.nodes.size(); ++k)
    for (const auto& o : g.nodes[k].outputs)
      if (!o.empty()) producer[o] = static_cast<int>(k);
  std::set<int> picked;
  std::vector<std::string> work = {y};
  while (!work.empty()) {
    std::string v = work.back();
    work.pop_back();
    if (leaves.count(v)) continue;
    auto it = producer.find(v);
    if (it == producer.end() || picked.count(it->second)) continue;
    const Node& n = g.nodes[static_cast<size_t>(it->second)];
    if (&n == &ctx.node) ctx.fail(ErrorCode::InvalidModel, "y '{}' depends on this Gradient node itself", y);
    picked.insert(it->second);
    for (const auto& in : n.inputs)
      if (!in.empty()) work.push_back(in);
  }
  std::vector<const Node*> out;
  for (int k : picked) out.push_back(&g.nodes[static_cast<size_t>(k)]);  // std::set: graph order
  return out;
}

Tape forward(KernelContext& ctx, const std::vector<std::string>& xs, const std::vector<std::string>& zs,
             const std::string& y) {
  std::set<std::string> leaves(xs.begin(), xs.end());
  leaves.insert(zs.begin(), zs.end());
  Tape tape;
  tape.nodes = collect_nodes(ctx, *ctx.graph, y, leaves);

  // The forward subgraph: inputs xs + zs, every node output is an output.
  Graph sub;
  sub.name = ctx.node.name + "_forward";
  for (const auto& n : xs) sub.inputs.push_back(Value{n, {}, {}});
  for (const auto& n : zs) sub.inputs.push_back(Value{n, {}, {}});
  // Outputs: every node output, then the outer values the nodes read (constants,
  // graph inputs), whose values the backward rules may need.
  std::vector<std::string> produced;
  std::set<std::string> seen(leaves);
  for (const Node* n : tape.nodes) {
    sub.nodes.push_back(*n);
    for (const auto& o : n->outputs)
      if (!o.empty() && seen.insert(o).second) produced.push_back(o);
  }
  for (const Node* n : tape.nodes)
    for (const auto& in : n->inputs)
      if (!in.empty() && seen.insert(in).second) produced.push_back(in);
  for (const auto& o : produced) sub.outputs.push_back(Value{o, {}, {}});
  std::vector<RuntimeValue> feeds;
  for (size_t i = 0; i < xs.size() + zs.size(); ++i) {
    feeds.push_back(ctx.value(i));
    const std::string& name = i < xs.size() ? xs[i] : zs[i - xs.size()];
    if (!feeds.back().is_tensor()) ctx.fail(ErrorCode::InvalidArgument, "input {} ('{}') must be a tensor", i, name);
    tape.values[name] = feeds.back().tensor;
  }
  std::vector<RuntimeValue> outs = ctx.run_subgraph(sub, feeds);
  for (size_t i = 0; i < produced.size(); ++i)
    if (outs[i].is_tensor()) tape.values[produced[i]] = outs[i].tensor;

  tape.needs_grad.insert(xs.begin(), xs.end());
  for (const Node* n : tape.nodes) {
    bool depends = false;
    for (const auto& in : n->inputs) depends = depends || (!in.empty() && tape.needs_grad.count(in));
    if (depends)
      for (const auto& o : n->outputs)
        if (!o.empty()) tape.needs_grad.insert(o);
  }
  return tape;
}

// ---- backward rules ------------------------------------------------------------------

struct Backward {
  KernelContext& ctx;
  Tape& tape;
  std::map<std::string, DArray> grads;

  DArray val(const Node& n, size_t i) const {
    if (!n.has_input(i)) ctx.fail(ErrorCode::InvalidModel, "{}: input {} is missing", n.describe(), i);
    auto it = tape.values.find(n.inputs[i]);
    if (it == tape.values.end())
      ctx.fail(ErrorCode::InvalidModel, "{}: value '{}' is not available to differentiate", n.describe(), n.inputs[i]);
    return DArray::of(it->second);
  }
  DArray out(const Node& n, size_t i = 0) const {
    auto it = tape.values.find(n.outputs[i]);
    if (it == tape.values.end()) ctx.fail(ErrorCode::Internal, "{}: output {} was not computed", n.describe(), i);
    return DArray::of(it->second);
  }
  bool wants(const Node& n, size_t i) const { return n.has_input(i) && tape.needs_grad.count(n.inputs[i]); }
  void add(const Node& n, size_t i, DArray g) {
    if (!wants(n, i)) return;
    const std::string& name = n.inputs[i];
    const std::vector<int64_t> shape = tape.values.at(name).shape();
    g = unbroadcast(g, shape);
    auto it = grads.find(name);
    if (it == grads.end()) grads.emplace(name, std::move(g));
    else
      for (size_t k = 0; k < g.v.size(); ++k) it->second.v[k] += g.v[k];
  }

  // Reduction axes of ReduceSum/ReduceMean (input 1), normalized; empty = all (unless noop).
  std::vector<int64_t> reduce_axes(const Node& n, int64_t rank, bool& noop) const {
    std::vector<int64_t> axes;
    if (n.has_input(1)) axes = tensor_to_int64_vector(tape.values.at(n.inputs[1]));
    noop = axes.empty() && n.get_int("noop_with_empty_axes", 0) != 0;
    if (axes.empty()) {
      axes.resize(static_cast<size_t>(rank));
      std::iota(axes.begin(), axes.end(), 0);
    }
    for (auto& a : axes) a = normalize_axis(ctx, a, rank);
    return axes;
  }

  // dL/dA and dL/dB of A @ B with numpy's 1-D promotion.
  void matmul_rule(const Node& n, const DArray& g0) {
    DArray a = val(n, 0), b = val(n, 1), g = g0;
    const bool a1 = a.shape.size() == 1, b1 = b.shape.size() == 1;
    std::vector<int64_t> sa = a.shape, sb = b.shape;
    if (a1) a = reshaped(a, {1, a.shape[0]});
    if (b1) b = reshaped(b, {b.shape[0], 1});
    std::vector<int64_t> gs(g.shape);
    if (a1) gs.insert(gs.end() - (b1 ? 0 : 1), 1);
    if (b1) gs.push_back(1);
    g = reshaped(g, gs);
    // Batch dims that were broadcast are summed back by unbroadcast.
    if (wants(n, 0)) add(n, 0, reshaped(unbroadcast(matmul(ctx, g, swap_last2(b)), a.shape), sa));
    if (wants(n, 1)) add(n, 1, reshaped(unbroadcast(matmul(ctx, swap_last2(a), g), b.shape), sb));
  }

  void gemm_rule(const Node& n, const DArray& g) {
    const bool ta = n.get_int("transA", 0) != 0, tb = n.get_int("transB", 0) != 0;
    const double alpha = n.get_float("alpha", 1.f), beta = n.get_float("beta", 1.f);
    DArray a = val(n, 0), b = val(n, 1);
    DArray A = ta ? swap_last2(a) : a, B = tb ? swap_last2(b) : b;
    auto scaled = [](DArray d, double s) { return map(d, [s](double x) { return x * s; }); };
    if (wants(n, 0)) {
      DArray gA = scaled(matmul(ctx, g, swap_last2(B)), alpha);  // dL/d(A') = g B'^T
      add(n, 0, ta ? swap_last2(gA) : gA);
    }
    if (wants(n, 1)) {
      DArray gB = scaled(matmul(ctx, swap_last2(A), g), alpha);  // dL/d(B') = A'^T g
      add(n, 1, tb ? swap_last2(gB) : gB);
    }
    if (wants(n, 2)) add(n, 2, scaled(g, beta));
  }

  void step(const Node& n) {
    auto git = grads.find(n.outputs.empty() ? std::string() : n.outputs[0]);
    if (git == grads.end()) return;  // y does not depend on this node's output
    const DArray g = git->second;
    const std::string& op = n.op_type;
    bool domain_ok = n.domain.empty() || n.domain == "ai.onnx";
    if (!domain_ok) unsupported(n);
    auto mul = [](double x, double y) { return x * y; };
    if (op == "Identity") {
      add(n, 0, g);
    } else if (op == "Add") {
      add(n, 0, g);
      add(n, 1, g);
    } else if (op == "Sub") {
      add(n, 0, g);
      add(n, 1, map(g, [](double x) { return -x; }));
    } else if (op == "Mul") {
      if (wants(n, 0)) add(n, 0, zip(ctx, g, val(n, 1), mul));
      if (wants(n, 1)) add(n, 1, zip(ctx, g, val(n, 0), mul));
    } else if (op == "Div") {
      DArray b = val(n, 1);
      if (wants(n, 0)) add(n, 0, zip(ctx, g, b, [](double x, double y) { return x / y; }));
      if (wants(n, 1)) {
        DArray q = zip(ctx, val(n, 0), map(b, [](double y) { return y * y; }), [](double x, double y) { return -x / y; });
        add(n, 1, zip(ctx, g, q, mul));
      }
    } else if (op == "Neg") {
      add(n, 0, map(g, [](double x) { return -x; }));
    } else if (op == "Relu") {
      add(n, 0, zip(ctx, g, val(n, 0), [](double d, double x) { return x > 0 ? d : 0.0; }));
    } else if (op == "Sigmoid") {
      add(n, 0, zip(ctx, g, out(n), [](double d, double y) { return d * y * (1 - y); }));
    } else if (op == "Tanh") {
      add(n, 0, zip(ctx, g, out(n), [](double d, double y) { return d * (1 - y * y); }));
    } else if (op == "Exp") {
      add(n, 0, zip(ctx, g, out(n), mul));
    } else if (op == "Log") {
      add(n, 0, zip(ctx, g, val(n, 0), [](double d, double x) { return d / x; }));
    } else if (op == "Sqrt") {
      add(n, 0, zip(ctx, g, out(n), [](double d, double y) { return d / (2 * y); }));
    } else if (op == "Pow") {
      DArray a = val(n, 0), p = val(n, 1);
      if (wants(n, 0)) {  // p * a^(p-1)
        DArray da = zip(ctx, a, p, [](double x, double e) { return e == 0 ? 0.0 : e * std::pow(x, e - 1); });
        add(n, 0, zip(ctx, g, da, mul));
      }
      if (wants(n, 1)) {  // a^p * ln(a)
        DArray dp = zip(ctx, out(n), expand(a, broadcast_shapes(ctx, a.shape, p.shape)),
                        [](double y, double x) { return y * std::log(x); });
        add(n, 1, zip(ctx, g, dp, mul));
      }
    } else if (op == "ReduceSum" || op == "ReduceMean") {
      DArray x = val(n, 0);
      const int64_t r = static_cast<int64_t>(x.shape.size());
      bool noop = false;
      std::vector<int64_t> axes = reduce_axes(n, r, noop);
      if (noop) {
        add(n, 0, g);
        return;
      }
      std::vector<int64_t> kept = x.shape;
      int64_t reduced = 1;
      for (int64_t a : axes) {
        reduced *= x.shape[static_cast<size_t>(a)];
        kept[static_cast<size_t>(a)] = 1;
      }
      DArray gx = expand(reshaped(g, kept), x.shape);  // keepdims=0 only removed size-1 axes
      if (op == "ReduceMean" && reduced > 0)
        for (double& v : gx.v) v /= static_cast<double>(reduced);
      add(n, 0, gx);
    } else if (op == "Cast") {
      if (dtype_is_float(tape.values.at(n.inputs[0]).dtype())) add(n, 0, g);  // integers carry no gradient
    } else if (op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze") {
      add(n, 0, reshaped(g, tape.values.at(n.inputs[0]).shape()));
    } else if (op == "Transpose") {
      const int64_t r = static_cast<int64_t>(g.shape.size());
      std::vector<int64_t> perm = n.get_ints("perm");
      if (perm.empty())
        for (int64_t d = r - 1; d >= 0; --d) perm.push_back(d);
      std::vector<int64_t> inv(perm.size());
      for (size_t d = 0; d < perm.size(); ++d) inv[static_cast<size_t>(perm[d])] = static_cast<int64_t>(d);
      add(n, 0, transpose(g, inv));
    } else if (op == "MatMul") {
      matmul_rule(n, g);
    } else if (op == "Gemm") {
      gemm_rule(n, g);
    } else {
      unsupported(n);
    }
  }

  [[noreturn]] void unsupported(const Node& n) const {
    ctx.fail(ErrorCode::Unsupported, "cannot differentiate through {}: no gradient rule for op '{}'{}", n.describe(),
             n.op_type, n.domain.empty() ? "" : " of domain '" + n.domain + "'");
  }
};

Tensor to_dtype(const DArray& a, DType dt) {
  Tensor t = Tensor::from_vector(DType::F64, a.shape, a.v);
  return dt == DType::F64 ? t : t.cast(dt);
}

void gradient_kernel(KernelContext& ctx) {
  if (!ctx.graph || !ctx.run_subgraph)
    ctx.fail(ErrorCode::Unsupported, "Gradient needs the enclosing graph (run it through the interpreter)");
  const std::vector<std::string> xs = ctx.node.get_strings("xs");
  const std::vector<std::string> zs = ctx.node.get_strings("zs");
  const std::string y = ctx.node.get_string("y", "");
  if (xs.empty()) ctx.fail(ErrorCode::InvalidModel, "attribute 'xs' is required and must not be empty");
  if (y.empty()) ctx.fail(ErrorCode::InvalidModel, "attribute 'y' is required");
  if (ctx.num_inputs() != xs.size() + zs.size())
    ctx.fail(ErrorCode::InvalidModel, "has {} inputs, but xs and zs name {} tensors", ctx.num_inputs(),
             xs.size() + zs.size());
  if (ctx.node.outputs.size() > xs.size())
    ctx.fail(ErrorCode::InvalidModel, "has {} outputs, but xs names only {} tensors", ctx.node.outputs.size(),
             xs.size());
  for (size_t i = 0; i < xs.size(); ++i)
    if (!dtype_is_float(ctx.input(i).dtype()) || dtype_is_complex(ctx.input(i).dtype()))
      ctx.fail(ErrorCode::InvalidArgument, "xs[{}] '{}' has dtype {}; gradients need a float tensor", i, xs[i],
               dtype_name(ctx.input(i).dtype()));

  Tape tape = forward(ctx, xs, zs, y);
  auto yit = tape.values.find(y);
  if (yit == tape.values.end())
    ctx.fail(ErrorCode::InvalidModel, "y '{}' is not produced by the graph nor one of xs/zs", y);
  Backward bw{ctx, tape, {}};
  if (tape.needs_grad.count(y)) bw.grads.emplace(y, DArray::filled(yit->second.shape(), 1.0));
  for (auto it = tape.nodes.rbegin(); it != tape.nodes.rend(); ++it) {
    const Node& n = **it;
    for (size_t o = 1; o < n.outputs.size(); ++o)
      if (!n.outputs[o].empty() && bw.grads.count(n.outputs[o])) bw.unsupported(n);  // rules cover output 0 only
    bw.step(n);
  }
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!ctx.wants_output(i)) continue;
    const Tensor& x = ctx.input(i);
    auto g = bw.grads.find(xs[i]);
    DArray d = g != bw.grads.end() ? g->second : DArray::filled(x.shape(), 0.0);  // y does not depend on x
    ctx.set_output(i, to_dtype(d, x.dtype()));
  }
}

}  // namespace

void register_gradient_ops(OpTable& t) { t.add("ai.onnx.preview.training", "Gradient", gradient_kernel); }

}  // namespace hodu::interp
