// Training graphs for Python (hodu.torch): the gradient graph split into a forward that saves
// what the backward needs and a backward fed the outputs' gradients (passes/autodiff_split.h),
// and a training-mode BatchNormalization's running statistics as graph outputs updated the way
// PyTorch updates them.
#include <pybind11/stl.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "bindings.h"
#include "core/error.h"
#include "ir/graph.h"
#include "passes/autodiff.h"
#include "passes/autodiff_split.h"

namespace hodu::python {
namespace {

std::shared_ptr<Model> with_graph(const Model& like, Graph g) {
  auto m = std::make_shared<Model>(like);
  m->graph = std::move(g);
  return m;
}

Node make_node(Graph& g, const std::string& stem, std::string op, std::vector<std::string> inputs,
               std::vector<Attribute> attrs = {}) {
  Node n;
  n.name = g.unique_name(stem);
  n.op_type = std::move(op);
  n.inputs = std::move(inputs);
  n.outputs = {n.name};
  n.attributes = std::move(attrs);
  return n;
}

// For each BatchNormalization in training mode whose running mean and variance are graph
// inputs: its updated statistics become the outputs "<mean>.next" and "<var>.next". ONNX
// updates the variance with the batch's biased variance; `unbiased` makes it PyTorch's update,
// with the unbiased one: var_b·n/(n−1) where n = elements per channel, written as
// next + (next − momentum·var)/(n − 1) from ONNX's next = momentum·var + (1 − momentum)·var_b.
// Returns the model and the (input, output) pairs.
py::tuple batch_norm_state_outputs(const Model& model, bool unbiased) {
  Graph g = model.graph;
  std::vector<std::pair<std::string, std::string>> pairs;
  std::set<std::string> taken;
  const size_t n_nodes = g.nodes.size();
  for (size_t k = 0; k < n_nodes; ++k) {
    Node& n = g.nodes[k];
    if (!n.domain.empty() || n.op_type != "BatchNormalization" || n.get_int("training_mode", 0) == 0) continue;
    if (n.inputs.size() < 5 || !g.input(n.inputs[3]) || !g.input(n.inputs[4])) continue;
    n.outputs.resize(std::max<size_t>(n.outputs.size(), 3));
    for (size_t i : {1, 2})
      if (n.outputs[i].empty()) n.outputs[i] = g.unique_name(n.name + (i == 1 ? "/running_mean" : "/running_var"));
    // Copies: the nodes appended below move g.nodes.
    const std::string name = n.name, x = n.inputs[0], mean_in = n.inputs[3], var_in = n.inputs[4];
    const std::string mean_next = n.outputs[1];
    std::string var_next = n.outputs[2];
    const float momentum = n.get_float("momentum", 0.9f);
    HODU_CHECK(taken.insert(mean_in).second && taken.insert(var_in).second, ErrorCode::Unsupported,
               "{}: its running statistics '{}', '{}' are updated by another BatchNormalization too", n.describe(),
               mean_in, var_in);
    if (unbiased) {
      auto emit = [&](const std::string& stem, const char* op, std::vector<std::string> in,
                      std::vector<Attribute> attrs = {}) {
        g.nodes.push_back(make_node(g, name + "/torch_var/" + stem, op, std::move(in), std::move(attrs)));
        return g.nodes.back().outputs[0];
      };
      auto constant = [&](const std::string& stem, Tensor t) {
        std::string c = g.unique_name(name + "/torch_var/" + stem);
        g.set_initializer(c, std::move(t));
        return c;
      };
      std::string shape = emit("shape", "Shape", {x});
      std::string numel = emit("numel", "ReduceProd", {shape}, {Attribute::make_int("keepdims", 0)});
      std::string channels = emit("channels", "Gather", {shape, constant("axis1", Tensor::scalar<int64_t>(DType::I64, 1))});
      std::string per_channel = emit("per_channel", "Div", {numel, channels});
      std::string count = emit("count", "Cast", {per_channel}, {Attribute::make_int("to", dtype_to_onnx(DType::F32))});
      std::string denom = emit("denominator", "Sub", {count, constant("one", Tensor::scalar<float>(DType::F32, 1.0f))});
      std::string old = emit("old", "Mul", {var_in, constant("momentum", Tensor::scalar<float>(DType::F32, momentum))});
      std::string step = emit("step", "Sub", {var_next, old});
      std::string correction = emit("correction", "Div", {step, denom});
      var_next = emit("next", "Add", {var_next, correction});
    }
    pairs.emplace_back(mean_in, mean_next);
    pairs.emplace_back(var_in, var_next);
  }
  py::list result;
  for (const auto& [in, out] : pairs) {
    std::string name = in + ".next";
    HODU_CHECK(!g.output(name) && !g.input(name) && g.producer_of(name) < 0, ErrorCode::InvalidArgument,
               "the graph already has a value '{}'", name);
    Node id;
    id.name = g.unique_name(name + "/output");
    id.op_type = "Identity";
    id.inputs = {out};
    id.outputs = {name};
    g.nodes.push_back(std::move(id));
    auto t = g.type_of(in);
    g.outputs.push_back(Value{name, t ? *t : ValueType{}, "running statistic after this batch"});
    result.append(py::make_tuple(in, name));
  }
  return py::make_tuple(with_graph(model, std::move(g)), result);
}

}  // namespace

void bind_training(py::module_& m) {
  m.def(
      "split_gradient_graph",
      [](const Model& model, const std::vector<std::string>& outputs, const std::vector<std::string>& wrt) {
        passes::ForwardBackward fb;
        {
          py::gil_scoped_release nogil;
          fb = passes::split_gradient_graph(model.graph, {outputs, wrt});
        }
        py::dict d;
        d["forward"] = with_graph(model, std::move(fb.forward));
        d["backward"] = with_graph(model, std::move(fb.backward));
        d["seeds"] = fb.seeds;
        d["saved"] = fb.saved;
        d["reused_inputs"] = fb.reused_inputs;
        return d;
      },
      py::arg("model"), py::arg("outputs"), py::arg("wrt"),
      "passes::split_gradient_graph: {forward, backward (Models), seeds, saved, reused_inputs}");
  m.def("batch_norm_state_outputs", &batch_norm_state_outputs, py::arg("model"), py::arg("unbiased") = true,
        "Training-mode BatchNormalization statistics fed as inputs become outputs '<input>.next': "
        "(model, [(input, output)])");
  m.def("differentiable_ops", &passes::differentiable_ops);
}

}  // namespace hodu::python
