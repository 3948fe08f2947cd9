// Tests of the graph passes: each builds a small graph, runs one pass, checks
// the rewritten structure, and checks that the interpreter gives the same
// outputs before and after (the passes must not change results).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "engines/interp/interpreter.h"
#include "ir/schema.h"
#include "ir/verifier.h"
#include "passes/graph_utils.h"
#include "passes/passes.h"

namespace hodu::passes {
namespace {

// A tiny graph builder.
struct Builder {
  Model m;
  Graph& g = m.graph;
  Builder() { m.opset_imports[""] = 21; }
  void input(const std::string& name, std::vector<int64_t> shape, DType dt = DType::F32) {
    g.inputs.push_back({name, ValueType::tensor(dt, Shape::from(shape)), ""});
  }
  void output(const std::string& name) { g.outputs.push_back({name, {}, ""}); }
  Node& node(const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs,
             std::vector<Attribute> attrs = {}, const std::string& domain = "") {
    Node n;
    n.name = outs[0] + "_node";
    n.op_type = op;
    n.domain = domain;
    n.inputs = std::move(ins);
    n.outputs = std::move(outs);
    n.attributes = std::move(attrs);
    g.nodes.push_back(n);
    return g.nodes.back();
  }
  void constant(const std::string& name, std::vector<int64_t> shape, uint32_t seed, float lo = -1, float hi = 1) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(shape_numel(shape));
    for (auto& x : v) x = d(rng);
    g.set_initializer(name, Tensor::from_vector(DType::F32, shape, v));
  }
  void scalar(const std::string& name, float v) { g.set_initializer(name, Tensor::scalar<float>(DType::F32, v)); }
  void finish() {
    infer_types(g);
    for (auto& o : g.outputs) o.type = *g.type_of(o.name);
  }
};

Tensor random_tensor(std::vector<int64_t> shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(shape_numel(shape));
  for (auto& x : v) x = d(rng);
  return Tensor::from_vector(DType::F32, shape, v);
}

std::vector<RuntimeValue> run(const Model& m, const std::map<std::string, RuntimeValue>& feeds) {
  interp::Interpreter in(m);
  return in.run(feeds);
}

void expect_close(const std::vector<RuntimeValue>& a, const std::vector<RuntimeValue>& b, double tol = 1e-4) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].tensor.shape(), b[i].tensor.shape());
    auto x = a[i].tensor.to_doubles(), y = b[i].tensor.to_doubles();
    double num = 0, den = 0;
    for (size_t j = 0; j < x.size(); ++j) {
      num += (x[j] - y[j]) * (x[j] - y[j]);
      den += y[j] * y[j];
    }
    EXPECT_LE(std::sqrt(num / std::max(den, 1e-30)), tol) << "output " << i;
  }
}

int count_op(const Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes) n += node.op_type == op;
  return n;
}

// Optimizes a copy at `level` and checks outputs are unchanged; returns the optimized model.
Model optimize_and_compare(const Model& m, const std::map<std::string, RuntimeValue>& feeds, int level) {
  Model opt = m;
  optimize(opt, {level, {}});
  verify_model(opt);
  expect_close(run(opt, feeds), run(m, feeds));
  return opt;
}

TEST(ConstantFolding, FoldsConstantSubgraphAndKeepsResults) {
  Builder b;
  b.input("x", {2, 3});
  b.constant("c1", {2, 3}, 1);
  b.constant("c2", {2, 3}, 2);
  b.node("Add", {"c1", "c2"}, {"s"});
  b.node("Exp", {"s"}, {"e"});
  b.node("Mul", {"x", "e"}, {"y"});
  b.output("y");
  b.finish();
  Model opt = b.m;
  EXPECT_TRUE(fold_constants(opt.graph));
  eliminate_dead_code(opt.graph);
  EXPECT_EQ(opt.graph.nodes.size(), 1u);
  EXPECT_EQ(opt.graph.nodes[0].op_type, "Mul");
  EXPECT_NE(opt.graph.initializer("e"), nullptr);
  EXPECT_EQ(opt.graph.initializer("c1"), nullptr);  // dead now
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({2, 3}, 7))}};
  expect_close(run(opt, feeds), run(b.m, feeds), 0);
}

TEST(ConstantFolding, LeavesRandomOpsAndOverridableInputs) {
  Builder b;
  b.input("x", {2});
  b.input("c", {2});
  b.constant("c", {2}, 3);  // an initializer that is also an input: the caller may override it
  b.node("RandomNormal", {}, {"r"}, {Attribute::make_ints("shape", {2})});
  b.node("Neg", {"c"}, {"n"});
  b.node("Add", {"r", "n"}, {"s"});
  b.node("Add", {"s", "x"}, {"y"});
  b.output("y");
  b.finish();
  EXPECT_FALSE(fold_constants(b.g));
  EXPECT_EQ(count_op(b.g, "RandomNormal"), 1);
  EXPECT_EQ(count_op(b.g, "Neg"), 1);
}

TEST(DeadCode, RemovesUnreachableNodesAndInitializers) {
  Builder b;
  b.input("x", {4});
  b.constant("w", {4}, 1);
  b.node("Relu", {"x"}, {"y"});
  b.node("Mul", {"x", "w"}, {"unused"});
  b.output("y");
  b.finish();
  EXPECT_TRUE(eliminate_dead_code(b.g));
  EXPECT_EQ(b.g.nodes.size(), 1u);
  EXPECT_EQ(b.g.initializer("w"), nullptr);
  EXPECT_FALSE(eliminate_dead_code(b.g));
}

TEST(Identities, RemovesIdentityDropoutAndSameTypeCast) {
  Builder b;
  b.input("x", {3});
  b.node("Identity", {"x"}, {"a"});
  b.node("Dropout", {"a"}, {"d"}, {Attribute::make_float("ratio", 0.5f)});
  b.node("Cast", {"d"}, {"c"}, {Attribute::make_int("to", 1)});
  b.node("Relu", {"c"}, {"r"});
  b.node("Identity", {"r"}, {"y"});  // graph output: the Relu takes its name
  b.output("y");
  b.finish();
  Model before = b.m;
  EXPECT_TRUE(eliminate_identities(b.g));
  ASSERT_EQ(b.g.nodes.size(), 1u);
  EXPECT_EQ(b.g.nodes[0].op_type, "Relu");
  EXPECT_EQ(b.g.nodes[0].inputs[0], "x");
  EXPECT_EQ(b.g.nodes[0].outputs[0], "y");
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({3}, 1))}};
  expect_close(run(b.m, feeds), run(before, feeds), 0);
}

// torch's Swin-T export: Dropout in training mode with ratio 0, and Pads of 0 on every side;
// torchvision's DenseNet: a Concat of one input (each dense block's first layer).
TEST(Identities, RatioZeroDropoutZeroPadAndOneInputConcatRemoved) {
  Builder b;
  b.input("x", {2, 3});
  b.scalar("zero", 0.f);
  b.g.set_initializer("train", Tensor::from_vector(DType::Bool, {}, std::vector<uint8_t>{1}));
  b.g.set_initializer("nopads", Tensor::from_vector(DType::I64, {4}, std::vector<int64_t>{0, 0, 0, 0}));
  b.g.set_initializer("pads", Tensor::from_vector(DType::I64, {4}, std::vector<int64_t>{0, 1, 0, 0}));
  b.node("Dropout", {"x", "zero", "train"}, {"d"});
  b.node("Pad", {"d", "nopads"}, {"p"});
  b.node("Concat", {"p"}, {"pc"}, {Attribute::make_int("axis", 1)});
  b.node("Relu", {"pc"}, {"r"});
  b.node("Pad", {"r", "pads"}, {"y"});  // pads something: stays
  b.output("y");
  b.finish();
  Model before = b.m;
  EXPECT_TRUE(eliminate_identities(b.g));
  ASSERT_EQ(b.g.nodes.size(), 2u);
  EXPECT_EQ(b.g.nodes[0].op_type, "Relu");
  EXPECT_EQ(b.g.nodes[0].inputs[0], "x");
  EXPECT_EQ(b.g.nodes[1].op_type, "Pad");
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({2, 3}, 4))}};
  expect_close(run(b.m, feeds), run(before, feeds), 0);
  // A random dropout (ratio 0.5 in training mode) stays.
  Builder c;
  c.input("x", {2, 3});
  c.scalar("half", 0.5f);
  c.g.set_initializer("train", Tensor::from_vector(DType::Bool, {}, std::vector<uint8_t>{1}));
  c.node("Dropout", {"x", "half", "train"}, {"y"});
  c.output("y");
  c.finish();
  EXPECT_FALSE(eliminate_identities(c.g));
}

