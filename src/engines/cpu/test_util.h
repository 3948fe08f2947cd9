// Helpers of the cpu engine's tests of control flow, recurrent and quantized ops: build a graph,
// run it on the interpreter and on a cpu Plan, compare, and list the kernels the plan chose
// (subgraph plans included).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engines/cpu/cpu_engine.h"
#include "engines/cpu/plan.h"
#include "engines/interp/interpreter.h"
#include "ir/schema.h"
#include "passes/passes.h"
#include "passes/test_graph.h"

namespace hodu::cpu::testing {

struct GraphBuilder {
  Model m;
  Graph& g = m.graph;
  GraphBuilder() { m.opset_imports[""] = 21; }
  void input(const std::string& name, DType dt, Shape shape) { g.inputs.push_back({name, ValueType::tensor(dt, std::move(shape)), ""}); }
  void input(const std::string& name, DType dt, const std::vector<int64_t>& shape) { input(name, dt, Shape::from(shape)); }
  void output(const std::string& name) { g.outputs.push_back({name, {}, ""}); }
  Node& node(const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs,
             std::vector<Attribute> attrs = {}) {
    g.nodes.push_back(hodu::testing::test_node(op, std::move(ins), std::move(outs), std::move(attrs)));
    return g.nodes.back();
  }
  void constant(const std::string& name, Tensor t) { g.set_initializer(name, std::move(t)); }
  Model finish() {
    infer_types(g);
    for (auto& o : g.outputs)
      if (auto t = g.type_of(o.name)) o.type = *t;
    return m;
  }
};

inline Tensor random_floats(const std::vector<int64_t>& shape, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (auto& x : v) x = d(rng);
  return Tensor::from_vector(DType::F32, shape, v);
}

inline Tensor int64s(const std::vector<int64_t>& v, std::vector<int64_t> shape = {}) {
  if (shape.empty() && v.size() != 1) shape = {static_cast<int64_t>(v.size())};
  return Tensor::from_vector<int64_t>(DType::I64, shape, v);
}

inline Tensor boolean(bool v) { return Tensor::scalar<bool>(DType::Bool, v); }

// The model optimized as the cpu engine does for these input shapes, and a plan over it.
struct PlannedModel {
  Model model;
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::unique_ptr<Plan> plan;
  PlannedModel(const Model& m, const std::map<std::string, RuntimeValue>& feeds, int threads = 1) : model(m) {
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto& [name, v] : feeds)
      if (v.is_tensor()) shapes[name] = v.tensor.shape();
    engine_rewrites(model, -1);  // as CpuExecutable prepares a model
    passes::optimize(model, {3, shapes});
    PlanOptions o;
    o.threads = threads;
    plan = std::make_unique<Plan>(model, shapes, o, engine);
  }
  std::vector<RuntimeValue> run(const std::map<std::string, RuntimeValue>& feeds) { return plan->run(feeds, stream); }
  // Kernel lines ("node 'x' (Op): kernel") of the plan and of the subgraph plans built so far.
  std::vector<std::string> kernels() const { return plan->kernel_choices(); }
  // The kernel lines one per line, for SCOPED_TRACE.
  std::string steps() const {
    std::string s;
    for (const auto& k : kernels()) s += k + "\n";
    return s;
  }
  // Ops of the steps that run on the interpreter's kernel.
  std::set<std::string> interp_ops() const {
    std::set<std::string> ops;
    for (const auto& k : kernels()) {
      if (k.size() < 8 || k.compare(k.size() - 8, 8, ": interp") != 0) continue;
      size_t open = k.rfind(" ("), close = k.rfind(")");
      if (open != std::string::npos && close != std::string::npos) ops.insert(k.substr(open + 2, close - open - 2));
    }
    return ops;
  }
  int count(const std::string& needle) const {
    int c = 0;
    for (const auto& k : kernels()) c += k.find(needle) != std::string::npos;
    return c;
  }
};

// Largest |a - b| / (atol + rtol |b|) over the elements must be at most 1 (rtol = atol = 0: equal).
inline void expect_close(const RuntimeValue& got, const RuntimeValue& want, double rtol, double atol,
                         const std::string& what) {
  ASSERT_EQ(got.kind, want.kind) << what;
  if (got.is_sequence()) {
    ASSERT_EQ(got.sequence.size(), want.sequence.size()) << what;
    for (size_t i = 0; i < got.sequence.size(); ++i)
      expect_close(RuntimeValue(got.sequence[i]), RuntimeValue(want.sequence[i]), rtol, atol,
                   what + "[" + std::to_string(i) + "]");
    return;
  }
  if (!got.is_tensor()) return;
  const Tensor& a = got.tensor;
  const Tensor& b = want.tensor;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  auto x = a.to_doubles(), y = b.to_doubles();
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    bool same = x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i]));
    double e = same ? 0.0 : std::fabs(x[i] - y[i]) / (atol + rtol * std::fabs(y[i]));  // inf when exactness is asked
    if (!(e <= worst)) worst = e, at = i;
  }
  EXPECT_LE(worst, 1.0) << what << ": element " << at << " is " << (x.empty() ? 0 : x[at]) << ", expected "
                        << (y.empty() ? 0 : y[at]);
}

// Runs `m` on the interpreter and on a cpu plan (twice: the second run reuses the plan's buffers)
// and compares every output. Returns the plan for kernel checks.
inline std::unique_ptr<PlannedModel> expect_matches_interpreter(const Model& m,
                                                                const std::map<std::string, RuntimeValue>& feeds,
                                                                double rtol = 1e-5, double atol = 1e-6,
                                                                int threads = 1) {
  auto want = interp::Interpreter(m).run(feeds);
  auto p = std::make_unique<PlannedModel>(m, feeds, threads);
  for (int run = 0; run < 2; ++run) {
    auto got = p->run(feeds);
    EXPECT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size() && i < want.size(); ++i)
      expect_close(got[i], want[i], rtol, atol, "output " + std::to_string(i) + " run " + std::to_string(run));
  }
  return p;
}

}  // namespace hodu::cpu::testing
