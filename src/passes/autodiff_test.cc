// Tests of IR autodiff (passes/autodiff.h): every gradient rule against
// central finite differences of the forward graph in f64 on the interpreter
// (the gradient of sum(loss), or of sum(loss · seed) with a seed input), with
// static and symbolic shapes; the built graphs verify; and the error paths.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "core/error.h"
#include "engines/interp/interpreter.h"
#include "ir/schema.h"
#include "ir/verifier.h"
#include "passes/autodiff.h"
#include "passes/autodiff_test_util.h"
#include "passes/passes.h"

namespace hodu::passes {
namespace {

using autodiff_test::Net;
using autodiff_test::rnd;

Tensor i64s(std::vector<int64_t> v) { return Tensor::from_vector(DType::I64, {static_cast<int64_t>(v.size())}, v); }

// sum(loss · seed) of the forward graph, `value` replaced by `t`.
double objective(const Net& net, const std::string& loss, const std::string& value, const Tensor& t,
                 const Tensor* seed) {
  Model m = net.m;
  m.graph.outputs = {Value{loss, {}, ""}};
  auto feeds = net.feeds;
  if (m.graph.initializer(value)) m.graph.set_initializer(value, t);
  else feeds[value] = t;
  interp::Interpreter in(m);
  Tensor y = in.run(feeds)[0].tensor;
  std::vector<double> v = y.to_doubles();
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * (seed ? seed->get_double(static_cast<int64_t>(i)) : 1.0);
  return s;
}

const Tensor& value_of(const Net& net, const std::string& name) {
  if (const Tensor* t = net.g.initializer(name)) return *t;
  return net.feeds.at(name).tensor;
}

// Builds the gradient graph, checks it verifies, runs it, and compares each gradient with central
// differences.
Graph check_gradients(const Net& net, const std::string& loss, std::vector<std::string> wrt, double tol = 1e-6,
                      bool seed_input = false, double eps = 1e-6) {
  Graph grad = build_gradient_graph(net.g, {loss, wrt, seed_input});
  EXPECT_NO_THROW(verify_graph(grad));
  Model m = net.m;
  m.graph = grad;
  auto feeds = net.feeds;
  Tensor seed;
  if (seed_input) {
    Model fm = net.m;
    fm.graph.outputs = {Value{loss, {}, ""}};
    Tensor y = interp::Interpreter(fm).run(feeds)[0].tensor;
    seed = rnd(y.shape(), 99);
    feeds["grad." + loss] = seed;
  }
  auto outs = interp::Interpreter(m).run(feeds);
  const size_t n_fw = net.g.outputs.size();
  EXPECT_EQ(outs.size(), n_fw + wrt.size());
  for (size_t k = 0; k < wrt.size(); ++k) {
    EXPECT_EQ(grad.outputs[n_fw + k].name, "grad." + wrt[k]);
    const Tensor& x = value_of(net, wrt[k]);
    const Tensor& gt = outs[n_fw + k].tensor;
    EXPECT_EQ(gt.shape(), x.shape()) << wrt[k];
    EXPECT_EQ(gt.dtype(), x.dtype()) << wrt[k];
    if (gt.shape() != x.shape()) continue;
    for (int64_t i = 0; i < x.numel(); ++i) {
      Tensor xp = x.clone(), xm = x.clone();
      xp.set_double(i, x.get_double(i) + eps);
      xm.set_double(i, x.get_double(i) - eps);
      double numeric = (objective(net, loss, wrt[k], xp, seed_input ? &seed : nullptr) -
                        objective(net, loss, wrt[k], xm, seed_input ? &seed : nullptr)) / (2 * eps);
      EXPECT_NEAR(gt.get_double(i), numeric, tol * std::max(1.0, std::fabs(numeric)))
          << "d " << loss << " / d " << wrt[k] << "[" << i << "]";
    }
  }
  return grad;
}

Attribute ai(const char* n, int64_t v) { return Attribute::make_int(n, v); }
Attribute af(const char* n, float v) { return Attribute::make_float(n, v); }
Attribute ais(const char* n, std::vector<int64_t> v) { return Attribute::make_ints(n, std::move(v)); }

// ---- arithmetic and unary math ----------------------------------------------------

TEST(Autodiff, BroadcastingArithmetic) {
  Net n;
  n.input("a", rnd({2, 3}, 1)).input("b", rnd({3}, 2, 0.5, 2)).input("c", rnd({2, 1}, 3, 0.5, 2));
  n.node("Mul", {"a", "b"}, {"m"}).node("Div", {"m", "c"}, {"d"}).node("Sub", {"d", "b"}, {"s"});
  n.node("Add", {"s", "a"}, {"t"}).node("Neg", {"t"}, {"u"}).node("Sum", {"u", "a", "c"}, {"y"}).output("y");
  check_gradients(n, "y", {"a", "b", "c"});
}

TEST(Autodiff, SameValueTwiceAndFanOut) {
  Net n;
  n.input("x", rnd({4}, 4));
  n.node("Identity", {"x"}, {"i"}).node("Mul", {"i", "x"}, {"sq"}).node("Add", {"x", "x"}, {"tw"});
  n.node("Mul", {"sq", "tw"}, {"y"}).output("y");
  check_gradients(n, "y", {"x"});
}

TEST(Autodiff, UnaryMath) {
  const char* ops[] = {"Sqrt", "Exp", "Log", "Reciprocal", "Abs", "Tanh", "Sigmoid", "Relu", "Erf", "Softplus",
                       "Sin", "Cos", "Floor", "Ceil", "Round", "Sign"};
  for (const char* op : ops) {
    SCOPED_TRACE(op);
    Net n;
    bool positive = std::string(op) == "Sqrt" || std::string(op) == "Log" || std::string(op) == "Reciprocal";
    n.input("x", positive ? rnd({2, 5}, 5, 0.3, 2) : rnd({2, 5}, 5, -2, 2));
    n.node(op, {"x"}, {"y"}).output("y");
    check_gradients(n, "y", {"x"});
  }
}

TEST(Autodiff, LeakyReluClipPow) {
  Net n;
  n.input("x", rnd({3, 4}, 6, -2, 2)).input("p", rnd({4}, 7, 0.5, 2)).input("b", rnd({3, 4}, 8, 0.5, 1.5));
  n.constant("lo", Tensor::scalar<double>(DType::F64, -0.5)).constant("hi", Tensor::scalar<double>(DType::F64, 0.7));
  n.constant("three", Tensor::scalar<double>(DType::F64, 3.0));
  n.node("LeakyRelu", {"x"}, {"l"}, {af("alpha", 0.2f)}).node("Clip", {"l", "lo", "hi"}, {"c"});
  n.node("Pow", {"b", "p"}, {"pw"}).node("Pow", {"x", "three"}, {"cube"});
  n.node("Add", {"c", "pw"}, {"s"}).node("Add", {"s", "cube"}, {"y"}).output("y");
  check_gradients(n, "y", {"x", "p", "b"});
}

TEST(Autodiff, MaxMinWhere) {
  Net n;
  n.input("a", rnd({2, 3}, 9)).input("b", rnd({3}, 10)).input("c", rnd({2, 3}, 11));
  n.node("Max", {"a", "b"}, {"mx"}).node("Min", {"mx", "c"}, {"mn"});
  n.node("Greater", {"a", "c"}, {"cond"}).node("Where", {"cond", "mn", "b"}, {"y"}).output("y");
  check_gradients(n, "y", {"a", "b", "c"});
}

TEST(Autodiff, Gelu) {
  for (const char* approx : {"none", "tanh"}) {
    Net n;
    n.input("x", rnd({2, 6}, 12, -3, 3)).input("bias", rnd({6}, 13));
    n.node("Gelu", {"x"}, {"g1"}, {Attribute::make_string("approximate", approx)});
    n.node("Gelu", {"g1", "bias"}, {"y"}, {Attribute::make_string("approximate", approx)}, "hodu").output("y");
    check_gradients(n, "y", {"x", "bias"});
  }
}

TEST(Autodiff, SiluAsMulSigmoid) {
  Net n;
  n.input("x", rnd({3, 3}, 14, -3, 3));
  n.node("Sigmoid", {"x"}, {"s"}).node("Mul", {"x", "s"}, {"y"}).output("y");
  check_gradients(n, "y", {"x"});
}

// ---- products ---------------------------------------------------------------------

TEST(Autodiff, MatMulShapes) {
  struct S {
    std::vector<int64_t> a, b;
  };
  for (const S& s : {S{{3, 4}, {4, 2}}, S{{2, 3, 4}, {4, 5}}, S{{2, 3, 4}, {2, 4, 5}}, S{{2, 1, 3, 4}, {3, 4, 2}},
                     S{{4}, {4, 3}}, S{{2, 3, 4}, {4}}, S{{4}, {4}}, S{{3, 4}, {2, 4, 2}}}) {
    SCOPED_TRACE(shape_to_string(s.a) + " x " + shape_to_string(s.b));
    Net n;
    n.input("a", rnd(s.a, 15)).input("b", rnd(s.b, 16));
    n.node("MatMul", {"a", "b"}, {"y"}).output("y");
    check_gradients(n, "y", {"a", "b"});
  }
}

TEST(Autodiff, GemmTransposes) {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      SCOPED_TRACE(fmt::format("transA={} transB={}", ta, tb));
      Net n;
      n.input("a", rnd(ta ? std::vector<int64_t>{4, 3} : std::vector<int64_t>{3, 4}, 17));
      n.input("b", rnd(tb ? std::vector<int64_t>{5, 4} : std::vector<int64_t>{4, 5}, 18));
      n.input("c", rnd({5}, 19));
      n.node("Gemm", {"a", "b", "c"}, {"y"}, {ai("transA", ta), ai("transB", tb), af("alpha", 0.7f), af("beta", 1.3f)});
      n.output("y");
      check_gradients(n, "y", {"a", "b", "c"});
    }
}

TEST(Autodiff, FusedProductsWithActivations) {
  for (const char* act : {"", "Relu", "Sigmoid", "Tanh", "Gelu", "Silu", "LeakyRelu"}) {
    SCOPED_TRACE(act);
    Net n;
    n.input("a", rnd({2, 3, 4}, 20)).input("w", rnd({5, 4}, 21)).input("bias", rnd({5}, 22)).input("z", rnd({2, 3, 5}, 23));
    n.node("FusedMatMul", {"a", "w", "bias", "z"}, {"m"},
           {ai("transB", 1), af("alpha", 0.5f), Attribute::make_string("activation", act)}, "hodu");
    n.input("ga", rnd({4, 3}, 24)).input("gb", rnd({5, 4}, 25)).input("gc", rnd({3, 5}, 26));
    n.node("FusedGemm", {"ga", "gb", "gc"}, {"gm"}, {ai("transA", 1), ai("transB", 1), Attribute::make_string("activation", act)},
           "hodu");
    n.node("Add", {"m", "gm"}, {"y"}).output("y");
    check_gradients(n, "y", {"a", "w", "bias", "z", "ga", "gb", "gc"});
  }
}

// ---- shape, layout, indexing, reductions -------------------------------------------

TEST(Autodiff, ReshapesAndTranspose) {
  Net n;
  n.input("x", rnd({2, 3, 4}, 27));
  n.node("Reshape", {"x", "shape"}, {"r"}).constant("shape", i64s({6, 4}));
  n.node("Transpose", {"r"}, {"t"}, {ais("perm", {1, 0})}).node("Unsqueeze", {"t", "ax0"}, {"u"}).constant("ax0", i64s({0}));
  n.node("Flatten", {"u"}, {"f"}, {ai("axis", 1)}).node("Squeeze", {"f", "ax0"}, {"s"});
  n.node("Transpose", {"x"}, {"tx"}).node("Flatten", {"tx"}, {"ftx"}, {ai("axis", 0)});
  n.node("Add", {"s", "ftx"}, {"y"}).output("y");
  check_gradients(n, "y", {"x"});
}

TEST(Autodiff, Reductions) {
  struct C {
    const char* op;
    std::vector<int64_t> axes;
    int keep;
  };
  for (const C& c : {C{"ReduceSum", {1}, 0}, C{"ReduceSum", {}, 0}, C{"ReduceMean", {0, 2}, 1}, C{"ReduceMean", {-1}, 0},
                     C{"ReduceMax", {1}, 1}, C{"ReduceMin", {2}, 0}, C{"ReduceSumSquare", {0}, 0}, C{"ReduceL2", {2}, 1},
                     C{"ReduceLogSumExp", {1}, 0}, C{"ReduceMax", {}, 0}, C{"ReduceProd", {0, 1}, 0}}) {
    SCOPED_TRACE(fmt::format("{} axes={} keepdims={}", c.op, shape_to_string(c.axes), c.keep));
    Net n;
    n.input("x", rnd({2, 3, 4}, 28, 0.1, 2));
    std::vector<std::string> ins = {"x"};
    if (!c.axes.empty()) {
      n.constant("axes", i64s(c.axes));
      ins.push_back("axes");
    }
    n.node(c.op, ins, {"r"}, {ai("keepdims", c.keep)}).node("Mul", {"r", "r"}, {"y"}).output("y");
    check_gradients(n, "y", {"x"}, 1e-5);
  }
}

TEST(Autodiff, ConcatSplitSlice) {
  Net n;
  n.input("a", rnd({2, 3}, 29)).input("b", rnd({2, 2}, 30));
  n.node("Concat", {"a", "b"}, {"c"}, {ai("axis", 1)});
  n.constant("sizes", i64s({1, 4})).node("Split", {"c", "sizes"}, {"s0", "s1"}, {ai("axis", 1)});
  n.node("Mul", {"s1", "s1"}, {"sq"});
  n.constant("st", i64s({1, -3})).constant("en", i64s({100, -1})).constant("ax", i64s({1, 0}));
  n.node("Slice", {"sq", "st", "en", "ax"}, {"sl"});
  n.node("ReduceSum", {"s0"}, {"r0"}, {ai("keepdims", 0)}).node("Add", {"sl", "r0"}, {"y"}).output("y");
  check_gradients(n, "y", {"a", "b"});
}

TEST(Autodiff, SliceWithStepsAndRunTimeBounds) {
  Net n;
  n.input("x", rnd({4, 6}, 90)).input("start", i64s({1}));
  n.constant("st", i64s({-1, 5})).constant("en", i64s({-100, 0})).constant("ax", i64s({0, 1})).constant("sp", i64s({-1, -2}));
  n.node("Slice", {"x", "st", "en", "ax", "sp"}, {"flip"});  // reversed rows, every other column backwards
  n.constant("en2", i64s({6})).constant("ax2", i64s({1}));
  n.node("Slice", {"x", "start", "en2", "ax2"}, {"dyn"});  // a start fed at run time
  n.node("ReduceSum", {"flip"}, {"s1"}).node("Mul", {"dyn", "dyn"}, {"sq"}).node("ReduceSum", {"sq"}, {"s2"});
  n.node("Add", {"s1", "s2"}, {"y"}).output("y");
  check_gradients(n, "y", {"x"});
}

TEST(Autodiff, PadAndMean) {
  Net n;
  n.input("x", rnd({2, 3, 4}, 120)).input("z", rnd({3, 1}, 121));
  n.constant("pads", i64s({0, 1, 2, 1, 0, 3})).constant("v", Tensor::scalar<double>(DType::F64, 0.5));
  n.node("Pad", {"x", "pads", "v"}, {"p"});  // [3, 4, 9]
  n.constant("pads2", i64s({1, 2})).constant("axes", i64s({-1}));
  n.node("Pad", {"x", "pads2", "", "axes"}, {"q"});  // [2, 3, 7]
  n.node("Mean", {"x", "z", "x"}, {"m"});
  n.node("Mul", {"p", "p"}, {"p2"}).node("ReduceSum", {"p2"}, {"s1"}, {ai("keepdims", 0)});
  n.node("Mul", {"q", "q"}, {"q2"}).node("ReduceSum", {"q2"}, {"s2"}, {ai("keepdims", 0)});
  n.node("Mul", {"m", "m"}, {"m2"}).node("ReduceSum", {"m2"}, {"s3"}, {ai("keepdims", 0)});
  n.node("Sum", {"s1", "s2", "s3"}, {"y"}).output("y");
  check_gradients(n, "y", {"x", "z"});
}

TEST(Autodiff, GatherScatterElementsTile) {
  Net n;
  n.input("x", rnd({3, 4}, 91)).input("u", rnd({2, 4}, 92));
  n.constant("gi", Tensor::from_vector(DType::I64, {3, 2}, std::vector<int64_t>{0, 3, 3, 3, 1, 0}));
  n.node("GatherElements", {"x", "gi"}, {"ge"}, {ai("axis", 1)});
  n.constant("si", Tensor::from_vector(DType::I64, {2, 4}, std::vector<int64_t>{0, 1, 2, 0, 2, 2, 1, 1}));
  n.node("ScatterElements", {"x", "si", "u"}, {"se"});
  n.node("ScatterElements", {"x", "si", "u"}, {"sa"}, {Attribute::make_string("reduction", "add")});
  n.constant("reps", i64s({2, 3})).node("Tile", {"x", "reps"}, {"t"});
  for (const char* v : {"ge", "se", "sa", "t"}) {
    n.node("Mul", {v, v}, {std::string(v) + "2"}).node("ReduceSum", {std::string(v) + "2"}, {std::string(v) + "s"}, {ai("keepdims", 0)});
  }
  n.node("Sum", {"ges", "ses", "sas", "ts"}, {"y"}).output("y");
  check_gradients(n, "y", {"x", "u"});
}

TEST(Autodiff, GatherAsEmbeddingAndOnAnAxis) {
  Net n;
  n.input("w", rnd({5, 3}, 31)).constant("ids", Tensor::from_vector(DType::I64, {2, 3}, std::vector<int64_t>{0, 4, 4, 1, -1, 0}));
  n.node("Gather", {"w", "ids"}, {"e"});
  n.input("x", rnd({2, 4, 3}, 32)).constant("col", i64s({3, 1, 3}));
  n.node("Gather", {"x", "col"}, {"gx"}, {ai("axis", 1)});
  n.node("Mul", {"e", "gx"}, {"y"}).output("y");
  check_gradients(n, "y", {"w", "x"});
}

TEST(Autodiff, CastAndExpand) {
  Net n;
  n.input("x", rnd({3, 1}, 33));
  n.constant("shape", i64s({2, 3, 4}));
  n.node("Expand", {"x", "shape"}, {"e"}).node("Cast", {"e"}, {"c"}, {ai("to", dtype_to_onnx(DType::F32))});
  n.node("Cast", {"c"}, {"d"}, {ai("to", dtype_to_onnx(DType::F64))}).node("Mul", {"d", "e"}, {"y"}).output("y");
  // Through f32, with differences large enough for f32's precision.
  check_gradients(n, "y", {"x"}, 1e-3, false, 1e-2);
}

TEST(Autodiff, SoftmaxLogSoftmax) {
  Net n;
  n.input("x", rnd({2, 3, 4}, 34, -2, 2)).input("w", rnd({2, 3, 4}, 35));
  n.node("Softmax", {"x"}, {"s"}, {ai("axis", 1)}).node("LogSoftmax", {"x"}, {"l"});
  n.node("Mul", {"s", "w"}, {"sw"}).node("Mul", {"l", "w"}, {"lw"}).node("Add", {"sw", "lw"}, {"y"}).output("y");
  check_gradients(n, "y", {"x"});
}

TEST(Autodiff, DropoutUsesItsMask) {
  Net n;
  n.input("x", rnd({4, 8}, 36));
  n.constant("ratio", Tensor::scalar<double>(DType::F64, 0.25)).constant("train", Tensor::scalar<bool>(DType::Bool, true));
  n.node("Dropout", {"x", "ratio", "train"}, {"d"}, {ai("seed", 7)}).node("Mul", {"d", "x"}, {"y"}).output("y");
  // The mask is random: the interpreter seeds each node the same way every run, so differences work.
  Graph g = check_gradients(n, "y", {"x"});
  EXPECT_EQ(g.nodes[0].outputs.size(), 2u) << "the pass names the mask it reads";
}

TEST(Autodiff, ActivationsThroughActivationGrad) {
  struct A {
    const char* op;
    std::vector<Attribute> attrs;
  };
  for (const A& a : {A{"Relu", {}}, A{"LeakyRelu", {af("alpha", 0.1f)}}, A{"Elu", {af("alpha", 0.7f)}},
                     A{"HardSigmoid", {af("alpha", 0.3f), af("beta", 0.4f)}}, A{"HardSwish", {}}, A{"Softplus", {}}}) {
    SCOPED_TRACE(a.op);
    Net n;
    n.input("x", rnd({3, 7}, 60, -4, 4));
    n.node(a.op, {"x"}, {"y"}, a.attrs).output("y");
    check_gradients(n, "y", {"x"});
  }
}

// ---- convolution and pooling --------------------------------------------------------

struct ConvCase {
  std::vector<int64_t> x, w;
  std::vector<Attribute> attrs;
  bool bias = true;
};

TEST(Autodiff, Conv) {
  std::vector<ConvCase> cases = {
      {{2, 3, 5, 5}, {4, 3, 3, 3}, {}},
      {{1, 4, 6, 7}, {6, 2, 3, 2}, {ai("group", 2), ais("strides", {2, 1}), ais("pads", {1, 0, 1, 1})}},
      {{1, 2, 7, 7}, {3, 2, 3, 3}, {ais("dilations", {2, 2}), ais("pads", {2, 1, 0, 2})}, false},
      {{2, 3, 9}, {2, 3, 4}, {ais("strides", {2}), ais("pads", {1, 2})}},
      {{1, 4, 5, 5}, {4, 1, 3, 3}, {ai("group", 4), Attribute::make_string("auto_pad", "SAME_UPPER"), ais("strides", {2, 2})}},
  };
  for (const auto& cc : cases) {
    SCOPED_TRACE(shape_to_string(cc.x) + " * " + shape_to_string(cc.w));
    Net n;
    n.input("x", rnd(cc.x, 61)).input("w", rnd(cc.w, 62));
    std::vector<std::string> ins = {"x", "w"};
    std::vector<std::string> wrt = {"x", "w"};
    if (cc.bias) {
      n.input("b", rnd({cc.w[0]}, 63));
      ins.push_back("b");
      wrt.push_back("b");
    }
    n.node("Conv", ins, {"c"}, cc.attrs).node("Mul", {"c", "c"}, {"y"}).output("y");
    check_gradients(n, "y", wrt, 1e-6);
  }
}

TEST(Autodiff, FusedConvWithActivationAndResidual) {
  for (const char* act : {"", "Relu", "Silu", "Sigmoid", "Gelu"}) {
    SCOPED_TRACE(act);
    Net n;
    n.input("x", rnd({2, 2, 5, 5}, 64)).input("w", rnd({3, 2, 3, 3}, 65)).input("b", rnd({3}, 66));
    n.input("z", rnd({2, 3, 5, 5}, 67));
    n.node("FusedConv", {"x", "w", "b", "z"}, {"c"},
           {ais("pads", {1, 1, 1, 1}), Attribute::make_string("activation", act)}, "hodu");
    n.node("Mul", {"c", "c"}, {"y"}).output("y");
    check_gradients(n, "y", {"x", "w", "b", "z"});
  }
}

TEST(Autodiff, Pooling) {
  struct P {
    const char* op;
    std::vector<int64_t> x;
    std::vector<Attribute> attrs;
  };
  for (const P& p : {P{"MaxPool", {2, 2, 6, 6}, {ais("kernel_shape", {2, 2}), ais("strides", {2, 2})}},
                     P{"MaxPool", {1, 2, 7, 6}, {ais("kernel_shape", {3, 3}), ais("pads", {1, 1, 1, 1}), ai("ceil_mode", 1), ais("strides", {2, 2})}},
                     P{"MaxPool", {1, 1, 9}, {ais("kernel_shape", {2}), ais("dilations", {2})}},
                     P{"AveragePool", {2, 2, 6, 6}, {ais("kernel_shape", {3, 3}), ais("pads", {1, 1, 1, 1})}},
                     P{"AveragePool", {1, 2, 5, 7}, {ais("kernel_shape", {3, 2}), ais("pads", {1, 1, 1, 0}), ai("count_include_pad", 1), ais("strides", {2, 2})}},
                     P{"AveragePool", {1, 2, 7, 7}, {ais("kernel_shape", {3, 3}), ai("ceil_mode", 1), ais("strides", {2, 2})}},
                     P{"GlobalAveragePool", {2, 3, 4, 5}, {}}, P{"GlobalMaxPool", {2, 3, 4, 5}, {}}}) {
    SCOPED_TRACE(std::string(p.op) + " " + shape_to_string(p.x));
    Net n;
    n.input("x", rnd(p.x, 68, -3, 3)).input("w", rnd({1}, 69));
    n.node(p.op, {"x"}, {"p"}, p.attrs).node("Mul", {"p", "p"}, {"y"}).output("y");
    check_gradients(n, "y", {"x"});
  }
}

// ---- normalization and losses -------------------------------------------------------

TEST(Autodiff, BatchNormalization) {
  for (int training : {1, 0}) {
    SCOPED_TRACE(training ? "training" : "inference");
    Net n;
    n.input("x", rnd({3, 2, 3, 2}, 70, -2, 2)).input("scale", rnd({2}, 71, 0.5, 1.5)).input("bias", rnd({2}, 72));
    n.constant("mean", rnd({2}, 73)).constant("var", rnd({2}, 74, 0.5, 2));
    n.node("BatchNormalization", {"x", "scale", "bias", "mean", "var"}, {"b"}, {ai("training_mode", training), af("epsilon", 1e-3f)});
    n.input("w", rnd({3, 2, 3, 2}, 75)).node("Mul", {"b", "w"}, {"y"}).output("y");
    check_gradients(n, "y", {"x", "scale", "bias"});
  }
}

TEST(Autodiff, LayerNormalizations) {
  struct L {
    const char* op;
    const char* domain;
    int64_t axis;
    std::vector<int64_t> scale;
    bool bias;
    int rms;
  };
  for (const L& l : {L{"LayerNormalization", "", -1, {5}, true, 0}, L{"LayerNormalization", "", 1, {3, 5}, true, 0},
                     L{"LayerNormalization", "", 1, {5}, false, 0}, L{"LayerNorm", "hodu", -1, {5}, true, 1},
                     L{"LayerNorm", "hodu", -1, {5}, true, 0}, L{"RMSNormalization", "", -1, {5}, false, 0}}) {
    SCOPED_TRACE(fmt::format("{} axis={} rms={}", l.op, l.axis, l.rms));
    Net n;
    n.input("x", rnd({2, 3, 5}, 76, -2, 2)).input("scale", rnd(l.scale, 77, 0.5, 1.5));
    std::vector<std::string> ins = {"x", "scale"}, wrt = {"x", "scale"};
    if (l.bias) {
      n.input("bias", rnd(l.scale, 78));
      ins.push_back("bias");
      wrt.push_back("bias");
    }
    std::vector<Attribute> attrs = {ai("axis", l.axis), af("epsilon", 1e-4f)};
    if (std::string(l.domain) == "hodu") attrs.push_back(ai("rms", l.rms));
    else attrs.push_back(ai("stash_type", dtype_to_onnx(DType::F64)));  // f32 statistics are a step function
    n.node(l.op, ins, {"ln"}, attrs, l.domain);
    n.input("w", rnd({2, 3, 5}, 79)).node("Mul", {"ln", "w"}, {"y"}).output("y");
    check_gradients(n, "y", wrt);
  }
}

TEST(Autodiff, Losses) {
  struct L {
    const char* op;
    std::vector<int64_t> x;
    std::vector<int64_t> labels;
    const char* reduction;
    bool weights;
    bool ignore;
  };
  for (const L& l : {L{"SoftmaxCrossEntropyLoss", {4, 3}, {0, 2, 1, 2}, "mean", false, false},
                     L{"SoftmaxCrossEntropyLoss", {4, 3}, {0, 2, 1, 2}, "mean", true, true},
                     L{"SoftmaxCrossEntropyLoss", {2, 3, 2}, {0, 2, 1, 1}, "sum", true, false},
                     L{"SoftmaxCrossEntropyLoss", {4, 3}, {0, 2, 1, 2}, "none", false, true},
                     L{"NegativeLogLikelihoodLoss", {4, 3}, {0, 2, 1, 2}, "mean", true, true},
                     L{"NegativeLogLikelihoodLoss", {2, 3, 2}, {0, 2, 1, 1}, "none", false, false}}) {
    SCOPED_TRACE(fmt::format("{} {} {} weights={} ignore={}", l.op, shape_to_string(l.x), l.reduction, l.weights, l.ignore));
    Net n;
    n.input("x", rnd(l.x, 80, -2, 2));
    std::vector<int64_t> lshape = {l.x[0]};
    for (size_t d = 2; d < l.x.size(); ++d) lshape.push_back(l.x[d]);
    n.constant("t", Tensor::from_vector(DType::I64, lshape, l.labels));
    std::vector<std::string> ins = {"x", "t"};
    if (l.weights) {
      n.constant("wt", Tensor::from_vector(DType::F64, {3}, std::vector<double>{0.5, 2.0, 1.25}));
      ins.push_back("wt");
    }
    std::vector<Attribute> attrs = {Attribute::make_string("reduction", l.reduction)};
    if (l.ignore) attrs.push_back(ai("ignore_index", 2));
    n.node(l.op, ins, {"loss"}, attrs).node("Mul", {"loss", "loss"}, {"y"}).output("y");
    check_gradients(n, "y", {"x"});
  }
  // The log_prob output differentiated as well.
  Net n;
  n.input("x", rnd({3, 4}, 81, -2, 2)).constant("t", i64s({1, 0, 3})).input("w", rnd({3, 4}, 82));
  n.node("SoftmaxCrossEntropyLoss", {"x", "t"}, {"loss", "lp"}).node("Mul", {"lp", "w"}, {"lw"});
  n.node("ReduceSum", {"lw"}, {"s"}, {ai("keepdims", 0)}).node("Add", {"s", "loss"}, {"y"}).output("y");
  check_gradients(n, "y", {"x"});
}

TEST(Autodiff, Attention) {
  {
    SCOPED_TRACE("hodu.Attention [B, H, S, D], mask, bias, causal");
    Net n;
    n.input("q", rnd({2, 2, 3, 4}, 100)).input("k", rnd({2, 2, 5, 4}, 101)).input("v", rnd({2, 2, 5, 3}, 102));
    n.input("mask", rnd({1, 1, 3, 5}, 103)).input("bias", rnd({2, 1, 1, 5}, 104));
    n.node("Attention", {"q", "k", "v", "mask", "bias"}, {"a"}, {ai("is_causal", 1)}, "hodu");
    n.node("Mul", {"a", "a"}, {"y"}).output("y");
    check_gradients(n, "y", {"q", "k", "v", "mask", "bias"});
  }
  {
    SCOPED_TRACE("hodu.Attention [B, S, H*D] with num_heads and a scale");
    Net n;
    n.input("q", rnd({2, 3, 8}, 105)).input("k", rnd({2, 4, 8}, 106)).input("v", rnd({2, 4, 6}, 107));
    n.node("Attention", {"q", "k", "v"}, {"a"}, {ai("num_heads", 2), ai("kv_num_heads", 2), af("scale", 0.3f)}, "hodu");
    n.node("Mul", {"a", "a"}, {"y"}).output("y");
    check_gradients(n, "y", {"q", "k", "v"});
  }
  {
    SCOPED_TRACE("ONNX Attention with a bool mask");
    Net n;
    n.input("q", rnd({1, 2, 3, 4}, 108)).input("k", rnd({1, 2, 3, 4}, 109)).input("v", rnd({1, 2, 3, 4}, 110));
    n.constant("mask", Tensor::from_vector(DType::Bool, {3, 3}, std::vector<uint8_t>{1, 0, 1, 1, 1, 0, 0, 1, 1}));
    n.node("Attention", {"q", "k", "v", "mask"}, {"a"}).node("Mul", {"a", "a"}, {"y"}).output("y");
    check_gradients(n, "y", {"q", "k", "v"});
  }
}

// ---- seeds, symbolic shapes, graph structure ----------------------------------------

TEST(Autodiff, SeedInputForANonScalarOutput) {
  Net n;
  n.input("x", rnd({2, 3}, 37)).constant("w", rnd({3, 4}, 38));
  n.node("MatMul", {"x", "w"}, {"m"}).node("Tanh", {"m"}, {"y"}).output("y");
  Graph g = check_gradients(n, "y", {"x", "w"}, 1e-6, true);
  const Value* seed = g.input("grad.y");
  ASSERT_NE(seed, nullptr);
  EXPECT_EQ(seed->type.to_string(), "f64[2, 4]");
  EXPECT_NE(g.initializer("w"), nullptr) << "a wrt initializer stays an initializer";
}

TEST(Autodiff, SymbolicBatchDim) {
  Net n;
  Shape batch({Dim::sym("batch"), Dim(4)});
  n.input("x", rnd({3, 4}, 39), batch).input("b", rnd({4}, 40)).input("c", rnd({1, 4}, 41));
  n.constant("w", rnd({4, 2}, 42));
  n.node("Add", {"x", "b"}, {"xb"}).node("Mul", {"xb", "c"}, {"xc"}).node("MatMul", {"xc", "w"}, {"m"});
  n.node("Softmax", {"m"}, {"s"}).node("ReduceMean", {"s"}, {"y"}, {ai("keepdims", 0)}).output("y");
  n.node("Reshape", {"m", "flat"}, {"mf"}).constant("flat", i64s({-1}));
  Graph g = check_gradients(n, "y", {"x", "b", "c", "w"});
  EXPECT_EQ(g.output("grad.x")->type.to_string(), "f64[batch, 4]");
  // Other batch sizes run through the same graph.
  Model m = n.m;
  m.graph = g;
  auto feeds = n.feeds;
  feeds["x"] = rnd({7, 4}, 43);
  auto outs = interp::Interpreter(m).run(feeds);
  EXPECT_EQ(outs[1].tensor.shape(), (std::vector<int64_t>{7, 4}));
}

TEST(Autodiff, UnknownDimsBroadcastDecidedAtRunTime) {
  // Dims with no size and no name: which dims were broadcast is found from the shapes at run time.
  Net n;
  n.input("a", rnd({2, 3}, 44), Shape({Dim(), Dim()})).input("b", rnd({2, 1}, 45), Shape({Dim(), Dim()}));
  n.node("Mul", {"a", "b"}, {"y"}).output("y");
  check_gradients(n, "y", {"a", "b"});
}

TEST(Autodiff, UnrelatedWrtGetsZerosAndForwardOutputsStay) {
  Net n;
  n.input("x", rnd({2}, 46)).input("unused", rnd({3}, 47));
  n.node("Exp", {"x"}, {"e"}).node("ReduceSum", {"e"}, {"loss"}, {ai("keepdims", 0)}).output("e").output("loss");
  Graph g = check_gradients(n, "loss", {"x", "unused"});
  ASSERT_EQ(g.outputs.size(), 4u);
  EXPECT_EQ(g.outputs[0].name, "e");
  EXPECT_EQ(g.outputs[1].name, "loss");
}

TEST(Autodiff, IntegerPathsCarryNoGradient) {
  Net n;
  n.input("x", rnd({2, 3}, 48));
  n.node("Shape", {"x"}, {"sh"}).node("Reshape", {"x", "sh"}, {"r"});
  n.node("ArgMax", {"x"}, {"am"}, {ai("axis", 1)}).node("Cast", {"am"}, {"amf"}, {ai("to", dtype_to_onnx(DType::F64))});
  n.node("Mul", {"r", "r"}, {"sq"}).node("ReduceSum", {"sq"}, {"s"}).node("Add", {"s", "amf"}, {"y"}).output("y");
  check_gradients(n, "y", {"x"});
}

TEST(Autodiff, OptimizedGraphsWithFusedOps) {
  // -O3 leaves FusedElementwise loops, FusedMatMul, FusedGemm (fusions of f32 graphs): the gradients of
  // the optimized graph equal those of the graph as written.
  Net n;
  n.input("x", rnd({3, 4}, 111).cast(DType::F32)).constant("w", rnd({4, 5}, 112).cast(DType::F32));
  n.constant("b", rnd({5}, 113).cast(DType::F32)).constant("two", Tensor::scalar<float>(DType::F32, 2.f));
  n.node("MatMul", {"x", "w"}, {"m"}).node("Add", {"m", "b"}, {"mb"}).node("Relu", {"mb"}, {"r"});
  n.node("Mul", {"r", "two"}, {"r2"}).node("Tanh", {"r2"}, {"t"}).node("Exp", {"t"}, {"e"});
  n.node("Sub", {"e", "r"}, {"y"}).output("y");
  infer_types(n.g);
  for (auto& o : n.g.outputs) o.type = *n.g.type_of(o.name);
  Model opt = n.m;
  passes::optimize(opt, {3, {{"x", {3, 4}}}});
  std::set<std::string> ops;
  for (const auto& node : opt.graph.nodes) ops.insert(node.op_type);
  EXPECT_TRUE(ops.count("FusedElementwise") && ops.count("FusedMatMul")) << "the optimized graph has no fused ops";
  auto grads = [&](const Model& m) {
    Model g = m;
    g.graph = build_gradient_graph(m.graph, {"y", {"x", "w", "b"}});
    return interp::Interpreter(g).run(n.feeds);
  };
  auto want = grads(n.m), got = grads(opt);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    auto a = got[i].tensor.to_doubles(), e = want[i].tensor.to_doubles();
    ASSERT_EQ(a.size(), e.size());
    for (size_t k = 0; k < a.size(); ++k) EXPECT_NEAR(a[k], e[k], 1e-5 * std::max(1.0, std::fabs(e[k]))) << i << "[" << k << "]";
  }
}