TEST(Identities, DropoutWithUnusedMaskIsRemovedUsedMaskKept) {
  Builder b;
  b.input("x", {4});
  b.node("Dropout", {"x"}, {"d", "unused_mask"}, {Attribute::make_float("ratio", 0.5f)});
  b.node("Relu", {"d"}, {"r"});
  b.node("Dropout", {"r"}, {"e", "mask"}, {Attribute::make_float("ratio", 0.5f)});
  b.output("e");
  b.output("mask");
  b.finish();
  EXPECT_TRUE(eliminate_identities(b.g));
  ASSERT_EQ(b.g.nodes.size(), 2u);
  EXPECT_EQ(b.g.nodes[0].op_type, "Relu");
  EXPECT_EQ(b.g.nodes[0].inputs[0], "x");
  EXPECT_EQ(b.g.nodes[1].op_type, "Dropout");  // its mask is a graph output
  EXPECT_FALSE(b.g.type_of("unused_mask"));
}

TEST(Cse, MergesEqualNodesOnly) {
  Builder b;
  b.input("x", {3});
  b.node("Exp", {"x"}, {"e1"});
  b.node("Exp", {"x"}, {"e2"});
  b.node("LeakyRelu", {"x"}, {"l1"}, {Attribute::make_float("alpha", 0.1f)});
  b.node("LeakyRelu", {"x"}, {"l2"}, {Attribute::make_float("alpha", 0.2f)});
  b.node("Add", {"e1", "e2"}, {"s"});
  b.node("Add", {"l1", "l2"}, {"t"});
  b.node("Add", {"s", "t"}, {"y"});
  b.output("y");
  b.finish();
  Model before = b.m;
  EXPECT_TRUE(eliminate_common_subexpressions(b.g));
  EXPECT_EQ(count_op(b.g, "Exp"), 1);
  EXPECT_EQ(count_op(b.g, "LeakyRelu"), 2);
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({3}, 2))}};
  expect_close(run(b.m, feeds), run(before, feeds), 0);
}

TEST(ShapeFolding, FoldsShapeGatherConcatReshapeChain) {
  Builder b;
  b.input("x", {-1, 6});
  b.g.inputs[0].type.shape = Shape({Dim::sym("batch"), Dim(6)});
  b.node("Shape", {"x"}, {"s"});
  b.g.set_initializer("i0", Tensor::scalar<int64_t>(DType::I64, 0));
  b.node("Gather", {"s", "i0"}, {"b0"}, {Attribute::make_int("axis", 0)});
  b.g.set_initializer("ax", Tensor::from_vector<int64_t>(DType::I64, {1}, {0}));
  b.node("Unsqueeze", {"b0", "ax"}, {"b1"});
  b.g.set_initializer("rest", Tensor::from_vector<int64_t>(DType::I64, {2}, {2, 3}));
  b.node("Concat", {"b1", "rest"}, {"shape"}, {Attribute::make_int("axis", 0)});
  b.node("Reshape", {"x", "shape"}, {"y"});
  b.output("y");
  b.finish();
  Model opt = b.m;
  optimize(opt, {1, {{"x", {4, 6}}}});
  ASSERT_EQ(opt.graph.nodes.size(), 1u);
  EXPECT_EQ(opt.graph.nodes[0].op_type, "Reshape");
  const Tensor* shape = opt.graph.initializer(opt.graph.nodes[0].inputs[1]);
  ASSERT_NE(shape, nullptr);
  EXPECT_EQ(shape->to_int64s(), (std::vector<int64_t>{4, 2, 3}));
  // Without a concrete batch the chain stays.
  Model sym = b.m;
  optimize(sym, {1, {}});
  EXPECT_EQ(count_op(sym.graph, "Shape"), 1);
  EXPECT_THROW(optimize(opt, {1, {{"x", {4, 6, 1}}}}), Error);
}

TEST(TransposeFolding, ComposesAndRemovesIdentity) {
  Builder b;
  b.input("x", {2, 3, 4});
  b.node("Transpose", {"x"}, {"t1"}, {Attribute::make_ints("perm", {1, 2, 0})});
  b.node("Transpose", {"t1"}, {"t2"}, {Attribute::make_ints("perm", {2, 0, 1})});  // back to x
  b.node("Relu", {"t2"}, {"r"});
  b.node("Transpose", {"r"}, {"t3"}, {Attribute::make_ints("perm", {0, 2, 1})});
  b.node("Transpose", {"t3"}, {"y"}, {Attribute::make_ints("perm", {1, 0, 2})});
  b.output("y");
  b.finish();
  Model before = b.m;
  EXPECT_TRUE(fold_transposes(b.g));
  eliminate_dead_code(b.g);
  EXPECT_EQ(count_op(b.g, "Transpose"), 1);
  EXPECT_EQ(b.g.nodes[0].op_type, "Relu");
  EXPECT_EQ(b.g.nodes[0].inputs[0], "x");
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({2, 3, 4}, 3))}};
  expect_close(run(b.m, feeds), run(before, feeds), 0);
}

// [1, S, E] → [S, 1, E] moves only a dim of size 1: the data is unchanged, a Reshape (a view) does it.
TEST(TransposeFolding, UnitDimTransposeBecomesReshape) {
  Builder b;
  b.input("x", {1, 3, 4});
  b.node("Transpose", {"x"}, {"t"}, {Attribute::make_ints("perm", {1, 0, 2})});
  b.node("Relu", {"t"}, {"r"});
  b.node("Transpose", {"r"}, {"y"}, {Attribute::make_ints("perm", {2, 1, 0})});  // a real transpose stays
  b.output("y");
  b.finish();
  Model before = b.m;
  EXPECT_TRUE(fold_transposes(b.g));
  EXPECT_EQ(count_op(b.g, "Transpose"), 1);
  EXPECT_EQ(b.g.nodes[0].op_type, "Reshape");
  EXPECT_EQ(constant_of(b.g, b.g.nodes[0].inputs[1])->to_int64s(), (std::vector<int64_t>{3, 1, 4}));
  verify_model(b.m);
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({1, 3, 4}, 3))}};
  expect_close(run(b.m, feeds), run(before, feeds), 0);
}

// ResNet block: Conv → BN → Add(residual) → Relu.
Builder conv_block() {
  Builder b;
  b.input("x", {1, 4, 8, 8});
  b.constant("w", {4, 4, 3, 3}, 1);
  b.constant("cb", {4}, 2);
  b.constant("gamma", {4}, 3, 0.5f, 1.5f);
  b.constant("beta", {4}, 4);
  b.constant("mean", {4}, 5);
  b.constant("var", {4}, 6, 0.5f, 2.0f);
  b.node("Conv", {"x", "w", "cb"}, {"c"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
  b.node("BatchNormalization", {"c", "gamma", "beta", "mean", "var"}, {"bn"});
  b.node("Add", {"bn", "x"}, {"s"});
  b.node("Relu", {"s"}, {"y"});
  b.output("y");
  b.finish();
  return b;
}

TEST(ConvFusion, ConvBatchNormAddReluBecomesOneFusedConv) {
  Builder b = conv_block();
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({1, 4, 8, 8}, 9))}};
  Model opt = optimize_and_compare(b.m, feeds, 2);
  ASSERT_EQ(opt.graph.nodes.size(), 1u);
  const Node& n = opt.graph.nodes[0];
  EXPECT_EQ(n.op_type, "FusedConv");
  EXPECT_EQ(n.domain, "hodu");
  EXPECT_EQ(n.inputs.size(), 4u);
  EXPECT_EQ(n.inputs[3], "x");
  EXPECT_EQ(n.get_string("activation", ""), "Relu");
  EXPECT_EQ(n.outputs[0], "y");
  // O1 keeps the ops apart.
  Model o1 = optimize_and_compare(b.m, feeds, 1);
  EXPECT_EQ(count_op(o1.graph, "Conv"), 1);
  EXPECT_EQ(count_op(o1.graph, "BatchNormalization"), 1);
}

