// Zero channels appended to a channel-blocked tensor: tf's channel Pad before a residual Add,
// which tf2onnx writes as Concat(x, zeros from ConstantOfShape) on axis 1 (BlazeFace's blocks
// widen 24 -> 28 -> 32 ... so), or a Pad of the channel axis's end with zeros. Where the wider
// count stays within x's last block, the result is x's own bytes: oneDNN's blocked layouts keep
// their padding channels zero (and hodu's kernels that write them do too), so the output is a
// view of x in the wider shape, with no reorder to plain, no copy and no step. BlazeFace ran each
// as a reorder to plain, a plain Concat and a reorder back (24x64x64: 71 + 15 us a block).
#include "core/error.h"
#include "engines/cpu/dnnl_common.h"
#include "kernels/cpu/blocked_layout.h"
#include "passes/graph_utils.h"

namespace hodu::cpu {
namespace {

bool all_zero(const Tensor* t) {
  if (!t || t->dtype() != DType::F32 || !t->is_contiguous()) return false;
  const float* v = t->data<float>();
  for (int64_t i = 0; i < t->numel(); ++i)
    if (v[i] != 0.0f) return false;  // -0.0f == 0.0f: its bits differ, but x + (-0) = x + 0
  return true;
}

// The channels `n` appends with zeros to its first input, or -1 when it does something else.
int64_t appended_zero_channels(const PlanBuilder& b, const Node& n, int64_t rank) {
  const Graph& g = b.graph();
  if (n.op_type == "Concat") {
    int64_t axis = n.get_int("axis", 0);
    if (axis < 0) axis += rank;
    if (axis != 1 || n.inputs.size() < 2) return -1;
    for (size_t i = 1; i < n.inputs.size(); ++i)
      if (!all_zero(passes::constant_of(g, n.inputs[i]))) return -1;
    return 0;  // counted from the shapes
  }
  if (n.op_type == "Pad") {
    if (n.get_string("mode", "constant") != "constant") return -1;
    std::vector<int64_t> pads;
    if (n.has_input(1)) {  // opset 11+: pads, constant_value and axes are inputs
      const Tensor* p = passes::constant_of(g, n.inputs[1]);
      if (!p || p->dtype() != DType::I64 || p->numel() != 2 * rank || n.has_input(3)) return -1;
      pads.assign(p->data<int64_t>(), p->data<int64_t>() + p->numel());
      if (n.has_input(2)) {
        const Tensor* c = passes::constant_of(g, n.inputs[2]);
        if (!c || c->numel() != 1 || !all_zero(c)) return -1;
      }
    } else {
      pads = n.get_ints("pads");
      if (static_cast<int64_t>(pads.size()) != 2 * rank || n.get_float("value", 0.0f) != 0.0f) return -1;
    }
    for (int64_t d = 0; d < 2 * rank; ++d)
      if (d != rank + 1 && pads[d] != 0) return -1;
    return 0;
  }
  return -1;
}

}  // namespace

bool has_channel_zero_pads(PlanBuilder& b) {
  if (!b.channel_zero_pads) {
    b.channel_zero_pads = false;
    for (const auto& n : b.graph().nodes) {
      if (!n.domain.empty() || (n.op_type != "Concat" && n.op_type != "Pad") || n.inputs.empty()) continue;
      auto y = b.static_type(n.outputs[0]);
      if (y && y->second.size() == 4 && appended_zero_channels(b, n, 4) >= 0) {
        b.channel_zero_pads = true;
        break;
      }
    }
  }
  return *b.channel_zero_pads;
}

bool make_channel_zero_pad(PlanBuilder& b, const Node& n) {
  if (!n.domain.empty() || (n.op_type != "Concat" && n.op_type != "Pad") || n.inputs.empty()) return false;
  auto x = b.static_type(n.inputs[0]), y = b.static_type(n.outputs[0]);
  if (!x || !y || x->first != DType::F32 || y->first != DType::F32 || x->second.size() != 4 || y->second.size() != 4)
    return false;
  const auto& xs = x->second;
  const auto& ys = y->second;
  if (ys[0] != xs[0] || ys[2] != xs[2] || ys[3] != xs[3] || ys[1] < xs[1]) return false;
  if (appended_zero_channels(b, n, 4) < 0) return false;
  // Producers whose padding channels are zeros: oneDNN's convs and pools (it keeps a blocked
  // layout's padding zero through post-ops), hodu's Winograd and blocked max pool (written as
  // zeros, the max of zeros). Not, say, an elementwise loop with f(0) != 0 over every byte.
  const int producer = b.graph().producer_of(n.inputs[0]);
  if (producer < 0) return false;
  const std::string& op = b.graph().nodes[static_cast<size_t>(producer)].op_type;
  if (op != "Conv" && op != "FusedConv" && op != "MaxPool" && op != "AveragePool") return false;
  // The view shares x's bytes: neither may be a graph output (copied out after the last step).
  if (b.graph().output(n.outputs[0]) || b.graph().output(n.inputs[0])) return false;
  const int s = b.slot(n.inputs[0]);
  const Slot& sl = b.at(s);
  if (!sl.blocked) return false;
  const int64_t block = onednn::channel_block(sl.md, to_dims(xs));
  if (!block || (ys[1] + block - 1) / block != (xs[1] + block - 1) / block) return false;
  const auto kind = b.at(b.root_of(s)).kind;
  if (kind != Slot::Kind::Arena && kind != Slot::Kind::Part) return false;
  b.define_part(n.outputs[0], s, ys, onednn::channel_blocked_md(to_dims(ys), block), 0);
  return true;
}

}  // namespace hodu::cpu
