// Control flow: If, Loop, Scan. Bodies run through ctx.run_subgraph, which
// makes the enclosing graphs' values visible to them.
#include <algorithm>
#include <limits>

#include "engines/interp/ops/tensor_util.h"

namespace hodu::interp {
namespace {

const Graph& graph_attr(const KernelContext& ctx, const char* name) {
  const Graph* g = ctx.node.get_graph(name);
  if (!g) ctx.fail(ErrorCode::InvalidModel, "graph attribute '{}' is missing", name);
  return *g;
}

bool read_bool(const KernelContext& ctx, const RuntimeValue& v, const char* what) {
  if (!v.is_tensor() || v.tensor.numel() != 1 || v.tensor.dtype() == DType::String)
    ctx.fail(ErrorCode::InvalidArgument, "{} must be a single boolean value", what);
  return v.tensor.get_double(0) != 0;
}

// The scan output of a loop that ran zero times: shape [0] + the body output's
// static shape when known, inserted at `axis`.
Tensor empty_scan_output(const Graph& body, size_t out_index, int64_t axis) {
  DType dt = DType::F32;
  std::vector<int64_t> shape;
  if (out_index < body.outputs.size()) {
    const ValueType& t = body.outputs[out_index].type;
    if (t.is_tensor()) {
      if (t.dtype != DType::Undefined) dt = t.dtype;
      if (auto s = t.shape.to_static()) shape = *s;
    }
  }
  int64_t r = static_cast<int64_t>(shape.size());
  if (axis < 0) axis += r + 1;
  axis = std::clamp<int64_t>(axis, 0, r);
  shape.insert(shape.begin() + axis, 0);
  return Tensor::empty(dt, shape);
}

void if_kernel(KernelContext& ctx) {
  bool cond = read_bool(ctx, ctx.value(0), "cond");
  const Graph& g = graph_attr(ctx, cond ? "then_branch" : "else_branch");
  auto outs = ctx.run_subgraph(g, {});
  if (outs.size() != ctx.outputs.size())
    ctx.fail(ErrorCode::InvalidModel, "the {} branch has {} outputs, the node {}", cond ? "then" : "else",
             outs.size(), ctx.outputs.size());
  for (size_t i = 0; i < outs.size(); ++i) ctx.set_output(i, std::move(outs[i]));
}

void loop_kernel(KernelContext& ctx) {
  const Graph& body = graph_attr(ctx, "body");
  int64_t max_trip = std::numeric_limits<int64_t>::max();
  if (ctx.has_input(0)) {
    const Tensor& m = ctx.input(0);
    if (m.numel() != 1 || !dtype_is_integer(m.dtype()))
      ctx.fail(ErrorCode::InvalidArgument, "M must be a single integer, got {}", m.type_string());
    max_trip = m.get_int64(0);
  }
  bool cond = ctx.has_input(1) ? read_bool(ctx, ctx.value(1), "cond") : true;
  size_t n = ctx.num_inputs() > 2 ? ctx.num_inputs() - 2 : 0;
  if (body.inputs.size() != n + 2)
    ctx.fail(ErrorCode::InvalidModel, "the body takes {} inputs, expected {} (iteration, cond, {} carried)",
             body.inputs.size(), n + 2, n);
  if (body.outputs.size() < n + 1)
    ctx.fail(ErrorCode::InvalidModel, "the body has {} outputs, expected at least {}", body.outputs.size(), n + 1);
  size_t k = body.outputs.size() - 1 - n;
  if (ctx.outputs.size() > n + k)
    ctx.fail(ErrorCode::InvalidModel, "the node has {} outputs, the body yields {}", ctx.outputs.size(), n + k);
  std::vector<RuntimeValue> carried;
  for (size_t i = 0; i < n; ++i) carried.push_back(ctx.inputs[2 + i] ? *ctx.inputs[2 + i] : RuntimeValue());
  std::vector<std::vector<Tensor>> scans(k);
  for (int64_t it = 0; it < max_trip && cond; ++it) {
    std::vector<RuntimeValue> in;
    in.reserve(n + 2);
    in.emplace_back(Tensor::scalar<int64_t>(DType::I64, it));
    in.emplace_back(Tensor::scalar<bool>(DType::Bool, cond));
    for (auto& v : carried) in.push_back(std::move(v));
    auto out = ctx.run_subgraph(body, in);
    cond = read_bool(ctx, out[0], "the body's condition output");
    for (size_t i = 0; i < n; ++i) carried[i] = std::move(out[1 + i]);
    for (size_t j = 0; j < k; ++j) {
      if (!out[1 + n + j].is_tensor())
        ctx.fail(ErrorCode::Unsupported, "scan output {} of the body is not a tensor", j);
      scans[j].push_back(out[1 + n + j].tensor);
    }
  }
  for (size_t i = 0; i < n && i < ctx.outputs.size(); ++i) ctx.set_output(i, std::move(carried[i]));
  for (size_t j = 0; j < k && n + j < ctx.outputs.size(); ++j) {
    if (!ctx.wants_output(n + j)) continue;
    ctx.set_output(n + j, scans[j].empty() ? empty_scan_output(body, 1 + n + j, 0) : stack_tensors(ctx, scans[j], 0));
  }
}

// Opset-8 Scan: a leading optional sequence_lens input and a batch axis 0 on
// every state and scan tensor (the body sees one batch entry at a time).
// Recognised by its shape: the body takes one input fewer than the node.
void scan8_kernel(KernelContext& ctx, const Graph& body) {
  int64_t m = ctx.node.get_int("num_scan_inputs", -1);
  int64_t total = static_cast<int64_t>(ctx.num_inputs()) - 1;
  if (m < 1 || m > total) ctx.fail(ErrorCode::InvalidModel, "num_scan_inputs {} is invalid for {} inputs", m, total);
  int64_t n = total - m;
  int64_t k = static_cast<int64_t>(body.outputs.size()) - n;
  if (k < 0) ctx.fail(ErrorCode::InvalidModel, "the body has fewer outputs than state variables");
  // The importer renames Scan-8's `directions` to today's scan_input_directions.
  auto dirs = ctx.node.get_ints("scan_input_directions", ctx.node.get_ints("directions", std::vector<int64_t>(m, 0)));
  if (static_cast<int64_t>(dirs.size()) != m) ctx.fail(ErrorCode::InvalidModel, "directions has the wrong length");
  std::vector<Tensor> states, xs;
  int64_t batch = -1, len = -1;
  auto check_batch = [&](const Tensor& t, int64_t min_rank) {
    if (t.rank() < min_rank) ctx.fail(ErrorCode::InvalidArgument, "{} needs a batch axis", t.type_string());
    if (batch >= 0 && t.dim(0) != batch) ctx.fail(ErrorCode::InvalidArgument, "inputs have different batch sizes");
    batch = t.dim(0);
  };
  for (int64_t i = 0; i < n; ++i) {
    states.push_back(to_movable(ctx.input(1 + i)));
    check_batch(states.back(), 1);
  }
  for (int64_t j = 0; j < m; ++j) {
    xs.push_back(to_movable(ctx.input(1 + n + j)));
    check_batch(xs.back(), 2);
    if (len >= 0 && xs.back().dim(1) != len)
      ctx.fail(ErrorCode::InvalidArgument, "scan inputs have different sequence lengths");
    len = xs.back().dim(1);
  }
  std::vector<int64_t> lens(batch, len);
  if (ctx.has_input(0)) {
    lens = read_int_list(ctx, ctx.input(0), "sequence_lens");
    if (static_cast<int64_t>(lens.size()) != batch)
      ctx.fail(ErrorCode::InvalidArgument, "sequence_lens has {} values for batch {}", lens.size(), batch);
    for (int64_t l : lens)
      if (l < 0 || l > len) ctx.fail(ErrorCode::InvalidArgument, "sequence length {} is outside [0, {}]", l, len);
  }
  auto entry = [&](const Tensor& t, int64_t b) {  // t[b] (batch axis removed)
    auto shape = t.shape();
    shape.erase(shape.begin());
    return t.slice(0, b, b + 1).clone().reshape(shape);
  };
  std::vector<std::vector<Tensor>> final_states(n), scans(k);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<RuntimeValue> st;
    for (int64_t i = 0; i < n; ++i) st.emplace_back(from_movable(entry(states[i], b), ctx.input(1 + i).dtype()));
    std::vector<Tensor> xb;
    for (int64_t j = 0; j < m; ++j) xb.push_back(entry(xs[j], b));
    std::vector<std::vector<Tensor>> sb(k);
    for (int64_t t = 0; t < lens[b]; ++t) {
      std::vector<RuntimeValue> in = st;
      for (int64_t j = 0; j < m; ++j) {
        int64_t idx = dirs[j] ? lens[b] - 1 - t : t;
        in.emplace_back(from_movable(entry(xb[j], idx), ctx.input(1 + n + j).dtype()));
      }
      auto out = ctx.run_subgraph(body, in);
      for (int64_t i = 0; i < n; ++i) st[i] = std::move(out[i]);
      for (int64_t j = 0; j < k; ++j) {
        if (!out[n + j].is_tensor()) ctx.fail(ErrorCode::Unsupported, "scan output {} of the body is not a tensor", j);
        sb[j].push_back(out[n + j].tensor);
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      if (!st[i].is_tensor()) ctx.fail(ErrorCode::Unsupported, "state {} is not a tensor", i);
      final_states[i].push_back(st[i].tensor);
    }
    for (int64_t j = 0; j < k; ++j) {
      if (sb[j].empty()) ctx.fail(ErrorCode::Unsupported, "empty sequences in an opset-8 Scan");
      while (static_cast<int64_t>(sb[j].size()) < len) sb[j].push_back(Tensor::empty(sb[j][0].dtype(), sb[j][0].shape()));
      scans[j].push_back(stack_tensors(ctx, sb[j], 0));
    }
  }
  if (batch == 0) ctx.fail(ErrorCode::Unsupported, "an opset-8 Scan with batch size 0");
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(ctx.outputs.size()); ++i)
    ctx.set_output(i, stack_tensors(ctx, final_states[i], 0));
  for (int64_t j = 0; j < k && n + j < static_cast<int64_t>(ctx.outputs.size()); ++j)
    if (ctx.wants_output(n + j)) ctx.set_output(n + j, stack_tensors(ctx, scans[j], 0));
}

void scan_kernel(KernelContext& ctx) {
  const Graph& body = graph_attr(ctx, "body");
  int64_t m = ctx.node.get_int("num_scan_inputs", -1);
  int64_t total = static_cast<int64_t>(ctx.num_inputs());
  if (static_cast<int64_t>(body.inputs.size()) + 1 == total && !ctx.node.has_attr("scan_input_axes") &&
      !ctx.node.has_attr("scan_output_axes"))
    return scan8_kernel(ctx, body);
  if (m < 1 || m > total) ctx.fail(ErrorCode::InvalidModel, "num_scan_inputs {} is invalid for {} inputs", m, total);
  int64_t n = total - m;
  if (static_cast<int64_t>(body.inputs.size()) != total)
    ctx.fail(ErrorCode::InvalidModel, "the body takes {} inputs, the node has {}", body.inputs.size(), total);
  int64_t k = static_cast<int64_t>(body.outputs.size()) - n;
  if (k < 0) ctx.fail(ErrorCode::InvalidModel, "the body has fewer outputs than state variables");
  auto in_axes = ctx.node.get_ints("scan_input_axes", std::vector<int64_t>(m, 0));
  auto in_dirs = ctx.node.get_ints("scan_input_directions", std::vector<int64_t>(m, 0));
  auto out_axes = ctx.node.get_ints("scan_output_axes", std::vector<int64_t>(k, 0));
  auto out_dirs = ctx.node.get_ints("scan_output_directions", std::vector<int64_t>(k, 0));
  if (static_cast<int64_t>(in_axes.size()) != m || static_cast<int64_t>(in_dirs.size()) != m ||
      static_cast<int64_t>(out_axes.size()) != k || static_cast<int64_t>(out_dirs.size()) != k)
    ctx.fail(ErrorCode::InvalidModel, "scan axes/directions attributes have the wrong length");
  std::vector<Tensor> xs;
  int64_t len = -1;
  for (int64_t j = 0; j < m; ++j) {
    const Tensor& x = ctx.input(n + j);
    in_axes[j] = normalize_axis(ctx, in_axes[j], x.rank());
    if (x.rank() == 0) ctx.fail(ErrorCode::InvalidArgument, "scan input {} is a scalar", j);
    int64_t l = x.dim(in_axes[j]);
    if (len >= 0 && l != len)
      ctx.fail(ErrorCode::InvalidArgument, "scan inputs have different lengths ({} and {})", len, l);
    len = l;
    xs.push_back(to_movable(x));
  }
  std::vector<RuntimeValue> states;
  for (int64_t i = 0; i < n; ++i) states.push_back(ctx.value(i));
  std::vector<std::vector<Tensor>> scans(k);
  for (int64_t t = 0; t < len; ++t) {
    std::vector<RuntimeValue> in;
    for (auto& s : states) in.push_back(std::move(s));
    for (int64_t j = 0; j < m; ++j) {
      int64_t idx = in_dirs[j] ? len - 1 - t : t;
      auto shape = xs[j].shape();
      shape.erase(shape.begin() + in_axes[j]);
      Tensor slice = xs[j].slice(in_axes[j], idx, idx + 1).clone().reshape(shape);
      in.emplace_back(from_movable(slice, ctx.input(n + j).dtype()));
    }
    auto out = ctx.run_subgraph(body, in);
    for (int64_t i = 0; i < n; ++i) states[i] = std::move(out[i]);
    for (int64_t j = 0; j < k; ++j) {
      if (!out[n + j].is_tensor()) ctx.fail(ErrorCode::Unsupported, "scan output {} of the body is not a tensor", j);
      scans[j].push_back(out[n + j].tensor);
    }
  }
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(ctx.outputs.size()); ++i) ctx.set_output(i, std::move(states[i]));
  for (int64_t j = 0; j < k && n + j < static_cast<int64_t>(ctx.outputs.size()); ++j) {
    if (!ctx.wants_output(n + j)) continue;
    if (scans[j].empty()) {
      ctx.set_output(n + j, empty_scan_output(body, n + j, out_axes[j]));
      continue;
    }
    if (out_dirs[j]) std::reverse(scans[j].begin(), scans[j].end());
    ctx.set_output(n + j, stack_tensors(ctx, scans[j], out_axes[j]));
  }
}

}  // namespace

void register_control_flow_ops(OpTable& t) {
  t.add("", "If", if_kernel);
  t.add("", "Loop", loop_kernel);
  t.add("", "Scan", scan_kernel);
}

}  // namespace hodu::interp
