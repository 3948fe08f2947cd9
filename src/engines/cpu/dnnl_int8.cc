// Quantized ops on the cpu engine:
//   QLinearConv, ConvInteger       oneDNN int8 convolution (u8/s8 src, s8 weights)
//   QLinearMatMul, MatMulInteger   oneDNN int8 matmul
//   QuantizeLinear, DequantizeLinear  hand-written loops (per tensor or per axis)
//
// oneDNN computes the int32 accumulator exactly, subtracting the source zero point (padding
// counts as the zero point, as in ONNX), adds an int32 bias, then for a u8/s8 output
// multiplies by the output scale x_scale*w_scale/y_scale (rounded to f32 as ONNX's reference
// rounds it), adds the output zero point and rounds half to even with saturation. The
// interpreter does the same product in double: the two can differ by one quantum where the
// f32 product lands on the other side of a .5 than the exact one (rare; the ConvInteger and
// MatMulInteger int32 outputs are exact).
// Weights must be constants; a nonzero weight zero point is subtracted from the weights when
// every difference fits in s8 (u8 weights with zero point 128, the old quantizers' style),
// otherwise the node runs on the interpreter's kernel (QLinearMatMul/MatMulInteger: oneDNN's common
// weights zero point takes it). So do nodes whose scales or zero points are not constants, whose
// zero points are per row / per element, those oneDNN only has a reference kernel for, or (oneDNN's
// u8·s8 products saturate in 16 bits without it) any on a CPU without VNNI.
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "engines/cpu/dnnl_common.h"
#include "engines/cpu/row_kernels.h"
#include "passes/graph_utils.h"