// A model with dynamic dims (torch's exports: batch, height and width) is optimized once over
// its symbolic shapes, where the conv's output and the residual cannot be shown equal, and
// again by the cpu engine once the shapes are known: the second run gives the FusedConv of the
// first its residual Add, and the Relu after it.
// tf2onnx orders BlazeFace's blocks conv, then the residual (the input widened by a Concat of
// zero channels), then the Add: the conv still takes the residual and the Relu, and the fused
// conv runs where the Add did (after the Concat that makes its Z). A second such block reads the
// first's moved output.
TEST(ConvFusion, ResidualMadeAfterTheConvStillFuses) {
  Builder b;
  b.input("x", {1, 4, 5, 6});
  b.constant("w1", {6, 4, 1, 1}, 1);
  b.constant("w2", {8, 6, 1, 1}, 2);
  b.constant("z2", {1, 2, 5, 6}, 0, 0.0f, 0.0f);
  b.constant("z4", {1, 2, 5, 6}, 0, 0.0f, 0.0f);
  b.node("Conv", {"x", "w1"}, {"c1"});
  b.node("Concat", {"x", "z2"}, {"wide1"}, {Attribute::make_int("axis", 1)});
  b.node("Add", {"c1", "wide1"}, {"s1"});
  b.node("Relu", {"s1"}, {"r1"});
  b.node("Conv", {"r1", "w2"}, {"c2"});
  b.node("Concat", {"r1", "z4"}, {"wide2"}, {Attribute::make_int("axis", 1)});
  b.node("Add", {"wide2", "c2"}, {"s2"});
  b.node("Relu", {"s2"}, {"y"});
  b.output("y");
  b.finish();
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({1, 4, 5, 6}, 3))}};
  Model opt = optimize_and_compare(b.m, feeds, 2);
  verify_model(opt);
  EXPECT_EQ(count_op(opt.graph, "Add"), 0);
  EXPECT_EQ(count_op(opt.graph, "Relu"), 0);
  ASSERT_EQ(count_op(opt.graph, "FusedConv"), 2);
  std::vector<std::string> ops;
  for (const auto& n : opt.graph.nodes) ops.push_back(n.op_type);
  EXPECT_EQ(ops, (std::vector<std::string>{"Concat", "FusedConv", "Concat", "FusedConv"}));
}

TEST(ConvFusion, FusedConvOfSymbolicShapesTakesItsResidualOnceShapesAreKnown) {
  Builder b;
  b.input("x", {-1, 4, -1, -1});
  b.g.inputs[0].type.shape = Shape({Dim::sym("n"), Dim(4), Dim::sym("h"), Dim::sym("w")});
  b.constant("w", {4, 4, 3, 3}, 1);
  b.constant("cb", {4}, 2);
  b.node("Conv", {"x", "w", "cb"}, {"c"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
  b.node("Add", {"c", "x"}, {"s"});
  b.node("Relu", {"s"}, {"y"});
  b.output("y");
  b.finish();
  Model sym = b.m;
  optimize(sym, {2, {}});
  verify_model(sym);
  ASSERT_EQ(count_op(sym.graph, "FusedConv"), 1);
  ASSERT_EQ(count_op(sym.graph, "Add"), 1);  // not matched over symbolic shapes
  Model known = sym;
  optimize(known, {2, {{"x", {1, 4, 6, 5}}}});
  verify_model(known);
  ASSERT_EQ(known.graph.nodes.size(), 1u);
  const Node& n = known.graph.nodes[0];
  EXPECT_EQ(n.op_type, "FusedConv");
  ASSERT_EQ(n.inputs.size(), 4u);
  EXPECT_EQ(n.inputs[3], "x");
  EXPECT_EQ(n.get_string("activation", ""), "Relu");
  EXPECT_EQ(n.outputs[0], "y");
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({1, 4, 6, 5}, 9))}};
  expect_close(run(known, feeds), run(b.m, feeds));
  // A FusedConv with an activation keeps it: the Add after it is not its residual.
  Builder a;
  a.input("x", {1, 4, 6, 5});
  a.constant("w", {4, 4, 3, 3}, 1);
  a.node("Conv", {"x", "w"}, {"c"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
  a.node("Relu", {"c"}, {"r"});
  a.node("Add", {"r", "x"}, {"y"});
  a.output("y");
  a.finish();
  Model twice = a.m;
  optimize(twice, {2, {}});
  optimize(twice, {2, {{"x", {1, 4, 6, 5}}}});
  EXPECT_EQ(count_op(twice.graph, "Add"), 1);
  expect_close(run(twice, feeds), run(a.m, feeds));
}

// SqueezeNet's fire modules: Concat → Conv becomes two convs summed (the second takes the
// first as its residual), Concat → MaxPool → Conv pools the parts first; a Concat that is
// also read elsewhere, or feeds a conv with a larger output, stays.
// A pool of a Concat read by several convs (GoogLeNet's stage pools): moved below the
// Concat by default (the engines' blocked concat takes the pooled parts), kept above it with
// pool_only_into_one_conv (hodu build could only copy that Concat plain).
TEST(ConcatConvSplit, PoolFeedingSeveralConvsStaysWhenAsked) {
  for (bool only_into_one_conv : {false, true}) {
    Builder b;
    b.input("x", {1, 8, 10, 10});
    b.constant("w1", {16, 8, 1, 1}, 1);
    b.constant("w2", {16, 8, 1, 1}, 2);
    b.constant("wa", {4, 32, 1, 1}, 3);
    b.constant("wb", {4, 32, 1, 1}, 4);
    b.node("Conv", {"x", "w1"}, {"c1"});
    b.node("Conv", {"x", "w2"}, {"c2"});
    b.node("Concat", {"c1", "c2"}, {"cat"}, {Attribute::make_int("axis", 1)});
    b.node("MaxPool", {"cat"}, {"p"}, {Attribute::make_ints("kernel_shape", {2, 2}), Attribute::make_ints("strides", {2, 2})});
    b.node("Conv", {"p", "wa"}, {"ya"});
    b.node("Conv", {"p", "wb"}, {"yb"});
    b.output("ya");
    b.output("yb");
    b.finish();
    Model before = b.m;
    EXPECT_EQ(split_concat_convs(b.g, only_into_one_conv), !only_into_one_conv);
    int pools = 0;
    for (const auto& n : b.g.nodes) pools += n.op_type == "MaxPool";
    EXPECT_EQ(pools, only_into_one_conv ? 1 : 2);
    std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({1, 8, 10, 10}, 5))}};
    expect_close(run(b.m, feeds), run(before, feeds), 1e-5);
  }
}

