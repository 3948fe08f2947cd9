// hodu::capture: traces a forward into a Model. With a dynamic batch the
// forward is traced twice (batch B and B + 1): the graphs must agree op for op;
// a constant that differs is a size derived from the batch (a reshape's
// target), made batch-independent where the op allows it.
#include "hodu/capture.h"

#include <algorithm>

#include "formats/model_io.h"
#include "frontend/capture/capture_internal.h"
#include "frontend/capture/trace_state.h"
#include "kernels/cpu/tensor/kernels.h"
#include "hodu/autograd.h"
#include "ir/hoduscript.h"
#include "ir/schema.h"
#include "ir/verifier.h"
#include "runtime/session.h"

namespace hodu::eager {
namespace {

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct TraceRun {
  trace::TraceState state;
  std::vector<Dims> output_shapes;
};

// Sets the thread's trace state for its scope.
struct ActiveTrace {
  explicit ActiveTrace(trace::TraceState* s) {
    HODU_CHECK(trace::current_state() == nullptr, ErrorCode::InvalidArgument,
               "capture: called while another capture runs on this thread");
    trace::set_current_state(s);
  }
  ~ActiveTrace() { trace::set_current_state(nullptr); }
};

std::string input_name(const CaptureOptions& o, size_t i) {
  if (i < o.input_names.size()) return o.input_names[i];
  return i == 0 ? "input" : "input_" + std::to_string(i);
}
std::string output_name(const CaptureOptions& o, size_t i) {
  if (i < o.output_names.size()) return o.output_names[i];
  return i == 0 ? "output" : "output_" + std::to_string(i);
}

// Renames value `from` to `to` everywhere in the graph.
void rename_value(Graph& g, const std::string& from, const std::string& to) {
  for (hodu::Node& n : g.nodes) {
    for (auto& v : n.inputs)
      if (v == from) v = to;
    for (auto& v : n.outputs)
      if (v == from) v = to;
  }
}

TraceRun trace_once(const Fn& fn, const nn::NamedTensors& params, const std::vector<Tensor>& inputs,
                    const CaptureOptions& options) {
  TraceRun run;
  trace::TraceState& s = run.state;
  s.graph.name = options.graph_name;
  for (const auto& [name, t] : params) {
    HODU_CHECK(t.defined(), ErrorCode::InvalidArgument, "capture: parameter '{}' is undefined", name);
    s.parameters[t.impl().get()] = name;
    hodu::Tensor copy = kernels::empty(t.dtype(), t.shape());
    kernels::copy_into(copy, core(t));
    s.parameter_values[t.impl().get()] = copy;
    s.keep_alive(t);
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    HODU_CHECK(inputs[i].defined(), ErrorCode::InvalidArgument, "capture: example input {} is undefined", i);
    const std::string name = input_name(options, i);
    s.names[inputs[i].impl().get()] = name;
    s.keep_alive(inputs[i]);
    s.graph.inputs.push_back({name, ValueType::tensor(inputs[i].dtype(), Shape::from(inputs[i].shape())), ""});
  }
  std::vector<Tensor> outputs;
  {
    ActiveTrace active(&s);
    NoGradGuard guard;  // the tape is not needed to trace
    outputs = fn(inputs);
  }
  HODU_CHECK(!outputs.empty(), ErrorCode::InvalidArgument, "capture: the forward returned no tensors");
  for (size_t i = 0; i < outputs.size(); ++i) {
    HODU_CHECK(outputs[i].defined(), ErrorCode::InvalidArgument, "capture: output {} of the forward is undefined", i);
    const std::string want = output_name(options, i);
    auto it = s.names.find(outputs[i].impl().get());
    const bool is_input = it != s.names.end() && s.graph.input(it->second);
    const bool produced = it != s.names.end() && s.graph.producer_of(it->second) >= 0;
    if (!produced || is_input) {
      // An input or a constant returned as is: an Identity gives it the output's name.
      hodu::Node n;
      n.op_type = "Identity";
      n.name = s.fresh("Identity");
      n.inputs = {s.name_of(outputs[i])};
      n.outputs = {want};
      s.graph.nodes.push_back(std::move(n));
    } else {
      // A value returned twice gets a second name through an Identity.
      if (s.graph.output(it->second) || std::any_of(s.graph.outputs.begin(), s.graph.outputs.end(),
                                                      [&](const Value& v) { return v.name == it->second; })) {
        hodu::Node n;
        n.op_type = "Identity";
        n.name = s.fresh("Identity");
        n.inputs = {it->second};
        n.outputs = {want};
        s.graph.nodes.push_back(std::move(n));
      } else {
        rename_value(s.graph, it->second, want);
        it->second = want;
      }
    }
    s.graph.outputs.push_back({want, ValueType::tensor(outputs[i].dtype(), Shape::from(outputs[i].shape())), ""});
    run.output_shapes.push_back(outputs[i].shape());
  }
  return run;
}

// The example inputs with one more row (row 0 repeated).
std::vector<Tensor> one_more_row(const std::vector<Tensor>& inputs) {
  std::vector<Tensor> out;
  NoGradGuard guard;
  for (size_t i = 0; i < inputs.size(); ++i) {
    HODU_CHECK(inputs[i].dim() >= 1 && inputs[i].size(0) >= 1, ErrorCode::InvalidArgument,
               "capture: with a dynamic batch, example input {} ({}) needs a batch dim of at least 1 (or set "
               "dynamic_batch = false)",
               i, inputs[i].type_string());
    out.push_back(cat({inputs[i].detach(), inputs[i].detach().slice(0, 0, 1)}, 0));
  }
  return out;
}

const hodu::Node* reader_of(const Graph& g, const std::string& value, int* input_index) {
  for (const hodu::Node& n : g.nodes)
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (n.inputs[i] == value) {
        *input_index = static_cast<int>(i);
        return &n;
      }
  return nullptr;
}

// Makes graph `a` (batch B) batch-independent by comparing it with `b` (batch B + 1).
void generalize_batch(Graph& a, const Graph& b, const std::set<std::string>& constants, const CaptureOptions& options) {
  HODU_CHECK(a.nodes.size() == b.nodes.size(), ErrorCode::Unsupported,
             "capture: the forward records {} ops at one batch size and {} at another; its control flow depends on "
             "the batch (set dynamic_batch = false to capture a fixed batch)",
             a.nodes.size(), b.nodes.size());
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    const hodu::Node& x = a.nodes[i];
    const hodu::Node& y = b.nodes[i];
    HODU_CHECK(x.op_type == y.op_type && x.inputs.size() == y.inputs.size() && x.attributes == y.attributes,
               ErrorCode::Unsupported,
               "capture: op {} ({}) differs between two batch sizes (attributes derived from the batch); set "
               "dynamic_batch = false",
               i, x.op_type);
  }
  for (auto& [name, t] : a.initializers) {
    if (!constants.count(name)) continue;  // parameters and buffers: the same in both traces
    const hodu::Tensor* other = b.initializer(name);
    if (!other) continue;
    if (t.shape() == other->shape() && tensors_bitwise_equal(t, *other)) continue;
    int slot = -1;
    const hodu::Node* reader = reader_of(a, name, &slot);
    const std::string where = reader ? reader->op_type + " " + reader->name : "an unused constant";
    HODU_CHECK(reader && reader->op_type == "Reshape" && slot == 1 && t.shape() == other->shape(),
               ErrorCode::Unsupported,
               "capture: a constant of {} ({} here, {} with one more row) depends on the batch size; only reshape "
               "targets can follow it (set dynamic_batch = false to capture a fixed batch)",
               where, t.type_string(), other->type_string());
    auto va = t.to_int64s(), vb = other->to_int64s();
    int differing = 0;
    for (size_t k = 0; k < va.size(); ++k)
      if (va[k] != vb[k]) ++differing;
    HODU_CHECK(differing == 1, ErrorCode::Unsupported,
               "capture: the target of {} changes in {} dims with the batch size ({} vs {}); set dynamic_batch = false",
               where, differing, shape_to_string(va), shape_to_string(vb));
    for (size_t k = 0; k < va.size(); ++k)
      if (va[k] != vb[k]) va[k] = -1;
    t = hodu::Tensor::from_vector(DType::I64, {static_cast<int64_t>(va.size())}, va);
  }
  for (Value& v : a.inputs)
    if (v.type.shape.rank() >= 1) v.type.shape[0] = Dim::sym(options.batch_symbol);
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    auto& da = a.outputs[i].type.shape.dims();
    const auto& db = b.outputs[i].type.shape.dims();
    for (size_t k = 0; k < da.size() && k < db.size(); ++k) {
      if (da[k] == db[k]) continue;
      // One more row adds one to a batch dim.
      da[k] = db[k].value == da[k].value + 1 ? Dim::sym(options.batch_symbol) : Dim::unknown();
    }
  }
}

