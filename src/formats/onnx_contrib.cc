// ONNX Runtime contrib ops (com.microsoft) → standard ONNX nodes, at import.
//
// One table, `lowerings()`, op name → function. Each function reads the
// contrib node and appends the standard nodes that compute it (the last ones
// writing the node's own output names). Semantics are ONNX Runtime 1.30's CPU
// kernels (contrib_defs.cc and the kernels under contrib_ops/cpu); the
// quantized (QOperator) ops become DequantizeLinear → float op →
// QuantizeLinear, which ORT computes in another order for a few of them (table
// lookups, integer sums): within one quantum of ORT (docs/import.md says which).
#include "formats/onnx_contrib.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "core/error.h"
#include "formats/onnx_canonicalize.h"
#include "ir/schema.h"

namespace hodu {
namespace {

constexpr const char* kDomain = "com.microsoft";

struct Lowering {
  std::string what;
  std::set<std::string> names;
  std::vector<Graph*> scope;  // enclosing graphs, innermost last

  // Types of the values made by the nodes lowered so far (inferred on demand:
  // contrib ops have no schema, so the file's intermediate types are unknown
  // until the nodes before them are standard).
  const Graph* inferred_for = nullptr;
  size_t inferred_nodes = 0;
  std::map<std::string, ValueType> inferred;
  std::optional<ValueType> inferred_type(const Graph& g, const std::vector<Node>& done, const std::string& v) {
    if (inferred_for != &g || inferred_nodes != done.size()) {
      Graph t;
      t.inputs = g.inputs;
      t.initializers = g.initializers;
      t.value_types = g.value_types;
      t.nodes = done;
      infer_types_collecting_problems(t);  // a problem leaves that node's outputs unknown
      inferred = std::move(t.value_types);
      inferred_for = &g;
      inferred_nodes = done.size();
    }
    auto it = inferred.find(v);
    if (it == inferred.end()) return std::nullopt;
    return it->second;
  }

  std::string fresh(const std::string& base) { return fresh_name(names, base.empty() ? std::string("contrib") : base); }
};

// One contrib node being lowered.
struct Ctx {
  Lowering& L;
  Graph& g;
  const Node& n;
  std::vector<Node>& out;  // the graph's new node list (earlier nodes already in it)

  std::string base() const {
    return n.name.empty() ? (n.outputs.empty() ? n.op_type : n.outputs[0]) : n.name;
  }
  std::string in(size_t i) const { return i < n.inputs.size() ? n.inputs[i] : std::string(); }
  bool has_in(size_t i) const { return !in(i).empty(); }
  std::string out_name(size_t i) const { return i < n.outputs.size() ? n.outputs[i] : std::string(); }
  bool has_out(size_t i) const { return !out_name(i).empty(); }

  [[noreturn]] void unsupported(const std::string& why) const {
    fail(ErrorCode::Unsupported, "{}: {} (op {}, domain {}): {}", L.what, n.describe(), n.op_type, kDomain, why);
  }
  [[noreturn]] void invalid(const std::string& why) const {
    fail(ErrorCode::InvalidModel, "{}: {} (op {}, domain {}): {}", L.what, n.describe(), n.op_type, kDomain, why);
  }
  void need_in(size_t i, const char* what) const {
    if (!has_in(i)) invalid(fmt::format("input {} ({}) is required", i, what));
  }

  // Appends a node writing `outputs`; returns the first.
  std::string emit(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs,
                   std::vector<Attribute> attrs = {}) {
    Node m;
    m.name = L.fresh(base() + "/" + op);
    m.op_type = op;
    m.inputs = std::move(inputs);
    while (!m.inputs.empty() && m.inputs.back().empty()) m.inputs.pop_back();
    m.outputs = std::move(outputs);
    m.attributes = std::move(attrs);
    std::string first = m.outputs.empty() ? std::string() : m.outputs[0];
    out.push_back(std::move(m));
    return first;
  }
  // Appends a node with one fresh output (or `dest` when given).
  std::string op(const std::string& op, std::vector<std::string> inputs, std::vector<Attribute> attrs = {},
                 const std::string& dest = {}) {
    std::string o = dest.empty() ? L.fresh(base() + "/" + op + "_out") : dest;
    return emit(op, std::move(inputs), {o}, std::move(attrs));
  }
  std::string constant(Tensor t, const std::string& hint) {
    std::string name = L.fresh(base() + "/" + hint);
    g.initializers.emplace_back(name, std::move(t));
    return name;
  }
  std::string f32(float v, const std::string& hint) { return constant(Tensor::scalar(DType::F32, v), hint); }
  std::string i64s(std::vector<int64_t> v, const std::string& hint) {
    return constant(Tensor::from_vector(DType::I64, {static_cast<int64_t>(v.size())}, v), hint);
  }
  std::string i64(int64_t v, const std::string& hint) { return constant(Tensor::scalar(DType::I64, v), hint); }

  const Tensor* initializer(const std::string& v) const {
    for (auto it = L.scope.rbegin(); it != L.scope.rend(); ++it)
      if (auto* t = (*it)->initializer(v)) return t;
    return nullptr;
  }
  std::optional<ValueType> type_of(const std::string& v) const {
    if (auto* t = initializer(v)) return ValueType::tensor(t->dtype(), Shape::from(t->shape()));
    for (auto it = L.scope.rbegin(); it != L.scope.rend(); ++it)
      if (auto t = (*it)->type_of(v); t && t->is_tensor() && t->shape.rank_known()) return t;
    if (auto t = L.inferred_type(g, out, v)) return t;
    for (auto it = L.scope.rbegin(); it != L.scope.rend(); ++it)
      if (auto t = (*it)->type_of(v)) return t;
    return std::nullopt;
  }
  std::optional<int64_t> rank_of(const std::string& v) const {
    auto t = type_of(v);
    if (t && t->is_tensor() && t->shape.rank_known()) return t->shape.rank();
    return std::nullopt;
  }
  // A static dim, or nothing.
  std::optional<int64_t> dim_of(const std::string& v, int64_t k) const {
    auto t = type_of(v);
    if (!t || !t->is_tensor() || !t->shape.rank_known()) return std::nullopt;
    int64_t r = t->shape.rank();
    if (k < 0) k += r;
    if (k < 0 || k >= r || !t->shape[k].is_known()) return std::nullopt;
    return t->shape[k].value;
  }
  // The element type of a value: from its declared type, or from the node
  // that makes it when that node's type is plain (quantized chains).
  DType dtype_of(const std::string& v, int depth = 0) const {
    if (v.empty() || depth > 64) return DType::Undefined;
    if (auto t = type_of(v); t && t->is_tensor() && t->dtype != DType::Undefined) return t->dtype;
    for (auto it = out.rbegin(); it != out.rend(); ++it) {
      if (std::find(it->outputs.begin(), it->outputs.end(), v) == it->outputs.end()) continue;
      const Node& p = *it;
      auto arg = [&](size_t i) { return i < p.inputs.size() ? p.inputs[i] : std::string(); };
      if (!p.domain.empty()) return DType::Undefined;
      if (p.op_type == "QuantizeLinear") return arg(2).empty() ? DType::U8 : dtype_of(arg(2), depth + 1);
      if (p.op_type == "DynamicQuantizeLinear") return p.outputs[0] == v ? DType::U8 : DType::Undefined;
      if (p.op_type == "QLinearConv" || p.op_type == "QLinearMatMul") return dtype_of(arg(7), depth + 1);
      static const std::set<std::string> same = {"Relu", "MaxPool", "Reshape", "Transpose", "Flatten", "Squeeze",
                                                 "Unsqueeze", "Identity", "Concat", "Slice", "Gather", "Pad",
                                                 "Resize", "Split", "Expand", "Tile", "DepthToSpace",
                                                 "SpaceToDepth", "Max", "Min", "Clip", "GlobalMaxPool"};
      if (same.count(p.op_type)) return dtype_of(arg(0), depth + 1);
      return DType::Undefined;
    }
    return DType::Undefined;
  }

