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

// passes::reshape_strides over sizes known at run time: chunks of dims contiguous in
// memory must map onto whole groups of the new dims (sizes compared by algebra).
std::optional<SymShape> reshape_strides(const SymShape& sizes, const SymShape& strides, const SymShape& shape) {
  auto ss = to_static(sizes), st = to_static(strides), sh = to_static(shape);
  if (ss && st && sh) {
    auto r = passes::reshape_strides(*ss, *st, *sh);
    if (!r) return std::nullopt;
    return to_sym(*r);
  }
  if (sizes.empty() || numel(sizes) != numel(shape)) return std::nullopt;
  SymShape out(shape.size(), 0);
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  SymInt base = strides.back(), tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[d];
    if (d == 0 || (!sizes[d - 1].is(1) && strides[d - 1] != tensor_numel * base)) {
      while (view_d >= 0 && (view_numel != tensor_numel || shape[view_d].is(1))) {
        if (!provably_ge(tensor_numel, view_numel * shape[view_d])) return std::nullopt;
        out[view_d] = view_numel * base;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        base = strides[d - 1];
        tensor_numel = view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
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
    auto st = reshape_strides(in.dims, in.strides, ys);
    if (!st) return std::nullopt;
    out.dims = ys;
    out.strides = *st;
  }
  if (out.dims != ys) return std::nullopt;
  return out;
}

}  // namespace hodu::compilers::c
