// A zero Pad of the spatial dims folded into the Conv or AveragePool that reads it: their own
// pads (with count_include_pad for the pool, whose average then counts the zeros as the Pad's
// copy did). Exporters write the Pad on its own: torch's avg_pool2d(count_include_pad=True)
// exports as Pad -> AveragePool (Inception v3 runs ten of them: the padded copy, then a pool
// of a plain layout that oneDNN runs on its reference kernel at AVX2, 41 of 142 ms), and Keras'
// ZeroPadding2D before a VALID conv comes through tf2onnx as Pad -> Conv.
#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::passes {
namespace {

// The pads a Pad node adds when it is a constant-zero padding of the dims after the first two
// (batch and channels untouched), none negative; empty otherwise.
std::vector<int64_t> spatial_zero_pads(const Graph& g, const Node& pad) {
  if (pad.get_string("mode", "constant") != "constant" || !pad.has_input(0)) return {};
  std::vector<int64_t> pads;
  if (pad.has_input(1)) {  // opset 11+: pads and the value are inputs
    const Tensor* p = constant_of(g, pad.inputs[1]);
    if (!p || p->rank() != 1) return {};
    pads = p->to_int64s();
    if (pad.has_input(2)) {
      auto v = scalar_constant(g, pad.inputs[2]);
      if (!v || *v != 0.0) return {};
    }
    if (pad.has_input(3)) return {};  // axes (opset 18): not folded
  } else {
    pads = pad.get_ints("pads");
    if (pad.get_float("value", 0.0f) != 0.0f) return {};
  }
  const size_t r = pads.size() / 2;
  if (pads.size() % 2 != 0 || r < 3) return {};
  if (pads[0] != 0 || pads[1] != 0 || pads[r] != 0 || pads[r + 1] != 0) return {};
  for (int64_t v : pads)
    if (v < 0) return {};
  return pads;
}

// Adds the Pad's spatial `pads` (2r entries) to `reader`'s pads attribute (2(r-2) entries).
void add_pads(Node& reader, const std::vector<int64_t>& pads) {
  const size_t r = pads.size() / 2, nd = r - 2;
  auto own = reader.get_ints("pads", std::vector<int64_t>(2 * nd, 0));
  for (size_t a = 0; a < nd; ++a) {
    own[a] += pads[2 + a];
    own[nd + a] += pads[r + 2 + a];
  }
  reader.set_attr(Attribute::make_ints("pads", own));
}

// Whether `reader` takes the Pad's output as its input 0 and can carry `pads` itself.
bool can_take(const Node& reader, const std::string& padded, const std::vector<int64_t>& pads) {
  if (!reader.domain.empty() || reader.inputs.empty() || reader.inputs[0] != padded) return false;
  for (size_t i = 1; i < reader.inputs.size(); ++i)
    if (reader.inputs[i] == padded) return false;
  if (reader.get_string("auto_pad", "NOTSET") != "NOTSET") return false;
  const size_t nd = pads.size() / 2 - 2;
  const auto own = reader.get_ints("pads", std::vector<int64_t>(2 * nd, 0));
  if (own.size() != 2 * nd) return false;
  if (reader.op_type == "Conv") return true;
  if (reader.op_type == "AveragePool") {
    // Its own pads must already count as zeros, and ceil_mode's extra windows would count
    // positions past the padding.
    if (reader.get_int("ceil_mode", 0) != 0) return false;
    bool padded_already = false;
    for (int64_t v : own) padded_already |= v != 0;
    return !padded_already || reader.get_int("count_include_pad", 0) == 1;
  }
  return false;
}

}  // namespace

bool fold_pads_into_windows(Graph& g) {
  bool changed = false;
  const auto readers = consumers(g);
  const auto uses = use_counts(g);
  for (Node& pad : g.nodes) {
    if (pad.op_type != "Pad" || !pad.domain.empty() || !pad.has_output(0)) continue;
    const std::string& out = pad.outputs[0];
    const int r = sole_reader(g, uses, readers, out);
    if (r < 0) continue;
    const auto pads = spatial_zero_pads(g, pad);
    if (pads.empty()) continue;
    Node& reader = g.nodes[static_cast<size_t>(r)];
    if (!can_take(reader, out, pads)) continue;
    add_pads(reader, pads);
    if (reader.op_type == "AveragePool") reader.set_attr(Attribute::make_int("count_include_pad", 1));
    reader.inputs[0] = pad.inputs[0];
    changed = true;  // the Pad, now unread, goes with dead-code elimination
  }
  if (changed) eliminate_dead_code(g);
  return changed;
}

}  // namespace hodu::passes