  // QOperator helpers. A zero point left out is 0 of the quantized input's type.
  std::string dq(const std::string& x, const std::string& scale, const std::string& zp, int64_t axis = 1) {
    std::vector<Attribute> a;
    if (axis != 1) a.push_back(Attribute::make_int("axis", axis));
    return op("DequantizeLinear", {x, scale, zp}, std::move(a));
  }
  std::string zero_like(const std::string& x) {
    DType dt = dtype_of(x);
    if (dt != DType::U8 && dt != DType::I8)
      unsupported(fmt::format("the output zero point is left out and the type of '{}' (which it follows) is not "
                              "known to be uint8 or int8; give the zero point",
                              x));
    return constant(dt == DType::U8 ? Tensor::scalar(DType::U8, uint8_t(0)) : Tensor::scalar(DType::I8, int8_t(0)),
                    "zero_point");
  }
  void q(const std::string& y, const std::string& scale, std::string zp, const std::string& like,
         const std::string& dest) {
    if (zp.empty()) zp = zero_like(like);
    emit("QuantizeLinear", {y, scale, zp}, {dest});
  }
  // Activation `name` with ORT's parameters (FusedConv / FusedGemm).
  void activation(const std::string& name, const std::string& x, const std::vector<float>& p, const std::string& dest) {
    auto param = [&](size_t i, float def) { return i < p.size() ? p[i] : def; };
    if (name == "Relu" || name == "Tanh" || name == "Sigmoid") {
      op(name, {x}, {}, dest);
    } else if (name == "LeakyRelu") {
      op("LeakyRelu", {x}, {Attribute::make_float("alpha", param(0, 0.01f))}, dest);
    } else if (name == "HardSigmoid") {
      op("HardSigmoid", {x}, {Attribute::make_float("alpha", param(0, 0.2f)), Attribute::make_float("beta", param(1, 0.5f))},
         dest);
    } else if (name == "Clip") {
      if (p.size() < 2) invalid("activation Clip needs two activation_params (min, max)");
      op("Clip", {x, f32(p[0], "clip_min"), f32(p[1], "clip_max")}, {}, dest);
    } else if (name == "Elu") {
      op("Elu", {x}, {Attribute::make_float("alpha", param(0, 1.0f))}, dest);
    } else {
      unsupported(fmt::format("activation '{}' is not lowered (supported: Relu, Tanh, Sigmoid, LeakyRelu, "
                              "HardSigmoid, Clip, Elu)",
                              name));
    }
  }
  void no_outputs_beyond(size_t k, const char* why) const {
    for (size_t i = k; i < n.outputs.size(); ++i)
      if (!n.outputs[i].empty()) unsupported(fmt::format("output {} ('{}') is not produced: {}", i, n.outputs[i], why));
  }
  void no_inputs_from(size_t k, const char* why) const {
    for (size_t i = k; i < n.inputs.size(); ++i)
      if (!n.inputs[i].empty()) unsupported(fmt::format("input {} ('{}') is not supported: {}", i, n.inputs[i], why));
  }
  // A 1-element dim of `x` as a [1] i64 tensor (computed while running).
  std::string dim1(const std::string& x, int64_t k) {
    return op("Shape", {x}, {Attribute::make_int("start", k), Attribute::make_int("end", k + 1)});
  }
  // 0 where `mask` > 0 and `filter` elsewhere, as f32.
  std::string additive_mask(const std::string& mask, float filter) {
    DType dt = dtype_of(mask);
    std::string zero = dt == DType::Undefined || dt == DType::I32
                           ? constant(Tensor::scalar(DType::I32, int32_t(0)), "mask_zero")
                           : op("CastLike", {constant(Tensor::scalar(DType::I32, int32_t(0)), "mask_zero"), mask});
    std::string keep = op("Greater", {mask, zero});
    return op("Where", {keep, f32(0.0f, "mask_keep"), f32(filter, "mask_filter")});
  }
};

using LowerFn = std::function<void(Ctx&)>;

// ---- QOperator (ORT's quantizer, QOperator format) ----

void qlinear_binary(Ctx& c, const char* op) {
  for (size_t i : {0, 1, 3, 4, 6}) c.need_in(i, "tensor or scale");
  std::string a = c.dq(c.in(0), c.in(1), c.in(2));
  std::string b = c.dq(c.in(3), c.in(4), c.in(5));
  std::string y = c.op(op, {a, b});
  c.q(y, c.in(6), c.in(7), c.in(0), c.out_name(0));
}

void qlinear_unary(Ctx& c, const std::function<std::string(const std::string&)>& body) {
  c.need_in(0, "X");
  c.need_in(1, "X_scale");
  c.need_in(3, "Y_scale");
  std::string x = c.dq(c.in(0), c.in(1), c.in(2));
  c.q(body(x), c.in(3), c.in(4), c.in(0), c.out_name(0));
}

void qlinear_concat(Ctx& c) {
  c.need_in(0, "Y_scale");
  if (c.n.inputs.size() < 5 || (c.n.inputs.size() - 2) % 3 != 0)
    c.invalid("inputs must be Y_scale, Y_zero_point, then (tensor, scale, zero point) triples");
  std::vector<std::string> parts;
  for (size_t i = 2; i < c.n.inputs.size(); i += 3) parts.push_back(c.dq(c.in(i), c.in(i + 1), c.in(i + 2)));
  std::string y = c.op("Concat", parts, {Attribute::make_int("axis", c.n.get_int("axis", 0))});
  c.q(y, c.in(0), c.in(1), c.in(2), c.out_name(0));
}

// NHWC <-> NCHW around a pooling op for channels_last=1.
std::string to_channels_first(Ctx& c, const std::string& x, int64_t rank) {
  std::vector<int64_t> perm = {0, rank - 1};
  for (int64_t d = 1; d < rank - 1; ++d) perm.push_back(d);
  return c.op("Transpose", {x}, {Attribute::make_ints("perm", perm)});
}
std::string to_channels_last(Ctx& c, const std::string& x, int64_t rank) {
  std::vector<int64_t> perm = {0};
  for (int64_t d = 2; d < rank; ++d) perm.push_back(d);
  perm.push_back(1);
  return c.op("Transpose", {x}, {Attribute::make_ints("perm", perm)});
}

void qlinear_global_average_pool(Ctx& c) {
  bool last = c.n.get_int("channels_last", 0) != 0;
  qlinear_unary(c, [&](const std::string& x) {
    if (!last) return c.op("GlobalAveragePool", {x});
    auto r = c.rank_of(c.in(0));
    if (!r || *r < 3) c.unsupported("channels_last=1 needs the input's rank (3 or more) to be known");
    std::vector<int64_t> axes;
    for (int64_t d = 1; d < *r - 1; ++d) axes.push_back(d);
    return c.op("ReduceMean", {x, c.i64s(axes, "axes")}, {Attribute::make_int("keepdims", 1)});
  });
}

void qlinear_average_pool(Ctx& c) {
  bool last = c.n.get_int("channels_last", 0) != 0;
  auto ks = c.n.get_ints("kernel_shape");
  if (ks.empty()) c.invalid("kernel_shape is required");
  int64_t rank = static_cast<int64_t>(ks.size()) + 2;
  std::vector<Attribute> attrs;
  for (const auto& a : c.n.attributes)
    if (a.name != "channels_last") attrs.push_back(a);
  qlinear_unary(c, [&](const std::string& x) {
    std::string v = last ? to_channels_first(c, x, rank) : x;
    std::string y = c.op("AveragePool", {v}, attrs);
    return last ? to_channels_last(c, y, rank) : y;
  });
}

// Softmax over `axis`; `opset` < 13 flattens to 2-D at `axis` first (ORT keeps
// both meanings under one op).
std::string softmax_with_opset(Ctx& c, const std::string& x, int64_t axis, int64_t opset) {
  if (opset >= 13) return c.op("Softmax", {x}, {Attribute::make_int("axis", axis)});
  std::string flat = c.op("Flatten", {x}, {Attribute::make_int("axis", axis)});
  std::string s = c.op("Softmax", {flat}, {Attribute::make_int("axis", 1)});
  return c.op("Reshape", {s, c.op("Shape", {x})});
}

void qlinear_softmax(Ctx& c) {
  if (!c.n.has_attr("opset")) c.invalid("attribute 'opset' is required");
  int64_t opset = c.n.get_int("opset", 13);
  int64_t axis = c.n.get_int("axis", opset >= 13 ? -1 : 1);
  qlinear_unary(c, [&](const std::string& x) { return softmax_with_opset(c, x, axis, opset); });
}

// Y = alpha (A' - za)(B' - zb) sa sb + C sa sb [quantized to y_scale, y_zp].
void qgemm(Ctx& c) {
  for (size_t i : {0, 1, 3, 4}) c.need_in(i, "A, a_scale, B or b_scale");
  float alpha = c.n.get_float("alpha", 1.0f);
  int64_t transA = c.n.get_int("transA", 0), transB = c.n.get_int("transB", 0);
  std::string a = c.dq(c.in(0), c.in(1), c.in(2));
  // A per-column scale of B: B is [K, N] (axis 1) or, transposed, [N, K] (axis 0).
  std::string b = c.dq(c.in(3), c.in(4), c.in(5), transB ? 0 : 1);
  std::vector<std::string> ins = {a, b};
  if (c.has_in(6)) {
    std::string s = c.op("Mul", {c.in(1), c.in(4)});
    ins.push_back(c.op("Mul", {c.op("Cast", {c.in(6)}, {Attribute::make_int("to", 1)}), s}));
  }
  std::vector<Attribute> attrs = {Attribute::make_float("alpha", alpha), Attribute::make_float("beta", alpha),
                                  Attribute::make_int("transA", transA), Attribute::make_int("transB", transB)};
  if (!c.has_in(7)) {
    c.op("Gemm", ins, attrs, c.out_name(0));
    return;
  }
  std::string y = c.op("Gemm", ins, attrs);
  c.q(y, c.in(7), c.in(8), c.in(0), c.out_name(0));
}

// ORT's dynamic quantization: A (float) quantized to uint8 per tensor.
void dynamic_quantize_matmul(Ctx& c) {
  for (size_t i : {0, 1, 2}) c.need_in(i, "A, B or b_scale");
  std::string qa = c.L.fresh(c.base() + "/A_quantized"), sa = c.L.fresh(c.base() + "/A_scale"),
              za = c.L.fresh(c.base() + "/A_zero_point");
  c.emit("DynamicQuantizeLinear", {c.in(0)}, {qa, sa, za});
  std::string acc = c.op("MatMulInteger", {qa, c.in(1), za, c.in(3)});
  std::string f = c.op("Cast", {acc}, {Attribute::make_int("to", 1)});
  std::string scale = c.op("Mul", {sa, c.in(2)});
  if (!c.has_in(4)) {
    c.op("Mul", {f, scale}, {}, c.out_name(0));
    return;
  }
  c.op("Add", {c.op("Mul", {f, scale}), c.in(4)}, {}, c.out_name(0));
}

void matmul_integer_to_float(Ctx& c) {
  for (size_t i : {0, 1, 2, 3}) c.need_in(i, "A, B, a_scale or b_scale");
  std::string acc = c.op("MatMulInteger", {c.in(0), c.in(1), c.in(4), c.in(5)});
  std::string f = c.op("Cast", {acc}, {Attribute::make_int("to", 1)});
  std::string scale = c.op("Mul", {c.in(2), c.in(3)});
  if (!c.has_in(6)) {
    c.op("Mul", {f, scale}, {}, c.out_name(0));
    return;
  }
  c.op("Add", {c.op("Mul", {f, scale}), c.in(6)}, {}, c.out_name(0));
}

// Weight-only quantized product (ORT's 2/4/8-bit MatMulNBits): B [N, blocks, blob]
// packed low bits first, one scale (and zero point, default 2^(bits-1)) per
// block of `block_size` along K. The weight is dequantized here, once, into an
// f32 [K, N] constant (what ORT computes at accuracy_level 0, in f32 memory).
void matmul_nbits(Ctx& c) {
  for (size_t i : {0, 1, 2}) c.need_in(i, "A, B or scales");
  if (c.has_in(4)) c.unsupported("input 4 (g_idx, activation-order quantization) is not lowered");
  const int64_t K = c.n.get_int("K", 0), N = c.n.get_int("N", 0), bits = c.n.get_int("bits", 4),
                block = c.n.get_int("block_size", 0);
  if (K <= 0 || N <= 0 || block <= 0) c.invalid("attributes K, N and block_size must be positive");
  if (bits != 2 && bits != 4 && bits != 8) c.unsupported(fmt::format("bits={} is not lowered (2, 4, 8 are)", bits));
  const Tensor* b = c.initializer(c.in(1));
  const Tensor* sc = c.initializer(c.in(2));
  const Tensor* zp = c.has_in(3) ? c.initializer(c.in(3)) : nullptr;
  if (!b || !sc || (c.has_in(3) && !zp))
    c.unsupported("B, scales and zero_points must be constant initializers (they are dequantized at load)");
  const int64_t blocks = (K + block - 1) / block, blob = block * bits / 8;
  if (b->dtype() != DType::U8 || b->numel() != N * blocks * blob)
    c.invalid(fmt::format("B must be uint8 of {}x{}x{} bytes, got {} {}", N, blocks, blob, dtype_name(b->dtype()),
                          b->shape_string()));
  if (sc->numel() != N * blocks) c.invalid(fmt::format("scales must hold {} values, got {}", N * blocks, sc->numel()));
  std::vector<float> scales(static_cast<size_t>(N * blocks));
  Tensor scf = sc->cast(DType::F32).contiguous();
  std::copy_n(scf.data<float>(), scales.size(), scales.begin());
  const int64_t zp_row = (blocks * bits + 7) / 8;  // packed zero point bytes per column of the product
  std::vector<float> zps(static_cast<size_t>(N * blocks), static_cast<float>(1 << (bits - 1)));
  if (zp) {
    if (zp->dtype() == DType::U8) {
      if (zp->numel() != N * zp_row) c.invalid(fmt::format("packed zero_points must hold {} bytes", N * zp_row));
      Tensor z = zp->contiguous();
      const uint8_t* zd = z.data<uint8_t>();
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < blocks; ++k) {
          int64_t bit = k * bits;
          zps[n * blocks + k] = static_cast<float>((zd[n * zp_row + bit / 8] >> (bit % 8)) & ((1 << bits) - 1));
        }
    } else {
      if (zp->numel() != N * blocks) c.invalid(fmt::format("zero_points must hold {} values", N * blocks));
      Tensor z = zp->cast(DType::F32).contiguous();
      std::copy_n(z.data<float>(), zps.size(), zps.begin());
    }
  }
  Tensor bc = b->contiguous();
  const uint8_t* bd = bc.data<uint8_t>();
  std::vector<float> w(static_cast<size_t>(K * N));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t kb = 0; kb < blocks; ++kb) {
      const uint8_t* blk = bd + (n * blocks + kb) * blob;
      const float s = scales[n * blocks + kb], z = zps[n * blocks + kb];
      for (int64_t j = 0; j < block && kb * block + j < K; ++j) {
        int64_t bit = j * bits;
        float q = static_cast<float>((blk[bit / 8] >> (bit % 8)) & ((1 << bits) - 1));
        w[(kb * block + j) * N + n] = (q - z) * s;
      }
    }
  std::string wt = c.constant(Tensor::from_vector(DType::F32, {K, N}, w), "B_dequantized");
  if (sc->dtype() != DType::F32) wt = c.op("Cast", {wt}, {Attribute::make_int("to", sc->dtype() == DType::F16 ? 10 : 16)});
  if (!c.has_in(5)) {
    c.op("MatMul", {c.in(0), wt}, {}, c.out_name(0));
    return;
  }
  c.op("Add", {c.op("MatMul", {c.in(0), wt}), c.in(5)}, {}, c.out_name(0));
}

