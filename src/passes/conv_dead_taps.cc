// Conv kernel taps that read only padding, for every output position, dropped from the weights.
// DeepLabV3's ASPP runs 3x3 convs dilated 12, 24 and 36 over a 20x20 map at 320x320 (33x33 at
// 512): a tap 24 pixels off the centre never lands inside the map, so the conv is a 1x1 conv of
// the centre taps, a ninth of the work (oneDNN's AVX2 path ran these on its gemm, 34 ms each).
// Needs the input's spatial dims, so it rewrites only where shapes are known (the engines'
// prepare binds them).
#include <algorithm>

#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::passes {
namespace {

// The taps [first, last] of one spatial axis that read the input for some output position.
struct LiveTaps {
  int64_t first = -1, last = -1;
};

LiveTaps live_taps(int64_t in, int64_t k, int64_t stride, int64_t dilation, int64_t pad_begin, int64_t out) {
  LiveTaps t;
  for (int64_t tap = 0; tap < k; ++tap) {
    bool live = false;
    for (int64_t o = 0; o < out && !live; ++o) {
      int64_t i = o * stride - pad_begin + tap * dilation;
      live = i >= 0 && i < in;
    }
    if (!live) continue;
    if (t.first < 0) t.first = tap;
    t.last = tap;
  }
  return t;
}

}  // namespace

bool drop_padding_only_conv_taps(Graph& g) {
  bool changed = false;
  for (Node& n : g.nodes) {
    // FusedConv too: the engines optimize once without shapes (convs fused) and again per shape.
    bool conv = (n.op_type == "Conv" && n.domain.empty()) || (n.op_type == "FusedConv" && n.domain == "hodu");
    if (!conv || n.get_string("auto_pad", "NOTSET") != "NOTSET") continue;
    const Tensor* w = constant_of(g, n.inputs[1]);
    if (!w || w->dtype() != DType::F32 || w->rank() < 3) continue;
    auto xs = static_shape(g, n.inputs[0]);
    const size_t nd = static_cast<size_t>(w->rank()) - 2;
    if (!xs || xs->size() != nd + 2) continue;
    auto strides = n.get_ints("strides", std::vector<int64_t>(nd, 1));
    auto dilations = n.get_ints("dilations", std::vector<int64_t>(nd, 1));
    auto pads = n.get_ints("pads", std::vector<int64_t>(2 * nd, 0));
    if (strides.size() != nd || dilations.size() != nd || pads.size() != 2 * nd) continue;
    std::vector<int64_t> ws = w->shape(), nws = ws, first(nd, 0), npads = pads, ndil = dilations;
    bool shrinks = false, ok = true;
    for (size_t a = 0; a < nd && ok; ++a) {
      const int64_t in = (*xs)[2 + a], k = ws[2 + a], s = strides[a], d = dilations[a];
      const int64_t out = (in + pads[a] + pads[nd + a] - (d * (k - 1) + 1)) / s + 1;
      if (in <= 0 || out <= 0 || s <= 0 || d <= 0) {
        ok = false;
        break;
      }
      LiveTaps t = live_taps(in, k, s, d, pads[a], out);
      if (t.first < 0) {  // the output is the bias alone: left to the kernels
        ok = false;
        break;
      }
      if (t.first == 0 && t.last == k - 1) continue;
      const int64_t nk = t.last - t.first + 1, nd_ = nk == 1 ? 1 : d;
      const int64_t pb = pads[a] - t.first * d;
      // End padding that keeps the output size: the last output's last live tap (none needed when
      // a stride's floor already gives that size).
      const int64_t span = nd_ * (nk - 1) + 1;
      const int64_t pe = std::max<int64_t>(0, (out - 1) * s + span - in - pb);
      if (pb < 0 || (in + pb + pe - span) / s + 1 != out) {
        ok = false;
        break;
      }
      nws[2 + a] = nk;
      first[a] = t.first;
      npads[a] = pb;
      npads[nd + a] = pe;
      ndil[a] = nd_;
      shrinks = true;
    }
    if (!ok || !shrinks) continue;
    // The kept taps' weights: every [o, i] filter's window cut to the live taps.
    Tensor src = w->contiguous();
    Tensor dst = Tensor::empty(DType::F32, nws);
    const float* ps = src.data<float>();
    float* pd = dst.data<float>();
    std::vector<int64_t> sstride(nws.size(), 1);
    for (size_t i = nws.size() - 1; i > 0; --i) sstride[i - 1] = sstride[i] * ws[i];
    std::vector<int64_t> idx(nws.size(), 0);
    for (int64_t e = 0; e < dst.numel(); ++e) {
      int64_t off = idx[0] * sstride[0] + idx[1] * sstride[1];
      for (size_t a = 0; a < nd; ++a) off += (idx[2 + a] + first[a]) * sstride[2 + a];
      pd[e] = ps[off];
      for (size_t i = nws.size(); i-- > 0;) {
        if (++idx[i] < nws[i]) break;
        idx[i] = 0;
      }
    }
    std::string name = g.unique_name(n.inputs[1] + "_live_taps");
    g.set_initializer(name, dst);
    n.inputs[1] = name;
    n.set_attr(Attribute::make_ints("pads", npads));
    n.set_attr(Attribute::make_ints("dilations", ndil));
    if (n.has_attr("kernel_shape"))
      n.set_attr(Attribute::make_ints("kernel_shape", std::vector<int64_t>(nws.begin() + 2, nws.end())));
    changed = true;
  }
  return changed;
}

}  // namespace hodu::passes