CapturedGraph finish(TraceRun run, const std::vector<Tensor>& inputs, const CaptureOptions& options) {
  auto model = std::make_shared<Model>();
  model->graph = std::move(run.state.graph);
  model->opset_imports[""] = 21;
  model->producer_name = "hodu.capture";
  model->producer_version = HODU_VERSION;
  // Types flow from the (symbolic) inputs; the verifier checks the whole graph.
  model->graph.value_types.clear();
  try {
    infer_types(model->graph);
    verify_model(*model);
  } catch (const Error& e) {
    throw Error(ErrorCode::Internal, std::string("capture produced a graph hodu refuses: ") + e.what());
  }
  (void)inputs;
  (void)options;
  return CapturedGraph(std::move(model));
}

// Module state a tracing run may change (BatchNorm statistics, the default generator).
struct StateSnapshot {
  std::vector<std::pair<Tensor, hodu::Tensor>> buffers;
  std::string generator;
  explicit StateSnapshot(const nn::NamedTensors& bufs) {
    for (const auto& [name, t] : bufs) {
      hodu::Tensor copy = kernels::empty(t.dtype(), t.shape());
      kernels::copy_into(copy, core(t));
      buffers.emplace_back(t, copy);
    }
    generator = Generator::default_generator().state();
  }
  void restore() const {
    for (const auto& [t, copy] : buffers) {
      hodu::Tensor dst = t.impl()->data;
      kernels::copy_into(dst, copy);
    }
    Generator::default_generator().set_state(generator);
  }
};