// com.microsoft GridSample (torch exports before opset 16): ONNX GridSample,
// whose modes were renamed in 20 (bilinear → linear, bicubic → cubic).
void grid_sample(Ctx& c) {
  Node m = c.n;
  m.domain.clear();
  std::string mode = c.n.get_string("mode", "bilinear");
  if (mode != "bilinear" && mode != "nearest" && mode != "bicubic")
    c.invalid(fmt::format("mode '{}' is not bilinear, nearest or bicubic", mode));
  m.remove_attr("mode");
  m.attributes.push_back(Attribute::make_string("mode", mode == "bilinear" ? "linear" : mode == "bicubic" ? "cubic"
                                                                                                           : mode));
  c.out.push_back(std::move(m));
}

// com.microsoft QuantizeLinear / DequantizeLinear / Trilu: the ONNX ops (same semantics).
void as_onnx(Ctx& c) {
  Node m = c.n;
  m.domain.clear();
  c.out.push_back(std::move(m));
}

// ---- transformer fusions (ORT's transformer optimizer, exporters) ----

void gelu(Ctx& c) { c.op("Gelu", {c.in(0)}, {}, c.out_name(0)); }

void fast_gelu(Ctx& c) {
  std::string x = c.has_in(1) ? c.op("Add", {c.in(0), c.in(1)}) : c.in(0);
  c.op("Gelu", {x}, {Attribute::make_string("approximate", "tanh")}, c.out_name(0));
}

