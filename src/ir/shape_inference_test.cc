// Tests of type and shape inference (infer_types).
#include <gtest/gtest.h>

#include "ir/schema.h"

namespace hodu {
namespace {

Dim S(const char* s) { return Dim::sym(s); }

struct G {
  Graph g;
  G& in(const std::string& n, DType dt, Shape s) {
    g.inputs.push_back({n, ValueType::tensor(dt, std::move(s)), ""});
    return *this;
  }
  G& init(const std::string& n, Tensor t) {
    g.set_initializer(n, std::move(t));
    return *this;
  }
  G& ints(const std::string& n, std::vector<int64_t> v) {
    return init(n, Tensor::from_vector(DType::I64, {static_cast<int64_t>(v.size())}, v));
  }
  Node& node(const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs,
             std::vector<Attribute> attrs = {}, const std::string& domain = "") {
    Node n;
    n.name = outs.empty() ? op : outs[0] + "_node";
    n.op_type = op;
    n.domain = domain;
    n.inputs = std::move(ins);
    n.outputs = std::move(outs);
    n.attributes = std::move(attrs);
    g.nodes.push_back(std::move(n));
    return g.nodes.back();
  }
  std::string type(const std::string& v) {
    auto t = g.type_of(v);
    return t ? t->to_string() : "none";
  }
};

std::string infer1(G& g, const std::string& out) {
  infer_types(g.g);
  return g.type(out);
}

ValueType T(DType dt, Shape s) { return ValueType::tensor(dt, std::move(s)); }

TEST(ShapeInference, BroadcastWithSymbols) {
  G g;
  g.in("a", DType::F32, Shape{S("batch"), 3}).in("b", DType::F32, Shape{3});
  g.node("Add", {"a", "b"}, {"y"});
  g.node("Less", {"a", "b"}, {"z"});
  infer_types(g.g);
  EXPECT_EQ(*g.g.type_of("y"), T(DType::F32, Shape{S("batch"), 3}));
  EXPECT_EQ(*g.g.type_of("z"), T(DType::Bool, Shape{S("batch"), 3}));
}

TEST(ShapeInference, BroadcastMismatchNamesNode) {
  G g;
  g.in("a", DType::F32, Shape{2, 3}).in("b", DType::F32, Shape{4});
  g.node("Mul", {"a", "b"}, {"y"}).name = "mul1";
  try {
    infer_types(g.g);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidModel);
    EXPECT_NE(std::string(e.what()).find("node 'mul1' (Mul)"), std::string::npos) << e.what();
  }
}

TEST(ShapeInference, MatMulSymbolic) {
  G g;
  g.in("x", DType::F32, Shape{S("batch"), S("seq"), 768}).in("w", DType::F32, Shape{768, 3072});
  g.node("MatMul", {"x", "w"}, {"y"});
  EXPECT_EQ(infer1(g, "y"), T(DType::F32, Shape{S("batch"), S("seq"), 3072}).to_string());
  EXPECT_EQ(*g.g.type_of("y"), T(DType::F32, Shape{S("batch"), S("seq"), 3072}));
}

TEST(ShapeInference, MatMulContradiction) {
  G g;
  g.in("a", DType::F32, Shape{2, 3}).in("b", DType::F32, Shape{4, 5});
  g.node("MatMul", {"a", "b"}, {"y"}).name = "mm";
  try {
    infer_types(g.g);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node 'mm' (MatMul): "), std::string::npos) << e.what();
  }
}

TEST(ShapeInference, MatMulVectorsAndBatch) {
  G g;
  g.in("a", DType::F32, Shape{5, 1, 2, 3}).in("b", DType::F32, Shape{4, 3, 7}).in("v", DType::F32, Shape{7});
  g.node("MatMul", {"a", "b"}, {"y"});
  g.node("MatMul", {"y", "v"}, {"z"});
  infer_types(g.g);
  EXPECT_EQ(*g.g.type_of("y"), T(DType::F32, Shape{5, 4, 2, 7}));
  EXPECT_EQ(*g.g.type_of("z"), T(DType::F32, Shape{5, 4, 2}));
}

TEST(ShapeInference, Gemm) {
  G g;
  g.in("a", DType::F32, Shape{3, S("n")}).in("b", DType::F32, Shape{10, S("n")}).in("c", DType::F32, Shape{10});
  g.node("Gemm", {"a", "b", "c"}, {"y"}, {Attribute::make_int("transB", 1)});
  EXPECT_EQ(*(infer_types(g.g), g.g.type_of("y")), T(DType::F32, Shape{3, 10}));
}

TEST(ShapeInference, ConvAndPool) {
  G g;
  g.in("x", DType::F32, Shape{S("N"), 3, 224, 224}).in("w", DType::F32, Shape{64, 3, 7, 7});
  g.node("Conv", {"x", "w"}, {"c"},
         {Attribute::make_ints("strides", {2, 2}), Attribute::make_ints("pads", {3, 3, 3, 3})});
  g.node("MaxPool", {"c"}, {"p"},
         {Attribute::make_ints("kernel_shape", {3, 3}), Attribute::make_ints("strides", {2, 2}),
          Attribute::make_ints("pads", {1, 1, 1, 1})});
  g.node("AveragePool", {"p"}, {"q"},
         {Attribute::make_ints("kernel_shape", {2, 2}), Attribute::make_string("auto_pad", "SAME_UPPER"),
          Attribute::make_ints("strides", {2, 2})});
  g.node("MaxPool", {"q"}, {"r"},
         {Attribute::make_ints("kernel_shape", {3, 3}), Attribute::make_ints("strides", {2, 2}),
          Attribute::make_int("ceil_mode", 1)});
  g.node("GlobalAveragePool", {"r"}, {"gp"});
  g.node("Conv", {"x", "w"}, {"d"},
         {Attribute::make_ints("dilations", {2, 2}), Attribute::make_string("auto_pad", "VALID")});
  infer_types(g.g);
  EXPECT_EQ(*g.g.type_of("c"), T(DType::F32, Shape{S("N"), 64, 112, 112}));
  EXPECT_EQ(*g.g.type_of("p"), T(DType::F32, Shape{S("N"), 64, 56, 56}));
  EXPECT_EQ(*g.g.type_of("q"), T(DType::F32, Shape{S("N"), 64, 28, 28}));
  EXPECT_EQ(*g.g.type_of("r"), T(DType::F32, Shape{S("N"), 64, 14, 14}));
  EXPECT_EQ(*g.g.type_of("gp"), T(DType::F32, Shape{S("N"), 64, 1, 1}));
  EXPECT_EQ(*g.g.type_of("d"), T(DType::F32, Shape{S("N"), 64, 212, 212}));
}

TEST(ShapeInference, ConvChannelMismatch) {
  G g;
  g.in("x", DType::F32, Shape{1, 4, 8, 8}).in("w", DType::F32, Shape{8, 3, 3, 3});
  g.node("Conv", {"x", "w"}, {"c"});
  EXPECT_THROW(infer_types(g.g), Error);
}

// A bias with other than one value per output channel, or a kernel_shape the weight contradicts
// (X and W swapped in a hand-edited model), is an error, not a run with the wrong operands.
TEST(ShapeInference, ConvBiasAndKernelShapeMismatch) {
  {
    G g;
    g.in("x", DType::F32, Shape{1, 4, 8, 8}).in("w", DType::F32, Shape{8, 4, 3, 3}).in("b", DType::F32, Shape{4});
    g.node("Conv", {"x", "w", "b"}, {"c"});
    EXPECT_THROW(infer_types(g.g), Error);
  }
  {
    G g;
    g.in("x", DType::F32, Shape{1, 4, 8, 8}).in("w", DType::F32, Shape{8, 4, 3, 3});
    g.node("Conv", {"x", "w"}, {"c"}, {Attribute::make_ints("kernel_shape", {1, 1})});
    EXPECT_THROW(infer_types(g.g), Error);
  }
  G g;
  g.in("x", DType::F32, Shape{1, 4, 8, 8}).in("w", DType::F32, Shape{8, 4, 3, 3}).in("b", DType::F32, Shape{8});
  g.node("Conv", {"x", "w", "b"}, {"c"}, {Attribute::make_ints("kernel_shape", {3, 3})});
  EXPECT_EQ(infer1(g, "c"), "f32[1, 8, 6, 6]");
}

TEST(ShapeInference, ConvTranspose) {
  G g;
  g.in("x", DType::F32, Shape{1, 8, 5, 5}).in("w", DType::F32, Shape{8, 4, 3, 3});
  g.node("ConvTranspose", {"x", "w"}, {"y"}, {Attribute::make_ints("strides", {2, 2})});
  EXPECT_EQ(*(infer_types(g.g), g.g.type_of("y")), T(DType::F32, Shape{1, 4, 11, 11}));
}

TEST(ShapeInference, ReshapeWithZeroAndMinusOne) {
  G g;
  g.in("x", DType::F32, Shape{2, 3, 4}).ints("s", {0, -1});
  g.node("Reshape", {"x", "s"}, {"y"});
  EXPECT_EQ(*(infer_types(g.g), g.g.type_of("y")), T(DType::F32, Shape{2, 12}));
  G bad;
  bad.in("x", DType::F32, Shape{2, 3}).ints("s", {4, 2});
  bad.node("Reshape", {"x", "s"}, {"y"});
  EXPECT_THROW(infer_types(bad.g), Error);
}

TEST(ShapeInference, ShapeGatherConcatReshapeSymbolic) {
  // The exporter pattern: reshape [batch, seq, 768] to [batch, seq, 12, 64].
  G g;
  g.in("x", DType::F32, Shape{S("batch"), S("seq"), 768});
  g.ints("i0", {0}).ints("i1", {1}).ints("tail", {12, 64});
  g.node("Shape", {"x"}, {"s"});
  g.node("Gather", {"s", "i0"}, {"b"});
  g.node("Gather", {"s", "i1"}, {"q"});
  g.node("Concat", {"b", "q", "tail"}, {"shape"}, {Attribute::make_int("axis", 0)});
  g.node("Reshape", {"x", "shape"}, {"y"});
  g.node("Transpose", {"y"}, {"t"}, {Attribute::make_ints("perm", {0, 2, 1, 3})});
  infer_types(g.g);
  EXPECT_EQ(*g.g.type_of("s"), T(DType::I64, Shape{3}));
  EXPECT_EQ(*g.g.type_of("shape"), T(DType::I64, Shape{4}));
  EXPECT_EQ(*g.g.type_of("y"), T(DType::F32, Shape{S("batch"), S("seq"), 12, 64}));
  EXPECT_EQ(*g.g.type_of("t"), T(DType::F32, Shape{S("batch"), 12, S("seq"), 64}));
}

TEST(ShapeInference, ReshapeMinusOneCancelsSymbols) {
  G g;
  g.in("x", DType::F32, Shape{S("batch"), 12, 64});
  g.node("Shape", {"x"}, {"s"}, {Attribute::make_int("end", 1)});
  g.ints("m1", {-1});
  g.node("Concat", {"s", "m1"}, {"shape"}, {Attribute::make_int("axis", 0)});
  g.node("Reshape", {"x", "shape"}, {"y"});
  infer_types(g.g);
  EXPECT_EQ(*g.g.type_of("y"), T(DType::F32, Shape{S("batch"), 768}));
}

TEST(ShapeInference, ReductionsWithAxesInput) {
  G g;
  g.in("x", DType::F32, Shape{S("b"), 4, 5}).ints("ax", {-1});
  g.node("ReduceMean", {"x", "ax"}, {"m"});
  g.node("ReduceSum", {"x", "ax"}, {"s"}, {Attribute::make_int("keepdims", 0)});
  g.node("ReduceMax", {"x"}, {"all"}, {Attribute::make_int("keepdims", 0)});
  g.node("ArgMax", {"x"}, {"am"}, {Attribute::make_int("axis", 1)});
  infer_types(g.g);
  EXPECT_EQ(*g.g.type_of("m"), T(DType::F32, Shape{S("b"), 4, 1}));
  EXPECT_EQ(*g.g.type_of("s"), T(DType::F32, Shape{S("b"), 4}));
  EXPECT_EQ(*g.g.type_of("all"), T(DType::F32, Shape::scalar()));
  EXPECT_EQ(*g.g.type_of("am"), T(DType::I64, Shape{S("b"), 1, 5}));
}

TEST(ShapeInference, ShapeOpsFamily) {
  G g;
  g.in("x", DType::F16, Shape{2, 1, 6});
  g.ints("ax0", {0}).ints("ax1", {1}).ints("st", {1}).ints("en", {100}).ints("sp", {2, 4}).ints("es", {2, 2, 1});
  g.node("Squeeze", {"x", "ax1"}, {"sq"});
  g.node("Unsqueeze", {"x", "ax0"}, {"us"});
  g.node("Flatten", {"x"}, {"fl"}, {Attribute::make_int("axis", 2)});
  g.node("Slice", {"x", "st", "en", "ax1"}, {"sl0"});
  g.node("Slice", {"x", "st", "en"}, {"sl"});
  g.node("Split", {"x", "sp"}, {"p0", "p1"}, {Attribute::make_int("axis", -1)});
  g.node("Split", {"x"}, {"q0", "q1", "q2"}, {Attribute::make_int("axis", 2), Attribute::make_int("num_outputs", 3)});
  g.node("Concat", {"x", "x"}, {"cc"}, {Attribute::make_int("axis", 1)});
  g.node("Transpose", {"x"}, {"tr"});
  g.node("Shape", {"x"}, {"shp"});
  g.node("Size", {"x"}, {"sz"});
  g.node("Cast", {"x"}, {"c32"}, {Attribute::make_int("to", 1)});
  g.node("Expand", {"x", "es"}, {"ex"});
  infer_types(g.g);
  EXPECT_EQ(*g.g.type_of("sq"), T(DType::F16, Shape{2, 6}));
  EXPECT_EQ(*g.g.type_of("us"), T(DType::F16, Shape{1, 2, 1, 6}));
  EXPECT_EQ(*g.g.type_of("fl"), T(DType::F16, Shape{2, 6}));
  EXPECT_EQ(*g.g.type_of("sl0"), T(DType::F16, Shape{2, 0, 6}));
  EXPECT_EQ(*g.g.type_of("sl"), T(DType::F16, Shape{1, 1, 6}));
  EXPECT_EQ(*g.g.type_of("p0"), T(DType::F16, Shape{2, 1, 2}));
  EXPECT_EQ(*g.g.type_of("p1"), T(DType::F16, Shape{2, 1, 4}));
  EXPECT_EQ(*g.g.type_of("q2"), T(DType::F16, Shape{2, 1, 2}));
  EXPECT_EQ(*g.g.type_of("cc"), T(DType::F16, Shape{2, 2, 6}));
  EXPECT_EQ(*g.g.type_of("tr"), T(DType::F16, Shape{6, 1, 2}));
  EXPECT_EQ(*g.g.type_of("shp"), T(DType::I64, Shape{3}));
  EXPECT_EQ(*g.g.type_of("sz"), T(DType::I64, Shape::scalar()));
  EXPECT_EQ(*g.g.type_of("c32"), T(DType::F32, Shape{2, 1, 6}));
  EXPECT_EQ(*g.g.type_of("ex"), T(DType::F16, Shape{2, 2, 6}));
}

TEST(ShapeInference, ExpandTileGatherWhere) {
  G g;
  g.in("x", DType::F32, Shape{3, 1}).in("c", DType::Bool, Shape{S("n"), 1, 4}).in("i", DType::I64, Shape{5, 2});
  g.ints("shape", {2, 3, 4}).ints("reps", {2, 3});
  g.node("Expand", {"x", "shape"}, {"e"});
  g.node("Tile", {"x", "reps"}, {"t"});
  g.node("Gather", {"x", "i"}, {"ga"});
  g.node("Where", {"c", "x", "x"}, {"w"});
  g.node("GatherElements", {"x", "i"}, {"ge"});
  infer_types(g.g);
  EXPECT_EQ(*g.g.type_of("e"), T(DType::F32, Shape{2, 3, 4}));
  EXPECT_EQ(*g.g.type_of("t"), T(DType::F32, Shape{6, 3}));
  EXPECT_EQ(*g.g.type_of("ga"), T(DType::F32, Shape{5, 2, 1}));
  EXPECT_EQ(*g.g.type_of("w"), T(DType::F32, Shape{S("n"), 3, 4}));
  EXPECT_EQ(*g.g.type_of("ge"), T(DType::F32, Shape{5, 2}));
}

TEST(ShapeInference, ConstantsRangeConstantOfShape) {
  G g;
  Node& c = g.node("Constant", {}, {"k"});
  c.attributes.push_back(Attribute::make_tensor("value", Tensor::from_vector(DType::I64, {2}, std::vector<int64_t>{3, 4})));
  g.node("ConstantOfShape", {"k"}, {"z"});
  g.node("Constant", {}, {"s"}, {Attribute::make_int("value_int", 0)});
  g.node("Constant", {}, {"l"}, {Attribute::make_int("value_int", 10)});
  g.node("Constant", {}, {"d"}, {Attribute::make_int("value_int", 3)});
  g.node("Range", {"s", "l", "d"}, {"r"});
  infer_types(g.g);
  EXPECT_EQ(*g.g.type_of("k"), T(DType::I64, Shape{2}));
  EXPECT_EQ(*g.g.type_of("z"), T(DType::F32, Shape{3, 4}));
  EXPECT_EQ(*g.g.type_of("r"), T(DType::I64, Shape{4}));
}

TEST(ShapeInference, ResizeTopKSoftmaxNorm) {
  G g;
  g.in("x", DType::F32, Shape{1, 3, 10, 20});
  g.init("scales", Tensor::from_vector(DType::F32, {4}, std::vector<float>{1, 1, 2, 0.5f}));
  g.ints("k", {4}).ints("sizes", {1, 3, 7, 9});
  g.node("Resize", {"x", "", "scales"}, {"r"});
  g.node("Resize", {"x", "", "", "sizes"}, {"r2"});
  g.node("TopK", {"x", "k"}, {"v", "i"});
  g.node("Softmax", {"x"}, {"sm"});
  g.in("scale", DType::F32, Shape{20}).in("bias", DType::F32, Shape{20});
  g.node("LayerNormalization", {"x", "scale", "bias"}, {"ln", "mean", "inv"});
  infer_types(g.g);
  EXPECT_EQ(*g.g.type_of("r"), T(DType::F32, Shape{1, 3, 20, 10}));
  EXPECT_EQ(*g.g.type_of("r2"), T(DType::F32, Shape{1, 3, 7, 9}));
  EXPECT_EQ(*g.g.type_of("v"), T(DType::F32, Shape{1, 3, 10, 4}));
  EXPECT_EQ(*g.g.type_of("i"), T(DType::I64, Shape{1, 3, 10, 4}));
  EXPECT_EQ(*g.g.type_of("sm"), T(DType::F32, Shape{1, 3, 10, 20}));
  EXPECT_EQ(*g.g.type_of("ln"), T(DType::F32, Shape{1, 3, 10, 20}));
  EXPECT_EQ(*g.g.type_of("mean"), T(DType::F32, Shape{1, 3, 10, 1}));
}

TEST(ShapeInference, IfLoopScanFromSubgraphs) {
  auto branch = [](float) {
    auto b = std::make_shared<Graph>();
    b->outputs.push_back({"o", ValueType(), ""});
    Node n;
    n.op_type = "Relu";
    n.inputs = {"x"};  // outer scope
    n.outputs = {"o"};
    b->nodes.push_back(n);
    return b;
  };
  G g;
  g.in("x", DType::F32, Shape{S("b"), 4}).in("cond", DType::Bool, Shape::scalar());
  g.node("If", {"cond"}, {"y"},
         {Attribute::make_graph("then_branch", branch(1)), Attribute::make_graph("else_branch", branch(2))});
  // Loop: body(i, cond, acc) -> (cond, acc + x, scan_out = acc)
  auto body = std::make_shared<Graph>();
  body->inputs = {{"i", ValueType(), ""}, {"c", ValueType(), ""}, {"acc", ValueType(), ""}};
  body->outputs = {{"c2", ValueType(), ""}, {"acc2", ValueType(), ""}, {"so", ValueType(), ""}};
  Node id;
  id.op_type = "Identity";
  id.inputs = {"c"};
  id.outputs = {"c2"};
  Node add;
  add.op_type = "Add";
  add.inputs = {"acc", "x"};
  add.outputs = {"acc2"};
  Node so;
  so.op_type = "Identity";
  so.inputs = {"acc"};
  so.outputs = {"so"};
  body->nodes = {id, add, so};
  g.in("n", DType::I64, Shape::scalar());
  g.node("Loop", {"n", "cond", "x"}, {"final", "scan"}, {Attribute::make_graph("body", body)});
  infer_types(g.g);
  EXPECT_EQ(*g.g.type_of("y"), T(DType::F32, Shape{S("b"), 4}));
  EXPECT_EQ(*g.g.type_of("final"), T(DType::F32, Shape{S("b"), 4}));
  EXPECT_EQ(*g.g.type_of("scan"), T(DType::F32, Shape{Dim::unknown(), S("b"), 4}));
  EXPECT_EQ(body->type_of("i")->to_string(), T(DType::I64, Shape::scalar()).to_string());
}

TEST(ShapeInference, SequencesAndOptionals) {
  G g;
  g.in("a", DType::F32, Shape{2, 3});
  g.node("SequenceConstruct", {"a", "a"}, {"seq"});
  g.node("SequenceAt", {"seq", "idx"}, {"e"});
  g.node("SequenceLength", {"seq"}, {"len"});
  g.node("Optional", {"a"}, {"opt"});
  g.node("OptionalGetElement", {"opt"}, {"got"});
  g.node("OptionalHasElement", {"opt"}, {"has"});
  g.node("SplitToSequence", {"a"}, {"parts"}, {Attribute::make_int("axis", 1), Attribute::make_int("keepdims", 0)});
  infer_types(g.g);
  EXPECT_EQ(*g.g.type_of("seq"), ValueType::sequence(T(DType::F32, Shape{2, 3})));
  EXPECT_EQ(*g.g.type_of("e"), T(DType::F32, Shape{2, 3}));
  EXPECT_EQ(*g.g.type_of("len"), T(DType::I64, Shape::scalar()));
  EXPECT_EQ(*g.g.type_of("got"), T(DType::F32, Shape{2, 3}));
  EXPECT_EQ(*g.g.type_of("has"), T(DType::Bool, Shape::scalar()));
  EXPECT_EQ(*g.g.type_of("parts"), ValueType::sequence(T(DType::F32, Shape{2})));
}

TEST(ShapeInference, FallbackDtypeFromTypeConstraint) {
  // Hardmax has an inference function; use an op without one: Det? use CumSum-like op LpNormalization...
  // DFT has none: output T1 shares the input's constraint.
  G g;
  g.in("x", DType::F64, Shape{4, 8, 1});
  g.node("DFT", {"x"}, {"y"});
  infer_types(g.g);
  auto t = g.g.type_of("y");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->dtype, DType::F64);
  EXPECT_FALSE(t->shape.rank_known());
}