// RAFT's update block unrolled over its iterations: the same weight read by a conv of a
// concat at each step. Each split makes the same parts: made once, shared by every step's convs
// (12 copies of each part, each packed, held 51 MB for a 4 MB model).
TEST(ConcatConvSplit, ConvsOfOneWeightShareItsParts) {
  Builder b;
  b.input("x", {1, 8, 10, 10});
  b.input("h", {1, 4, 10, 10});
  b.constant("w", {4, 12, 3, 3}, 1);
  std::string state = "h";
  for (int step = 0; step < 3; ++step) {
    const std::string k = std::to_string(step);
    b.node("Concat", {state, "x"}, {"cat" + k}, {Attribute::make_int("axis", 1)});
    b.node("Conv", {"cat" + k, "w"}, {"c" + k}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
    b.node("Tanh", {"c" + k}, {"s" + k});
    state = "s" + k;
  }
  b.output(state);
  b.finish();
  Model opt = b.m;
  EXPECT_TRUE(split_concat_convs(opt.graph));
  std::set<std::string> weights;
  for (const auto& n : opt.graph.nodes)
    if (n.op_type == "Conv") weights.insert(n.inputs[1]);
  EXPECT_EQ(count_op(opt.graph, "Conv"), 6);
  EXPECT_EQ(weights.size(), 2u);  // one per part, not one per conv
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({1, 8, 10, 10}, 2))},
                                                {"h", RuntimeValue(random_tensor({1, 4, 10, 10}, 3))}};
  expect_close(run(opt, feeds), run(b.m, feeds), 1e-5);
}

TEST(ConcatConvSplit, FireModulesLoseTheirConcats) {
  Builder b;
  b.input("x", {1, 8, 10, 10});
  b.constant("we1", {16, 8, 1, 1}, 1);
  b.constant("we3", {16, 8, 3, 3}, 2);
  b.constant("ws", {4, 32, 1, 1}, 3);
  b.constant("bs", {4}, 4);
  b.constant("wf", {6, 32, 3, 3}, 5);
  b.constant("wbig", {40, 32, 1, 1}, 6);
  b.node("Conv", {"x", "we1"}, {"e1"});
  b.node("Relu", {"e1"}, {"r1"});
  b.node("Conv", {"x", "we3"}, {"e3"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});
  b.node("Relu", {"e3"}, {"r3"});
  b.node("Concat", {"r1", "r3"}, {"cat"}, {Attribute::make_int("axis", 1)});
  b.node("Conv", {"cat", "ws", "bs"}, {"s"});  // split
  b.node("Relu", {"s"}, {"y1"});
  b.node("Concat", {"r3", "r1"}, {"cat2"}, {Attribute::make_int("axis", 1)});  // distinct, or CSE merges them
  b.node("MaxPool", {"cat2"}, {"p"}, {Attribute::make_ints("kernel_shape", {3, 3}), Attribute::make_ints("strides", {2, 2}),
                                     Attribute::make_int("ceil_mode", 1)});
  b.node("Conv", {"p", "wf"}, {"y2"}, {Attribute::make_ints("pads", {1, 1, 1, 1})});  // pooled, then split
  b.node("Concat", {"r3", "r3"}, {"cat3"}, {Attribute::make_int("axis", -3)});
  b.node("Conv", {"cat3", "wbig"}, {"y3"});  // output larger than the concat: stays
  b.output("y1");
  b.output("y2");
  b.output("y3");
  b.finish();
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({1, 8, 10, 10}, 7))}};
  Model opt = b.m;
  EXPECT_TRUE(split_concat_convs(opt.graph));
  verify_model(opt);
  expect_close(run(opt, feeds), run(b.m, feeds), 1e-5);
  EXPECT_EQ(count_op(opt.graph, "Concat"), 1);  // cat3
  EXPECT_EQ(count_op(opt.graph, "MaxPool"), 2);
  EXPECT_EQ(count_op(opt.graph, "Add"), 2);
  EXPECT_FALSE(split_concat_convs(opt.graph));  // nothing left to do
  // At -O2 each Add becomes the second conv's residual.
  Model o2 = optimize_and_compare(b.m, feeds, 2);
  EXPECT_EQ(count_op(o2.graph, "Add"), 0);
  EXPECT_EQ(count_op(o2.graph, "Concat"), 1);
}

// DeepLab's ASPP: 3x3 convs dilated past the map's size read only padding off their centre.
// Pad -> AveragePool (torch's avg_pool2d with count_include_pad) and Pad -> Conv (Keras'
// ZeroPadding2D): the zeros become the reader's pads. Non-zero values, other modes, padded
// channels, a second reader, a ceil_mode pool and a pool that excludes its own padding stay.
TEST(PadFolding, ZeroSpatialPadsBecomeTheReadersPads) {
  Builder b;
  b.input("x", {1, 4, 9, 11});
  b.constant("w", {6, 4, 3, 3}, 1);
  auto i64 = [&](const std::string& name, std::vector<int64_t> v) {
    b.g.set_initializer(name, Tensor::from_vector(DType::I64, {static_cast<int64_t>(v.size())}, v));
  };
  i64("sp", {0, 0, 1, 2, 0, 0, 2, 1});    // spatial only: folds
  i64("ch", {0, 1, 1, 1, 0, 0, 1, 1});    // a channel padded: stays
  b.scalar("zero", 0.0f);
  b.scalar("one", 1.0f);
  auto pad = [&](const std::string& y, const std::string& pads, const std::string& value = "",
                 const std::string& mode = "constant") {
    b.node("Pad", {"x", pads, value}, {y}, {Attribute::make_string("mode", mode)});
  };
  auto pool = [&](const std::string& y, const std::string& x, std::vector<Attribute> extra = {}) {
    extra.push_back(Attribute::make_ints("kernel_shape", {3, 3}));
    b.node("AveragePool", {x}, {y}, extra);
  };
  pad("p1", "sp");
  pool("avg", "p1");                                                     // folds
  pad("p2", "sp", "zero");
  b.node("Conv", {"p2", "w"}, {"conv"}, {Attribute::make_ints("pads", {1, 0, 0, 1})});  // folds onto its own pads
  pad("p3", "sp", "one");
  pool("avg_one", "p3");                                                 // a value of 1: stays
  pad("p4", "sp", "", "reflect");
  pool("avg_reflect", "p4");                                             // reflect: stays
  pad("p5", "ch");
  pool("avg_ch", "p5");                                                  // channels: stays
  pad("p6", "sp");
  pool("avg_shared", "p6");
  b.node("Relu", {"p6"}, {"relu_shared"});                               // two readers: stays
  pad("p7", "sp");
  pool("avg_ceil", "p7", {Attribute::make_int("ceil_mode", 1)});         // ceil_mode: stays
  pad("p8", "sp");
  pool("avg_excl", "p8", {Attribute::make_ints("pads", {1, 1, 1, 1})});  // excludes its own pads: stays
  pad("p9", "sp");
  pool("avg_incl", "p9", {Attribute::make_ints("pads", {1, 1, 1, 1}), Attribute::make_int("count_include_pad", 1)});
  for (const char* y : {"avg", "conv", "avg_one", "avg_reflect", "avg_ch", "avg_shared", "relu_shared", "avg_ceil",
                        "avg_excl", "avg_incl"})
    b.output(y);
  b.finish();
  Model opt = b.m;
  EXPECT_TRUE(fold_pads_into_windows(opt.graph));
  verify_model(opt);
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({1, 4, 9, 11}, 3))}};
  expect_close(run(opt, feeds), run(b.m, feeds), 1e-6);
  auto node = [&](const std::string& y) -> const Node& { return opt.graph.nodes[opt.graph.producer_of(y)]; };
  EXPECT_EQ(node("avg").inputs[0], "x");
  EXPECT_EQ(node("avg").get_ints("pads"), (std::vector<int64_t>{1, 2, 2, 1}));
  EXPECT_EQ(node("avg").get_int("count_include_pad", 0), 1);
  EXPECT_EQ(node("conv").inputs[0], "x");
  EXPECT_EQ(node("conv").get_ints("pads"), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(node("avg_incl").inputs[0], "x");
  EXPECT_EQ(node("avg_incl").get_ints("pads"), (std::vector<int64_t>{2, 3, 3, 2}));
  for (const char* y : {"avg_one", "avg_reflect", "avg_ch", "avg_shared", "avg_ceil", "avg_excl"})
    EXPECT_EQ(opt.graph.nodes[opt.graph.producer_of(node(y).inputs[0])].op_type, "Pad") << y;
  EXPECT_EQ(count_op(opt.graph, "Pad"), 6);
  EXPECT_FALSE(fold_pads_into_windows(opt.graph));
}

