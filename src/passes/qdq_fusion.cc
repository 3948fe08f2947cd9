// QDQ graphs (ORT's static quantizer: QuantizeLinear/DequantizeLinear around each op) → the
// integer ops they stand for, so that engines run int8 kernels instead of float ones between
// quantize/dequantize loops:
//   DQ(x) → Conv(·, DQ(w) [, DQ(b) | b]) [→ Relu | Clip] → Q  ⇒  QLinearConv [→ Max | Clip on int8]
//   DQ(a) → MatMul(·, DQ(b)) [→ Relu | Clip] → Q             ⇒  QLinearMatMul [→ Max | Clip]
//   DQ(a) → Gemm(·, DQ(B) [, DQ(C) | C]) [→ ...] → Q          ⇒  Reshape → QLinearConv 1x1 → Reshape
// A per-tensor DQ first moves below Reshape/Flatten/Squeeze/Unsqueeze/Transpose (they commute).
// The integer ops compute the sums exactly and round once, where the QDQ graph rounds its float
// convolution: results agree within one quantum. Q(Relu(y)) = Max(Q(y), y_zero_point) and
// Q(Clip(y, a, b)) = Clip(Q(y), Q(a), Q(b)) exactly (the rounding is monotone).
// Scales and zero points must be constants; the DQ's inputs stay for their other readers.
#include <algorithm>
#include <cmath>
#include <functional>

#include "ir/schema.h"
#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::passes {
namespace {

// A DequantizeLinear or QuantizeLinear with constant scale and zero point.
struct Quant {
  const Node* node = nullptr;
  std::string q;             // the integer value (DQ's input, Q's output)
  const Tensor* scale = nullptr;
  const Tensor* zero = nullptr;  // may be null (zero)
  int64_t axis = 1;
};

bool is_8bit(DType t) { return t == DType::U8 || t == DType::I8; }

std::optional<Quant> dequantize_of(const Graph& g, const std::string& v) {
  int p = g.producer_of(v);
  if (p < 0) return std::nullopt;
  const Node& n = g.nodes[p];
  if (n.op_type != "DequantizeLinear" || !n.domain.empty() || n.get_int("block_size", 0) != 0) return std::nullopt;
  Quant d{&n, n.inputs[0], constant_of(g, n.inputs[1]), n.has_input(2) ? constant_of(g, n.inputs[2]) : nullptr,
          n.get_int("axis", 1)};
  if (!d.scale || d.scale->dtype() != DType::F32 || (n.has_input(2) && !d.zero)) return std::nullopt;
  if (n.get_int("output_dtype", 0) > 1) return std::nullopt;
  return d;
}

bool per_tensor(const Quant& q) { return q.scale->numel() == 1 && (!q.zero || q.zero->numel() == 1); }

Tensor zero_point_or(const Quant& q, DType dt) {
  if (q.zero) return *q.zero;
  return dt == DType::U8 ? Tensor::scalar<uint8_t>(dt, 0) : Tensor::scalar<int8_t>(dt, 0);
}

}  // namespace

