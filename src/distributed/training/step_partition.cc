#include "distributed/training/step_partition.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "core/error.h"
#include "ir/schema.h"
#include "ir/topological_order.h"

namespace hodu::distributed {
namespace {

constexpr const char* kNext = ".next";

bool summable(DType dt) { return dt == DType::F32 || dt == DType::F64; }

// The nodes `values` depend on (their producers and everything those read), as a mask.
void mark_ancestors(const Graph& g, const std::vector<std::string>& values, std::vector<bool>& mask) {
  std::vector<int> stack;
  for (const auto& v : values)
    if (int p = g.producer_of(v); p >= 0) stack.push_back(p);
  while (!stack.empty()) {
    int i = stack.back();
    stack.pop_back();
    if (mask[i]) continue;
    mask[i] = true;
    for (const auto& r : node_reads(g.nodes[i]))
      if (int p = g.producer_of(r); p >= 0 && !mask[p]) stack.push_back(p);
  }
}

// The node that really computes `value`: through Identity nodes (the gradient graph names its
// results with an Identity after all of the backward).
int real_producer(const Graph& g, const std::string& value) {
  int p = g.producer_of(value);
  while (p >= 0 && g.nodes[p].op_type == "Identity" && g.nodes[p].has_input(0)) {
    int q = g.producer_of(g.nodes[p].inputs[0]);
    if (q < 0) break;
    p = q;
  }
  return p;
}

Value typed(const Graph& g, const std::string& name) {
  Value v;
  v.name = name;
  if (auto t = g.type_of(name)) v.type = *t;
  return v;
}

// A model of `source`'s metadata holding the nodes of `mask` (in order) and the initializers
// they read.
Model part(const Model& source, const std::vector<bool>& mask, std::vector<Value> inputs, std::vector<Value> outputs,
           const std::string& suffix) {
  Model m = source;
  m.graph = Graph{};
  const Graph& g = source.graph;
  m.graph.name = g.name + suffix;
  m.graph.inputs = std::move(inputs);
  m.graph.outputs = std::move(outputs);
  std::set<std::string> used;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!mask[i]) continue;
    m.graph.nodes.push_back(g.nodes[i]);
    for (const auto& r : node_reads(g.nodes[i])) used.insert(r);
    for (const auto& o : g.nodes[i].outputs)
      if (auto it = g.value_types.find(o); it != g.value_types.end()) m.graph.value_types.insert(*it);
  }
  for (const auto& [name, t] : g.initializers)
    if (used.count(name) && !g.input(name)) m.graph.initializers.emplace_back(name, t);
  return m;
}

std::vector<int64_t> static_shape(const Graph& g, const std::string& value, const char* what) {
  auto t = g.type_of(value);
  auto dims = t && t->is_tensor() ? t->shape.to_static() : std::nullopt;
  HODU_CHECK(dims.has_value(), ErrorCode::InvalidArgument, "{} '{}' has no static shape ({}); it cannot be averaged",
             what, value, t ? t->to_string() : "unknown type");
  return *dims;
}

void check_loss(const Graph& g, const std::string& loss) {
  if (!g.input(loss) && !g.initializer(loss) && g.producer_of(loss) < 0) {
    std::string outs;
    for (const auto& o : g.outputs) outs += (outs.empty() ? "'" : ", '") + o.name + "'";
    fail(ErrorCode::InvalidArgument, "--loss '{}': the model has no value of that name (its outputs: {})", loss,
         outs.empty() ? "none" : outs);
  }
  HODU_CHECK(g.producer_of(loss) >= 0, ErrorCode::InvalidArgument,
             "--loss '{}' is a graph input or initializer, not a value the model computes", loss);
  auto t = g.type_of(loss);
  if (!t || !t->is_tensor()) return;  // checked on the first run
  HODU_CHECK(t->dtype == DType::Undefined || summable(t->dtype), ErrorCode::InvalidArgument,
             "--loss '{}' is {}; a f32 or f64 value is needed", loss, t->to_string());
  const auto& dims = t->shape.dims();
  const bool one = !t->shape.rank_known() ||
                   std::all_of(dims.begin(), dims.end(), [](const Dim& d) { return d.is_known() && d.value == 1; });
  HODU_CHECK(one, ErrorCode::InvalidArgument,
             "--loss '{}' is {}, not one number: reduce it to its mean over the batch in the model (data-parallel "
             "training averages the ranks' gradients, which is the big batch's gradient only for a mean)",
             loss, t->to_string());
}

}  // namespace