TEST(ConvDeadTaps, DilatedPastTheMapBecomeSmallerKernels) {
  Builder b;
  b.input("x", {1, 8, 20, 20});
  b.input("p", {1, 8, 1, 1});
  b.constant("w", {6, 8, 3, 3}, 1);
  b.constant("bias", {6}, 2);
  auto conv = [&](const std::string& y, const std::string& x, std::vector<int64_t> d, std::vector<int64_t> pads,
                  int64_t stride = 1) {
    b.node("Conv", {x, "w", "bias"}, {y},
           {Attribute::make_ints("dilations", d), Attribute::make_ints("pads", pads),
            Attribute::make_ints("strides", {stride, stride}), Attribute::make_ints("kernel_shape", {3, 3})});
  };
  conv("d24", "x", {24, 24}, {24, 24, 24, 24});     // centre only: 1x1
  conv("d36s2", "x", {36, 36}, {36, 36, 36, 36}, 2);  // strided: 1x1, its output still 10x10
  conv("d12", "x", {12, 12}, {12, 12, 12, 12});     // every tap reads the map somewhere: kept
  conv("rows", "x", {20, 1}, {20, 1, 20, 1});       // dead along H only: 1x3
  conv("pooled", "p", {1, 1}, {1, 1, 1, 1});        // a 1x1 map: its centre tap
  for (const char* y : {"d24", "d36s2", "d12", "rows", "pooled"}) b.output(y);
  b.finish();
  Model opt = b.m;
  EXPECT_TRUE(drop_padding_only_conv_taps(opt.graph));
  verify_model(opt);
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({1, 8, 20, 20}, 3))},
                                               {"p", RuntimeValue(random_tensor({1, 8, 1, 1}, 4))}};
  expect_close(run(opt, feeds), run(b.m, feeds), 1e-6);
  auto node = [&](const std::string& y) -> const Node& { return opt.graph.nodes[opt.graph.producer_of(y)]; };
  auto kernel = [&](const std::string& y) { return opt.graph.initializer(node(y).inputs[1])->shape(); };
  EXPECT_EQ(kernel("d24"), (std::vector<int64_t>{6, 8, 1, 1}));
  EXPECT_EQ(node("d24").get_ints("pads"), (std::vector<int64_t>{0, 0, 0, 0}));
  EXPECT_EQ(node("d24").get_ints("kernel_shape"), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(kernel("d36s2"), (std::vector<int64_t>{6, 8, 1, 1}));
  EXPECT_EQ(kernel("d12"), (std::vector<int64_t>{6, 8, 3, 3}));
  EXPECT_EQ(kernel("rows"), (std::vector<int64_t>{6, 8, 1, 3}));
  EXPECT_EQ(node("rows").get_ints("pads"), (std::vector<int64_t>{0, 1, 0, 1}));
  EXPECT_EQ(node("rows").get_ints("dilations"), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(kernel("pooled"), (std::vector<int64_t>{6, 8, 1, 1}));
  EXPECT_FALSE(drop_padding_only_conv_taps(opt.graph));  // nothing left to drop
  // As the engines run it: optimized without shapes first (convs fused), then with them.
  Builder lazy;
  lazy.g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape({Dim(1), Dim(8), Dim::sym("h"), Dim::sym("w")})), ""});
  lazy.constant("w", {6, 8, 3, 3}, 1);
  lazy.node("Conv", {"x", "w"}, {"c"}, {Attribute::make_ints("dilations", {24, 24}), Attribute::make_ints("pads", {24, 24, 24, 24})});
  lazy.node("Relu", {"c"}, {"y"});
  lazy.output("y");
  lazy.finish();
  Model fused = lazy.m;
  optimize(fused, {2, {}});
  ASSERT_EQ(count_op(fused.graph, "FusedConv"), 1);
  EXPECT_EQ(fused.graph.initializer(fused.graph.nodes[fused.graph.producer_of("y")].inputs[1])->shape(),
            (std::vector<int64_t>{6, 8, 3, 3}));  // free h, w: kept
  Model bound = fused;
  optimize(bound, {2, {{"x", {1, 8, 20, 20}}}});
  EXPECT_EQ(bound.graph.initializer(bound.graph.nodes[bound.graph.producer_of("y")].inputs[1])->shape(),
            (std::vector<int64_t>{6, 8, 1, 1}));
  std::map<std::string, RuntimeValue> xf = {{"x", RuntimeValue(random_tensor({1, 8, 20, 20}, 5))}};
  expect_close(run(bound, xf), run(lazy.m, xf), 1e-6);
  // Free spatial dims: nothing is known, nothing changes.
  Builder f;
  f.g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape({Dim(1), Dim(8), Dim::sym("h"), Dim::sym("w")})), ""});
  f.constant("w", {6, 8, 3, 3}, 1);
  f.node("Conv", {"x", "w"}, {"y"}, {Attribute::make_ints("dilations", {24, 24}), Attribute::make_ints("pads", {24, 24, 24, 24})});
  f.output("y");
  f.finish();
  EXPECT_FALSE(drop_padding_only_conv_taps(f.g));
}

TEST(ConvFusion, ClipAndSiluActivations) {
  Builder b;
  b.input("x", {1, 2, 5, 5});
  b.constant("w", {3, 2, 1, 1}, 1);
  b.constant("w2", {3, 3, 1, 1}, 2);
  b.scalar("lo", 0.0f);
  b.scalar("hi", 6.0f);
  b.node("Conv", {"x", "w"}, {"c"});
  b.node("Clip", {"c", "lo", "hi"}, {"r6"});
  b.node("Conv", {"r6", "w2"}, {"c2"});
  b.node("Sigmoid", {"c2"}, {"sg"});
  b.node("Mul", {"c2", "sg"}, {"y"});
  b.output("y");
  b.finish();
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({1, 2, 5, 5}, 4))}};
  Model opt = optimize_and_compare(b.m, feeds, 2);
  ASSERT_EQ(opt.graph.nodes.size(), 2u);
  EXPECT_EQ(opt.graph.nodes[0].get_string("activation", ""), "Clip");
  EXPECT_EQ(opt.graph.nodes[0].get_floats("activation_params"), (std::vector<float>{0.0f, 6.0f}));
  EXPECT_EQ(opt.graph.nodes[1].get_string("activation", ""), "Silu");
}

TEST(MatMulFusion, MatMulBiasGeluBecomesFusedMatMul) {
  Builder b;
  b.input("x", {2, 5, 8});
  b.constant("w", {8, 16}, 1);
  b.constant("bias", {16}, 2);
  b.scalar("sqrt2", std::sqrt(2.0f));
  b.scalar("one", 1.0f);
  b.scalar("half", 0.5f);
  b.node("MatMul", {"x", "w"}, {"m"});
  b.node("Add", {"m", "bias"}, {"h"});
  b.node("Div", {"h", "sqrt2"}, {"d"});
  b.node("Erf", {"d"}, {"e"});
  b.node("Add", {"e", "one"}, {"e1"});
  b.node("Mul", {"h", "e1"}, {"he"});
  b.node("Mul", {"he", "half"}, {"y"});
  b.output("y");
  b.finish();
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({2, 5, 8}, 5))}};
  Model opt = optimize_and_compare(b.m, feeds, 2);
  ASSERT_EQ(opt.graph.nodes.size(), 1u);
  EXPECT_EQ(opt.graph.nodes[0].op_type, "FusedMatMul");
  EXPECT_EQ(opt.graph.nodes[0].inputs.size(), 3u);
  EXPECT_EQ(opt.graph.nodes[0].get_string("activation", ""), "Gelu");
}

