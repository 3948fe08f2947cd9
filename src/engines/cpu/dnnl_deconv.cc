// ConvTranspose on oneDNN's deconvolution: constant weights reordered once into the
// primitive's layout, bias inside the primitive, src and dst in the layouts it prefers (the
// blocked layouts of the convs around it), groups, strides, dilations, pads, auto_pad,
// output_padding and output_shape as ONNX defines them (the interpreter's arithmetic,
// nn_conv.cc). The ops after it (BatchNormalization, activations) run on its output's layout.
#include "core/error.h"
#include "engines/cpu/dnnl_common.h"
#include "passes/graph_utils.h"

namespace hodu::cpu {
namespace {

class DeconvStep : public Step {
 public:
  void run(RunState& rs) override {
    bind(src_, rs, reads[0]);
    bind(dst_, rs, writes[0]);
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, weights_.mem}, {DNNL_ARG_DST, dst_}};
    if (has_bias_) args[DNNL_ARG_BIAS] = bias_.mem;
    prim_.execute(rs.stream, args);
  }
  dnnl::deconvolution_forward prim_;
  dnnl::memory src_, dst_;
  PackedConstant weights_, bias_;
  bool has_bias_ = false;
};

}  // namespace

bool make_deconv(PlanBuilder& b, const Node& n) {
  if (!n.domain.empty() || n.op_type != "ConvTranspose" || n.inputs.size() < 2) return false;
  auto x = b.static_type(n.inputs[0]);
  auto y = b.static_type(n.outputs[0]);
  const Tensor* w = passes::constant_of(b.graph(), n.inputs[1]);
  if (!x || !y || !w || x->first != DType::F32 || w->dtype() != DType::F32) return false;
  const Tensor* bias = n.has_input(2) ? passes::constant_of(b.graph(), n.inputs[2]) : nullptr;
  if (n.has_input(2) && (!bias || bias->dtype() != DType::F32)) return false;
  const auto& xs = x->second;
  const auto& ys = y->second;
  const int64_t nd = static_cast<int64_t>(xs.size()) - 2;
  if (nd < 1 || nd > 3 || w->rank() != nd + 2 || static_cast<int64_t>(ys.size()) != nd + 2) return false;
  const int64_t C = xs[1], G = n.get_int("group", 1);
  if (G <= 0 || C % G != 0 || w->dim(0) != C) return false;
  const int64_t Mg = w->dim(1), M = Mg * G, Cg = C / G;
  if (ys[0] != xs[0] || ys[1] != M || (bias && bias->numel() != M)) return false;
  std::vector<int64_t> kernel(w->shape().begin() + 2, w->shape().end());
  auto ks = n.get_ints("kernel_shape");
  if (!ks.empty() && ks != kernel) return false;
  auto ints = [&](const char* name, int64_t def) {
    auto v = n.get_ints(name);
    if (v.empty()) v.assign(static_cast<size_t>(nd), def);
    return v;
  };
  auto strides = ints("strides", 1), dil = ints("dilations", 1), opad = ints("output_padding", 0);
  if (static_cast<int64_t>(strides.size()) != nd || static_cast<int64_t>(dil.size()) != nd ||
      static_cast<int64_t>(opad.size()) != nd)
    return false;
  const std::string auto_pad = n.get_string("auto_pad", "NOTSET");
  auto pads = n.get_ints("pads");
  if (!pads.empty() && static_cast<int64_t>(pads.size()) != 2 * nd) return false;
  dnnl::memory::dims pl(static_cast<size_t>(nd)), pr(static_cast<size_t>(nd)), st(static_cast<size_t>(nd)),
      dl(static_cast<size_t>(nd));
  for (int64_t i = 0; i < nd; ++i) {
    const size_t k = static_cast<size_t>(i);
    if (strides[k] <= 0 || dil[k] <= 0 || opad[k] < 0) return false;
    const int64_t in = xs[k + 2], out = ys[k + 2], ext = (kernel[k] - 1) * dil[k] + 1;
    const int64_t full = strides[k] * (in - 1) + opad[k] + ext;
    int64_t begin;
    if (pads.empty() && (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")) {
      const int64_t total = full - out;
      const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
      begin = auto_pad == "SAME_UPPER" ? half : total - half;
    } else {
      begin = pads.empty() ? 0 : pads[k];
    }
    // oneDNN: out = (in - 1) * stride + ext - pad_l - pad_r; output_padding and output_shape
    // are a smaller (maybe negative) right pad.
    pl[k] = begin;
    pr[k] = (in - 1) * strides[k] + ext - begin - out;
    st[k] = strides[k];
    dl[k] = dil[k] - 1;
  }
  // ONNX weights [C, M/G, k...] (grouped: [G, C/G, M/G, k...] in memory) as oneDNN's
  // {M, C, k...} / {G, M/G, C/G, k...}, described by strides.
  const int64_t K = shape_numel(kernel);
  dnnl::memory::dims wdims, wstrides;
  if (G == 1) {
    wdims = {M, C};
    wstrides = {K, M * K};
  } else {
    wdims = {G, Mg, Cg};
    wstrides = {Cg * Mg * K, K, Mg * K};
  }
  auto ks_strides = contiguous_strides(kernel);
  for (int64_t i = 0; i < nd; ++i) {
    wdims.push_back(kernel[static_cast<size_t>(i)]);
    wstrides.push_back(ks_strides[static_cast<size_t>(i)]);
  }
  const dnnl::memory::desc w_user(wdims, dt::f32, wstrides);
  const bool blocked = b.blocked_layouts();
  dnnl::memory::desc src_md = blocked ? dnnl::memory::desc(to_dims(xs), dt::f32, tag::any) : plain_md(xs);
  dnnl::memory::desc dst_md = blocked ? dnnl::memory::desc(to_dims(ys), dt::f32, tag::any) : plain_md(ys);
  dnnl::memory::desc w_md(wdims, dt::f32, tag::any);
  dnnl::memory::desc b_md({M}, dt::f32, tag::x);
  dnnl::deconvolution_forward::primitive_desc pd;
  try {
    using fwd = dnnl::deconvolution_forward;
    auto desc = bias ? fwd::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct, src_md, w_md,
                                 b_md, dst_md, st, dl, pl, pr)
                     : fwd::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct, src_md, w_md,
                                 dst_md, st, dl, pl, pr);
    pd = fwd::primitive_desc(desc, b.engine());
  } catch (const dnnl::error&) {
    return false;  // e.g. a negative right pad oneDNN refuses: the interpreter's kernel
  }
  if (reference_impl(pd.impl_info_str())) return false;
  auto step = std::make_unique<DeconvStep>();
  step->prim_ = dnnl::deconvolution_forward(pd);
  step->weights_ = b.pack(n.inputs[1], *w, w_user, pd.weights_desc());
  if (bias) {
    step->has_bias_ = true;
    step->bias_ = b.pack(n.inputs[2], *bias, b_md, pd.bias_desc());
  }
  step->reads = {b.as_layout(n.inputs[0], pd.src_desc())};
  step->src_ = dnnl::memory(pd.src_desc(), b.engine(), nullptr);
  step->writes = {b.define(n.outputs[0], DType::F32, ys, pd.dst_desc())};
  step->dst_ = dnnl::memory(pd.dst_desc(), b.engine(), nullptr);
  step->label = n.describe() + ": onednn deconvolution " + std::string(pd.impl_info_str());
  b.add(std::move(step));
  return true;
}

}  // namespace hodu::cpu