void bias_gelu(Ctx& c) {
  c.need_in(1, "bias");
  c.op("Gelu", {c.op("Add", {c.in(0), c.in(1)})}, {}, c.out_name(0));
}

void quick_gelu(Ctx& c) {
  float alpha = c.n.get_float("alpha", 1.702f);
  std::string ax = alpha == 1.0f ? c.in(0) : c.op("Mul", {c.in(0), c.f32(alpha, "alpha")});
  c.op("Mul", {c.in(0), c.op("Sigmoid", {ax})}, {}, c.out_name(0));
}

void bias_add(Ctx& c) {
  for (size_t i : {0, 1, 2}) c.need_in(i, "X, bias or skip");
  c.op("Add", {c.op("Add", {c.in(0), c.in(1)}), c.in(2)}, {}, c.out_name(0));
}

// input + skip [+ bias], written to output `sum_out` when the model reads it.
std::string skip_sum(Ctx& c, size_t bias_index, size_t sum_out) {
  c.need_in(0, "input");
  c.need_in(1, "skip");
  bool bias = c.has_in(bias_index);
  std::string dest = c.has_out(sum_out) ? c.out_name(sum_out) : std::string();
  std::string s = c.op("Add", {c.in(0), c.in(1)}, {}, bias ? std::string() : dest);
  if (bias) s = c.op("Add", {s, c.in(bias_index)}, {}, dest);
  return s;
}

void skip_layer_norm(Ctx& c) {
  c.need_in(2, "gamma");
  std::string s = skip_sum(c, 4, 3);
  c.emit("LayerNormalization", {s, c.in(2), c.in(3)}, {c.out_name(0), c.out_name(1), c.out_name(2)},
         {Attribute::make_int("axis", -1), Attribute::make_float("epsilon", c.n.get_float("epsilon", 1e-12f))});
}

// 1 / sqrt(mean(x^2 over the last axis) + eps), keeping that axis as 1.
void rms_inv_std(Ctx& c, const std::string& x, float eps, int64_t axis, const std::string& dest) {
  auto r = c.rank_of(x);
  std::vector<int64_t> axes;
  if (axis == -1) {
    axes = {-1};
  } else {
    if (!r) c.unsupported("inv_std_var with an axis other than -1 needs the input's rank to be known");
    int64_t a = axis < 0 ? axis + *r : axis;
    for (int64_t d = a; d < *r; ++d) axes.push_back(d);
  }
  std::string ms = c.op("ReduceMean", {c.op("Mul", {x, x}), c.i64s(axes, "axes")}, {Attribute::make_int("keepdims", 1)});
  c.op("Reciprocal", {c.op("Sqrt", {c.op("Add", {ms, c.f32(eps, "epsilon")})})}, {}, dest);
}

void skip_simplified_layer_norm(Ctx& c) {
  c.need_in(2, "gamma");
  if (c.has_out(1)) c.unsupported("output 1 (mean) is not defined for the simplified (RMS) form");
  float eps = c.n.get_float("epsilon", 1e-12f);
  std::string s = skip_sum(c, 3, 3);
  c.op("RMSNormalization", {s, c.in(2)}, {Attribute::make_int("axis", -1), Attribute::make_float("epsilon", eps)},
       c.out_name(0));
  if (c.has_out(2)) rms_inv_std(c, s, eps, -1, c.out_name(2));
}

