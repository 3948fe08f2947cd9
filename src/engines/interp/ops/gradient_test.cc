// Gradient checked against central finite differences of the same graph, op by
// op and on small networks, plus its error paths. Inputs are f64 so the
// numerical derivative is accurate to ~1e-8.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "engines/interp/interpreter.h"

namespace hodu::interp {
namespace {

struct Case {
  std::vector<Node> nodes;                               // compute "y"
  std::vector<std::pair<std::string, Tensor>> inputs;    // graph inputs, in order
  std::vector<std::pair<std::string, Tensor>> constants;  // initializers
  std::vector<std::string> xs, zs;
};

Node node(std::string op, std::vector<std::string> ins, std::string out, std::vector<Attribute> attrs = {}) {
  Node n;
  n.op_type = std::move(op);
  n.name = out + "_node";
  n.inputs = std::move(ins);
  n.outputs = {std::move(out)};
  n.attributes = std::move(attrs);
  return n;
}

uint32_t g_state = 12345;
Tensor rnd(std::vector<int64_t> shape, double lo = -1, double hi = 1) {
  Tensor t = Tensor::empty(DType::F64, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) {
    g_state = g_state * 1664525u + 1013904223u;
    t.set_double(i, lo + (hi - lo) * static_cast<double>(g_state >> 8) / 16777216.0);
  }
  return t;
}

Tensor i64s(std::vector<int64_t> v) { return Tensor::from_vector(DType::I64, {static_cast<int64_t>(v.size())}, v); }

Model build(const Case& c, bool with_gradient) {
  Model m;
  for (const auto& [name, t] : c.inputs) m.graph.inputs.push_back(Value{name, ValueType::tensor(t.dtype(), Shape{}), {}});
  m.graph.initializers = c.constants;
  m.graph.nodes = c.nodes;
  m.graph.outputs.push_back(Value{"y", {}, {}});
  if (with_gradient) {
    Node g;
    g.op_type = "Gradient";
    g.domain = "ai.onnx.preview.training";
    g.name = "grad";
    for (const auto& x : c.xs) g.inputs.push_back(x);
    for (const auto& z : c.zs) g.inputs.push_back(z);
    for (const auto& x : c.xs) {
      g.outputs.push_back("d_" + x);
      m.graph.outputs.push_back(Value{"d_" + x, {}, {}});
    }
    g.attributes = {Attribute::make_strings("xs", c.xs), Attribute::make_string("y", "y")};
    if (!c.zs.empty()) g.attributes.push_back(Attribute::make_strings("zs", c.zs));
    m.graph.nodes.push_back(g);
  }
  m.opset_imports = {{"", 21}, {"ai.onnx.preview.training", 1}};
  return m;
}

std::map<std::string, RuntimeValue> feeds_of(const Case& c) {
  std::map<std::string, RuntimeValue> f;
  for (const auto& [name, t] : c.inputs) f[name] = t;
  return f;
}

// Sum of y's elements: the gradient seeds dy/dy with ones, so it is the gradient of sum(y).
double sum_y(const Interpreter& in, const std::map<std::string, RuntimeValue>& feeds) {
  double s = 0;
  for (double v : in.run(feeds)[0].tensor.to_doubles()) s += v;
  return s;
}

void check_gradient(const Case& c, double tol = 1e-6) {
  Model with = build(c, true), without = build(c, false);
  Interpreter gi(with), fi(without);
  auto feeds = feeds_of(c);
  auto outs = gi.run(feeds);
  ASSERT_EQ(outs.size(), 1 + c.xs.size());
  for (size_t k = 0; k < c.xs.size(); ++k) {
    const Tensor& x = feeds[c.xs[k]].tensor;
    const Tensor& g = outs[1 + k].tensor;
    ASSERT_EQ(g.shape(), x.shape()) << c.xs[k];
    ASSERT_EQ(g.dtype(), x.dtype()) << c.xs[k];
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double eps = 1e-6;
      auto f = feeds;
      Tensor xp = x.clone(), xm = x.clone();
      xp.set_double(i, x.get_double(i) + eps);
      xm.set_double(i, x.get_double(i) - eps);
      f[c.xs[k]] = xp;
      double up = sum_y(fi, f);
      f[c.xs[k]] = xm;
      double down = sum_y(fi, f);
      double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(g.get_double(i), numeric, tol * std::max(1.0, std::fabs(numeric)))
          << "d y / d " << c.xs[k] << "[" << i << "]";
    }
  }
}

TEST(Gradient, BroadcastingBinaryOps) {
  Case c;
  c.inputs = {{"a", rnd({2, 3})}, {"b", rnd({3}, 0.5, 2)}, {"c", rnd({2, 1}, 0.5, 2)}};
  c.nodes = {node("Mul", {"a", "b"}, "m"), node("Div", {"m", "c"}, "d"), node("Sub", {"d", "b"}, "s"),
             node("Add", {"s", "a"}, "y")};
  c.xs = {"a", "b", "c"};
  check_gradient(c);
}

TEST(Gradient, UnaryOps) {
  Case c;
  c.inputs = {{"x", rnd({2, 3}, 0.2, 1.5)}};
  c.constants = {{"p", Tensor::scalar(DType::F64, 2.5)}};
  c.nodes = {node("Exp", {"x"}, "e"),      node("Log", {"e"}, "l"),        node("Sqrt", {"x"}, "q"),
             node("Tanh", {"q"}, "t"),     node("Sigmoid", {"l"}, "s"),    node("Neg", {"t"}, "n"),
             node("Pow", {"x", "p"}, "w"), node("Identity", {"w"}, "i"),   node("Add", {"s", "n"}, "u"),
             node("Mul", {"u", "i"}, "v"), node("Relu", {"v"}, "y")};
  c.xs = {"x"};
  check_gradient(c);
}

TEST(Gradient, PowExponent) {
  Case c;
  c.inputs = {{"a", rnd({3}, 0.5, 2)}, {"p", rnd({2, 1}, 1, 3)}};
  c.nodes = {node("Pow", {"a", "p"}, "y")};
  c.xs = {"a", "p"};
  check_gradient(c);
}

TEST(Gradient, ReluMasksNegativeInputs) {
  Case c;
  c.inputs = {{"x", Tensor::from_vector(DType::F64, {4}, std::vector<double>{-2, -0.5, 0.5, 3})}};
  c.nodes = {node("Relu", {"x"}, "y")};
  c.xs = {"x"};
  auto outs = Interpreter(build(c, true)).run(feeds_of(c));
  EXPECT_EQ(outs[1].tensor.to_doubles(), (std::vector<double>{0, 0, 1, 1}));
}

TEST(Gradient, ShapeOpsAndReductions) {
  Case c;
  c.inputs = {{"x", rnd({2, 3, 4})}};
  c.constants = {{"shape", i64s({6, 4})}, {"axes", i64s({1})}, {"axes0", i64s({0, -1})}, {"zero", i64s({0})}};
  c.nodes = {node("Transpose", {"x"}, "t", {Attribute::make_ints("perm", {2, 0, 1})}),  // [4, 2, 3]
             node("Reshape", {"t", "shape"}, "r"),                                       // [6, 4]
             node("Mul", {"r", "r"}, "sq"),
             node("ReduceMean", {"sq", "axes"}, "m", {Attribute::make_int("keepdims", 1)}),  // [6, 1]
             node("Squeeze", {"m", "axes"}, "m1"),                                           // [6]
             node("ReduceSum", {"x", "axes0"}, "s", {Attribute::make_int("keepdims", 0)}),   // [3]
             node("Unsqueeze", {"s", "zero"}, "su"),                                         // [1, 3]
             node("Mul", {"m1", "m1"}, "m3"),
             node("ReduceSum", {"m3"}, "total", {Attribute::make_int("keepdims", 0)}),  // all axes: []
             node("Mul", {"total", "su"}, "y")};
  c.xs = {"x"};
  check_gradient(c);
}

TEST(Gradient, MatMulShapes) {
  // Batch broadcasting and numpy's 1-D promotion on either side.
  Case c;
  c.inputs = {{"a", rnd({2, 1, 3, 4})}, {"b", rnd({5, 4, 2})}, {"v", rnd({2})}, {"u", rnd({3})}};
  c.nodes = {node("MatMul", {"a", "b"}, "ab"),                                                  // [2, 5, 3, 2]
             node("MatMul", {"ab", "v"}, "abv"),                                                // [2, 5, 3]
             node("Transpose", {"abv"}, "abvT", {Attribute::make_ints("perm", {0, 2, 1})}),  // [2, 3, 5]
             node("MatMul", {"u", "abvT"}, "y")};                                               // [2, 5]
  c.xs = {"a", "b", "v", "u"};
  check_gradient(c);
}

TEST(Gradient, GemmWithTransposes) {
  Case c;
  c.inputs = {{"A", rnd({4, 3})}, {"B", rnd({5, 4})}, {"C", rnd({5})}};
  c.nodes = {node("Gemm", {"A", "B", "C"}, "g",
                  {Attribute::make_int("transA", 1), Attribute::make_int("transB", 1),
                   Attribute::make_float("alpha", 0.5f), Attribute::make_float("beta", 2.f)}),
             node("Tanh", {"g"}, "y")};
  c.xs = {"A", "B", "C"};
  check_gradient(c);
}

TEST(Gradient, SmallNetworkWithConstantInput) {
  // y = mean(sigmoid(X W + b)), X held constant through zs.
  Case c;
  c.inputs = {{"X", rnd({4, 3})}, {"W", rnd({3, 2})}, {"b", rnd({2})}};
  c.nodes = {node("MatMul", {"X", "W"}, "h"), node("Add", {"h", "b"}, "z"), node("Sigmoid", {"z"}, "s"),
             node("ReduceMean", {"s"}, "y", {Attribute::make_int("keepdims", 0)})};
  c.xs = {"W", "b"};
  c.zs = {"X"};
  check_gradient(c);
}

TEST(Gradient, WithRespectToAnIntermediate) {
  // h = exp(x), y = h * h + x: with h cut at the Gradient's input, dy/dh = 2h.
  Case c;
  c.inputs = {{"x", Tensor::from_vector(DType::F64, {2}, std::vector<double>{1, 2})}};
  c.nodes = {node("Exp", {"x"}, "h"), node("Mul", {"h", "h"}, "hh"), node("Add", {"hh", "x"}, "y")};
  c.xs = {"h"};
  c.zs = {"x"};
  auto outs = Interpreter(build(c, true)).run(feeds_of(c));  // Gradient reads h from the graph
  auto g = outs[1].tensor.to_doubles();
  ASSERT_EQ(g.size(), 2u);
  EXPECT_NEAR(g[0], 2 * std::exp(1.0), 1e-12);
  EXPECT_NEAR(g[1], 2 * std::exp(2.0), 1e-12);
}

TEST(Gradient, FloatInputsGiveFloatGradients) {
  Case c;
  c.inputs = {{"a", Tensor::from_vector(DType::F32, {2}, std::vector<float>{1.5f, -2.f})},
              {"b", Tensor::from_vector(DType::F32, {2}, std::vector<float>{3.f, 0.25f})}};
  c.nodes = {node("Mul", {"a", "b"}, "y")};
  c.xs = {"a", "b"};
  auto outs = Interpreter(build(c, true)).run(feeds_of(c));
  ASSERT_EQ(outs[1].tensor.dtype(), DType::F32);
  EXPECT_EQ(outs[1].tensor.to_doubles(), (std::vector<double>{3, 0.25}));
  EXPECT_EQ(outs[2].tensor.to_doubles(), (std::vector<double>{1.5, -2}));
}

TEST(Gradient, UnrelatedInputHasZeroGradient) {
  Case c;
  c.inputs = {{"a", rnd({3})}, {"b", rnd({2})}};
  c.nodes = {node("Exp", {"a"}, "y")};
  c.xs = {"a", "b"};
  auto outs = Interpreter(build(c, true)).run(feeds_of(c));
  EXPECT_EQ(outs[2].tensor.to_doubles(), (std::vector<double>{0, 0}));
}

TEST(Gradient, OpWithoutRuleIsUnsupported) {
  Case c;
  c.inputs = {{"x", rnd({3})}};
  c.nodes = {node("Sin", {"x"}, "s"), node("Exp", {"s"}, "y")};
  c.xs = {"x"};
  try {
    Interpreter(build(c, true)).run(feeds_of(c));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_NE(std::string(e.what()).find("'Sin'"), std::string::npos) << e.what();
  }
}

TEST(Gradient, BadAttributesAreInvalidModel) {
  Case c;
  c.inputs = {{"x", rnd({3})}};
  c.nodes = {node("Exp", {"x"}, "y")};
  c.xs = {"x"};
  Model m = build(c, true);
  m.graph.nodes.back().attributes = {Attribute::make_strings("xs", {"x"}), Attribute::make_string("y", "nope")};
  try {
    Interpreter(m).run(feeds_of(c));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidModel);
    EXPECT_NE(std::string(e.what()).find("nope"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hodu::interp
