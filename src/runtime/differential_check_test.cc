#include "runtime/differential_check.h"

#include <gtest/gtest.h>

#include "runtime/kernel_registry.h"

namespace hodu {
namespace {

Node node(const std::string& name, const std::string& op, std::vector<std::string> ins,
          std::vector<std::string> outs) {
  Node n;
  n.name = name;
  n.op_type = op;
  n.inputs = std::move(ins);
  n.outputs = std::move(outs);
  return n;
}

// x -> Relu -> a; a -> Sigmoid -> s; x + s -> y1; y1 * a -> y2; outputs y2, s
Model chain_model() {
  Model m;
  m.opset_imports[""] = 21;
  Graph& g = m.graph;
  Shape sh{Dim::sym("batch"), 4};
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, sh), ""});
  g.nodes.push_back(node("relu", "Relu", {"x"}, {"a"}));
  g.nodes.push_back(node("sigmoid", "Sigmoid", {"a"}, {"s"}));
  g.nodes.push_back(node("add", "Add", {"x", "s"}, {"y1"}));
  g.nodes.push_back(node("mul", "Mul", {"y1", "a"}, {"y2"}));
  g.outputs.push_back({"y2", ValueType::tensor(DType::F32, sh), ""});
  g.outputs.push_back({"s", ValueType::tensor(DType::F32, sh), ""});
  for (const auto& [name, t] : std::map<std::string, ValueType>{{"a", ValueType::tensor(DType::F32, sh)},
                                                                {"y1", ValueType::tensor(DType::F32, sh)}})
    g.value_types[name] = t;
  return m;
}

// An engine with a wrong kernel: it runs Sigmoid as Tanh (on the interpreter).
class WrongSigmoidEngine : public Engine {
 public:
  std::string name() const override { return "wrong_sigmoid"; }
  std::string description() const override { return "test engine: Sigmoid computed as Tanh"; }
  bool supports(const Device& d) const override { return d.kind == Device::Kind::CPU; }
  std::unique_ptr<Executable> prepare(const Model& model, const EngineOptions& options) override {
    models_.push_back(std::make_unique<Model>(model));
    for (auto& n : models_.back()->graph.nodes)
      if (n.op_type == "Sigmoid") n.op_type = "Tanh";
    return EngineRegistry::instance().find("interp")->prepare(*models_.back(), options);
  }

 private:
  std::vector<std::unique_ptr<Model>> models_;
};

std::map<std::string, RuntimeValue> feeds() {
  Tensor x = Tensor::empty(DType::F32, {2, 4});
  for (int i = 0; i < 8; ++i) x.data<float>()[i] = static_cast<float>(i) * 0.5f - 2.0f;
  return {{"x", RuntimeValue(x)}};
}

TEST(DifferentialCheck, MatchingEngineIsOk) {
  DifferentialOptions o;
  o.engine.engine = "cpu";
  auto r = differential_check(chain_model(), feeds(), o);
  EXPECT_TRUE(r.ok);
  ASSERT_EQ(r.outputs.size(), 2u);
  EXPECT_TRUE(r.outputs[0].matches);
  EXPECT_FALSE(r.first);
}

TEST(DifferentialCheck, BisectsToTheFirstWrongNode) {
  static bool registered = false;
  if (!registered) {
    EngineRegistry::instance().add(std::make_shared<WrongSigmoidEngine>());
    KernelInfo k;
    k.op = "*";
    k.name = "wrong";
    k.engine = "wrong_sigmoid";
    KernelRegistry::instance().add(k);
  }
  registered = true;
  DifferentialOptions o;
  o.engine.engine = "wrong_sigmoid";
  auto r = differential_check(chain_model(), feeds(), o);
  EXPECT_FALSE(r.ok);
  ASSERT_TRUE(r.first);
  EXPECT_EQ(r.first->node_index, 1);
  EXPECT_NE(r.first->node.find("sigmoid"), std::string::npos) << r.first->node;
  ASSERT_FALSE(r.first->values.empty());
  EXPECT_EQ(r.first->values[0].value, "s");
  EXPECT_FALSE(r.first->values[0].matches);
  EXPECT_GT(r.prefixes_run, 0);
}

TEST(DifferentialCheck, PrefixOutputsWhatLaterNodesRead) {
  Model p = prefix_model(chain_model(), 1);
  ASSERT_EQ(p.graph.nodes.size(), 2u);
  std::vector<std::string> outs;
  for (const auto& o : p.graph.outputs) outs.push_back(o.name);
  // a is read by add and mul later; s by add and as a graph output.
  EXPECT_EQ(outs, (std::vector<std::string>{"a", "s"}));
  EXPECT_THROW(prefix_model(chain_model(), 4), Error);
}

TEST(DifferentialCheck, ComparesIntegersExactlyAndNaNsByPlace) {
  Tensor a = Tensor::from_vector<int64_t>(DType::I64, {2}, {1, (int64_t{1} << 60) + 1});
  Tensor b = Tensor::from_vector<int64_t>(DType::I64, {2}, {1, int64_t{1} << 60});
  EXPECT_FALSE(compare_values("i", a, b, 1e-4, 1e-6).matches);  // equal as doubles, not as ints
  EXPECT_NE(compare_values("i", a, b, 1e-4, 1e-6).note.find("1 of 2 elements differ"), std::string::npos);
  Tensor q1 = Tensor::from_vector<uint8_t>(DType::U8, {3}, {7, 9, 250});
  Tensor q2 = Tensor::from_vector<uint8_t>(DType::U8, {3}, {7, 10, 249});
  ValueDifference dq = compare_values("q", q1, q2, 1e-4, 1e-6);
  EXPECT_FALSE(dq.matches);
  EXPECT_EQ(dq.max_abs, 1.0);  // one quantum, not a wrapped byte
  EXPECT_NE(dq.to_string().find("2 of 3 elements differ"), std::string::npos) << dq.to_string();
  Tensor n1 = Tensor::from_vector<float>(DType::F32, {2}, {NAN, 1.0f});
  Tensor n2 = Tensor::from_vector<float>(DType::F32, {2}, {1.0f, NAN});
  EXPECT_FALSE(compare_values("f", n1, n2, 1e-4, 1e-6).matches);
  EXPECT_TRUE(compare_values("f", n1, n1, 1e-4, 1e-6).matches);
}

}  // namespace
}  // namespace hodu
