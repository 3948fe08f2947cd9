// Conv and hodu.FusedConv on oneDNN: the primitive is created and the weights
// reordered into its preferred layout once per plan; bias, the residual (sum
// post-op) and the activation (eltwise post-ops) run inside the convolution.
#include "core/error.h"
#include "engines/cpu/dnnl_common.h"
#include "passes/graph_utils.h"

namespace hodu::cpu {
namespace {

class ConvStep : public Step {
 public:
  void run(RunState& rs) override {
    bind(src_, rs, reads[0]);
    bind(dst_, rs, writes[0]);
    if (has_z_) {
      bind(z_, rs, reads[1]);
      z_copy_.execute(rs.stream, z_, dst_);
    }
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, weights_.mem}, {DNNL_ARG_DST, dst_}};
    if (has_bias_) args[DNNL_ARG_BIAS] = bias_.mem;
    prim_.execute(rs.stream, args);
  }

  dnnl::convolution_forward prim_;
  dnnl::memory src_, dst_, z_;
  dnnl::reorder z_copy_;
  PackedConstant weights_, bias_;
  bool has_bias_ = false, has_z_ = false;
};

}  // namespace

bool make_conv(PlanBuilder& b, const Node& n) {
  bool fused = n.domain == "hodu" && n.op_type == "FusedConv";
  if (!fused && !(n.domain.empty() && n.op_type == "Conv")) return false;
  auto x = b.static_type(n.inputs[0]);
  auto y = b.static_type(n.outputs[0]);
  const Tensor* w = passes::constant_of(b.graph(), n.inputs[1]);
  if (!x || !y || !w || x->first != DType::F32 || w->dtype() != DType::F32) return false;
  const Tensor* bias = n.has_input(2) ? passes::constant_of(b.graph(), n.inputs[2]) : nullptr;
  if (n.has_input(2) && !bias) return false;
  const auto& xs = x->second;
  const auto& ys = y->second;
  int64_t spatial = static_cast<int64_t>(xs.size()) - 2;
  if (spatial < 1 || spatial > 3 || w->rank() != spatial + 2 || ys.size() != xs.size()) return false;
  std::string act = fused ? n.get_string("activation", "") : "";
  auto act_params = fused ? n.get_floats("activation_params") : std::vector<float>{};
  bool has_z = fused && n.has_input(3);
  if (has_z) {
    auto z = b.static_type(n.inputs[3]);
    if (!z || z->first != DType::F32 || z->second != ys) return false;
  }

  int64_t group = n.get_int("group", 1);
  auto strides = n.get_ints("strides", std::vector<int64_t>(spatial, 1));
  auto dil = n.get_ints("dilations", std::vector<int64_t>(spatial, 1));
  auto pads = n.get_ints("pads", std::vector<int64_t>(2 * spatial, 0));
  std::string auto_pad = n.get_string("auto_pad", "NOTSET");
  if (static_cast<int64_t>(strides.size()) != spatial || static_cast<int64_t>(dil.size()) != spatial ||
      static_cast<int64_t>(pads.size()) != 2 * spatial)
    return false;
  dnnl::memory::dims pad_l(spatial), pad_r(spatial), dnnl_dil(spatial);
  for (int64_t i = 0; i < spatial; ++i) {
    int64_t k = w->dim(2 + i), in = xs[2 + i], out = ys[2 + i];
    int64_t ext = (k - 1) * dil[i] + 1;
    std::tie(pad_l[i], pad_r[i]) = spatial_pads(auto_pad, in, out, strides[i], ext, pads[i], pads[i + spatial]);
    dnnl_dil[i] = dil[i] - 1;
    if ((in + pad_l[i] + pad_r[i] - ext) / strides[i] + 1 != out) return false;
  }

  // Weights: [G, O/G, I/G, k...] when grouped.
  auto wdims = to_dims(w->shape());
  dnnl::memory::desc w_user;
  dnnl::memory::dims w_any_dims = wdims;
  if (group > 1) {
    w_any_dims.insert(w_any_dims.begin(), group);
    w_any_dims[1] /= group;
    w_user = dnnl::memory::desc(w_any_dims, dt::f32, spatial == 1 ? tag::goiw : spatial == 2 ? tag::goihw : tag::goidhw);
  } else {
    w_user = dnnl::memory::desc(wdims, dt::f32, spatial == 1 ? tag::oiw : spatial == 2 ? tag::oihw : tag::oidhw);
  }
  bool blocked = b.blocked_layouts();
  // A plain input with few channels (the image into the first conv) is read as it is: oneDNN
  // has direct kernels for it, and reordering it to a channel-blocked layout costs more than the conv.
  const Slot& xslot = b.at(b.slot(n.inputs[0]));
  bool plain_src = !blocked || (!xslot.blocked && xs[1] <= 4);
  dnnl::memory::desc src_md = plain_src ? plain_md(xs) : dnnl::memory::desc(to_dims(xs), dt::f32, tag::any);
  dnnl::memory::desc dst_md = blocked ? dnnl::memory::desc(to_dims(ys), dt::f32, tag::any) : plain_md(ys);
  dnnl::memory::desc w_md(w_any_dims, dt::f32, tag::any);
  dnnl::memory::desc b_md({ys[1]}, dt::f32, tag::x);

  dnnl::post_ops po;
  if (has_z) po.append_sum(1.0f);
  if (!append_activation(po, act, act_params)) return false;
  dnnl::primitive_attr attr;
  attr.set_post_ops(po);
  auto desc = bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                     dnnl::algorithm::convolution_direct, src_md, w_md, b_md, dst_md,
                                                     to_dims(strides), dnnl_dil, pad_l, pad_r)
                   : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                     dnnl::algorithm::convolution_direct, src_md, w_md, dst_md,
                                                     to_dims(strides), dnnl_dil, pad_l, pad_r);
  dnnl::convolution_forward::primitive_desc pd;
  try {
    pd = dnnl::convolution_forward::primitive_desc(desc, attr, b.engine());
  } catch (const dnnl::error&) {
    return false;
  }
  auto step = std::make_unique<ConvStep>();
  step->prim_ = dnnl::convolution_forward(pd);
  step->weights_ = pack_constant(b.engine(), *w, w_user, pd.weights_desc());
  if (bias) {
    step->has_bias_ = true;
    step->bias_ = pack_constant(b.engine(), *bias, b_md, pd.bias_desc());
  }
  int src = b.as_layout(n.inputs[0], pd.src_desc());
  step->src_ = dnnl::memory(pd.src_desc(), b.engine(), nullptr);
  step->reads = {src};
  if (has_z) {
    int z = b.slot(n.inputs[3]);
    step->z_ = dnnl::memory(layout_md(b.at(z)), b.engine(), nullptr);
    step->has_z_ = true;
    step->reads.push_back(z);
  }
  int dst = b.define(n.outputs[0], DType::F32, ys, pd.dst_desc());
  step->dst_ = dnnl::memory(pd.dst_desc(), b.engine(), nullptr);
  if (has_z) step->z_copy_ = dnnl::reorder(step->z_, step->dst_);
  step->writes = {dst};
  step->label = n.describe() + ": onednn " + std::string(pd.impl_info_str());
  b.add(std::move(step));
  return true;
}

}  // namespace hodu::cpu
