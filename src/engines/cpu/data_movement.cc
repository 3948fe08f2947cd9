// Ops that move data: Reshape/Flatten/Squeeze/Unsqueeze are views (no copy),
// Transpose, Concat and Gather are hand-written copies split over threads.
#include <algorithm>
#include <cstring>
#include <optional>

#include "core/error.h"
#include "engines/cpu/dnnl_common.h"
#include "engines/cpu/plan.h"
#include "engines/cpu/row_kernels.h"
#include "passes/graph_utils.h"

namespace hodu::cpu {
namespace {

// out[i] = in[base + Σ i_d · in_strides[d]] over the output's row-major index (Transpose, Slice).
class StridedCopyStep : public Step {
 public:
  void run(RunState& rs) override {
    const char* src = static_cast<const char*>(rs.slots[reads[0]].tensor().raw_data());
    char* dst = static_cast<char*>(rs.slots[writes[0]].value.tensor.raw_data());
    const size_t es = elem_;
    const int64_t inner = out_shape_.back();
    const int64_t rows = inner ? total_ / inner : 0;
    const int64_t r = static_cast<int64_t>(out_shape_.size());
    const int64_t inner_stride = in_strides_.back();
    parallel_for(rows, rs.threads, [&](int64_t row) {
      // Source offset of the row's first element.
      int64_t rem = row, off = base_;
      for (int64_t d = r - 2; d >= 0; --d) {
        off += (rem % out_shape_[d]) * in_strides_[d];
        rem /= out_shape_[d];
      }
      char* out = dst + row * inner * es;
      if (inner_stride == 1) {
        // The last dim stays last (head split/merge, Slice of whole rows): a row is one block.
        std::memcpy(out, src + off * es, inner * es);
      } else if (es == 4) {
        const float* in = reinterpret_cast<const float*>(src) + off;
        float* o = reinterpret_cast<float*>(out);
        for (int64_t j = 0; j < inner; ++j) o[j] = in[j * inner_stride];
      } else {
        for (int64_t j = 0; j < inner; ++j) std::memcpy(out + j * es, src + (off + j * inner_stride) * es, es);
      }
    });
  }
  std::vector<int64_t> out_shape_, in_strides_;  // in_strides_: input strides permuted into output order
  int64_t total_ = 0;
  int64_t base_ = 0;  // element offset of the first output element (Slice)
  size_t elem_ = 4;
};

bool add_strided_copy(PlanBuilder& b, const Node& n, DType dtype, const std::vector<int64_t>& out_shape,
                      std::vector<int64_t> in_strides, int64_t base) {
  auto step = std::make_unique<StridedCopyStep>();
  step->elem_ = dtype_storage_bytes(dtype, 1);
  if (step->elem_ == 0) return false;
  step->out_shape_ = out_shape;
  step->in_strides_ = std::move(in_strides);
  step->base_ = base;
  step->total_ = shape_numel(out_shape);
  step->reads = {b.plain(n.inputs[0])};
  step->writes = {b.define(n.outputs[0], dtype, out_shape)};
  step->label = n.describe() + ": cpu";
  b.add(std::move(step));
  return true;
}

class ConcatStep : public Step {
 public:
  void run(RunState& rs) override {
    char* dst = static_cast<char*>(rs.slots[writes[0]].value.tensor.raw_data());
    int64_t out_row = 0;
    for (int64_t w : widths_) out_row += w;
    int64_t col = 0;
    for (size_t i = 0; i < reads.size(); ++i) {
      const char* src = static_cast<const char*>(rs.slots[reads[i]].tensor().raw_data());
      int64_t w = widths_[i], c = col;
      parallel_for(outer_, rs.threads, [&](int64_t o) { std::memcpy(dst + o * out_row + c, src + o * w, w); });
      col += w;
    }
  }
  int64_t outer_ = 0;
  std::vector<int64_t> widths_;  // bytes per outer row of each input
};

class GatherStep : public Step {
 public:
  void run(RunState& rs) override {
    const char* src = static_cast<const char*>(rs.slots[reads[0]].tensor().raw_data());
    const Tensor& idx = rs.slots[reads[1]].tensor();
    char* dst = static_cast<char*>(rs.slots[writes[0]].value.tensor.raw_data());
    int64_t n = idx.numel();
    const bool i32 = idx.dtype() == DType::I32;
    const void* ip = idx.raw_data();
    for (int64_t k = 0; k < n; ++k) {
      int64_t v = i32 ? static_cast<const int32_t*>(ip)[k] : static_cast<const int64_t*>(ip)[k];
      if (v < -axis_dim_ || v >= axis_dim_)
        fail(ErrorCode::InvalidArgument, "{}: index {} is out of range for an axis of {}", label, v, axis_dim_);
    }
    parallel_for(outer_, rs.threads, [&](int64_t o) {
      for (int64_t k = 0; k < n; ++k) {
        int64_t v = i32 ? static_cast<const int32_t*>(ip)[k] : static_cast<const int64_t*>(ip)[k];
        if (v < 0) v += axis_dim_;
        std::memcpy(dst + (o * n + k) * inner_, src + (o * axis_dim_ + v) * inner_, inner_);
      }
    });
  }
  int64_t outer_ = 0, axis_dim_ = 0, inner_ = 0;  // inner_ in bytes
};

// A 4-D f32 Transpose between NCHW and NHWC (ConvNeXt's around each LayerNorm and its channel
// products) moves no bytes of its own: NCHW -> NHWC is the input in oneDNN's nhwc layout (the
// input's producer, a conv, may write it so; else one reorder, faster than the strided copy)
// read as plain NHWC; NHWC -> NCHW is the plain input's bytes taken as nhwc, which the convs,
// channel scales and binary ops after it read as they are.
bool transpose_as_view(PlanBuilder& b, const Node& n, DType dtype, const std::vector<int64_t>& xs,
                       const std::vector<int64_t>& ys, const std::vector<int64_t>& perm) {
  // The input read by this node alone: no other reader shares a reorder of it (PlanBuilder caches
  // them) that a node writing the view in place would overwrite.
  if (dtype != DType::F32 || xs.size() != 4 || !b.blocked_layouts() || b.graph().output(n.outputs[0]) ||
      b.graph().output(n.inputs[0]) || b.readers(n.inputs[0]).size() != 1)
    return false;
  auto nhwc = [](const std::vector<int64_t>& nchw) {
    return dnnl::memory::desc(to_dims(nchw), dnnl::memory::data_type::f32, dnnl::memory::format_tag::nhwc);
  };
  auto in_arena = [&](int s) {
    auto kind = b.at(b.root_of(s)).kind;
    return kind == Slot::Kind::Arena || kind == Slot::Kind::Part;
  };
  if (perm == std::vector<int64_t>{0, 2, 3, 1}) {
    int s = b.as_layout(n.inputs[0], nhwc(xs));
    if (!in_arena(s)) return false;
    b.define_part(n.outputs[0], s, ys, plain_md(ys), 0);
    return true;
  }
  if (perm == std::vector<int64_t>{0, 3, 1, 2}) {
    int s = b.plain(n.inputs[0]);
    if (!in_arena(s)) return false;
    b.define_part(n.outputs[0], s, ys, nhwc(ys), 0);
    return true;
  }
  return false;
}

}  // namespace

bool make_data_movement(PlanBuilder& b, const Node& n) {
  if (!n.domain.empty()) return false;
  const std::string& op = n.op_type;
  if (passes::is_reshape_op(n)) {
    auto x = b.static_type(n.inputs[0]), y = b.static_type(n.outputs[0]);
    if (!x || !y || x->first == DType::String || shape_numel(x->second) != shape_numel(y->second)) return false;
    b.define_alias(n.outputs[0], b.plain(n.inputs[0]), y->second);
    return true;
  }
  if (op == "Transpose") {
    auto x = b.static_type(n.inputs[0]), y = b.static_type(n.outputs[0]);
    if (!x || !y || x->first == DType::String || x->second.empty()) return false;
    size_t r = x->second.size();
    auto perm = passes::transpose_perm(n, r);
    if (perm.size() != r) return false;
    if (transpose_as_view(b, n, x->first, x->second, y->second, perm)) return true;
    auto strides = contiguous_strides(x->second);
    std::vector<int64_t> in_strides;
    for (size_t i = 0; i < r; ++i) {
      if (perm[i] < 0 || perm[i] >= static_cast<int64_t>(r)) return false;
      in_strides.push_back(strides[perm[i]]);
    }
    return add_strided_copy(b, n, x->first, y->second, std::move(in_strides), 0);
  }
  if (op == "Slice") {
    // Constant starts/ends/axes/steps: a strided copy (the Transpose kernel with an offset).
    auto x = b.static_type(n.inputs[0]), y = b.static_type(n.outputs[0]);
    if (!x || !y || x->first == DType::String || x->second.empty() || y->second.size() != x->second.size())
      return false;
    const Graph& g = b.graph();
    auto ints_of = [&](size_t i) -> std::optional<std::vector<int64_t>> {
      if (!n.has_input(i)) return std::vector<int64_t>{};
      const Tensor* t = passes::constant_of(g, n.inputs[i]);
      if (!t) return std::nullopt;
      return t->to_int64s();
    };
    auto starts = ints_of(1), ends = ints_of(2), axes = ints_of(3), steps = ints_of(4);
    if (!starts || !ends || !axes || !steps || starts->size() != ends->size()) return false;
    const auto& xs = x->second;
    int64_t r = static_cast<int64_t>(xs.size());
    if (axes->empty())
      for (size_t i = 0; i < starts->size(); ++i) axes->push_back(static_cast<int64_t>(i));
    if (steps->empty()) steps->assign(starts->size(), 1);
    if (axes->size() != starts->size() || steps->size() != starts->size()) return false;
    auto strides = contiguous_strides(xs);
    std::vector<int64_t> first(r, 0), step(r, 1);
    for (size_t i = 0; i < axes->size(); ++i) {
      int64_t a = (*axes)[i] < 0 ? (*axes)[i] + r : (*axes)[i];
      if (a < 0 || a >= r || (*steps)[i] == 0) return false;
      int64_t st = (*steps)[i], dim = xs[a];
      int64_t s0 = (*starts)[i];
      if (s0 < 0) s0 += dim;
      s0 = st > 0 ? std::clamp<int64_t>(s0, 0, dim) : std::clamp<int64_t>(s0, 0, dim - 1);
      first[a] = s0;
      step[a] = st;
    }
    if (shape_numel(y->second) == 0) return false;
    std::vector<int64_t> in_strides;
    int64_t base = 0;
    for (int64_t d = 0; d < r; ++d) {
      in_strides.push_back(strides[d] * step[d]);
      base += first[d] * strides[d];
    }
    return add_strided_copy(b, n, x->first, y->second, std::move(in_strides), base);
  }
  if (op == "Concat") {
    auto y = b.static_type(n.outputs[0]);
    if (!y || y->first == DType::String || y->second.empty()) return false;
    const auto& ys = y->second;
    int64_t axis = n.get_int("axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(ys.size());
    if (axis < 0 || axis >= static_cast<int64_t>(ys.size())) return false;
    size_t es = dtype_storage_bytes(y->first, 1);
    if (es == 0) return false;
    auto step = std::make_unique<ConcatStep>();
    step->outer_ = 1;
    for (int64_t d = 0; d < axis; ++d) step->outer_ *= ys[d];
    for (const auto& in : n.inputs) {
      auto t = b.static_type(in);
      if (!t || t->first != y->first || t->second.size() != ys.size()) return false;
      int64_t w = static_cast<int64_t>(es);
      for (size_t d = axis; d < ys.size(); ++d) w *= t->second[d];
      step->widths_.push_back(w);
    }
    for (const auto& in : n.inputs) step->reads.push_back(b.plain(in));
    step->writes = {b.define(n.outputs[0], y->first, ys)};
    step->label = n.describe() + ": cpu";
    b.add(std::move(step));
    return true;
  }
  if (op == "Gather") {
    auto x = b.static_type(n.inputs[0]), idx = b.static_type(n.inputs[1]), y = b.static_type(n.outputs[0]);
    if (!x || !idx || !y || x->first == DType::String || x->second.empty()) return false;
    if (idx->first != DType::I64 && idx->first != DType::I32) return false;
    const auto& xs = x->second;
    int64_t axis = n.get_int("axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(xs.size());
    if (axis < 0 || axis >= static_cast<int64_t>(xs.size())) return false;
    auto step = std::make_unique<GatherStep>();
    step->outer_ = 1;
    for (int64_t d = 0; d < axis; ++d) step->outer_ *= xs[d];
    step->axis_dim_ = xs[axis];
    step->inner_ = static_cast<int64_t>(dtype_storage_bytes(x->first, 1));
    for (size_t d = axis + 1; d < xs.size(); ++d) step->inner_ *= xs[d];
    step->reads = {b.plain(n.inputs[0]), b.plain(n.inputs[1])};
    step->writes = {b.define(n.outputs[0], x->first, y->second)};
    step->label = n.describe() + ": cpu";
    b.add(std::move(step));
    return true;
  }
  return false;
}

}  // namespace hodu::cpu