namespace hodu::cpu {

// oneDNN's int8 kernels are exact only with VNNI (vpdpbusd accumulates in 32 bits; the
// AVX2/AVX-512 fallback vpmaddubsw saturates pairs of products in 16 bits).
bool int8_exact_isa() {
  static const bool ok = [] {
    auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    auto has = [&](dnnl::cpu_isa want) {
      auto w = static_cast<unsigned>(want);
      return (isa & w) == w;
    };
    return has(dnnl::cpu_isa::avx512_core_vnni) || has(dnnl::cpu_isa::avx2_vnni);
  }();
  return ok;
}

namespace {

bool is_8bit(DType t) { return t == DType::U8 || t == DType::I8; }

// A constant input (an initializer); `present` false when the input is absent.
struct ConstIn {
  bool present = false;
  const Tensor* t = nullptr;
};
ConstIn const_input(const PlanBuilder& b, const Node& n, size_t i) {
  if (!n.has_input(i)) return {};
  return {true, passes::constant_of(b.graph(), n.inputs[i])};
}

// Values of a float scale: 1 or `count` of them (count 0: only one).
std::optional<std::vector<float>> scales_of(const Tensor* t, int64_t count) {
  if (!t || t->dtype() != DType::F32 || t->rank() > 1) return std::nullopt;
  if (t->numel() != 1 && (count <= 1 || t->numel() != count)) return std::nullopt;
  std::vector<float> v(static_cast<size_t>(t->numel()));
  for (int64_t i = 0; i < t->numel(); ++i) v[static_cast<size_t>(i)] = static_cast<float>(t->get_double(i));
  return v;
}

// Values of an optional zero point of dtype `dt`: 1 or `count` (count 0: only one); {0} when absent.
std::optional<std::vector<int32_t>> zero_points_of(const ConstIn& z, DType dt, int64_t count) {
  if (!z.present) return std::vector<int32_t>{0};
  if (!z.t || z.t->dtype() != dt || z.t->rank() > 1) return std::nullopt;
  if (z.t->numel() != 1 && (count <= 1 || z.t->numel() != count)) return std::nullopt;
  std::vector<int32_t> v;
  for (int64_t x : z.t->to_int64s()) v.push_back(static_cast<int32_t>(x));
  return v;
}

// The weights minus their zero point (element i's at zp_index(i)) as s8, when every value fits.
template <typename F>
std::optional<Tensor> s8_weights(const Tensor& w, const std::vector<int32_t>& zp, F zp_index) {
  bool all_zero = std::all_of(zp.begin(), zp.end(), [](int32_t z) { return z == 0; });
  if (w.dtype() == DType::I8 && all_zero) return w.contiguous();
  auto v = w.to_int64s();
  std::vector<int8_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t d = v[i] - (zp.size() == 1 ? zp[0] : zp[zp_index(static_cast<int64_t>(i))]);
    if (d < -128 || d > 127) return std::nullopt;
    out[i] = static_cast<int8_t>(d);
  }
  return Tensor::from_vector(DType::I8, w.shape(), out);
}

// x_scale * w_scale[i] / y_scale in f32, as the interpreter (and ONNX's float scales) computes it.
std::vector<float> output_scales(float xs, const std::vector<float>& ws, float ys) {
  std::vector<float> r;
  for (float w : ws) r.push_back(xs * w / ys);
  return r;
}

// The output side of QLinearConv / QLinearMatMul: y_scale (input 6) and y_zero_point (input 7,
// whose type is the output's; absent: the input's type), with the oneDNN output scales
// x_scale * w_scale[i] / y_scale (x_scale input 1, w_scale input 4 with `w_scales` values).
// The integer ops (ConvInteger, MatMulInteger) give int32 with no scale or zero point.
struct QuantizedOutput {
  DType dtype = DType::I32;
  int32_t zero_point = 0;
  std::vector<float> scales;  // empty: no output scaling
};
std::optional<QuantizedOutput> quantized_output(PlanBuilder& b, const Node& n, bool qlinear, DType input_dtype,
                                                int64_t w_scales) {
  QuantizedOutput out;
  if (!qlinear) return out;
  auto xsc = scales_of(const_input(b, n, 1).t, 0), wsc = scales_of(const_input(b, n, 4).t, w_scales),
       ysc = scales_of(const_input(b, n, 6).t, 0);
  if (!xsc || !wsc || !ysc) return std::nullopt;
  out.scales = output_scales((*xsc)[0], *wsc, (*ysc)[0]);
  out.dtype = input_dtype;
  ConstIn yz = const_input(b, n, 7);
  if (yz.present) {
    if (!yz.t || !is_8bit(yz.t->dtype())) return std::nullopt;
    out.dtype = yz.t->dtype();
  }
  auto yzv = zero_points_of(yz, out.dtype, 0);
  if (!yzv) return std::nullopt;
  out.zero_point = (*yzv)[0];
  return out;
}

// A common zero point passed at run time (oneDNN 2.6's int8 kernels take them so).
struct RuntimeZeroPoint {
  int arg = 0;
  dnnl::memory mem;
};

// Sets the common zero points on `attr` (nonzero ones only) and returns their memories.
std::vector<RuntimeZeroPoint> set_zero_points(dnnl::primitive_attr& attr, dnnl::engine& eng,
                                              std::initializer_list<std::pair<int, int32_t>> zps) {
  std::vector<RuntimeZeroPoint> out;
  for (auto [arg, zp] : zps) {
    if (zp == 0) continue;
    attr.set_zero_points(arg, 0, {DNNL_RUNTIME_S32_VAL});
    RuntimeZeroPoint r{arg, dnnl::memory(dnnl::memory::desc({1}, dt::s32, tag::x), eng)};
    *static_cast<int32_t*>(r.mem.get_data_handle()) = zp;
    out.push_back(std::move(r));
  }
  return out;
}

class Int8Step : public Step {
 public:
  void run(RunState& rs) override {
    bind(src_, rs, reads[0]);
    bind(dst_, rs, writes[0]);
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, weights_.mem}, {DNNL_ARG_DST, dst_}};
    if (has_bias_) args[DNNL_ARG_BIAS] = bias_.mem;
    for (const auto& z : zero_points_) args[DNNL_ARG_ATTR_ZERO_POINTS | z.arg] = z.mem;
    prim_.execute(rs.stream, args);
  }

  dnnl::primitive prim_;
  dnnl::memory src_, dst_;
  PackedConstant weights_, bias_;
  bool has_bias_ = false;
  std::vector<RuntimeZeroPoint> zero_points_;
};

}  // namespace

// QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B) and ConvInteger(x, w, x_zp, w_zp).
bool make_int8_conv(PlanBuilder& b, const Node& n) {
  if (!n.domain.empty() || (n.op_type != "QLinearConv" && n.op_type != "ConvInteger")) return false;
  if (!int8_exact_isa()) return false;
  const bool qlinear = n.op_type == "QLinearConv";
  const size_t w_in = qlinear ? 3 : 1, xzp_in = qlinear ? 2 : 2, wzp_in = qlinear ? 5 : 3;
  auto x = b.static_type(n.inputs[0]);
  auto y = b.static_type(n.outputs[0]);
  const Tensor* w = passes::constant_of(b.graph(), n.inputs[w_in]);
  if (!x || !y || !w || !is_8bit(x->first) || !is_8bit(w->dtype())) return false;
  const auto& xs = x->second;
  const auto& ys = y->second;
  int64_t spatial = static_cast<int64_t>(xs.size()) - 2;
  if (spatial < 1 || spatial > 3 || w->rank() != spatial + 2 || ys.size() != xs.size()) return false;
  const int64_t M = ys[1];
  if (w->dim(0) != M) return false;

  auto xzp = zero_points_of(const_input(b, n, xzp_in), x->first, 0);
  auto wzp = zero_points_of(const_input(b, n, wzp_in), w->dtype(), M);
  if (!xzp || !wzp) return false;
  const int64_t per_out = w->numel() / M;
  auto w8 = s8_weights(*w, *wzp, [&](int64_t i) { return i / per_out; });
  if (!w8) return false;

  auto q = quantized_output(b, n, qlinear, x->first, M);
  if (!q) return false;
  const Tensor* bias = nullptr;
  if (qlinear && n.has_input(8)) {
    bias = passes::constant_of(b.graph(), n.inputs[8]);
    if (!bias || bias->dtype() != DType::I32 || bias->rank() != 1 || bias->numel() != M) return false;
  }
  const DType out_dt = q->dtype;
  if (y->first != out_dt) return false;

  auto win = conv_window(n, xs, ys, w->shape());
  if (!win) return false;
  const dnnl::memory::desc w_user(win->weight_dims, dt::s8, win->weight_tag);
  const dt x_dt = dnnl_dtype(x->first), y_dt = dnnl_dtype(out_dt);
  bool blocked = b.blocked_layouts();
  dnnl::memory::desc src_md = blocked ? dnnl::memory::desc(to_dims(xs), x_dt, tag::any) : plain_md(xs, x_dt);
  dnnl::memory::desc dst_md = blocked ? dnnl::memory::desc(to_dims(ys), y_dt, tag::any) : plain_md(ys, y_dt);
  dnnl::memory::desc w_md(win->weight_dims, dt::s8, tag::any);
  dnnl::memory::desc b_md({M}, dt::s32, tag::x);

  dnnl::primitive_attr attr;
  if (qlinear) attr.set_output_scales(q->scales.size() == 1 ? 0 : 1 << 1, q->scales);
  auto zps = set_zero_points(attr, b.engine(), {{DNNL_ARG_SRC, (*xzp)[0]}, {DNNL_ARG_DST, q->zero_point}});
  dnnl::convolution_forward::primitive_desc pd;
  try {
    auto desc = win->desc(dnnl::algorithm::convolution_direct, src_md, w_md, bias ? &b_md : nullptr, dst_md);
    pd = dnnl::convolution_forward::primitive_desc(desc, attr, b.engine());
  } catch (const dnnl::error&) {
    return false;
  }
  // oneDNN's reference int8 kernels (no JIT kernel for the layout or attributes, e.g. plain nchw
  // with HODU_CPU_PLAIN_LAYOUT) are ~100x slower than the interpreter's: the node falls back.
  if (reference_impl(pd.impl_info_str())) return false;
  auto step = std::make_unique<Int8Step>();
  step->prim_ = dnnl::convolution_forward(pd);
  step->weights_ = pack_constant(b.engine(), *w8, w_user, pd.weights_desc());
  if (bias) {
    step->has_bias_ = true;
    step->bias_ = pack_constant(b.engine(), *bias, b_md, pd.bias_desc());
  }
  step->zero_points_ = std::move(zps);
  step->reads = {b.as_layout(n.inputs[0], pd.src_desc())};
  step->src_ = dnnl::memory(pd.src_desc(), b.engine(), nullptr);
  step->writes = {b.define(n.outputs[0], out_dt, ys, pd.dst_desc())};
  step->dst_ = dnnl::memory(pd.dst_desc(), b.engine(), nullptr);
  step->label = n.describe() + ": onednn int8 " + std::string(pd.impl_info_str());
  b.add(std::move(step));
  return true;
}

// QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp) and MatMulInteger(a, b, a_zp, b_zp),
// with a constant b.
bool make_int8_matmul(PlanBuilder& b, const Node& n) {
  if (!n.domain.empty() || (n.op_type != "QLinearMatMul" && n.op_type != "MatMulInteger")) return false;
  if (!int8_exact_isa()) return false;
  const bool qlinear = n.op_type == "QLinearMatMul";
  const size_t b_in = qlinear ? 3 : 1, azp_in = 2, bzp_in = qlinear ? 5 : 3;
  auto at = b.static_type(n.inputs[0]), yt = b.static_type(n.outputs[0]);
  const Tensor* w = passes::constant_of(b.graph(), n.inputs[b_in]);
  if (!at || !yt || !w || !is_8bit(at->first) || !is_8bit(w->dtype())) return false;
  auto as = at->second, bs = w->shape(), ys = yt->second;
  if (as.size() < 2 || bs.size() < 2 || ys.size() != std::max(as.size(), bs.size())) return false;
  const size_t r = ys.size();
  as.insert(as.begin(), r - as.size(), 1);
  bs.insert(bs.begin(), r - bs.size(), 1);
  const int64_t K = as[r - 1], N = bs[r - 1];
  if (bs[r - 2] != K || ys[r - 2] != as[r - 2] || ys[r - 1] != N) return false;

  auto azp = zero_points_of(const_input(b, n, azp_in), at->first, 0);
  auto bzp = zero_points_of(const_input(b, n, bzp_in), w->dtype(), N);
  if (!azp || !bzp) return false;
  auto w8 = s8_weights(*w, *bzp, [&](int64_t i) { return i % N; });
  // Differences that do not fit in s8: the weights as s8 (u8 ones minus 128) and oneDNN's common
  // weights zero point for the rest.
  int32_t wzp = 0;
  if (!w8 && bzp->size() == 1) {
    int32_t shift = w->dtype() == DType::U8 ? 128 : 0;
    w8 = s8_weights(*w, {shift}, [](int64_t) { return 0; });
    wzp = (*bzp)[0] - shift;
  }
  if (!w8) return false;

  auto q = quantized_output(b, n, qlinear, at->first, N);
  if (!q) return false;
  const DType out_dt = q->dtype;
  if (yt->first != out_dt) return false;

  // Weights shared by every batch: A's batch dims folded into its rows, one [rows, K] × [K, N].
  bool b_2d = true;
  for (size_t i = 0; i + 2 < r; ++i) b_2d &= bs[i] == 1;
  std::vector<int64_t> a2 = as, b2 = bs, y2 = ys;
  if (b_2d) {
    a2 = {shape_numel(as) / K, K};
    b2 = {K, N};
    y2 = {a2[0], N};
  }
  const dt a_dt = dnnl_dtype(at->first), y_dt = dnnl_dtype(out_dt);
  dnnl::memory::desc a_md = plain_md(a2, a_dt), y_md = plain_md(y2, y_dt);
  dnnl::memory::desc w_user = plain_md(b2, dt::s8), w_md(to_dims(b2), dt::s8, tag::any);
  dnnl::primitive_attr attr;
  if (qlinear) attr.set_output_scales(q->scales.size() == 1 ? 0 : 1 << (a2.size() - 1), q->scales);
  auto zps = set_zero_points(attr, b.engine(), {{DNNL_ARG_SRC, (*azp)[0]}, {DNNL_ARG_WEIGHTS, wzp}, {DNNL_ARG_DST, q->zero_point}});
  dnnl::matmul::primitive_desc pd;
  try {
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, w_md, y_md), attr, b.engine());
  } catch (const dnnl::error&) {
    return false;
  }
  if (reference_impl(pd.impl_info_str())) return false;
  auto step = std::make_unique<Int8Step>();
  step->prim_ = dnnl::matmul(pd);
  step->weights_ = pack_constant(b.engine(), *w8, w_user, pd.weights_desc());
  step->zero_points_ = std::move(zps);
  step->reads = {b.plain(n.inputs[0])};
  step->src_ = dnnl::memory(a_md, b.engine(), nullptr);
  step->writes = {b.define(n.outputs[0], out_dt, ys)};
  step->dst_ = dnnl::memory(y_md, b.engine(), nullptr);
  step->label = n.describe() + ": onednn int8 " + std::string(pd.impl_info_str());
  b.add(std::move(step));
  return true;
}