bool fuse_qdq(Graph& g) {
  bool changed = false;
  // Constant nodes (exporters write scales, zero points and Clip bounds so) as initializers first.
  std::set<size_t> constants;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    if (n.op_type != "Constant" || !n.domain.empty() || n.outputs.size() != 1 || is_graph_output(g, n.outputs[0])) continue;
    if (const Tensor* t = n.get_tensor("value")) {
      g.set_initializer(n.outputs[0], *t);
    } else if (const Attribute* a = n.attr("value_float")) {
      g.set_initializer(n.outputs[0], Tensor::scalar<float>(DType::F32, a->f));
    } else if (const Attribute* a = n.attr("value_int")) {
      g.set_initializer(n.outputs[0], Tensor::scalar<int64_t>(DType::I64, a->i));
    } else {
      continue;
    }
    constants.insert(k);
  }
  if (!constants.empty()) {
    erase_nodes(g, constants);
    changed = true;
  }
  // A per-tensor DQ moves below the shape ops reading it (DQ → Reshape ≡ Reshape → DQ), so that
  // the products after them see their DQ.
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    Node& r = g.nodes[k];
    if (!r.domain.empty() || !(is_reshape_op(r) || r.op_type == "Transpose") || !r.has_input(0)) continue;
    auto d = dequantize_of(g, r.inputs[0]);
    if (!d || !per_tensor(*d)) continue;
    const Node dq = *d->node;
    std::string y = r.outputs[0];
    std::string moved = g.unique_name(y + "/quantized");
    r.inputs[0] = dq.inputs[0];
    r.outputs[0] = moved;
    g.value_types.erase(y);
    Node after = dq;
    after.name = dq.name + "/after_" + r.name;
    after.inputs[0] = moved;
    after.outputs = {y};
    g.nodes.insert(g.nodes.begin() + static_cast<std::ptrdiff_t>(k) + 1, std::move(after));
    changed = true;
  }
  infer_types(g);  // the shapes and integer types the patterns check
  auto uses = use_counts(g);
  auto readers = consumers(g);
  std::set<size_t> removed;
  std::map<size_t, std::vector<Node>> replace;
  // The dtype of a value, also before type inference: a QuantizeLinear's output has its zero
  // point's (u8 without one).
  std::function<DType(const std::string&)> value_dtype = [&](const std::string& v) -> DType {
    if (const Tensor* t = constant_of(g, v)) return t->dtype();
    if (auto t = g.type_of(v); t && t->is_tensor() && t->dtype != DType::Undefined) return t->dtype;
    int p = g.producer_of(v);
    if (p >= 0 && g.nodes[p].domain.empty() && (is_reshape_op(g.nodes[p]) || g.nodes[p].op_type == "Transpose"))
      return value_dtype(g.nodes[p].inputs[0]);
    if (p >= 0 && g.nodes[p].op_type == "QuantizeLinear" && g.nodes[p].domain.empty()) {
      const Node& q = g.nodes[p];
      if (!q.has_input(2)) return DType::U8;
      if (const Tensor* z = constant_of(g, q.inputs[2])) return z->dtype();
      if (auto t = g.type_of(q.inputs[2]); t && t->is_tensor()) return t->dtype;
    }
    return DType::Undefined;
  };
  auto add_constant = [&](const std::string& base, Tensor t) {
    std::string name = g.unique_name(base);
    g.set_initializer(name, std::move(t));
    return name;
  };
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& op = g.nodes[k];
    if (!op.domain.empty() || removed.count(k)) continue;
    const std::string& t = op.op_type;
    const bool conv = t == "Conv", matmul = t == "MatMul", gemm = t == "Gemm";
    if (!conv && !matmul && !gemm) continue;
    // The output, through an optional Relu or Clip (constant bounds), read only by a per-tensor
    // QuantizeLinear.
    std::string y = op.outputs[0];
    std::set<size_t> chain = {k};
    bool relu = false;
    std::optional<std::pair<double, double>> clip;
    int next = sole_reader(g, uses, readers, y);
    if (next >= 0 && g.nodes[next].domain.empty() &&
        (g.nodes[next].op_type == "Relu" || g.nodes[next].op_type == "Clip")) {
      const Node& a = g.nodes[next];
      if (a.op_type == "Clip") {
        auto lo = a.has_input(1) ? scalar_constant(g, a.inputs[1]) : std::optional<double>(-INFINITY);
        auto hi = a.has_input(2) ? scalar_constant(g, a.inputs[2]) : std::optional<double>(INFINITY);
        if (!lo || !hi) continue;
        clip = std::make_pair(*lo, *hi);
      } else {
        relu = true;
      }
      chain.insert(static_cast<size_t>(next));
      y = a.outputs[0];
      next = sole_reader(g, uses, readers, y);
    }
    if (next < 0) continue;
    const Node& qn = g.nodes[next];
    if (qn.op_type != "QuantizeLinear" || !qn.domain.empty() || qn.get_int("block_size", 0) != 0) continue;
    Quant yq{&qn, qn.outputs[0], constant_of(g, qn.inputs[1]), qn.has_input(2) ? constant_of(g, qn.inputs[2]) : nullptr};
    if (!yq.scale || yq.scale->dtype() != DType::F32 || (qn.has_input(2) && !yq.zero) || !per_tensor(yq)) continue;
    DType ydt = yq.zero ? yq.zero->dtype() : DType::U8;
    if (int64_t odt = qn.get_int("output_dtype", 0); odt != 0 && (!yq.zero || static_cast<int64_t>(dtype_to_onnx(ydt)) != odt))
      continue;
    if (!is_8bit(ydt)) continue;
    // Inputs: a per-tensor DQ activation and a constant DQ weight.
    auto xq = dequantize_of(g, op.inputs[0]);
    auto wq = op.inputs.size() > 1 ? dequantize_of(g, op.inputs[1]) : std::nullopt;
    if (!xq || !wq || !per_tensor(*xq) || !is_8bit(value_dtype(xq->q))) continue;
    const Tensor* w = constant_of(g, wq->q);
    if (!w || !is_8bit(w->dtype())) continue;
    const int64_t rank = w->rank();
    if (!per_tensor(*wq)) {
      // Per output channel: axis 0 of conv weights, the columns of a MatMul's B, Gemm's rows with transB.
      int64_t axis = wq->axis < 0 ? wq->axis + rank : wq->axis;
      bool trans_b = gemm && op.get_int("transB", 0) != 0;
      int64_t want = conv ? 0 : (matmul ? rank - 1 : (trans_b ? 0 : 1));
      if (axis != want || rank < 2) continue;
    }
    if (matmul && rank != 2) continue;
    if (gemm && (op.get_float("alpha", 1.0f) != 1.0f || op.get_int("transA", 0) != 0 || rank != 2)) continue;
    // Bias: DQ(int32 bq, x_scale · w_scale, 0), or a float constant rounded to that scale.
    std::string bias_name;
    const size_t bias_in = 2;
    if ((conv || gemm) && op.has_input(bias_in)) {
      if (gemm && op.get_float("beta", 1.0f) != 1.0f) continue;
      const int64_t M = conv ? w->dim(0) : (op.get_int("transB", 0) ? w->dim(0) : w->dim(1));
      std::vector<double> xs_ws(static_cast<size_t>(M));
      auto wsv = wq->scale->to_doubles();
      float xs = static_cast<float>(xq->scale->get_double(0));
      for (int64_t m = 0; m < M; ++m)
        xs_ws[static_cast<size_t>(m)] = static_cast<float>(xs * static_cast<float>(wsv[wsv.size() == 1 ? 0 : m]));
      std::vector<int32_t> bq;
      if (auto bd = dequantize_of(g, op.inputs[bias_in])) {
        const Tensor* b = constant_of(g, bd->q);
        if (!b || b->dtype() != DType::I32 || b->numel() != M) continue;
        auto bs = bd->scale->to_doubles();
        bool ok = true;
        if (bd->zero)
          for (int64_t z : bd->zero->to_int64s()) ok &= z == 0;
        for (int64_t m = 0; ok && m < M; ++m)
          ok = std::fabs(bs[bs.size() == 1 ? 0 : m] - xs_ws[m]) <= 1e-6 * std::fabs(xs_ws[m]);
        if (!ok) continue;
        for (int64_t v : b->to_int64s()) bq.push_back(static_cast<int32_t>(v));
      } else if (const Tensor* b = constant_of(g, op.inputs[bias_in]); b && b->dtype() == DType::F32 && b->numel() == M) {
        auto bv = b->to_doubles();
        for (int64_t m = 0; m < M; ++m) bq.push_back(static_cast<int32_t>(std::nearbyint(bv[m] / xs_ws[m])));
      } else {
        continue;
      }
      bias_name = add_constant(op.name + "/qdq_bias", Tensor::from_vector(DType::I32, {M}, bq));
    }
    std::string ys_name = qn.inputs[1];
    std::string yz_name = yq.zero ? qn.inputs[2] : add_constant(qn.name + "/zero_point", zero_point_or(yq, ydt));
    std::string xz_name = xq->zero ? xq->node->inputs[2] : add_constant(op.name + "/x_zero_point", zero_point_or(*xq, value_dtype(xq->q)));
    std::string wz_name = wq->zero ? wq->node->inputs[2] : add_constant(op.name + "/w_zero_point", zero_point_or(*wq, w->dtype()));
    std::vector<Node> out;
    std::string q_out = relu || clip ? g.unique_name(yq.q + "/before_activation") : yq.q;
    if (matmul) {
      Node n;
      n.name = op.name + "/qlinear";
      n.op_type = "QLinearMatMul";
      n.inputs = {xq->q, xq->node->inputs[1], xz_name, wq->q, wq->node->inputs[1], wz_name, ys_name, yz_name};
      n.outputs = {q_out};
      out.push_back(std::move(n));
    } else {
      std::string x_in = xq->q, w_in = wq->q;
      std::vector<int64_t> x2;
      if (gemm) {
        // [M, K] as [M, K, 1, 1]; B as [N, K, 1, 1].
        auto xs = static_shape(g, xq->q);
        if (!xs || xs->size() != 2) continue;
        x2 = *xs;
        bool tb = op.get_int("transB", 0) != 0;
        Tensor wt = tb ? w->contiguous() : w->permute({1, 0}).contiguous();
        w_in = add_constant(op.name + "/qdq_weights", wt.reshape({wt.dim(0), wt.dim(1), 1, 1}));
        x_in = g.unique_name(op.name + "/as_image");
        out.push_back(make_reshape(g, xq->q, x_in, {x2[0], x2[1], 1, 1}));
      }
      Node n;
      n.name = op.name + "/qlinear";
      n.op_type = "QLinearConv";
      n.inputs = {x_in, xq->node->inputs[1], xz_name, w_in, wq->node->inputs[1], wz_name, ys_name, yz_name};
      if (!bias_name.empty()) n.inputs.push_back(bias_name);
      if (conv) n.attributes = op.attributes;
      std::string conv_out = gemm ? g.unique_name(op.name + "/image") : q_out;
      n.outputs = {conv_out};
      out.push_back(std::move(n));
      if (gemm) {
        int64_t N = w->dim(op.get_int("transB", 0) ? 0 : 1);
        out.push_back(make_reshape(g, conv_out, q_out, {x2[0], N}));
      }
    }
    if (relu) {
      // Q(Relu(y)) = Max(Q(y), y_zero_point): the rounding is monotone and Q(0) is the zero point.
      Node mx;
      mx.name = qn.name + "/relu";
      mx.op_type = "Max";
      mx.inputs = {q_out, yz_name};
      mx.outputs = {yq.q};
      out.push_back(std::move(mx));
    } else if (clip) {
      // Q(Clip(y, lo, hi)) = Clip(Q(y), Q(lo), Q(hi)) for the same reason.
      const double ys = yq.scale->get_double(0), yz = yq.zero ? yq.zero->get_double(0) : 0.0;
      const double qmin = ydt == DType::U8 ? 0 : -128, qmax = ydt == DType::U8 ? 255 : 127;
      auto quantize = [&](double v) {
        if (std::isinf(v)) return v < 0 ? qmin : qmax;
        float q = static_cast<float>(v) / static_cast<float>(ys);  // as QuantizeLinear: in f32
        return std::clamp(std::nearbyint(static_cast<double>(q)) + yz, qmin, qmax);
      };
      auto bound = [&](double v, const char* what) {
        Tensor t = ydt == DType::U8 ? Tensor::scalar<uint8_t>(ydt, static_cast<uint8_t>(quantize(v)))
                                    : Tensor::scalar<int8_t>(ydt, static_cast<int8_t>(quantize(v)));
        return add_constant(qn.name + what, t);
      };
      Node c;
      c.name = qn.name + "/clip";
      c.op_type = "Clip";
      c.inputs = {q_out, bound(clip->first, "/clip_min"), bound(clip->second, "/clip_max")};
      c.outputs = {yq.q};
      out.push_back(std::move(c));
    }
    for (size_t c : chain) removed.insert(c);
    removed.insert(static_cast<size_t>(next));
    replace[static_cast<size_t>(next)] = std::move(out);
    changed = true;
  }
  if (removed.empty()) return changed;
  // The integer ops take the place of the QuantizeLinear (after everything they read).
  splice_nodes(g, removed, replace);
  eliminate_dead_code(g);
  return true;
}

}  // namespace hodu::passes