void simplified_layer_norm(Ctx& c) {
  c.need_in(1, "scale");
  int64_t axis = c.n.get_int("axis", -1);
  float eps = c.n.get_float("epsilon", 1e-5f);
  c.op("RMSNormalization", {c.in(0), c.in(1)},
       {Attribute::make_int("axis", axis), Attribute::make_float("epsilon", eps)}, c.out_name(0));
  if (c.has_out(1)) rms_inv_std(c, c.in(0), eps, axis, c.out_name(1));
}

std::string swap_last_two(Ctx& c, const std::string& x, const char* which) {
  auto r = c.rank_of(x);
  if (!r) c.unsupported(fmt::format("{}=1 needs the rank of '{}' to be known", which, x));
  if (*r < 2) c.invalid(fmt::format("{}=1 on '{}' of rank {}", which, x, *r));
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < *r; ++d) perm.push_back(d);
  std::swap(perm[*r - 1], perm[*r - 2]);
  return c.op("Transpose", {x}, {Attribute::make_ints("perm", perm)});
}

void fused_matmul(Ctx& c) {
  if (c.n.get_int("transBatchA", 0) || c.n.get_int("transBatchB", 0))
    c.unsupported("transBatchA/transBatchB=1 is not lowered");
  std::string a = c.n.get_int("transA", 0) ? swap_last_two(c, c.in(0), "transA") : c.in(0);
  std::string b = c.n.get_int("transB", 0) ? swap_last_two(c, c.in(1), "transB") : c.in(1);
  float alpha = c.n.get_float("alpha", 1.0f);
  if (alpha == 1.0f) {
    c.op("MatMul", {a, b}, {}, c.out_name(0));
    return;
  }
  c.op("Mul", {c.op("MatMul", {a, b}), c.f32(alpha, "alpha")}, {}, c.out_name(0));
}

void fused_gemm(Ctx& c) {
  std::vector<Attribute> attrs;
  for (const char* a : {"alpha", "beta", "transA", "transB"})
    if (auto* at = c.n.attr(a)) attrs.push_back(*at);
  std::string act = c.n.get_string("activation", "");
  if (act.empty()) {
    c.op("Gemm", {c.in(0), c.in(1), c.in(2)}, attrs, c.out_name(0));
    return;
  }
  std::vector<float> p;
  if (act == "LeakyRelu" || act == "Elu") p = {c.n.get_float("activation_alpha", act == "Elu" ? 1.0f : 0.01f)};
  if (act == "HardSigmoid") p = {c.n.get_float("activation_alpha", 0.2f), c.n.get_float("activation_beta", 0.5f)};
  if (act == "Clip") c.unsupported("activation Clip is not lowered for FusedGemm");
  c.activation(act, c.op("Gemm", {c.in(0), c.in(1), c.in(2)}, attrs), p, c.out_name(0));
}

void fused_conv(Ctx& c) {
  std::vector<Attribute> attrs;
  for (const auto& a : c.n.attributes)
    if (a.name != "activation" && a.name != "activation_params") attrs.push_back(a);
  std::string act = c.n.get_string("activation", "");
  bool z = c.has_in(3);
  std::string dest = act.empty() && !z ? c.out_name(0) : std::string();
  std::string y = c.op("Conv", {c.in(0), c.in(1), c.in(2)}, attrs, dest);
  if (z) y = c.op("Add", {y, c.in(3)}, {}, act.empty() ? c.out_name(0) : std::string());
  if (!act.empty()) c.activation(act, y, c.n.get_floats("activation_params"), c.out_name(0));
}

// [B, S, N·h] → [B, N, S, h].
std::string split_heads(Ctx& c, const std::string& x, int64_t heads) {
  std::string r = c.op("Reshape", {x, c.i64s({0, 0, heads, -1}, "heads_shape")});
  return c.op("Transpose", {r}, {Attribute::make_ints("perm", {0, 2, 1, 3})});
}

// Scaled dot-product attention over rank-3 [B, S, N·h] Q, K, V with an additive
// mask, written as exporters write it (head split, MatMul, scale, mask,
// Softmax, MatMul, head merge): the attention fusion (-O3) makes it one
// hodu.Attention, and at every other level each node runs on an engine kernel.
// `q_hidden` (N·h) gives the default scale 1/sqrt(h) as a constant when known.
// `past` ([2, B, N, P, h], Attention's cache) goes before K and V; `present`
// (output index, 0 for none) gets them back, [2, B, N, P + S, h].
void attention_core(Ctx& c, const std::string& q, const std::string& k, const std::string& v, std::string mask,
                    int64_t heads, bool causal, std::optional<int64_t> q_hidden, float filter,
                    const std::string& past = {}, size_t present = 0) {
  std::string q4 = split_heads(c, q, heads), k4 = split_heads(c, k, heads), v4 = split_heads(c, v, heads);
  std::string diagonal = c.i64(1, "diagonal");  // causal: key t is masked above query s + past length
  if (!past.empty()) {
    std::string axis0 = c.i64s({0}, "axis");
    auto cached = [&](int64_t i, const std::string& x) {
      std::string p = c.op("Squeeze", {c.op("Slice", {past, c.i64s({i}, "start"), c.i64s({i + 1}, "end"), axis0}),
                                       axis0});
      return c.op("Concat", {p, x}, {Attribute::make_int("axis", 2)});
    };
    k4 = cached(0, k4);
    v4 = cached(1, v4);
    std::string plen = c.op("Squeeze", {c.dim1(past, 3), axis0});
    diagonal = c.op("Add", {plen, diagonal});
  }
  if (present)
    c.op("Concat", {c.op("Unsqueeze", {k4, c.i64s({0}, "axes")}), c.op("Unsqueeze", {v4, c.i64s({0}, "axes")})},
         {Attribute::make_int("axis", 0)}, c.out_name(present));
  std::string kt = c.op("Transpose", {k4}, {Attribute::make_ints("perm", {0, 1, 3, 2})});
  std::string s = c.op("MatMul", {q4, kt});
  float scale = c.n.get_float("scale", 0.0f);
  std::string scale_v;
  if (scale != 0.0f) {
    scale_v = c.f32(scale, "scale");
  } else if (q_hidden && *q_hidden % heads == 0) {
    scale_v = c.f32(static_cast<float>(1.0 / std::sqrt(static_cast<double>(*q_hidden / heads))), "scale");
  } else {  // 1/sqrt(head size), the head size known only while running
    std::string h = c.op("Cast", {c.dim1(q4, 3)}, {Attribute::make_int("to", 1)});
    scale_v = c.op("Reciprocal", {c.op("Sqrt", {h})});
  }
  s = c.op("Mul", {s, scale_v});
  if (causal) {  // filter above the diagonal (ORT adds mask_filter_value there)
    Attribute one = Attribute::make_tensor("value", Tensor::from_vector(DType::F32, {1}, std::vector<float>{1.0f}));
    std::string ones = c.op("ConstantOfShape", {c.op("Shape", {s}, {Attribute::make_int("start", -2)})}, {one});
    std::string upper = c.op("Trilu", {ones, diagonal}, {Attribute::make_int("upper", 1)});
    std::string cm = c.op("Mul", {upper, c.f32(filter, "mask_filter")});
    mask = mask.empty() ? cm : c.op("Add", {mask, cm});
  }
  if (!mask.empty()) s = c.op("Add", {s, mask});
  std::string p = c.op("Softmax", {s}, {Attribute::make_int("axis", -1)});
  std::string y = c.op("Transpose", {c.op("MatMul", {p, v4})}, {Attribute::make_ints("perm", {0, 2, 1, 3})});
  c.op("Reshape", {y, c.i64s({0, 0, -1}, "merge_shape")}, {}, c.out_name(0));
}