TEST(Autodiff, FusedElementwiseBodyIsDifferentiated) {
  Net n;
  n.input("a", rnd({2, 3}, 114)).input("b", rnd({2, 3}, 115, 0.5, 1.5));
  auto body = std::make_shared<Graph>();
  body->inputs = {{"p", ValueType::tensor(DType::F64, Shape({Dim(2), Dim(3)})), ""},
                  {"q", ValueType::tensor(DType::F64, Shape({Dim(2), Dim(3)})), ""}};
  body->set_initializer("half", Tensor::scalar<double>(DType::F64, 0.5));
  Node m1, m2;
  m1.name = "mul";
  m1.op_type = "Mul";
  m1.inputs = {"p", "half"};
  m1.outputs = {"t"};
  m2.name = "div";
  m2.op_type = "Div";
  m2.inputs = {"t", "q"};
  m2.outputs = {"o"};
  body->nodes = {m1, m2};
  body->outputs = {{"o", ValueType::tensor(DType::F64, Shape({Dim(2), Dim(3)})), ""}};
  n.node("FusedElementwise", {"a", "b"}, {"f"}, {Attribute::make_graph("body", body)}, "hodu");
  n.node("Mul", {"f", "f"}, {"y"}).output("y");
  check_gradients(n, "y", {"a", "b"});
}