PartitionedStep partition_training_step(const Model& forward, const std::string& loss,
                                        const std::vector<std::string>& params, const passes::OptimizerSpec& optimizer,
                                        int64_t bucket_bytes) {
  Model typed_forward = forward;
  infer_types(typed_forward.graph);
  check_loss(typed_forward.graph, loss);
  for (const auto& p : params) {
    const Tensor* t = typed_forward.graph.initializer(p);
    HODU_CHECK(t, ErrorCode::InvalidArgument, "param '{}' is not an initializer of the model", p);
    HODU_CHECK(summable(t->dtype()), ErrorCode::Unsupported,
               "param '{}' is {}; the gradient all-reduce sums f32 and f64 tensors only", p, t->type_string());
  }
  PartitionedStep out;
  out.loss = loss;
  out.step = typed_forward;
  out.step.graph = passes::build_training_step(typed_forward.graph, loss, params, optimizer);
  const Graph& g = out.step.graph;
  std::set<std::string> param_set(params.begin(), params.end());
  for (const auto& in : g.inputs)
    if (param_set.count(in.name)) out.params.push_back(in.name);

  // Batch-norm running statistics: state inputs that are initializers of forward but not params.
  // Their new value ("<s>.next" is an Identity of it) is averaged over the ranks.
  std::vector<std::string> stat_values;
  for (const auto& x : passes::training_state_names(g)) {
    if (param_set.count(x) || !typed_forward.graph.initializer(x)) continue;
    out.statistics.push_back(x);
    int p = g.producer_of(x + kNext);
    HODU_CHECK(p >= 0 && g.nodes[p].op_type == "Identity", ErrorCode::Internal,
               "training step: '{}{}' is not an Identity of the statistic's update", x, kNext);
    stat_values.push_back(g.nodes[p].inputs[0]);
  }

  // The gradient part: what the gradients, the loss and the statistics need. The rest is the update.
  std::vector<std::string> grads;
  for (const auto& p : out.params) {
    grads.push_back("grad." + p);
    HODU_CHECK(g.producer_of(grads.back()) >= 0, ErrorCode::Internal, "training step: no value '{}'", grads.back());
  }
  std::vector<bool> in_gradient(g.nodes.size(), false);
  std::vector<std::string> needed = grads;
  needed.push_back(loss);
  needed.insert(needed.end(), stat_values.begin(), stat_values.end());
  mark_ancestors(g, needed, in_gradient);

  // Buckets: gradients in the order the backward computes them, cut at bucket_bytes and at dtype changes.
  std::vector<size_t> order(grads.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::vector<int> ready(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) ready[i] = real_producer(g, grads[i]);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ready[a] < ready[b]; });
  auto add = [&](GradientBucket& b, const std::string& v, std::vector<int64_t> shape) {
    const int64_t n = shape_numel(shape);
    b.values.push_back(v);
    b.shapes.push_back(std::move(shape));
    b.elements.push_back(n);
    b.total_elements += n;
  };
  for (size_t i : order) {
    DType dt = g.input(out.params[i])->type.dtype;
    std::vector<int64_t> shape = static_shape(g, grads[i], "gradient");
    const int64_t n = shape_numel(shape);
    size_t bytes = static_cast<size_t>(n) * static_cast<size_t>(dtype_bits(dt) / 8);
    bool fits = !out.buckets.empty() && out.buckets.back().dtype == dt &&
                (bucket_bytes <= 0 || out.buckets.back().bytes() + bytes <= static_cast<size_t>(bucket_bytes));
    if (!fits) {
      out.buckets.emplace_back();
      out.buckets.back().dtype = dt;
    }
    add(out.buckets.back(), grads[i], std::move(shape));
  }
  // The loss and the statistics ride with the last bucket of their dtype (or one of their own).
  std::vector<std::string> extras = {loss};
  extras.insert(extras.end(), stat_values.begin(), stat_values.end());
  for (const auto& v : extras) {
    auto t = g.type_of(v);
    DType dt = t && t->is_tensor() ? t->dtype : DType::Undefined;
    HODU_CHECK(summable(dt), ErrorCode::InvalidArgument, "'{}' is {}; only f32 and f64 values are averaged", v,
               t ? t->to_string() : "of unknown type");
    // The loss: its static shape (one element) or, unknown, a scalar (checked on each run).
    std::vector<int64_t> shape;
    if (v != loss) shape = static_shape(g, v, "running statistic");
    else if (auto dims = t->shape.to_static()) shape = *dims;
    auto it = std::find_if(out.buckets.rbegin(), out.buckets.rend(), [&](const GradientBucket& b) { return b.dtype == dt; });
    if (it == out.buckets.rend() || it != out.buckets.rbegin()) {
      out.buckets.emplace_back();
      out.buckets.back().dtype = dt;
      it = out.buckets.rbegin();
    }
    add(*it, v, std::move(shape));
  }
  for (const auto& b : out.buckets) out.averaged.insert(out.averaged.end(), b.values.begin(), b.values.end());

  // Stages: stage i computes what bucket i needs beyond the earlier stages; the last takes the rest.
  std::vector<std::vector<bool>> masks;
  std::vector<bool> done(g.nodes.size(), false);
  for (size_t b = 0; b < out.buckets.size(); ++b) {
    std::vector<bool> mask(g.nodes.size(), false);
    mark_ancestors(g, out.buckets[b].values, mask);
    if (b + 1 == out.buckets.size()) mask = in_gradient;
    for (size_t i = 0; i < mask.size(); ++i) {
      mask[i] = mask[i] && !done[i];
      done[i] = done[i] || mask[i];
    }
    masks.push_back(std::move(mask));
  }
  std::vector<int> stage_of(g.nodes.size(), -1);  // -1: the update
  for (size_t s = 0; s < masks.size(); ++s)
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (masks[s][i]) stage_of[i] = static_cast<int>(s);

  // Who reads each value: the stages (by index) and the update (masks.size()).
  std::map<std::string, std::set<int>> readers;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& r : node_reads(g.nodes[i]))
      readers[r].insert(stage_of[i] < 0 ? static_cast<int>(masks.size()) : stage_of[i]);
  std::set<std::string> averaged(out.averaged.begin(), out.averaged.end());
  auto is_step_input = [&](const std::string& v) { return g.input(v) != nullptr; };

  for (size_t s = 0; s < masks.size(); ++s) {
    std::vector<Value> inputs, outputs;
    std::set<std::string> seen;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (!masks[s][i]) continue;
      for (const auto& r : node_reads(g.nodes[i])) {
        if (r.empty() || !seen.insert(r).second) continue;
        int p = g.producer_of(r);
        if (p < 0 ? is_step_input(r) : stage_of[p] != static_cast<int>(s)) inputs.push_back(typed(g, r));
      }
    }
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (!masks[s][i]) continue;
      for (const auto& o : g.nodes[i].outputs) {
        if (o.empty()) continue;
        auto it = readers.find(o);
        bool later = it != readers.end() &&
                     std::any_of(it->second.begin(), it->second.end(), [&](int r) {
                       return r > static_cast<int>(s) && (r < static_cast<int>(masks.size()) || !averaged.count(o));
                     });
        if (later || averaged.count(o)) outputs.push_back(typed(g, o));
      }
    }
    out.stages.push_back(part(out.step, masks[s], std::move(inputs), std::move(outputs), "_stage" + std::to_string(s)));
  }

  // The update reads step inputs and averaged values, nothing else a rank computed alone.
  std::vector<bool> update_mask(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) update_mask[i] = stage_of[i] < 0;
  std::vector<Value> inputs, outputs;
  std::set<std::string> seen;
  for (const auto& v : out.averaged) {
    inputs.push_back(typed(g, v));
    seen.insert(v);
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!update_mask[i]) continue;
    for (const auto& r : node_reads(g.nodes[i])) {
      if (r.empty() || seen.count(r)) continue;
      int p = g.producer_of(r);
      if (p >= 0 && stage_of[p] >= 0)
        fail(ErrorCode::Internal, "training step: the update reads '{}', which is not averaged over the ranks", r);
      HODU_CHECK(p >= 0 || !is_step_input(r) || r == passes::kLearningRateInput || g.output(r + kNext),
                 ErrorCode::Internal, "training step: the update reads the input '{}'", r);
    }
  }
  // Then lr and every input x with an output "<x>.next" (params, optimizer state, statistics), in
  // the step's order, so that the update writes each "<x>.next" into the x it is fed.
  for (const auto& in : g.inputs)
    if (!seen.count(in.name) && (in.name == passes::kLearningRateInput || g.output(in.name + kNext)))
      inputs.push_back(in);
  for (const auto& o : g.outputs)
    if (o.name.size() > 5 && o.name.compare(o.name.size() - 5, 5, kNext) == 0) outputs.push_back(o);
  out.update = part(out.step, update_mask, std::move(inputs), std::move(outputs), "_update");
  return out;
}

}  // namespace hodu::distributed
