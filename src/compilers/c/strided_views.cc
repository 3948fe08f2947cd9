#include "compilers/c/strided_views.h"

#include <algorithm>

#include "compilers/c/codegen_context.h"
#include "passes/graph_utils.h"

namespace hodu::compilers::c {
namespace {

bool positive_steps(const Codegen& cg, const Node& n) {
  if (!n.has_input(4)) return true;
  if (!cg.is_constant(n.inputs[4])) return false;
  for (int64_t s : cg.constant(n.inputs[4]).to_int64s())
    if (s <= 0) return false;
  return true;
}

}  // namespace

StridedView whole_view(const Codegen& cg, const std::string& v) {
  StridedView w;
  w.root = v;
  w.dims = cg.shape_of(v);
  w.strides = row_major_strides(w.dims);
  return w;
}

bool is_row_major(const StridedView& v) {
  if (!v.offset.is(0)) return false;
  auto want = row_major_strides(v.dims);
  for (size_t i = 0; i < v.dims.size(); ++i)
    if (!v.dims[i].is(1) && v.strides[i] != want[i]) return false;
  return true;
}

bool is_view_producer(const Codegen& cg, const Node& n) {
  if (!n.domain.empty() || n.inputs.empty() || n.outputs.size() != 1 || n.outputs[0].empty()) return false;
  if (n.op_type == "Transpose") return true;
  if (n.op_type == "Slice")
    return n.inputs.size() >= 3 && cg.is_constant(n.inputs[1]) && cg.is_constant(n.inputs[2]) &&
           (!n.has_input(3) || cg.is_constant(n.inputs[3])) && positive_steps(cg, n);
  return is_view_op(n) && (n.op_type != "Dropout" || n.outputs.size() == 1);
}

std::optional<StridedView> view_through(const Codegen& cg, const Node& n, const StridedView& in) {
  StridedView out = in;
  const auto ys = cg.shape_of(n.outputs[0]);
  const int64_t r = static_cast<int64_t>(in.dims.size());
  if (n.op_type == "Transpose") {
    const auto perm = passes::transpose_perm(n, in.dims.size());
    if (static_cast<int64_t>(perm.size()) != r) return std::nullopt;
    for (int64_t k = 0; k < r; ++k) {
      if (perm[k] < 0 || perm[k] >= r) return std::nullopt;
      out.dims[k] = in.dims[perm[k]];
      out.strides[k] = in.strides[perm[k]];
    }
  } else if (n.op_type == "Slice") {
    auto starts = cg.constant(n.inputs[1]).to_int64s();
    std::vector<int64_t> axes, steps;
    if (n.has_input(3)) axes = cg.constant(n.inputs[3]).to_int64s();
    else
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    steps = n.has_input(4) ? cg.constant(n.inputs[4]).to_int64s() : std::vector<int64_t>(starts.size(), 1);
    if (axes.size() != starts.size() || steps.size() != starts.size() || static_cast<int64_t>(ys.size()) != r)
      return std::nullopt;
    for (size_t i = 0; i < axes.size(); ++i) {
      int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
      if (a < 0 || a >= r || steps[i] <= 0) return std::nullopt;
      SymInt s = slice_start(starts[i], in.dims[a], 1);
      if (!ys[a].is(0)) out.offset += s * in.strides[a];
      out.strides[a] = in.strides[a] * steps[i];
    }
    out.dims = ys;
  } else {
    auto st = passes::reshape_strides_with(in.dims, in.strides, ys, provably_ge);
    if (!st) return std::nullopt;
    out.dims = ys;
    out.strides = *st;
  }
  if (out.dims != ys) return std::nullopt;
  return out;
}

}  // namespace hodu::compilers::c