// ---- QuantizeLinear / DequantizeLinear ----

namespace {

// y = saturate(round_half_even(x / s) + z), NaN to the low end (ONNX's numpy reference).
template <typename T>
__attribute__((target_clones("avx512f", "avx2,fma", "default"))) void quantize_run(const float* x, T* y, int64_t n,
                                                                                  float s, float z) {
  constexpr float lo = std::is_same_v<T, uint8_t> ? 0.0f : -128.0f, hi = std::is_same_v<T, uint8_t> ? 255.0f : 127.0f;
  for (int64_t i = 0; i < n; ++i) {
    float v = std::nearbyint(x[i] / s) + z;
    v = v >= lo ? v : lo;  // NaN too
    v = v <= hi ? v : hi;
    y[i] = static_cast<T>(static_cast<int32_t>(v));
  }
}

// y = (float(x) - z) * s.
template <typename T>
__attribute__((target_clones("avx512f", "avx2,fma", "default"))) void dequantize_run(const T* x, float* y, int64_t n,
                                                                                    float s, float z) {
  for (int64_t i = 0; i < n; ++i) y[i] = (static_cast<float>(x[i]) - z) * s;
}

class QuantizeStep : public Step {
 public:
  void run(RunState& rs) override {
    const void* x = rs.slots[reads[0]].data();
    void* y = rs.slots[writes[0]].data();
    const int64_t n = n_, inner = inner_, D = static_cast<int64_t>(axis_len_);
    const int64_t chunk = 1 << 14;
    const int threads = n >= 4 * chunk ? rs.threads : 1;
    parallel_for((n + chunk - 1) / chunk, threads, [&](int64_t c) {
      int64_t i = c * chunk, end = std::min(n, i + chunk);
      while (i < end) {
        int64_t row = i / inner, stop = std::min(end, (row + 1) * inner);
        size_t d = static_cast<size_t>(row % D);
        float s = scale_[scale_.size() == 1 ? 0 : d], z = zp_[zp_.size() == 1 ? 0 : d];
        switch (kind_) {
          case Kind::QuantizeU8:
            quantize_run(static_cast<const float*>(x) + i, static_cast<uint8_t*>(y) + i, stop - i, s, z);
            break;
          case Kind::QuantizeS8:
            quantize_run(static_cast<const float*>(x) + i, static_cast<int8_t*>(y) + i, stop - i, s, z);
            break;
          case Kind::DequantizeU8:
            dequantize_run(static_cast<const uint8_t*>(x) + i, static_cast<float*>(y) + i, stop - i, s, z);
            break;
          case Kind::DequantizeS8:
            dequantize_run(static_cast<const int8_t*>(x) + i, static_cast<float*>(y) + i, stop - i, s, z);
            break;
        }
        i = stop;
      }
    });
  }
  enum class Kind { QuantizeU8, QuantizeS8, DequantizeU8, DequantizeS8 } kind_ = Kind::QuantizeU8;
  int64_t n_ = 0, inner_ = 1;
  size_t axis_len_ = 1;
  std::vector<float> scale_, zp_;
};

}  // namespace