CapturedGraph capture_impl(const Fn& fn, const nn::NamedTensors& params, const nn::NamedTensors& buffers,
                           const std::vector<Tensor>& inputs, const CaptureOptions& options) {
  HODU_CHECK(!inputs.empty(), ErrorCode::InvalidArgument, "capture: no example inputs");
  nn::NamedTensors all = params;
  all.insert(all.end(), buffers.begin(), buffers.end());
  StateSnapshot snapshot(buffers);
  TraceRun first = trace_once(fn, all, inputs, options);
  snapshot.restore();
  if (options.dynamic_batch) {
    TraceRun second = trace_once(fn, all, one_more_row(inputs), options);
    snapshot.restore();
    generalize_batch(first.state.graph, second.state.graph, first.state.constants, options);
  }
  return finish(std::move(first), inputs, options);
}

}  // namespace

CapturedGraph capture_graph(const Fn& fn, const nn::NamedTensors& params, const nn::NamedTensors& buffers,
                            const std::vector<Tensor>& inputs, const CaptureOptions& options) {
  return capture_impl(fn, params, buffers, inputs, options);
}

CapturedGraph capture(nn::Module& module, const std::vector<Tensor>& inputs, const CaptureOptions& options) {
  return capture_impl([&](const std::vector<Tensor>& xs) { return module.forward_all(xs); }, module.named_parameters(),
                      module.named_buffers(), inputs, options);
}

CapturedGraph capture(const Fn& fn, const nn::NamedTensors& parameters, const std::vector<Tensor>& inputs,
                      const CaptureOptions& options) {
  return capture_impl(fn, parameters, {}, inputs, options);
}

// ---- CapturedGraph ------------------------------------------------------------------

struct CapturedGraph::Runner {
  std::unique_ptr<Session> session;
};

CapturedGraph::CapturedGraph() = default;
CapturedGraph::CapturedGraph(std::shared_ptr<Model> model) : model_(std::move(model)) {}

void CapturedGraph::save(const std::string& path) const {
  HODU_CHECK(model_ != nullptr, ErrorCode::InvalidArgument, "CapturedGraph::save: empty graph");
  save_model(*model_, path);
}

std::string CapturedGraph::to_text() const {
  HODU_CHECK(model_ != nullptr, ErrorCode::InvalidArgument, "CapturedGraph::to_text: empty graph");
  return print_hoduscript(*model_);
}

std::vector<std::string> CapturedGraph::input_names() const {
  std::vector<std::string> out;
  if (model_)
    for (const Value& v : model_->graph.inputs) out.push_back(v.name);
  return out;
}

std::vector<std::string> CapturedGraph::output_names() const {
  std::vector<std::string> out;
  if (model_)
    for (const Value& v : model_->graph.outputs) out.push_back(v.name);
  return out;
}

int64_t CapturedGraph::node_count() const { return model_ ? static_cast<int64_t>(model_->graph.nodes.size()) : 0; }

std::vector<Tensor> CapturedGraph::run(const std::vector<Tensor>& inputs) const {
  HODU_CHECK(model_ != nullptr, ErrorCode::InvalidArgument, "CapturedGraph::run: empty graph");
  auto& self = const_cast<CapturedGraph&>(*this);
  if (!self.runner_) {
    SessionOptions so;
    so.engine = "cpu";
    so.threads = get_num_threads();
    self.runner_ = std::make_shared<Runner>();
    self.runner_->session = Session::from_model(*model_, so);
  }
  const auto& names = model_->graph.inputs;
  HODU_CHECK(inputs.size() == names.size(), ErrorCode::InvalidArgument, "CapturedGraph::run: {} inputs for {}",
             inputs.size(), names.size());
  std::map<std::string, RuntimeValue> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) feeds[names[i].name] = kernels::contiguous(core(inputs[i], "run"));
  std::vector<Tensor> out;
  for (auto& nv : runner_->session->run(feeds)) out.push_back(make_tensor(nv.value.tensor));
  return out;
}

}  // namespace hodu::eager
