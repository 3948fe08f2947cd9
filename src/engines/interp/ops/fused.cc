// Reference kernels of hodu's fused ops (domain "hodu"), written as the ONNX
// ops they replace followed by the fused epilogue, so the interpreter stays the
// oracle for graphs the fusion passes rewrote.
//   FusedConv:   Y = act(Conv(X, W, B) + Z)
//   FusedMatMul: Y = act(alpha * MatMul(op(A), op(B)) + bias + Z)   (op = transpose of the last two dims)
//   FusedGemm:   Y = act(Gemm(A, B, C) + Z)
//   LayerNorm:   LayerNormalization (rms=0) or RMSNormalization (rms=1) over [axis, rank)
//   Gelu:        Gelu(X + bias)
//   Attention:   ONNX Attention(Q, K, V, mask + bias)
//   FusedElementwise: the body graph run on the inputs
#include <cmath>

#include "engines/interp/kernel.h"

namespace hodu::interp {
namespace {

// Runs the ONNX kernel `op` on `inputs` (nullptr = omitted) with `attrs`; returns output 0.
Tensor run_onnx(const KernelContext& outer, const std::string& op, const std::vector<const Tensor*>& inputs,
                std::vector<Attribute> attrs) {
  Node n;
  n.name = outer.node.name;
  n.op_type = op;
  n.attributes = std::move(attrs);
  std::vector<RuntimeValue> held;
  held.reserve(inputs.size());
  for (const Tensor* t : inputs) {
    n.inputs.push_back(t ? fmt::format("x{}", held.size()) : std::string());
    held.emplace_back(t ? RuntimeValue(*t) : RuntimeValue());
  }
  n.outputs = {"y"};
  KernelFn fn = OpTable::instance().find("", op);
  if (!fn) outer.fail(ErrorCode::Internal, "no reference kernel for {}", op);
  KernelContext ctx{n, {}, {}, outer.threads, outer.seed, {}};
  for (size_t i = 0; i < inputs.size(); ++i) ctx.inputs.push_back(inputs[i] ? &held[i] : nullptr);
  ctx.outputs.resize(1);
  fn(ctx);
  return ctx.outputs[0].tensor;
}

// Attributes of the fused node minus those of the epilogue.
std::vector<Attribute> base_attrs(const Node& n, std::initializer_list<const char*> drop) {
  std::vector<Attribute> out;
  for (const auto& a : n.attributes) {
    bool dropped = false;
    for (const char* d : drop) dropped |= a.name == d;
    if (!dropped) out.push_back(a);
  }
  return out;
}

double activate(const std::string& act, const std::vector<float>& p, double x) {
  auto param = [&](size_t i, double def) { return i < p.size() ? static_cast<double>(p[i]) : def; };
  if (act.empty()) return x;
  if (act == "Relu") return x > 0 ? x : 0;
  if (act == "LeakyRelu") return x >= 0 ? x : param(0, 0.01) * x;
  if (act == "Sigmoid") return 1 / (1 + std::exp(-x));
  if (act == "Tanh") return std::tanh(x);
  if (act == "Clip") return std::min(std::max(x, param(0, -INFINITY)), param(1, INFINITY));
  if (act == "HardSigmoid") return std::max(0.0, std::min(1.0, param(0, 0.2) * x + param(1, 0.5)));
  if (act == "Silu") return x / (1 + std::exp(-x));
  if (act == "Gelu") return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  if (act == "GeluTanh") return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  return NAN;
}

bool known_activation(const std::string& act) {
  for (const char* a : {"", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip", "HardSigmoid", "Silu", "Gelu", "GeluTanh"})
    if (act == a) return true;
  return false;
}

// y = act(y + z) in place; z (optional) has y's shape or broadcasts over the last dim (numel == last dim).
void epilogue(const KernelContext& c, Tensor& y, const Tensor* z) {
  std::string act = c.node.get_string("activation", "");
  if (!known_activation(act)) c.fail(ErrorCode::Unsupported, "unknown activation '{}'", act);
  auto p = c.node.get_floats("activation_params");
  if (z && z->numel() != y.numel() && (y.rank() == 0 || z->numel() != y.dim(-1)))
    c.fail(ErrorCode::InvalidModel, "addend {} does not match the output {}", z->type_string(), y.type_string());
  if (act.empty() && !z) return;
  y = y.contiguous().clone();
  int64_t n = y.numel(), last = y.rank() ? y.dim(-1) : 1;
  Tensor zc = z ? z->contiguous() : Tensor();
  if (y.dtype() == DType::F32 && (!z || zc.dtype() == DType::F32)) {
    float* py = y.data<float>();
    const float* pz = z ? zc.data<float>() : nullptr;
    int64_t zn = z ? zc.numel() : 1;
    for (int64_t i = 0; i < n; ++i) {
      double v = py[i] + (pz ? pz[zn == n ? i : i % last] : 0.0f);
      py[i] = static_cast<float>(activate(act, p, v));
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    double v = y.get_double(i) + (z ? zc.get_double(zc.numel() == n ? i : i % last) : 0.0);
    y.set_double(i, activate(act, p, v));
  }
}

const Tensor* opt_input(const KernelContext& c, size_t i) { return c.has_input(i) ? &c.input(i) : nullptr; }

void fused_conv(KernelContext& c) {
  Tensor y = run_onnx(c, "Conv", {&c.input(0), &c.input(1), opt_input(c, 2)},
                      base_attrs(c.node, {"activation", "activation_params"}));
  if (c.has_input(3) && c.input(3).shape() != y.shape())
    c.fail(ErrorCode::InvalidModel, "Z {} must have the output's shape {}", c.input(3).type_string(), y.type_string());
  epilogue(c, y, opt_input(c, 3));
  c.set_output(0, y);
}

Tensor transpose_last_two(const Tensor& t) {
  if (t.rank() < 2) return t;
  std::vector<int64_t> perm(t.rank());
  for (int64_t i = 0; i < t.rank(); ++i) perm[i] = i;
  std::swap(perm[t.rank() - 1], perm[t.rank() - 2]);
  return t.permute(perm).contiguous();
}

// y += input `i` (the residual Z, of y's exact shape) when given.
void add_residual(const KernelContext& c, Tensor& y, size_t i) {
  if (!c.has_input(i)) return;
  if (c.input(i).shape() != y.shape())
    c.fail(ErrorCode::InvalidModel, "Z {} must have the output's shape {}", c.input(i).type_string(), y.type_string());
  y = run_onnx(c, "Add", {&y, &c.input(i)}, {});
}

void fused_matmul(KernelContext& c) {
  Tensor a = c.node.get_int("transA", 0) ? transpose_last_two(c.input(0)) : c.input(0);
  Tensor b = c.node.get_int("transB", 0) ? transpose_last_two(c.input(1)) : c.input(1);
  Tensor y = run_onnx(c, "MatMul", {&a, &b}, {});
  float alpha = c.node.get_float("alpha", 1.0f);
  if (alpha != 1.0f) {
    y = y.clone();
    for (int64_t i = 0; i < y.numel(); ++i) y.set_double(i, y.get_double(i) * alpha);
  }
  add_residual(c, y, 3);
  epilogue(c, y, opt_input(c, 2));
  c.set_output(0, y);
}

void fused_gemm(KernelContext& c) {
  Tensor y = run_onnx(c, "Gemm", {&c.input(0), &c.input(1), opt_input(c, 2)},
                      base_attrs(c.node, {"activation", "activation_params"}));
  add_residual(c, y, 3);
  epilogue(c, y, nullptr);
  c.set_output(0, y);
}

void layer_norm(KernelContext& c) {
  // Statistics in f64 for f64 inputs (f32 otherwise, ONNX's default stash type).
  const bool f64 = c.input(0).dtype() == DType::F64;
  std::vector<Attribute> attrs = {Attribute::make_int("axis", c.node.get_int("axis", -1)),
                                  Attribute::make_float("epsilon", c.node.get_float("epsilon", 1e-5f)),
                                  Attribute::make_int("stash_type", dtype_to_onnx(f64 ? DType::F64 : DType::F32))};
  if (c.node.get_int("rms", 0)) {
    Tensor y = run_onnx(c, "RMSNormalization", {&c.input(0), &c.input(1)}, attrs);
    if (c.has_input(2)) y = run_onnx(c, "Add", {&y, &c.input(2)}, {});
    c.set_output(0, y);
  } else {
    c.set_output(0, run_onnx(c, "LayerNormalization", {&c.input(0), &c.input(1), opt_input(c, 2)}, attrs));
  }
}

void gelu(KernelContext& c) {
  Tensor x = c.input(0);
  if (c.has_input(1)) x = run_onnx(c, "Add", {&x, &c.input(1)}, {});
  c.set_output(0, run_onnx(c, "Gelu", {&x}, {Attribute::make_string("approximate",
                                                                       c.node.get_string("approximate", "none"))}));
}

void attention(KernelContext& c) {
  std::vector<Attribute> attrs;
  if (c.node.has_attr("scale")) attrs.push_back(Attribute::make_float("scale", c.node.get_float("scale", 1.0f)));
  attrs.push_back(Attribute::make_int("is_causal", c.node.get_int("is_causal", 0)));
  if (int64_t h = c.node.get_int("num_heads", 0)) attrs.push_back(Attribute::make_int("q_num_heads", h));
  if (int64_t h = c.node.get_int("kv_num_heads", 0)) attrs.push_back(Attribute::make_int("kv_num_heads", h));
  const Tensor* mask = opt_input(c, 3);
  Tensor combined;
  if (c.has_input(4)) {
    combined = mask ? run_onnx(c, "Add", {mask, &c.input(4)}, {}) : c.input(4);
    mask = &combined;
  }
  c.set_output(0, run_onnx(c, "Attention", {&c.input(0), &c.input(1), &c.input(2), mask}, attrs));
}

void fused_elementwise(KernelContext& c) {
  const Graph* body = c.node.get_graph("body");
  if (!body) c.fail(ErrorCode::InvalidModel, "missing the 'body' graph");
  std::vector<RuntimeValue> ins;
  for (size_t i = 0; i < c.num_inputs(); ++i) ins.push_back(c.value(i));
  auto outs = c.run_subgraph(*body, ins);
  if (outs.size() < c.outputs.size())
    c.fail(ErrorCode::InvalidModel, "body gives {} outputs, the node has {}", outs.size(), c.outputs.size());
  for (size_t i = 0; i < c.outputs.size(); ++i) c.set_output(i, outs[i]);
}

}  // namespace

void register_fused_ops(OpTable& t) {
  t.add("hodu", "FusedConv", fused_conv);
  t.add("hodu", "FusedMatMul", fused_matmul);
  t.add("hodu", "FusedGemm", fused_gemm);
  t.add("hodu", "LayerNorm", layer_norm);
  t.add("hodu", "Gelu", gelu);
  t.add("hodu", "Attention", attention);
  t.add("hodu", "FusedElementwise", fused_elementwise);
}

}  // namespace hodu::interp