// ---- errors ---------------------------------------------------------------------

TEST(Autodiff, OpWithoutRuleIsNamed) {
  Net n;
  n.input("x", rnd({3, 3}, 49));
  n.node("Det", {"x"}, {"r"}).node("Mul", {"r", "x"}, {"y"}).output("y");
  try {
    build_gradient_graph(n.g, {"y", {"x"}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_NE(std::string(e.what()).find("node 'r_node' (Det)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no gradient rule for op 'Det'"), std::string::npos) << e.what();
  }
}

TEST(Autodiff, BadRequests) {
  Net n;
  n.input("x", rnd({2}, 50)).input("k", i64s({1, 2}));
  n.node("Exp", {"x"}, {"y"}).output("y");
  auto code = [&](GradientRequest r) {
    try {
      build_gradient_graph(n.g, r);
    } catch (const Error& e) {
      return std::make_pair(e.code(), std::string(e.what()));
    }
    return std::make_pair(ErrorCode::Internal, std::string("no error"));
  };
  auto [c1, m1] = code({"nope", {"x"}});
  EXPECT_EQ(c1, ErrorCode::InvalidArgument);
  EXPECT_NE(m1.find("'nope'"), std::string::npos) << m1;
  auto [c2, m2] = code({"y", {"e"}});
  EXPECT_EQ(c2, ErrorCode::InvalidArgument);
  EXPECT_NE(m2.find("neither an input nor an initializer"), std::string::npos) << m2;
  auto [c3, m3] = code({"y", {"k"}});
  EXPECT_EQ(c3, ErrorCode::InvalidArgument);
  EXPECT_NE(m3.find("float"), std::string::npos) << m3;
  auto [c4, m4] = code({"y", {"x", "x"}});
  EXPECT_EQ(c4, ErrorCode::InvalidArgument);
  auto [c5, m5] = code({"y", {}});
  EXPECT_EQ(c5, ErrorCode::InvalidArgument);
}

TEST(Autodiff, DifferentiableOpsAreListed) {
  auto ops = differentiable_ops();
  for (const char* op : {"MatMul", "Conv", "hodu.FusedMatMul", "Softmax", "Gather", "Dropout", "BatchNormalization"})
    EXPECT_NE(std::find(ops.begin(), ops.end(), op), ops.end()) << op;
}

}  // namespace
}  // namespace hodu::passes