// ORT's key padding / raw attention masks (int, 1 keep, 0 masked) as an additive
// mask broadcasting to [B, N, S, T]: rank 2 [B, T] or rank 3 [B, S, T]; with
// `seq_of` (Attention's input) also rank 1: [B] end positions (exclusive) of the
// keys, or [2B] end then start positions.
std::string padding_mask(Ctx& c, const std::string& mask, float filter, const std::string& seq_of = {}) {
  auto r = c.rank_of(mask);
  if (!r) c.unsupported(fmt::format("the rank of mask '{}' is not known (rank 2 [batch, total_seq] or rank 3 "
                                    "[batch, seq, total_seq] masks are lowered)", mask));
  if (*r == 1 && !seq_of.empty()) {
    // keep key t of row b when start[b] <= t < end[b]; start is 0 for a [B] mask
    // (the slice past B is then empty and the zeros take its place).
    std::string m = c.op("Cast", {mask}, {Attribute::make_int("to", 7)});
    std::string axis0 = c.i64s({0}, "axis"), col = c.i64s({1}, "axis");
    std::string t = c.op("Squeeze", {c.dim1(seq_of, 1), axis0});
    std::string pos = c.op("Range", {c.i64(0, "start"), t, c.i64(1, "delta")});  // [T]
    // A mask whose length is the batch (the same number or symbol) has no start positions.
    auto mt = c.type_of(mask), it = c.type_of(seq_of);
    bool ends_only = mt && it && mt->shape.rank_known() && it->shape.rank_known() && it->shape.rank() >= 1 &&
                     (mt->shape[0].is_known() || mt->shape[0].is_symbolic()) && mt->shape[0] == it->shape[0];
    std::string keep;
    if (ends_only) {
      keep = c.op("Less", {pos, c.op("Unsqueeze", {m, col})});
    } else {
      std::string batch = c.dim1(seq_of, 0), zero = c.i64s({0}, "zero");
      std::string end = c.op("Slice", {m, zero, batch, axis0});
      std::string two_b = c.op("Mul", {batch, c.i64s({2}, "two")});
      std::string zeros = c.op("ConstantOfShape", {batch}, {Attribute::make_tensor("value",
                               Tensor::from_vector(DType::I64, {1}, std::vector<int64_t>{0}))});
      std::string start = c.op("Slice", {c.op("Concat", {c.op("Slice", {m, batch, two_b, axis0}), zeros},
                                              {Attribute::make_int("axis", 0)}),
                                        zero, batch, axis0});
      keep = c.op("And", {c.op("Less", {pos, c.op("Unsqueeze", {end, col})}),
                          c.op("GreaterOrEqual", {pos, c.op("Unsqueeze", {start, col})})});
    }
    std::string add = c.op("Where", {keep, c.f32(0.0f, "mask_keep"), c.f32(filter, "mask_filter")});
    return c.op("Unsqueeze", {add, c.i64s({1, 2}, "axes")});
  }
  if (*r != 2 && *r != 3)
    c.unsupported(fmt::format("a rank-{} mask is not lowered (rank 2 [batch, total_seq] or rank 3 "
                              "[batch, seq, total_seq] are{})", *r,
                              seq_of.empty() ? "" : "; so are 1-D end (and start) positions; 4-D masks are not"));
  std::string add = c.additive_mask(mask, filter);
  return c.op("Unsqueeze", {add, c.i64s(*r == 2 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{1}, "axes")});
}

// Attention and QAttention after the QKV product: `qkv` [B, S, q + k + v],
// `mask` and `bias_add` (attention_bias) input indices, `weights` for the widths.
void attention_from_qkv(Ctx& c, const std::string& qkv, size_t mask_in, size_t bias_in, const std::string& weights,
                        const std::string& past = {}) {
  if (c.n.get_int("do_rotary", 0)) c.unsupported("do_rotary=1 is not lowered");
  if (c.n.get_int("past_present_share_buffer", 0)) c.unsupported("past_present_share_buffer=1 is not lowered");
  c.no_outputs_beyond(2, "outputs past present are not produced");
  int64_t heads = c.n.get_int("num_heads", 0);
  if (heads <= 0) c.invalid("num_heads must be positive");
  float filter = c.n.get_float("mask_filter_value", -10000.0f);
  auto sizes = c.n.get_ints("qkv_hidden_sizes");
  std::vector<Attribute> split_attrs = {Attribute::make_int("axis", -1)};
  std::vector<std::string> split_in = {qkv};
  if (!sizes.empty()) {
    if (sizes.size() != 3) c.invalid("qkv_hidden_sizes must have 3 values");
    if (sizes[0] != sizes[1]) c.unsupported("qkv_hidden_sizes with Q and K of different widths is not lowered");
    split_in.push_back(c.i64s(sizes, "qkv_sizes"));
  } else {
    split_attrs.push_back(Attribute::make_int("num_outputs", 3));
  }
  std::string q = c.L.fresh(c.base() + "/Q"), k = c.L.fresh(c.base() + "/K"), v = c.L.fresh(c.base() + "/V");
  c.emit("Split", split_in, {q, k, v}, split_attrs);
  std::string mask;
  if (c.has_in(mask_in)) {
    if (!past.empty() && c.rank_of(c.in(mask_in)) == std::optional<int64_t>(1))
      c.unsupported("a 1-D mask_index together with past is not lowered (2-D [batch, past + seq] masks are)");
    mask = padding_mask(c, c.in(mask_in), filter, c.in(0));
  }
  if (bias_in && c.has_in(bias_in)) mask = mask.empty() ? c.in(bias_in) : c.op("Add", {mask, c.in(bias_in)});
  std::optional<int64_t> q_hidden;
  if (!sizes.empty()) q_hidden = sizes[0];
  else if (auto w = c.dim_of(weights, 1); w && *w % 3 == 0) q_hidden = *w / 3;
  if (c.has_out(1) && !sizes.empty() && sizes[1] != sizes[2])
    c.unsupported("output 1 (present) with K and V of different widths is not defined");
  attention_core(c, q, k, v, mask, heads, c.n.get_int("unidirectional", 0) != 0, q_hidden, filter, past,
                 c.has_out(1) ? 1 : 0);
}

