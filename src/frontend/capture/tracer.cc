#include "frontend/capture/tracer.h"

#include "frontend/capture/trace_state.h"
#include "kernels/cpu/tensor/kernels.h"
#include "frontend/tensor/tensor_impl.h"

namespace hodu::eager::trace {

namespace {
thread_local TraceState* current = nullptr;
}

TraceState* current_state() { return current; }
void set_current_state(TraceState* s) { current = s; }

bool active() { return current && !current->paused; }

Pause::Pause() : previous_(current ? current->paused : false) {
  if (current) current->paused = true;
}
Pause::~Pause() {
  if (current) current->paused = previous_;
}

std::string TraceState::fresh(const std::string& prefix) { return prefix + "_" + std::to_string(counter++); }

void TraceState::keep_alive(const Tensor& t) {
  if (t.defined()) keep.push_back(t.impl());
}

std::string TraceState::name_of(const Tensor& t) {
  if (!t.defined()) return "";
  const TensorImpl* impl = t.impl().get();
  if (auto it = names.find(impl); it != names.end()) return it->second;
  keep_alive(t);
  // A snapshot: a parameter's value when tracing began (the forward may update a buffer before
  // an op reads it), anything else's when the op ran.
  std::string name;
  hodu::Tensor copy;
  if (auto p = parameters.find(impl); p != parameters.end()) {
    name = p->second;
    copy = parameter_values.at(impl);
  } else {
    const hodu::Tensor& c = core(t);
    copy = kernels::empty(c.dtype(), c.shape());
    kernels::copy_into(copy, c);
    name = fresh("const");
    constants.insert(name);
  }
  graph.set_initializer(name, copy);
  names[impl] = name;
  return name;
}

void record(const std::string& op_type, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
            std::vector<Attribute> attributes, const std::string& domain) {
  TraceState* s = current;
  if (!s || s->paused) return;
  hodu::Node n;
  n.op_type = op_type;
  n.domain = domain;
  n.name = s->fresh(op_type);
  for (const Tensor& t : inputs) n.inputs.push_back(s->name_of(t));
  // Trailing omitted optional inputs are dropped.
  while (!n.inputs.empty() && n.inputs.back().empty()) n.inputs.pop_back();
  for (const Tensor& t : outputs) {
    std::string name = s->fresh("v");
    s->keep_alive(t);
    s->names[t.impl().get()] = name;
    n.outputs.push_back(name);
  }
  n.attributes = std::move(attributes);
  s->graph.nodes.push_back(std::move(n));
}

Tensor ints(const std::vector<int64_t>& values) { return tensor(values, {static_cast<int64_t>(values.size())}); }

Tensor constant(double value, DType dtype) { return scalar_tensor(value, dtype); }

void record_dropout(const Tensor& x, const Tensor& y, double p) {
  if (!active()) return;
  record("Dropout", {x, constant(p, x.dtype()), constant(1.0, DType::Bool)}, {y});
}

void alias(const Tensor& self, const Tensor& result) {
  TraceState* s = current;
  if (!s || !self.defined() || !result.defined()) return;
  auto it = s->names.find(result.impl().get());
  if (it == s->names.end()) return;
  s->keep_alive(self);
  s->names[self.impl().get()] = it->second;
}

}  // namespace hodu::eager::trace