TEST(MatMulFusion, GemmReluAndTransposedB) {
  Builder b;
  b.input("x", {3, 4});
  b.input("k", {6, 4});
  b.constant("w", {5, 4}, 1);
  b.constant("c", {5}, 2);
  b.node("Gemm", {"x", "w", "c"}, {"g"}, {Attribute::make_int("transB", 1)});
  b.node("Relu", {"g"}, {"y"});
  b.node("Transpose", {"k"}, {"kt"}, {Attribute::make_ints("perm", {1, 0})});
  b.node("MatMul", {"x", "kt"}, {"z"});
  b.output("y");
  b.output("z");
  b.finish();
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({3, 4}, 6))},
                                               {"k", RuntimeValue(random_tensor({6, 4}, 7))}};
  Model opt = optimize_and_compare(b.m, feeds, 2);
  EXPECT_EQ(count_op(opt.graph, "FusedGemm"), 1);
  EXPECT_EQ(count_op(opt.graph, "FusedMatMul"), 1);
  EXPECT_EQ(count_op(opt.graph, "Transpose"), 0);
}

// Residual Adds after products: through Reshapes (z gets a Reshape to the product's shape), onto
// a plain Gemm (becomes FusedGemm), a product with a bias; a broadcasting Add and an Add after
// an activation stay Adds.
TEST(ResidualFusion, AddAfterProductBecomesItsResidual) {
  Builder b;
  b.input("x", {6, 8});
  b.constant("w1", {8, 8}, 1);
  b.constant("w2", {8, 8}, 2);
  b.constant("w3", {8, 8}, 3);
  b.constant("bias", {8}, 4);
  b.constant("row", {8}, 5);
  b.g.set_initializer("s3", Tensor::from_vector<int64_t>(DType::I64, {3}, {2, 3, 8}));
  b.node("Reshape", {"x", "s3"}, {"x3"});
  b.node("Gemm", {"x", "w1"}, {"g"}, {Attribute::make_int("transB", 1)});
  b.node("Reshape", {"g", "s3"}, {"g3"});
  b.node("Add", {"x3", "g3"}, {"r1"});  // z = x3, the Gemm's output seen through a Reshape
  b.node("MatMul", {"r1", "w2"}, {"m"});
  b.node("Add", {"m", "bias"}, {"mb"});
  b.node("Add", {"mb", "r1"}, {"r2"});  // bias, then residual
  b.node("MatMul", {"r2", "w3"}, {"n"});
  b.node("Relu", {"n"}, {"nr"});
  b.node("Add", {"nr", "r2"}, {"r3"});  // after an activation: stays
  b.node("Add", {"r3", "row"}, {"y"});  // broadcasting: stays
  b.output("y");
  b.finish();
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({6, 8}, 8))}};
  Model opt = optimize_and_compare(b.m, feeds, 2);
  EXPECT_EQ(count_op(opt.graph, "Add"), 2);
  ASSERT_EQ(count_op(opt.graph, "FusedGemm"), 1);
  for (const auto& n : opt.graph.nodes) {
    if (n.op_type == "FusedGemm") {
      ASSERT_EQ(n.inputs.size(), 4u);
      const Node& z = opt.graph.nodes[opt.graph.producer_of(n.inputs[3])];
      EXPECT_EQ(z.op_type, "Reshape");  // x3 back to the Gemm's [6, 8]
      EXPECT_EQ(*opt.graph.type_of(n.inputs[3]), *opt.graph.type_of(n.outputs[0]));
    }
    if (n.op_type == "FusedMatMul" && n.get_string("activation", "").empty()) {
      ASSERT_EQ(n.inputs.size(), 4u);
      EXPECT_EQ(n.inputs[2], "bias");
      EXPECT_EQ(n.outputs[0], "r2");
    }
  }
}

TEST(LayerNormFusion, DecomposedLayerNormAndRmsNorm) {
  Builder b;
  b.input("x", {2, 3, 8});
  b.g.set_initializer("axes", Tensor::from_vector<int64_t>(DType::I64, {1}, {-1}));
  b.scalar("two", 2.0f);
  b.scalar("eps", 1e-5f);
  b.constant("s", {8}, 1);
  b.constant("bb", {8}, 2);
  b.node("ReduceMean", {"x", "axes"}, {"m"});
  b.node("Sub", {"x", "m"}, {"d"});
  b.node("Pow", {"d", "two"}, {"p"});
  b.node("ReduceMean", {"p", "axes"}, {"v"});
  b.node("Add", {"v", "eps"}, {"ve"});
  b.node("Sqrt", {"ve"}, {"sd"});
  b.node("Div", {"d", "sd"}, {"n"});
  b.node("Mul", {"n", "s"}, {"ns"});
  b.node("Add", {"ns", "bb"}, {"ln"});
  // RMSNorm of the result.
  b.node("Pow", {"ln", "two"}, {"p2"});
  b.node("ReduceMean", {"p2", "axes"}, {"v2"});
  b.node("Add", {"v2", "eps"}, {"ve2"});
  b.node("Sqrt", {"ve2"}, {"sd2"});
  b.node("Reciprocal", {"sd2"}, {"r2"});
  b.node("Mul", {"ln", "r2"}, {"n2"});
  b.node("Mul", {"n2", "s"}, {"y"});
  b.output("y");
  b.finish();
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({2, 3, 8}, 8))}};
  Model opt = optimize_and_compare(b.m, feeds, 2);
  ASSERT_EQ(opt.graph.nodes.size(), 2u);
  EXPECT_EQ(opt.graph.nodes[0].op_type, "LayerNorm");
  EXPECT_EQ(opt.graph.nodes[0].get_int("rms", 0), 0);
  EXPECT_EQ(opt.graph.nodes[1].op_type, "LayerNorm");
  EXPECT_EQ(opt.graph.nodes[1].get_int("rms", 0), 1);
}

TEST(AttentionFusion, ScaledDotProductWithMask) {
  Builder b;
  b.input("q", {1, 2, 5, 4});
  b.input("k", {1, 2, 5, 4});
  b.input("v", {1, 2, 5, 4});
  b.constant("mask", {1, 1, 5, 5}, 3);
  b.scalar("c", 2.0f);
  b.node("Transpose", {"k"}, {"kt"}, {Attribute::make_ints("perm", {0, 1, 3, 2})});
  b.node("MatMul", {"q", "kt"}, {"s"});
  b.node("Div", {"s", "c"}, {"ss"});
  b.node("Add", {"ss", "mask"}, {"sm"});
  b.node("Softmax", {"sm"}, {"p"}, {Attribute::make_int("axis", -1)});
  b.node("MatMul", {"p", "v"}, {"y"});
  b.output("y");
  b.finish();
  std::map<std::string, RuntimeValue> feeds = {{"q", RuntimeValue(random_tensor({1, 2, 5, 4}, 1))},
                                               {"k", RuntimeValue(random_tensor({1, 2, 5, 4}, 2))},
                                               {"v", RuntimeValue(random_tensor({1, 2, 5, 4}, 3))}};
  Model opt = optimize_and_compare(b.m, feeds, 3);
  ASSERT_EQ(opt.graph.nodes.size(), 1u);
  EXPECT_EQ(opt.graph.nodes[0].op_type, "Attention");
  EXPECT_FLOAT_EQ(opt.graph.nodes[0].get_float("scale", 0), 0.5f);
  // O2 leaves attention unfused.
  Model o2 = optimize_and_compare(b.m, feeds, 2);
  EXPECT_EQ(count_op(o2.graph, "Attention"), 0);
}