void attention(Ctx& c) {
  c.need_in(0, "input");
  c.need_in(1, "weights");
  if (c.has_in(6)) c.unsupported("input 6 (past_sequence_length, the shared-buffer cache) is not lowered");
  std::string qkv = c.op("MatMul", {c.in(0), c.in(1)});
  if (c.has_in(2)) qkv = c.op("Add", {qkv, c.in(2)});
  attention_from_qkv(c, qkv, 3, 5, c.in(1), c.in(4));
}

// ORT's dynamically quantized Attention: the QKV product in integers
// (uint8/int8 input, int8 weight, per-tensor or per-column weight scale and
// zero point), scaled to float, + bias; the rest as Attention.
void qattention(Ctx& c) {
  for (size_t i : {0, 1, 2, 3, 4}) c.need_in(i, "input, weight, bias, input_scale or weight_scale");
  if (c.has_in(8)) c.unsupported("input 8 (past, the key/value cache) is not lowered");
  std::string acc = c.op("MatMulInteger", {c.in(0), c.in(1), c.in(6), c.in(7)});
  std::string f = c.op("Cast", {acc}, {Attribute::make_int("to", 1)});
  std::string qkv = c.op("Add", {c.op("Mul", {f, c.op("Mul", {c.in(3), c.in(4)})}), c.in(2)});
  attention_from_qkv(c, qkv, 5, 0, c.in(1));
}

void multi_head_attention(Ctx& c) {
  c.need_in(0, "query");
  if (!c.has_in(1) || !c.has_in(2))
    c.unsupported("packed QKV or packed KV (key or value left out) is not lowered; give query, key and value");
  for (size_t i : {1, 2})
    if (auto r = c.rank_of(c.in(i)); r && *r != 3)
      c.unsupported(fmt::format("a rank-{} {} is not lowered (rank 3 [batch, seq, hidden] is)", *r,
                                i == 1 ? "key" : "value"));
  if (auto r = c.rank_of(c.in(0)); r && *r != 3)
    c.unsupported(fmt::format("a rank-{} query is not lowered (rank 3 [batch, seq, hidden] is)", *r));
  c.no_inputs_from(6, "the key/value cache (past_key, past_value, past_sequence_length, cache_indirection)");
  int64_t heads = c.n.get_int("num_heads", 0);
  if (heads <= 0) c.invalid("num_heads must be positive");
  float filter = c.n.get_float("mask_filter_value", -10000.0f);
  std::string q = c.in(0), k = c.in(1), v = c.in(2);
  if (c.has_in(3)) {
    std::string sizes = c.op("Concat", {c.dim1(q, 2), c.dim1(k, 2), c.dim1(v, 2)}, {Attribute::make_int("axis", 0)});
    std::string bq = c.L.fresh(c.base() + "/bias_q"), bk = c.L.fresh(c.base() + "/bias_k"),
                bv = c.L.fresh(c.base() + "/bias_v");
    c.emit("Split", {c.in(3), sizes}, {bq, bk, bv}, {Attribute::make_int("axis", 0)});
    q = c.op("Add", {q, bq});
    k = c.op("Add", {k, bk});
    v = c.op("Add", {v, bv});
  }
  std::string mask;
  if (c.has_in(4)) mask = padding_mask(c, c.in(4), filter);
  if (c.has_in(5)) mask = mask.empty() ? c.in(5) : c.op("Add", {mask, c.in(5)});
  attention_core(c, q, k, v, mask, heads, c.n.get_int("unidirectional", 0) != 0, c.dim_of(c.in(0), 2), filter);
  // present_key / present_value without a past: K and V as [B, N, L, H].
  for (size_t i : {1, 2}) {
    if (!c.has_out(i)) continue;
    std::string heads4 = c.op("Reshape", {i == 1 ? k : v, c.i64s({0, 0, heads, -1}, "heads_shape")});
    c.op("Transpose", {heads4}, {Attribute::make_ints("perm", {0, 2, 1, 3})}, c.out_name(i));
  }
  c.no_outputs_beyond(3, "outputs past present_value are not produced");
}

// `in`: input_ids, segment_ids, word, position and segment embeddings, gamma,
// beta, mask, position_ids ("" where absent).
void embed_layer_norm_of(Ctx& c, const std::vector<std::string>& in) {
  std::string ids = in[0];
  std::string sum = c.op("Gather", {in[2], ids});
  std::string pos;
  if (!in[8].empty()) {
    pos = c.op("Gather", {in[3], in[8]});
  } else {
    std::string s = c.op("Squeeze", {c.dim1(ids, 1), c.i64s({0}, "axes")});
    std::string range = c.op("Range", {c.i64(0, "start"), s, c.i64(1, "delta")});
    pos = c.op("Gather", {in[3], range});
  }
  sum = c.op("Add", {sum, pos});
  if (!in[1].empty() != !in[4].empty()) c.invalid("segment_ids and segment_embedding must be given together");
  bool embedding_sum = c.has_out(2);
  if (!in[1].empty()) sum = c.op("Add", {sum, c.op("Gather", {in[4], in[1]})});
  if (embedding_sum) c.op("Identity", {sum}, {}, c.out_name(2));
  c.emit("LayerNormalization", {sum, in[5], in[6]}, {c.out_name(0)},
         {Attribute::make_int("axis", -1), Attribute::make_float("epsilon", c.n.get_float("epsilon", 1e-12f))});
  if (!c.has_out(1)) return;
  if (c.n.get_int("mask_index_type", 1) != 1)
    c.unsupported("mask_index with mask_index_type other than 1 is not lowered");
  if (!in[7].empty()) {
    std::string m = c.op("Cast", {in[7]}, {Attribute::make_int("to", 6)});  // int32
    c.op("ReduceSum", {m, c.i64s({1}, "axes")}, {Attribute::make_int("keepdims", 0)}, c.out_name(1));
  } else {
    Attribute value = Attribute::make_tensor("value", Tensor::from_vector(DType::I32, {1}, std::vector<int32_t>{0}));
    c.op("ConstantOfShape", {c.dim1(ids, 0)}, {value}, c.out_name(1));
  }
}

void embed_layer_norm(Ctx& c) {
  for (size_t i : {0, 2, 3, 5, 6}) c.need_in(i, "input_ids, word_embedding, position_embedding, gamma or beta");
  std::vector<std::string> in;
  for (size_t i = 0; i < 9; ++i) in.push_back(c.in(i));
  embed_layer_norm_of(c, in);
}

// quantize_dynamic's EmbedLayerNormalization: uint8 tables, gamma and beta, each
// with its scale and zero point, dequantized (ORT dequantizes each element it reads).
void qembed_layer_norm(Ctx& c) {
  for (size_t i : {0, 2, 3, 5, 6, 8, 9, 11, 12, 13, 14, 16, 17})
    c.need_in(i, "input_ids, a table, gamma, beta or their scale and zero point");
  auto deq = [&](size_t q, size_t s, size_t z) { return c.has_in(q) ? c.dq(c.in(q), c.in(s), c.in(z)) : std::string(); };
  embed_layer_norm_of(c, {c.in(0), c.in(1), deq(2, 8, 13), deq(3, 9, 14), deq(4, 10, 15), deq(5, 11, 16),
                          deq(6, 12, 17), c.in(7), ""});
}