TEST(ShapeInference, AttentionAndHoduOps) {
  G g;
  g.in("q", DType::F16, Shape{S("b"), 8, S("s"), 64}).in("k", DType::F16, Shape{S("b"), 8, S("t"), 64});
  g.in("v", DType::F16, Shape{S("b"), 8, S("t"), 32});
  g.node("Attention", {"q", "k", "v"}, {"y"});
  g.in("x", DType::F32, Shape{S("b"), 3, 32, 32}).in("w", DType::F32, Shape{16, 3, 3, 3});
  g.node("FusedConv", {"x", "w"}, {"fc"}, {Attribute::make_ints("pads", {1, 1, 1, 1}), Attribute::make_string("activation", "Relu")}, "hodu");
  g.in("a", DType::F32, Shape{S("m"), 5}).in("bm", DType::F32, Shape{7, 5});
  g.node("FusedMatMul", {"a", "bm"}, {"fm"}, {Attribute::make_int("transB", 1)}, "hodu");
  g.node("LayerNorm", {"a", "a"}, {"ln"}, {}, "hodu");
  infer_types(g.g);
  EXPECT_EQ(*g.g.type_of("y"), T(DType::F16, Shape{S("b"), 8, S("s"), 32}));
  EXPECT_EQ(*g.g.type_of("fc"), T(DType::F32, Shape{S("b"), 16, 32, 32}));
  EXPECT_EQ(*g.g.type_of("fm"), T(DType::F32, Shape{S("m"), 7}));
  EXPECT_EQ(*g.g.type_of("ln"), T(DType::F32, Shape{S("m"), 5}));
}

}  // namespace
}  // namespace hodu
