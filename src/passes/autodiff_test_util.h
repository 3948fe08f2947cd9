// Test helpers shared by the autodiff tests (src/passes/autodiff_test.cc) and the cpu engine's
// backward tests (src/engines/cpu/backward_test.cc): a forward graph with its feeds, random
// tensors.
#pragma once
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/runtime_value.h"
#include "ir/graph.h"

namespace hodu::autodiff_test {

// Uniform in [lo, hi), f64 or f32.
inline Tensor rnd(std::vector<int64_t> shape, uint32_t seed, double lo = -1, double hi = 1, DType dt = DType::F64) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (auto& x : v) x = d(rng);
  Tensor t = Tensor::from_vector(DType::F64, shape, v);
  return dt == DType::F64 ? t : t.cast(dt);
}

// A forward graph and its feeds. Inputs are declared with their shape, or with symbolic dims.
// Copy it with its model (`g` refers to its own model's graph).
struct Net {
  Model m;
  Graph& g = m.graph;
  std::map<std::string, RuntimeValue> feeds;
  Net() { m.opset_imports[""] = 21; }
  Net(const Net& o) : m(o.m), feeds(o.feeds) {}
  Net& operator=(const Net&) = delete;
  Net& input(const std::string& name, Tensor t, std::optional<Shape> declared = std::nullopt) {
    g.inputs.push_back({name, ValueType::tensor(t.dtype(), declared ? *declared : Shape::from(t.shape())), ""});
    feeds[name] = t;
    return *this;
  }
  Net& constant(const std::string& name, Tensor t) {
    g.set_initializer(name, std::move(t));
    return *this;
  }
  Net& node(const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs,
            std::vector<Attribute> attrs = {}, const std::string& domain = "") {
    Node n;
    n.name = outs[0] + "_node";
    n.op_type = op;
    n.domain = domain;
    n.inputs = std::move(ins);
    n.outputs = std::move(outs);
    n.attributes = std::move(attrs);
    g.nodes.push_back(std::move(n));
    return *this;
  }
  Net& output(const std::string& name) {
    g.outputs.push_back({name, {}, ""});
    return *this;
  }
};

}  // namespace hodu::autodiff_test
