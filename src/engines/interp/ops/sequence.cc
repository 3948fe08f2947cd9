// Sequences and optionals: SequenceEmpty/Construct/Insert/At/Erase/Length,
// SplitToSequence, ConcatFromSequence, SequenceMap, Optional,
// OptionalGetElement, OptionalHasElement.
#include <algorithm>

#include "engines/interp/ops/tensor_util.h"

namespace hodu::interp {
namespace {

const RuntimeValue& seq_input(const KernelContext& ctx, size_t i) {
  const RuntimeValue& v = ctx.value(i);
  if (!v.is_sequence()) ctx.fail(ErrorCode::InvalidArgument, "input {} must be a sequence", i);
  return v;
}

DType seq_dtype(const RuntimeValue& v) {
  if (!v.sequence.empty()) return v.sequence[0].dtype();
  return v.elem_dtype;
}

// Position input (scalar int32/int64) normalized against `n`; valid range [-n, n - 1 + extra].
int64_t read_position(const KernelContext& ctx, size_t input, int64_t n, int64_t extra) {
  const Tensor& p = ctx.input(input);
  if (p.numel() != 1 || (p.dtype() != DType::I64 && p.dtype() != DType::I32))
    ctx.fail(ErrorCode::InvalidArgument, "position must be a scalar int32/int64, got {}", p.type_string());
  int64_t pos = p.get_int64(0);
  if (pos < -n || pos > n - 1 + extra)
    ctx.fail(ErrorCode::InvalidArgument, "position {} is out of range for a sequence of length {}", pos, n);
  return pos < 0 ? pos + n : pos;
}

void sequence_empty_kernel(KernelContext& ctx) {
  DType dt = DType::F32;
  if (ctx.node.has_attr("dtype")) {
    auto d = dtype_from_onnx(static_cast<int>(ctx.node.get_int("dtype", 1)));
    if (!d) ctx.fail(ErrorCode::InvalidArgument, "unknown dtype {}", ctx.node.get_int("dtype", 1));
    dt = *d;
  }
  ctx.set_output(0, RuntimeValue::make_sequence({}, dt));
}

void sequence_construct_kernel(KernelContext& ctx) {
  TensorSequence s;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor& t = ctx.input(i);
    if (!s.empty() && t.dtype() != s[0].dtype())
      ctx.fail(ErrorCode::InvalidArgument, "input {} has dtype {}, input 0 has {}", i, dtype_name(t.dtype()),
               dtype_name(s[0].dtype()));
    s.push_back(t);
  }
  DType dt = s.empty() ? DType::Undefined : s[0].dtype();
  ctx.set_output(0, RuntimeValue::make_sequence(std::move(s), dt));
}

void sequence_insert_kernel(KernelContext& ctx) {
  const RuntimeValue& seq = seq_input(ctx, 0);
  const Tensor& t = ctx.input(1);
  DType dt = seq_dtype(seq);
  if (dt != DType::Undefined && dt != t.dtype())
    ctx.fail(ErrorCode::InvalidArgument, "cannot insert a {} tensor into a sequence of {}", dtype_name(t.dtype()),
             dtype_name(dt));
  TensorSequence s = seq.sequence;
  int64_t n = static_cast<int64_t>(s.size());
  int64_t pos = ctx.has_input(2) ? read_position(ctx, 2, n, 1) : n;
  s.insert(s.begin() + pos, t);
  ctx.set_output(0, RuntimeValue::make_sequence(std::move(s), t.dtype()));
}

void sequence_at_kernel(KernelContext& ctx) {
  const RuntimeValue& seq = seq_input(ctx, 0);
  int64_t n = static_cast<int64_t>(seq.sequence.size());
  int64_t pos = read_position(ctx, 1, n, 0);
  ctx.set_output(0, seq.sequence[pos]);
}

void sequence_erase_kernel(KernelContext& ctx) {
  const RuntimeValue& seq = seq_input(ctx, 0);
  TensorSequence s = seq.sequence;
  int64_t n = static_cast<int64_t>(s.size());
  if (n == 0) ctx.fail(ErrorCode::InvalidArgument, "cannot erase from an empty sequence");
  int64_t pos = ctx.has_input(1) ? read_position(ctx, 1, n, 0) : n - 1;
  s.erase(s.begin() + pos);
  ctx.set_output(0, RuntimeValue::make_sequence(std::move(s), seq_dtype(seq)));
}

void sequence_length_kernel(KernelContext& ctx) {
  const RuntimeValue& seq = seq_input(ctx, 0);
  ctx.set_output(0, Tensor::scalar<int64_t>(DType::I64, static_cast<int64_t>(seq.sequence.size())));
}

void split_to_sequence_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  int64_t r = in.rank();
  if (r == 0) ctx.fail(ErrorCode::InvalidArgument, "SplitToSequence needs rank >= 1");
  int64_t axis = normalize_axis(ctx, ctx.node.get_int("axis", 0), r);
  bool keepdims = ctx.node.get_int("keepdims", 1) != 0;
  int64_t dim = in.dim(axis);
  std::vector<int64_t> sizes;
  bool squeeze = false;
  if (ctx.has_input(1)) {
    const Tensor& sp = ctx.input(1);
    auto v = read_int_list(ctx, sp, "split");
    if (sp.rank() == 0) {
      int64_t c = v[0];
      if (c <= 0) ctx.fail(ErrorCode::InvalidArgument, "split size must be positive, got {}", c);
      for (int64_t s = 0; s < dim; s += c) sizes.push_back(std::min(c, dim - s));
    } else {
      int64_t sum = 0;
      for (int64_t s : v) {
        if (s < 0) ctx.fail(ErrorCode::InvalidArgument, "split {} has a negative size", shape_to_string(v));
        sum += s;
      }
      if (sum != dim)
        ctx.fail(ErrorCode::InvalidArgument, "split {} sums to {}, axis has size {}", shape_to_string(v), sum, dim);
      sizes = v;
    }
  } else {
    sizes.assign(dim, 1);
    squeeze = !keepdims;
  }
  Tensor x = to_movable(in);
  TensorSequence out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    Tensor part = x.slice(axis, start, start + s).clone();
    start += s;
    if (squeeze) {
      auto shape = part.shape();
      shape.erase(shape.begin() + axis);
      part = part.reshape(shape);
    }
    out.push_back(from_movable(part, in.dtype()));
  }
  ctx.set_output(0, RuntimeValue::make_sequence(std::move(out), in.dtype()));
}