// nn.MultiheadAttention as PyTorch exports it: rank-3 heads, Q scaled before the product, Kᵀ by one Transpose.
TEST(AttentionFusion, Rank3WithScaledQuery) {
  Builder b;
  b.input("q3", {5, 2, 4});
  b.input("k3", {5, 2, 4});
  b.input("v3", {5, 2, 4});
  b.scalar("c", 2.0f);
  b.node("Transpose", {"q3"}, {"q"}, {Attribute::make_ints("perm", {1, 0, 2})});
  b.node("Div", {"q", "c"}, {"qs"});
  b.node("Transpose", {"k3"}, {"kt"}, {Attribute::make_ints("perm", {1, 2, 0})});
  b.node("Transpose", {"v3"}, {"v"}, {Attribute::make_ints("perm", {1, 0, 2})});
  b.node("MatMul", {"qs", "kt"}, {"s"});
  b.node("Softmax", {"s"}, {"p"}, {Attribute::make_int("axis", -1)});
  b.node("MatMul", {"p", "v"}, {"y"});
  b.output("y");
  b.finish();
  std::map<std::string, RuntimeValue> feeds = {{"q3", RuntimeValue(random_tensor({5, 2, 4}, 1))},
                                               {"k3", RuntimeValue(random_tensor({5, 2, 4}, 2))},
                                               {"v3", RuntimeValue(random_tensor({5, 2, 4}, 3))}};
  Model opt = optimize_and_compare(b.m, feeds, 3);
  EXPECT_EQ(count_op(opt.graph, "Attention"), 1);
  EXPECT_EQ(count_op(opt.graph, "Div"), 0);
  EXPECT_EQ(count_op(opt.graph, "Softmax"), 0);
  EXPECT_EQ(count_op(opt.graph, "MatMul"), 0);
  for (const auto& n : opt.graph.nodes) {
    if (n.op_type == "Attention") {
      EXPECT_FLOAT_EQ(n.get_float("scale", 0), 0.5f);
      EXPECT_EQ(opt.graph.type_of(n.inputs[0])->shape.rank(), 4u);
    }
    // K's Transpose now produces K ([heads, seq, dim]), not Kᵀ.
    if (n.op_type == "Transpose" && n.inputs[0] == "k3") {
      EXPECT_EQ(n.get_ints("perm"), (std::vector<int64_t>{1, 0, 2}));
    }
  }
}

// Multi-head attention as BERT-style exports write it (batch 2, 4 heads of 4): the head split
// (Reshape + Transpose) of Q, K, V and the merge of Y are absorbed into a rank-3 Attention. With
// V's heads taken from another axis ([B, S, D, H]: not a head split), everything stays.
TEST(AttentionHeads, SplitAndMergeBecomeRank3Attention) {
  for (bool other_v_layout : {false, true}) {
    Builder b;
    b.input("x", {2, 6, 16});
    for (const char* w : {"wq", "wk", "wv", "wo"}) b.constant(w, {16, 16}, static_cast<uint32_t>(w[1]));
    b.g.set_initializer("heads", Tensor::from_vector<int64_t>(DType::I64, {4}, {2, 6, 4, 4}));
    b.g.set_initializer("merged", Tensor::from_vector<int64_t>(DType::I64, {3}, {2, 6, 16}));
    b.scalar("c", 2.0f);
    for (const char* t : {"q", "k", "v"}) {
      std::string n = t;
      b.node("MatMul", {"x", std::string("w") + t}, {n});
      b.node("Reshape", {n, "heads"}, {n + "r"});
      std::vector<int64_t> perm = {0, 2, 1, 3};
      if (n == "v" && other_v_layout) perm = {0, 3, 1, 2};  // [B, S, D, H] → "heads" from the last axis
      b.node("Transpose", {n + "r"}, {n + "h"}, {Attribute::make_ints("perm", perm)});
    }
    b.node("Transpose", {"kh"}, {"kt"}, {Attribute::make_ints("perm", {0, 1, 3, 2})});
    b.node("MatMul", {"qh", "kt"}, {"s"});
    b.node("Div", {"s", "c"}, {"ss"});
    b.node("Softmax", {"ss"}, {"p"}, {Attribute::make_int("axis", -1)});
    b.node("MatMul", {"p", "vh"}, {"a"});
    b.node("Transpose", {"a"}, {"at"}, {Attribute::make_ints("perm", {0, 2, 1, 3})});
    b.node("Reshape", {"at", "merged"}, {"am"});
    b.node("MatMul", {"am", "wo"}, {"y"});
    b.output("y");
    b.finish();
    std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({2, 6, 16}, 4))}};
    Model opt = optimize_and_compare(b.m, feeds, 3);
    ASSERT_EQ(count_op(opt.graph, "Attention"), 1);
    EXPECT_EQ(count_op(opt.graph, "Transpose"), other_v_layout ? 4 : 0);
    for (const auto& n : opt.graph.nodes) {
      if (n.op_type != "Attention") continue;
      EXPECT_EQ(n.get_int("num_heads", 0), other_v_layout ? 0 : 4);
      EXPECT_EQ(opt.graph.type_of(n.inputs[0])->shape.rank(), other_v_layout ? 4u : 3u);
      if (!other_v_layout) {
        EXPECT_EQ(n.inputs[0], "q");  // the projection's output itself
      }
    }
  }
}

TEST(ElementwiseFusion, ChainBecomesOneNodeAndSharedValuesStayOutside) {
  Builder b;
  b.input("x", {2, 3, 4});
  b.input("y", {2, 3, 4});
  b.scalar("c", 3.0f);
  b.node("Add", {"x", "y"}, {"a"});
  b.node("Mul", {"a", "c"}, {"m"});
  b.node("Relu", {"m"}, {"r"});
  b.node("Sigmoid", {"r"}, {"s"});
  b.node("Sub", {"s", "x"}, {"z"});
  // `u` has two readers: it is a group's output, not an intermediate.
  b.node("Exp", {"y"}, {"e"});
  b.node("Neg", {"e"}, {"u"});
  b.node("Add", {"u", "z"}, {"w"});
  b.node("Abs", {"u"}, {"v"});
  b.output("w");
  b.output("v");
  b.finish();
  std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(random_tensor({2, 3, 4}, 1))},
                                               {"y", RuntimeValue(random_tensor({2, 3, 4}, 2))}};
  Model opt = optimize_and_compare(b.m, feeds, 3);
  // {Add, Mul, Relu, Sigmoid, Sub, Add(u, z)}, {Exp, Neg}, and Abs alone.
  EXPECT_EQ(count_op(opt.graph, "FusedElementwise"), 2);
  EXPECT_EQ(count_op(opt.graph, "Abs"), 1);
  EXPECT_EQ(opt.graph.nodes.size(), 3u);
  for (const auto& n : opt.graph.nodes) {
    if (n.op_type != "FusedElementwise" || n.outputs[0] != "w") continue;
    EXPECT_EQ(n.get_graph("body")->nodes.size(), 6u);
    EXPECT_NE(n.get_graph("body")->initializer("c"), nullptr);  // the scalar moved into the body
  }
  // O2 leaves them alone.
  EXPECT_EQ(count_op(optimize_and_compare(b.m, feeds, 2).graph, "FusedElementwise"), 0);
}

TEST(Optimize, RecordsLevelAndRejectsBadLevel) {
  Builder b = conv_block();
  Model m = b.m;
  EXPECT_EQ(optimized_level(m), -1);
  optimize(m, {2, {}});
  EXPECT_EQ(optimized_level(m), 2);
  EXPECT_THROW(optimize(m, {4, {}}), Error);
  Model o0 = b.m;
  optimize(o0, {0, {}});
  EXPECT_EQ(o0.graph.nodes.size(), b.m.graph.nodes.size());
}