bool make_quantize(PlanBuilder& b, const Node& n) {
  const bool quantize = n.op_type == "QuantizeLinear";
  if (!n.domain.empty() || (!quantize && n.op_type != "DequantizeLinear")) return false;
  if (n.get_int("block_size", 0) != 0 || n.get_int("precision", 0) != 0) return false;
  auto x = b.static_type(n.inputs[0]), y = b.static_type(n.outputs[0]);
  if (!x || !y || x->second != y->second) return false;
  const auto& xs = x->second;
  const int64_t rank = static_cast<int64_t>(xs.size());
  const Tensor* scale = passes::constant_of(b.graph(), n.inputs[1]);
  if (!scale || scale->dtype() != DType::F32 || scale->rank() > 1) return false;
  ConstIn zp = const_input(b, n, 2);
  // Per axis when the scale (or the zero point) has more than one value.
  int64_t axis_len = 1, inner = std::max<int64_t>(shape_numel(xs), 1);
  bool per_axis = scale->numel() != 1 || (zp.t && zp.t->numel() != 1);
  if (per_axis) {
    int64_t axis = n.get_int("axis", 1);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) return false;
    axis_len = xs[static_cast<size_t>(axis)];
    inner = 1;
    for (int64_t d = axis + 1; d < rank; ++d) inner *= xs[static_cast<size_t>(d)];
    if (inner == 0) return false;
  }
  auto scales = scales_of(scale, axis_len);
  if (!scales) return false;

  DType qt = quantize ? y->first : x->first;  // the integer side
  if (!is_8bit(qt)) return false;
  if (quantize) {
    if (x->first != DType::F32) return false;
    int64_t odt = n.get_int("output_dtype", 0);
    if (odt != 0 && odt != (qt == DType::U8 ? 2 : 3)) return false;  // ONNX: UINT8 2, INT8 3
  } else {
    if (y->first != DType::F32) return false;
    int64_t odt = n.get_int("output_dtype", 0);
    if (odt != 0 && odt != 1) return false;  // FLOAT
  }
  auto zps = zero_points_of(zp, qt, axis_len);
  if (!zps) return false;

  auto step = std::make_unique<QuantizeStep>();
  step->kind_ = quantize ? (qt == DType::U8 ? QuantizeStep::Kind::QuantizeU8 : QuantizeStep::Kind::QuantizeS8)
                         : (qt == DType::U8 ? QuantizeStep::Kind::DequantizeU8 : QuantizeStep::Kind::DequantizeS8);
  step->n_ = shape_numel(xs);
  step->inner_ = inner;
  step->axis_len_ = static_cast<size_t>(axis_len);
  step->scale_ = *scales;
  for (int32_t z : *zps) step->zp_.push_back(static_cast<float>(z));
  step->reads = {b.plain(n.inputs[0])};
  step->writes = {b.define(n.outputs[0], y->first, xs)};
  step->label = n.describe() + (per_axis ? ": cpu per-axis" : ": cpu");
  b.add(std::move(step));
  return true;
}

}  // namespace hodu::cpu