void concat_from_sequence_kernel(KernelContext& ctx) {
  const RuntimeValue& seq = seq_input(ctx, 0);
  if (seq.sequence.empty()) ctx.fail(ErrorCode::InvalidArgument, "cannot concatenate an empty sequence");
  bool new_axis = ctx.node.get_int("new_axis", 0) != 0;
  int64_t axis = ctx.node.get_int("axis", 0);
  if (new_axis) {
    int64_t r = seq.sequence[0].rank();
    if (axis < -r - 1 || axis > r)
      ctx.fail(ErrorCode::InvalidArgument, "axis {} is out of range for rank {} with new_axis", axis, r);
    ctx.set_output(0, stack_tensors(ctx, seq.sequence, axis));
  } else {
    ctx.set_output(0, concat_tensors(ctx, seq.sequence, axis));
  }
}

void sequence_map_kernel(KernelContext& ctx) {
  const Graph* body = ctx.node.get_graph("body");
  if (!body) ctx.fail(ErrorCode::InvalidModel, "graph attribute 'body' is missing");
  const RuntimeValue& seq = seq_input(ctx, 0);
  size_t n = seq.sequence.size();
  for (size_t i = 1; i < ctx.num_inputs(); ++i) {
    const RuntimeValue& v = ctx.value(i);
    if (v.is_sequence() && v.sequence.size() != n)
      ctx.fail(ErrorCode::InvalidArgument, "input {} has {} elements, the input sequence {}", i, v.sequence.size(), n);
  }
  size_t m = body->outputs.size();
  std::vector<TensorSequence> outs(m);
  for (size_t k = 0; k < n; ++k) {
    std::vector<RuntimeValue> in;
    in.emplace_back(seq.sequence[k]);
    for (size_t i = 1; i < ctx.num_inputs(); ++i) {
      const RuntimeValue& v = ctx.value(i);
      in.push_back(v.is_sequence() ? RuntimeValue(v.sequence[k]) : v);
    }
    auto res = ctx.run_subgraph(*body, in);
    for (size_t j = 0; j < m; ++j) {
      if (!res[j].is_tensor()) ctx.fail(ErrorCode::Unsupported, "body output {} is not a tensor", j);
      outs[j].push_back(res[j].tensor);
    }
  }
  for (size_t j = 0; j < m && j < ctx.outputs.size(); ++j) {
    DType dt = DType::Undefined;
    if (!outs[j].empty()) {
      dt = outs[j][0].dtype();
    } else if (body->outputs[j].type.is_tensor()) {
      dt = body->outputs[j].type.dtype;
    }
    ctx.set_output(j, RuntimeValue::make_sequence(std::move(outs[j]), dt));
  }
}

void optional_kernel(KernelContext& ctx) {
  if (ctx.has_input(0)) {
    RuntimeValue v = ctx.value(0);
    v.is_optional = true;
    ctx.set_output(0, std::move(v));
    return;
  }
  DType dt = DType::Undefined;
  if (const Attribute* a = ctx.node.attr("type"); a && !a->types.empty()) {
    const ValueType& t = a->types[0];
    if (t.is_tensor()) dt = t.dtype;
    else if (t.elem && t.elem->is_tensor()) dt = t.elem->dtype;
  }
  ctx.set_output(0, RuntimeValue::empty_optional(dt));
}

void optional_get_element_kernel(KernelContext& ctx) {
  const RuntimeValue& v = ctx.value(0);
  if (v.kind == RuntimeValue::Kind::OptionalEmpty || v.is_none())
    ctx.fail(ErrorCode::InvalidArgument, "the optional input is empty");
  RuntimeValue out = v;
  out.is_optional = false;
  ctx.set_output(0, std::move(out));
}

void optional_has_element_kernel(KernelContext& ctx) {
  bool has = ctx.has_input(0) && ctx.value(0).kind != RuntimeValue::Kind::OptionalEmpty;
  ctx.set_output(0, Tensor::scalar<bool>(DType::Bool, has));
}

}  // namespace

void register_sequence_ops(OpTable& t) {
  t.add("", "SequenceEmpty", sequence_empty_kernel);
  t.add("", "SequenceConstruct", sequence_construct_kernel);
  t.add("", "SequenceInsert", sequence_insert_kernel);
  t.add("", "SequenceAt", sequence_at_kernel);
  t.add("", "SequenceErase", sequence_erase_kernel);
  t.add("", "SequenceLength", sequence_length_kernel);
  t.add("", "SplitToSequence", split_to_sequence_kernel);
  t.add("", "ConcatFromSequence", concat_from_sequence_kernel);
  t.add("", "SequenceMap", sequence_map_kernel);
  t.add("", "Optional", optional_kernel);
  t.add("", "OptionalGetElement", optional_get_element_kernel);
  t.add("", "OptionalHasElement", optional_has_element_kernel);
}

}  // namespace hodu::interp