TEST(PretransposeGemmWeights, ConstantBBecomesTransposed) {
  Builder b;
  b.input("a", {3, 5});
  b.input("a2", {2, 5});
  b.constant("w", {4, 5}, 1);  // [N, K], read with transB=1 by two Gemms
  b.constant("c", {4}, 2);
  b.input("v", {4, 5});        // a B that is not constant stays as it is
  b.node("Gemm", {"a", "w", "c"}, {"y"}, {Attribute::make_int("transB", 1), Attribute::make_float("alpha", 0.5f)});
  b.node("Gemm", {"a2", "w"}, {"y2"}, {Attribute::make_int("transB", 1)});
  b.node("Gemm", {"a", "v"}, {"y3"}, {Attribute::make_int("transB", 1)});
  b.output("y");
  b.output("y2");
  b.output("y3");
  b.finish();
  Model before = b.m;
  ASSERT_TRUE(pretranspose_gemm_weights(b.g));
  verify_model(b.m);
  const Node& g0 = b.g.nodes[0];
  EXPECT_EQ(g0.get_int("transB", 0), 0);
  EXPECT_EQ(b.g.nodes[1].inputs[1], g0.inputs[1]);  // transposed once for both readers
  EXPECT_EQ(b.g.initializer(g0.inputs[1])->shape(), (std::vector<int64_t>{5, 4}));
  EXPECT_EQ(b.g.initializer("w"), nullptr);  // nothing reads the old one
  EXPECT_EQ(b.g.nodes[2].get_int("transB", 0), 1);
  std::map<std::string, RuntimeValue> feeds{
      {"a", random_tensor({3, 5}, 3)}, {"a2", random_tensor({2, 5}, 4)}, {"v", random_tensor({4, 5}, 5)}};
  expect_close(run(before, feeds), run(b.m, feeds), 1e-6);
  EXPECT_FALSE(pretranspose_gemm_weights(b.g));
}

TEST(Optimize, LeavesGraphsWithAGradientNodeAsLoaded) {
  Builder b;
  b.input("a", {3});
  b.input("c", {3});
  b.node("Mul", {"a", "c"}, {"m"});
  b.node("Exp", {"m"}, {"y"});
  b.node("Gradient", {"a", "c"}, {"dy_da", "dy_dc"},
         {Attribute::make_strings("xs", {"a", "c"}), Attribute::make_string("y", "y")}, "ai.onnx.preview.training");
  b.output("y");
  b.output("dy_da");
  b.output("dy_dc");
  b.m.opset_imports["ai.onnx.preview.training"] = 1;
  b.finish();
  Model m = b.m;
  optimize(m, {3, {}});
  EXPECT_EQ(m.graph.nodes.size(), 3u);  // Mul and Exp not fused into FusedElementwise
  EXPECT_EQ(count_op(m.graph, "FusedElementwise"), 0);
  EXPECT_EQ(optimized_level(m), 0);
}


// HardSwish as paddle2onnx and torch (opset < 14) write it: the forms that fuse and the
// near misses that must not.
Tensor spread_tensor(std::vector<int64_t> shape, uint32_t seed) {
  Tensor t = random_tensor(shape, seed);  // N(0, 1) * 4: both kinks (-3, 3) and the flat parts
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] *= 4.0f;
  return t;
}

void hardswish_graph(Builder& b, const std::string& form) {
  b.input("x", {2, 5, 3, 4});
  b.scalar("three", 3.0f);
  b.scalar("zero", 0.0f);
  b.scalar("six", 6.0f);
  b.scalar("sixth", 1.0f / 6);
  b.node("Relu", {"x"}, {"r"});  // x computed by the graph, read by the pattern twice
  if (form == "hardsigmoid") {
    b.node("HardSigmoid", {"r"}, {"h"}, {Attribute::make_float("alpha", 1.0f / 6), Attribute::make_float("beta", 0.5f)});
    b.node("Mul", {"h", "r"}, {"y"});
  } else {
    b.node("Add", {form == "mul_sixth" ? "three" : "r", form == "mul_sixth" ? "r" : "three"}, {"a"});
    b.node("Clip", {"a", "zero", "six"}, {"c"});
    if (form == "div_first") {
      b.node("Div", {"c", "six"}, {"c6"});
      b.node("Mul", {"r", "c6"}, {"y"});
    } else {
      b.node("Mul", {"r", "c"}, {"m"});
      if (form == "mul_sixth") b.node("Mul", {"sixth", "m"}, {"y"});
      else b.node("Div", {"m", "six"}, {"y"});
    }
  }
  b.output("y");
}

TEST(HardSwishFusion, ExporterFormsBecomeOneNode) {
  for (const char* form : {"div", "mul_sixth", "div_first", "hardsigmoid"}) {
    SCOPED_TRACE(form);
    Builder b;
    hardswish_graph(b, form);
    b.g.nodes[0].op_type = "Neg";  // negative values too: x → -x
    b.finish();
    std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(spread_tensor({2, 5, 3, 4}, 3))}};
    Model opt = optimize_and_compare(b.m, feeds, 2);
    ASSERT_EQ(opt.graph.nodes.size(), 2u);
    EXPECT_EQ(opt.graph.nodes[1].op_type, "HardSwish");
    EXPECT_EQ(opt.graph.nodes[1].inputs, std::vector<std::string>{"r"});
    EXPECT_EQ(opt.graph.nodes[1].outputs, std::vector<std::string>{"y"});
  }
}

TEST(HardSwishFusion, NearMissesStay) {
  auto fused = [](const std::function<void(Builder&)>& change) {
    Builder b;
    hardswish_graph(b, "div");
    change(b);
    b.finish();
    Model opt = b.m;
    fuse_hardswish(opt.graph);
    return count_op(opt.graph, "HardSwish");
  };
  EXPECT_EQ(fused([](Builder&) {}), 1);
  EXPECT_EQ(fused([](Builder& b) { b.scalar("six", 5.0f); }), 0);        // Clip(0, 5), Div by 5
  EXPECT_EQ(fused([](Builder& b) { b.scalar("three", 2.0f); }), 0);      // x + 2
  EXPECT_EQ(fused([](Builder& b) { b.output("c"); }), 0);                // the clip is read outside
  EXPECT_EQ(fused([](Builder& b) { b.g.nodes[3].inputs = {"x", "c"}; }), 0);  // Mul by another tensor
  // A 3 of higher rank than x broadcasts x: not x's shape any more.
  EXPECT_EQ(fused([](Builder& b) {
              b.g.set_initializer("three", Tensor::from_vector(DType::F32, {1, 1, 1, 1, 1}, std::vector<float>{3}));
            }),
            0);
  // Integer x: Div is integer division there.
  Builder b;
  b.input("x", {4}, DType::I32);
  b.g.set_initializer("three", Tensor::scalar<int32_t>(DType::I32, 3));
  b.g.set_initializer("zero", Tensor::scalar<int32_t>(DType::I32, 0));
  b.g.set_initializer("six", Tensor::scalar<int32_t>(DType::I32, 6));
  b.node("Abs", {"x"}, {"r"});
  b.node("Add", {"r", "three"}, {"a"});
  b.node("Clip", {"a", "zero", "six"}, {"c"});
  b.node("Mul", {"r", "c"}, {"m"});
  b.node("Div", {"m", "six"}, {"y"});
  b.output("y");
  b.finish();
  EXPECT_FALSE(fuse_hardswish(b.g));
}

}  // namespace
}  // namespace hodu::passes

namespace hodu::passes {
namespace {

// reads_of: the outer values a node's subgraphs read, not the names they define themselves (a
// fused body's output carries its node's output name; the cpu engine's reader counts use this).
TEST(GraphUtils, ReadsOfCountsOnlyOuterValuesOfSubgraphs) {
  auto body = std::make_shared<Graph>();
  body->inputs.push_back({"a", ValueType::tensor(DType::F32, Shape::from({2})), ""});
  body->set_initializer("k", Tensor::from_vector<float>(DType::F32, {1}, {2.0f}));
  Node mul;
  mul.op_type = "Mul";
  mul.inputs = {"a", "k"};
  mul.outputs = {"t"};
  Node add;
  add.op_type = "Add";
  add.inputs = {"t", "outer"};  // an outer value
  add.outputs = {"y"};          // the node's own output name
  body->nodes = {mul, add};
  body->outputs.push_back({"y", {}, ""});
  body->outputs.push_back({"passed", {}, ""});  // an outer value handed straight out
  Node n;
  n.op_type = "FusedElementwise";
  n.domain = "hodu";
  n.inputs = {"x"};
  n.outputs = {"y", "z"};
  n.attributes.push_back(Attribute::make_graph("body", body));
  EXPECT_EQ(reads_of(n), (std::set<std::string>{"x", "outer", "passed"}));
}

}  // namespace
}  // namespace hodu::passes