void rotary_embedding(Ctx& c) {
  for (size_t i : {0, 1, 2, 3}) c.need_in(i, "input, position_ids, cos_cache or sin_cache");
  if (c.n.get_int("is_packed_batching", 0)) c.unsupported("is_packed_batching=1 is not lowered");
  if (c.n.get_float("scale", 1.0f) != 1.0f) c.unsupported("scale other than 1 is not lowered");
  std::string x = c.in(0);
  auto xr = c.rank_of(x);
  if (!xr || (*xr != 3 && *xr != 4)) c.unsupported("the input's rank must be known (3 or 4)");
  int64_t heads = c.n.get_int("num_heads", 0);
  int64_t rot = c.n.get_int("rotary_embedding_dim", 0);
  if (*xr == 3 && heads == 0) {
    auto hidden = c.dim_of(x, 2);
    auto half = c.dim_of(c.in(2), 1);
    if (rot != 0 || !hidden || !half)
      c.unsupported("num_heads is not given and cannot be derived (needs the hidden size and cos_cache's width)");
    heads = *hidden / (*half * 2);
  }
  std::string pos = c.in(1);
  auto pr = c.rank_of(pos);
  if (!pr) c.unsupported("the rank of position_ids must be known (1: an offset, 2: [batch, seq])");
  pos = c.op("Cast", {pos}, {Attribute::make_int("to", 7)});
  if (*pr == 1) {  // one offset: positions offset .. offset + seq - 1 for every batch
    std::string off = c.op("Reshape", {pos, c.i64s({}, "scalar_shape")});
    std::string seq_dim = c.dim1(x, *xr == 3 ? 1 : 2);
    std::string seq = c.op("Squeeze", {seq_dim, c.i64s({0}, "axes")});
    std::string range = c.op("Range", {off, c.op("Add", {off, seq}), c.i64(1, "delta")});
    std::string shape = c.op("Concat", {c.dim1(x, 0), seq_dim}, {Attribute::make_int("axis", 0)});
    pos = c.op("Expand", {range, shape});
  } else if (*pr != 2) {
    c.invalid(fmt::format("position_ids must be 1-D or 2-D, got rank {}", *pr));
  }
  std::vector<Attribute> attrs = {Attribute::make_int("interleaved", c.n.get_int("interleaved", 0))};
  if (heads) attrs.push_back(Attribute::make_int("num_heads", heads));
  if (rot) attrs.push_back(Attribute::make_int("rotary_embedding_dim", rot));
  c.emit("RotaryEmbedding", {x, c.in(2), c.in(3), pos}, {c.out_name(0)}, std::move(attrs));
}

const std::map<std::string, LowerFn>& lowerings() {
  static const std::map<std::string, LowerFn> table = {
      {"QLinearAdd", [](Ctx& c) { qlinear_binary(c, "Add"); }},
      {"QLinearMul", [](Ctx& c) { qlinear_binary(c, "Mul"); }},
      {"QLinearSigmoid", [](Ctx& c) { qlinear_unary(c, [&](const std::string& x) { return c.op("Sigmoid", {x}); }); }},
      {"QLinearLeakyRelu",
       [](Ctx& c) {
         float alpha = c.n.get_float("alpha", 0.01f);
         qlinear_unary(c, [&](const std::string& x) {
           return c.op("LeakyRelu", {x}, {Attribute::make_float("alpha", alpha)});
         });
       }},
      {"QLinearConcat", qlinear_concat},
      {"QLinearGlobalAveragePool", qlinear_global_average_pool},
      {"QLinearAveragePool", qlinear_average_pool},
      {"QLinearSoftmax", qlinear_softmax},
      {"QGemm", qgemm},
      {"DynamicQuantizeMatMul", dynamic_quantize_matmul},
      {"MatMulIntegerToFloat", matmul_integer_to_float},
      {"MatMulNBits", matmul_nbits},
      {"QuantizeLinear", as_onnx},
      {"Trilu", as_onnx},
      {"GridSample", grid_sample},
      {"DequantizeLinear", as_onnx},
      {"Gelu", gelu},
      {"FastGelu", fast_gelu},
      {"BiasGelu", bias_gelu},
      {"QuickGelu", quick_gelu},
      {"BiasAdd", bias_add},
      {"SkipLayerNormalization", skip_layer_norm},
      {"SkipSimplifiedLayerNormalization", skip_simplified_layer_norm},
      {"SimplifiedLayerNormalization", simplified_layer_norm},
      {"FusedMatMul", fused_matmul},
      {"FusedGemm", fused_gemm},
      {"FusedConv", fused_conv},
      {"Attention", attention},
      {"QAttention", qattention},
      {"MultiHeadAttention", multi_head_attention},
      {"EmbedLayerNormalization", embed_layer_norm},
      {"QEmbedLayerNormalization", qembed_layer_norm},
      {"RotaryEmbedding", rotary_embedding},
  };
  return table;
}

bool is_contrib(const Node& n) {
  if (n.domain == kDomain) return true;
  // ORT registers SimplifiedLayerNormalization in the ai.onnx domain.
  return n.domain.empty() && n.op_type == "SimplifiedLayerNormalization";
}

bool has_contrib(const Graph& g) {
  for (const auto& n : g.nodes) {
    if (is_contrib(n)) return true;
    for (const auto& a : n.attributes) {
      if (a.g && has_contrib(*a.g)) return true;
      for (const auto& sg : a.graphs)
        if (has_contrib(*sg)) return true;
    }
  }
  return false;
}

void lower_graph(Lowering& L, Graph& g) {
  L.scope.push_back(&g);
  std::vector<Node> out;
  out.reserve(g.nodes.size());
  for (Node& n : g.nodes) {
    for (auto& a : n.attributes) {
      if (a.g) lower_graph(L, *a.g);
      for (auto& sg : a.graphs) lower_graph(L, *sg);
    }
    if (!is_contrib(n)) {
      out.push_back(std::move(n));
      continue;
    }
    auto it = lowerings().find(n.op_type);
    if (it == lowerings().end()) {
      std::string list;
      for (const auto& s : supported_contrib_ops()) list += (list.empty() ? "" : ", ") + s;
      fail(ErrorCode::Unsupported,
           "{}: {}: unsupported op {} of domain {} (ONNX Runtime contrib op); hodu lowers these {} ops: {}", L.what,
           n.describe(), n.op_type, kDomain, lowerings().size(), list);
    }
    Ctx c{L, g, n, out};
    it->second(c);
  }
  g.nodes = std::move(out);
  L.scope.pop_back();
}

}  // namespace

std::vector<std::string> supported_contrib_ops() {
  std::vector<std::string> ops;
  for (const auto& [name, fn] : lowerings()) ops.push_back(name);
  return ops;
}

void lower_contrib_ops(Model& model, const std::string& what) {
  if (!has_contrib(model.graph)) return;
  Lowering L;
  L.what = what;
  collect_graph_names(model.graph, L.names);
  lower_graph(L, model.graph);
  // The nodes are standard ONNX now, some of them (Gelu, RMSNormalization,
  // Attention, RotaryEmbedding) newer than the opset the file declares.
  model.opset_imports.erase(kDomain);
}

}  // namespace hodu
