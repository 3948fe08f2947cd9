// build_training_step: forward + backward (build_gradient_graph) + the
// optimizer's update, as one graph. Params and optimizer state are graph inputs
// x with outputs "x.next", so an engine can run step after step with the state
// updated in place (docs/passes.md, "Training step"). The update follows
// PyTorch 1.13's single-tensor SGD, Adam and AdamW exactly; it is elementwise,
// so the elementwise fusion pass makes one loop of each param's update.
#include <algorithm>
#include <set>

#include "core/error.h"
#include "ir/schema.h"
#include "passes/autodiff.h"

namespace hodu::passes {
namespace {

constexpr const char* kStep = "optimizer.step";

std::string next(const std::string& x) { return x + ".next"; }

// Appends nodes to a graph under one prefix.
class Emitter {
 public:
  explicit Emitter(Graph& g) : g_(g) {}
  std::string op(const std::string& type, std::vector<std::string> inputs, std::vector<Attribute> attrs = {},
                 std::string output = "") {
    Node n;
    n.op_type = type;
    n.name = "optimizer/" + type + "_" + std::to_string(count_++);
    n.inputs = std::move(inputs);
    n.attributes = std::move(attrs);
    n.outputs = {output.empty() ? n.name + "_out" : std::move(output)};
    g_.nodes.push_back(std::move(n));
    return g_.nodes.back().outputs[0];
  }
  std::string scalar(double v, DType dt) {
    std::string name = "optimizer/const_" + std::to_string(count_++);
    Tensor t = Tensor::from_vector(DType::F64, {}, std::vector<double>{v});
    g_.set_initializer(name, dt == DType::F64 ? t : t.cast(dt));
    return name;
  }
  std::string mul(const std::string& a, const std::string& b) { return op("Mul", {a, b}); }
  std::string add(const std::string& a, const std::string& b) { return op("Add", {a, b}); }
  std::string sub(const std::string& a, const std::string& b) { return op("Sub", {a, b}); }
  std::string div(const std::string& a, const std::string& b) { return op("Div", {a, b}); }
  std::string cast(const std::string& a, DType to) {
    return to == DType::F32 ? a : op("Cast", {a}, {Attribute::make_int("to", dtype_to_onnx(to))});
  }

 private:
  Graph& g_;
  size_t count_ = 0;
};

// Scalars shared by every param of one dtype (the learning rate and the bias corrections).
struct Scalars {
  std::string lr, step_size, bc2_sqrt, decay, first;
};

Scalars scalars_for(Emitter& e, const OptimizerSpec& o, DType dt, const std::string& t, const std::string& step) {
  Scalars s;
  s.lr = e.cast(kLearningRateInput, dt);
  auto k = [&](double v) { return e.scalar(v, dt); };
  if (o.kind == OptimizerSpec::Kind::SGD) {
    // A momentum buffer starts as the first gradient itself (no dampening on step 1).
    if (o.momentum != 0 && o.dampening != 0)
      s.first = e.sub(k(1), e.mul(k(o.dampening), e.cast(e.op("Min", {step, e.scalar(1, DType::F32)}), dt)));
    return s;
  }
  std::string tt = e.cast(t, dt);
  std::string bc1 = e.sub(k(1), e.op("Pow", {k(o.beta1), tt}));
  std::string bc2 = e.sub(k(1), e.op("Pow", {k(o.beta2), tt}));
  s.step_size = e.div(s.lr, bc1);
  s.bc2_sqrt = e.op("Sqrt", {bc2});
  if (o.kind == OptimizerSpec::Kind::AdamW && o.weight_decay != 0)
    s.decay = e.sub(k(1), e.mul(s.lr, k(o.weight_decay)));
  return s;
}

}  // namespace

OptimizerSpec OptimizerSpec::sgd(float momentum, float dampening, bool nesterov, float weight_decay) {
  OptimizerSpec o;
  o.kind = Kind::SGD;
  o.momentum = momentum;
  o.dampening = dampening;
  o.nesterov = nesterov;
  o.weight_decay = weight_decay;
  return o;
}

OptimizerSpec OptimizerSpec::adam(float beta1, float beta2, float eps, float weight_decay) {
  OptimizerSpec o;
  o.kind = Kind::Adam;
  o.beta1 = beta1;
  o.beta2 = beta2;
  o.eps = eps;
  o.weight_decay = weight_decay;
  return o;
}

OptimizerSpec OptimizerSpec::adamw(float beta1, float beta2, float eps, float weight_decay) {
  OptimizerSpec o = adam(beta1, beta2, eps, weight_decay);
  o.kind = Kind::AdamW;
  return o;
}

Graph build_training_step(const Graph& forward, std::string loss, std::vector<std::string> params,
                          const OptimizerSpec& opt) {
  using K = OptimizerSpec::Kind;
  if (params.empty()) fail(ErrorCode::InvalidArgument, "training step: no parameters to train");
  if (opt.kind == K::SGD) {
    if (opt.nesterov && (opt.momentum <= 0 || opt.dampening != 0))
      fail(ErrorCode::InvalidArgument, "training step: Nesterov momentum requires a momentum and zero dampening");
    if (opt.momentum < 0) fail(ErrorCode::InvalidArgument, "training step: invalid momentum {}", opt.momentum);
  } else {
    if (!(opt.beta1 >= 0 && opt.beta1 < 1) || !(opt.beta2 >= 0 && opt.beta2 < 1))
      fail(ErrorCode::InvalidArgument, "training step: invalid betas ({}, {})", opt.beta1, opt.beta2);
    if (!(opt.eps >= 0)) fail(ErrorCode::InvalidArgument, "training step: invalid eps {}", opt.eps);
  }
  if (!(opt.weight_decay >= 0)) fail(ErrorCode::InvalidArgument, "training step: invalid weight_decay {}", opt.weight_decay);
  for (const char* reserved : {kLearningRateInput, kStep})
    if (forward.input(reserved) || forward.initializer(reserved) || forward.producer_of(reserved) >= 0)
      fail(ErrorCode::InvalidArgument, "training step: the graph already has a value '{}'", reserved);

  Graph fw = forward;
  std::set<std::string> seen;
  for (const auto& p : params) {
    if (!seen.insert(p).second) fail(ErrorCode::InvalidArgument, "training step: param '{}' is named twice", p);
    const Tensor* t = fw.initializer(p);
    if (!t) fail(ErrorCode::InvalidArgument, "training step: param '{}' is not an initializer of graph '{}'", p, fw.name);
    if (!dtype_is_float(t->dtype()))
      fail(ErrorCode::InvalidArgument, "training step: param '{}' has dtype {}; a float tensor is needed", p,
           dtype_name(t->dtype()));
  }
  // BatchNormalization in training mode: its running statistics become state too (not params).
  for (const auto& n : fw.nodes)
    if (n.op_type == "BatchNormalization" && canonical_domain(n.domain).empty() && n.get_int("training_mode", 0) != 0)
      for (size_t i = 3; i <= 4; ++i)
        if (n.has_input(i) && seen.count(n.inputs[i]))
          fail(ErrorCode::InvalidArgument,
               "training step: param '{}' is a running statistic of {}; the step updates it as state, leave it out "
               "of the params",
               n.inputs[i], n.describe());
  std::vector<std::pair<std::string, std::string>> stats;  // (statistic input, node output with its update)
  for (auto& n : fw.nodes) {
    if (n.op_type != "BatchNormalization" || !canonical_domain(n.domain).empty() || n.get_int("training_mode", 0) == 0)
      continue;
    for (size_t i = 3; i <= 4; ++i) {
      if (!n.has_input(i) || !fw.initializer(n.inputs[i]) || fw.input(n.inputs[i]) || seen.count(n.inputs[i])) continue;
      if (n.outputs.size() <= i - 2) n.outputs.resize(i - 1);
      if (n.outputs[i - 2].empty()) n.outputs[i - 2] = fw.unique_name(n.name + (i == 3 ? "/running_mean" : "/running_var"));
      stats.emplace_back(n.inputs[i], n.outputs[i - 2]);
      seen.insert(n.inputs[i]);
    }
  }
  // Params (and statistics) stop being constants: they are fed every step.
  std::vector<Value> state_inputs;
  auto to_input = [&](const std::string& name) {
    const Tensor* t = fw.initializer(name);
    Value v{name, ValueType::tensor(t->dtype(), Shape::from(t->shape())), ""};
    fw.remove_initializer(name);
    return v;
  };
  std::vector<Value> param_inputs, stat_inputs;
  for (const auto& p : params) param_inputs.push_back(to_input(p));
  for (const auto& [s, o] : stats) stat_inputs.push_back(to_input(s));
  for (const auto& v : param_inputs) fw.inputs.push_back(v);
  for (const auto& v : stat_inputs) fw.inputs.push_back(v);

  // The loss is an output (first after forward's) even where forward does not output it.
  if (!fw.output(loss)) {
    auto t = fw.type_of(loss);
    fw.outputs.push_back(Value{loss, t ? *t : ValueType{}, "the loss"});
  }
  const size_t n_forward_outputs = fw.outputs.size();
  Graph g = build_gradient_graph(fw, {loss, params, false});
  g.outputs.resize(n_forward_outputs);  // the gradients are consumed by the update
  // Inputs: forward's, lr, params, optimizer state, statistics.
  g.inputs.erase(std::remove_if(g.inputs.begin(), g.inputs.end(),
                                [&](const Value& v) { return seen.count(v.name) > 0; }),
                 g.inputs.end());
  g.inputs.push_back(Value{kLearningRateInput, ValueType::tensor(DType::F32, Shape::scalar()), "learning rate"});
  for (const auto& v : param_inputs) g.inputs.push_back(v);

  Emitter e(g);
  const bool has_step = opt.kind != K::SGD || opt.momentum != 0;
  std::string t;  // steps including this one
  if (has_step) t = e.add(kStep, e.scalar(1, DType::F32));
  std::map<DType, Scalars> scalars;
  std::vector<Value> opt_inputs;
  std::vector<std::pair<std::string, std::string>> updates;  // (output name, value)
  auto state = [&](const std::string& p, const char* what, const ValueType& type) {
    std::string name = p + "." + what;
    if (g.input(name) || g.initializer(name) || g.producer_of(name) >= 0)
      fail(ErrorCode::InvalidArgument, "training step: the graph already has a value '{}'", name);
    opt_inputs.push_back(Value{name, type, ""});
    return name;
  };
  for (const auto& pv : param_inputs) {
    const std::string& p = pv.name;
    const DType dt = pv.type.dtype;
    auto k = [&](double v) { return e.scalar(v, dt); };
    if (!scalars.count(dt)) scalars[dt] = scalars_for(e, opt, dt, t, kStep);
    const Scalars& s = scalars[dt];
    std::string grad = "grad." + p;
    if (opt.maximize) grad = e.op("Neg", {grad});
    std::string p_next;
    if (opt.kind == K::SGD) {
      std::string d = opt.weight_decay != 0 ? e.add(grad, e.mul(p, k(opt.weight_decay))) : grad;
      if (opt.momentum != 0) {
        std::string buf = state(p, "momentum_buffer", pv.type);
        std::string scaled = s.first.empty() ? (opt.dampening != 0 ? e.mul(d, k(1 - opt.dampening)) : d) : e.mul(d, s.first);
        std::string buf_next = e.add(e.mul(buf, k(opt.momentum)), scaled);
        updates.emplace_back(next(buf), buf_next);
        d = opt.nesterov ? e.add(d, e.mul(buf_next, k(opt.momentum))) : buf_next;
      }
      p_next = e.sub(p, e.mul(d, s.lr));
    } else {
      std::string base = p;
      if (opt.weight_decay != 0) {
        if (opt.kind == K::AdamW) base = e.mul(p, s.decay);
        else grad = e.add(grad, e.mul(p, k(opt.weight_decay)));
      }
      std::string m = state(p, "exp_avg", pv.type), v = state(p, "exp_avg_sq", pv.type);
      std::string m_next = e.add(e.mul(m, k(opt.beta1)), e.mul(grad, k(1 - opt.beta1)));
      std::string v_next = e.add(e.mul(v, k(opt.beta2)), e.mul(e.mul(grad, grad), k(1 - opt.beta2)));
      updates.emplace_back(next(m), m_next);
      updates.emplace_back(next(v), v_next);
      std::string second = v_next;
      if (opt.amsgrad) {
        std::string vmax = state(p, "max_exp_avg_sq", pv.type);
        second = e.op("Max", {vmax, v_next});
        updates.emplace_back(next(vmax), second);
      }
      std::string denom = e.add(e.div(e.op("Sqrt", {second}), s.bc2_sqrt), k(opt.eps));
      p_next = e.sub(base, e.mul(e.div(m_next, denom), s.step_size));
    }
    updates.emplace_back(next(p), p_next);
  }
  for (const auto& v : opt_inputs) g.inputs.push_back(v);
  if (has_step) {
    g.inputs.push_back(Value{kStep, ValueType::tensor(DType::F32, Shape::scalar()), "optimizer steps taken"});
    updates.emplace_back(next(kStep), t);
  }
  for (const auto& v : stat_inputs) g.inputs.push_back(v);
  for (const auto& [s, o] : stats) updates.emplace_back(next(s), o);

  // Outputs "<x>.next" in input order.
  std::map<std::string, std::string> by_output(updates.begin(), updates.end());
  for (const auto& in : g.inputs) {
    auto it = by_output.find(next(in.name));
    if (it == by_output.end()) continue;
    if (g.input(it->first) || g.initializer(it->first) || g.producer_of(it->first) >= 0)
      fail(ErrorCode::InvalidArgument, "training step: the graph already has a value '{}'", it->first);
    e.op("Identity", {it->second}, {}, it->first);
    g.outputs.push_back(Value{it->first, in.type, ""});
  }
  infer_types(g);
  return g;
}

std::vector<std::string> trainable_initializers(const Graph& forward) {
  std::set<std::string> stats;
  for (const auto& n : forward.nodes)
    if (n.op_type == "BatchNormalization" && canonical_domain(n.domain).empty())
      for (size_t i = 3; i <= 4; ++i)
        if (n.has_input(i)) stats.insert(n.inputs[i]);
  std::vector<std::string> out;
  for (const auto& [name, t] : forward.initializers)
    if (dtype_is_float(t.dtype()) && t.rank() >= 1 && !forward.input(name) && !stats.count(name) &&
        name.find("::") == std::string::npos)
      out.push_back(name);
  return out;
}

std::vector<std::string> training_state_names(const Graph& step) {
  std::vector<std::string> out;
  for (const auto& in : step.inputs)
    if (step.output(next(in.name))) out.push_back(in.name);
  return out;
}

std::map<std::string, Tensor> initial_training_state(const Graph& forward, const Graph& step) {
  std::map<std::string, Tensor> out;
  for (const auto& name : training_state_names(step)) {
    if (const Tensor* t = forward.initializer(name)) {
      out[name] = t->clone();
      continue;
    }
    const Value* v = step.input(name);
    auto dims = v->type.shape.to_static();
    if (!v->type.is_tensor() || !dims)
      fail(ErrorCode::InvalidArgument, "training state '{}' has no static shape ({})", name, v->type.to_string());
    out[name] = Tensor::zeros(v->type.dtype, *dims);
  }
  return out;
}

}  // namespace hodu::passes
