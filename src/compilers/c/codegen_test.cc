// End-to-end: generate C, compile a .so, load it with the native engine and
// compare with the reference interpreter.
#include <cstdio>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <unistd.h>

#include "compilers/c/c_codegen.h"
#include "compilers/c/toolchain.h"
#include "core/error.h"
#include "kernels/cpu/winograd_avx2.h"
#include "runtime/session.h"

namespace hodu::compilers::c {
namespace {

Node node(std::string op, std::vector<std::string> in, std::vector<std::string> out, std::vector<Attribute> attrs = {}) {
  Node n;
  n.name = out[0] + "_node";
  n.op_type = std::move(op);
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.attributes = std::move(attrs);
  return n;
}

// A 1-D int64 constant (shapes, slice bounds).
Tensor i64s(std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Tensor::from_vector(DType::I64, {n}, v);
}

Tensor ramp(std::vector<int64_t> shape, float scale, float shift) {
  Tensor t = Tensor::empty(DType::F32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::sin(static_cast<float>(i) * scale) + shift;
  return t;
}

// Conv(+BN) → Relu → MaxPool → Add(bias) → Sigmoid*x → Flatten → Gemm → Softmax.
Model small_cnn(Shape input_shape) {
  Model m;
  m.opset_imports[""] = 21;
  Graph& g = m.graph;
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, std::move(input_shape)), ""});
  g.set_initializer("w", ramp({4, 3, 3, 3}, 0.37f, 0.f));
  g.set_initializer("b", ramp({4}, 1.1f, 0.1f));
  g.set_initializer("gamma", ramp({4}, 0.5f, 1.f));
  g.set_initializer("beta", ramp({4}, 0.9f, 0.f));
  g.set_initializer("mean", ramp({4}, 0.3f, 0.f));
  g.set_initializer("var", ramp({4}, 0.2f, 1.5f));
  g.set_initializer("cb", ramp({1, 4, 1, 1}, 0.7f, 0.f));
  g.set_initializer("fw", ramp({5, 64}, 0.13f, 0.f));
  g.set_initializer("fb", ramp({5}, 0.4f, 0.f));
  g.nodes.push_back(node("Conv", {"x", "w", "b"}, {"c"},
                         {Attribute::make_ints("pads", {1, 1, 1, 1}), Attribute::make_ints("strides", {1, 1})}));
  g.nodes.push_back(node("BatchNormalization", {"c", "gamma", "beta", "mean", "var"}, {"bn"}));
  g.nodes.push_back(node("Relu", {"bn"}, {"r"}));
  g.nodes.push_back(node("MaxPool", {"r"}, {"p"},
                         {Attribute::make_ints("kernel_shape", {2, 2}), Attribute::make_ints("strides", {2, 2})}));
  g.nodes.push_back(node("Add", {"p", "cb"}, {"a"}));
  g.nodes.push_back(node("Sigmoid", {"a"}, {"s"}));
  g.nodes.push_back(node("Mul", {"a", "s"}, {"silu"}));
  g.nodes.push_back(node("Flatten", {"silu"}, {"f"}));
  g.nodes.push_back(node("Gemm", {"f", "fw", "fb"}, {"logits"}, {Attribute::make_int("transB", 1)}));
  g.nodes.push_back(node("Softmax", {"logits"}, {"y"}));
  g.outputs.push_back({"y", {}, ""});
  g.outputs.push_back({"f", {}, ""});
  return m;
}

std::vector<NamedValue> run(const Model& m, const std::string& engine, const Tensor& x) {
  SessionOptions o;
  o.engine = engine;
  o.threads = 1;
  auto s = Session::from_model(m, o);
  return s->run({{"x", x}});
}

// Builds m into a .so (options o) and runs it on x through the native engine.
std::vector<NamedValue> run_built(const Model& m, const CodegenOptions& o, const Tensor& x, const std::string& tag);

double max_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double d = 0;
  auto va = a.to_doubles(), vb = b.to_doubles();
  for (size_t i = 0; i < va.size() && i < vb.size(); ++i) d = std::max(d, std::abs(va[i] - vb[i]));
  return d;
}

TEST(CCodegen, SmallCnnMatchesTheInterpreterAtEveryLevel) {
  Model m = small_cnn(Shape{1, 3, 8, 8});
  Tensor x = ramp({1, 3, 8, 8}, 0.21f, 0.f);
  auto want = run(m, "interp", x);
  for (int level = 0; level <= 3; ++level) {
    CodegenOptions o;
    o.opt_level = level;
    auto gen = generate_c(m, o);
    EXPECT_GT(gen.steps, 0);
    if (level >= 1) {
      EXPECT_GT(gen.fused_nodes, 0) << level;
    }
    if (level >= 2) {
      EXPECT_LT(gen.nodes, 10) << "BatchNormalization folded into Conv";
    }
    EXPECT_LE(gen.arena_bytes, gen.naive_arena_bytes);
  }
  auto got = run(m, "native", x);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_LT(max_diff(got[0].value.tensor, want[0].value.tensor), 1e-5);
  EXPECT_LT(max_diff(got[1].value.tensor, want[1].value.tensor), 1e-5);
}

TEST(CCodegen, FusedLoopAndBlobInTheSource) {
  auto gen = generate_c(small_cnn(Shape{1, 3, 8, 8}), {});
  EXPECT_NE(gen.source.find("/* Sigmoid + Mul */"), std::string::npos) << "one loop for the chain";
  EXPECT_NE(gen.source.find(".incbin"), std::string::npos);
  EXPECT_NE(gen.header.find("int model_run(model_t* m"), std::string::npos);
  EXPECT_EQ(gen.weights.substr(0, 8), "HODUWGT1");
  EXPECT_EQ(gen.source.find("(A + @"), std::string::npos) << "every arena offset resolved";
}

// A free batch dim stays free: one library runs every batch size, in default and portable
// mode, against the interpreter; --dim binds it (fixed-size code, the arena planned at build time).
TEST(CCodegen, SymbolicDimsStayFreeUnlessBound) {
  Model m = small_cnn(Shape{Dim::sym("batch"), 3, 8, 8});
  auto gen = generate_c(m, {});
  EXPECT_NE(gen.header.find("#define MODEL_NUM_DIMS 1"), std::string::npos);
  EXPECT_NE(gen.header.find("input  'x' f32 [batch, 3, 8, 8]"), std::string::npos) << gen.header;
  EXPECT_NE(gen.source.find("static int hm_shapes("), std::string::npos);
  EXPECT_NE(gen.source.find("hm_in_shape0[] = {-1, 3, 8, 8}"), std::string::npos);
  for (bool library : {true, false}) {
    CodegenOptions o;
    o.kernel_library = library;
    for (int64_t batch : {1, 3, 2}) {
      Tensor x = ramp({batch, 3, 8, 8}, 0.21f, 0.f);
      auto want = run(m, "interp", x);
      auto got = run_built(m, o, x, fmt::format("free{}b{}", library, batch));
      ASSERT_EQ(got.size(), 2u);
      EXPECT_EQ(got[0].value.tensor.shape(), (std::vector<int64_t>{batch, 5}));
      for (size_t k = 0; k < 2; ++k)
        EXPECT_LT(max_diff(got[k].value.tensor, want[k].value.tensor), 1e-5) << "batch " << batch << " output " << k;
    }
  }
  CodegenOptions o;
  o.dims["batch"] = 2;
  gen = generate_c(m, o);
  EXPECT_NE(gen.source.find("hm_in_shape0[] = {2, 3, 8, 8}"), std::string::npos);
  EXPECT_NE(gen.header.find("#define MODEL_NUM_DIMS 0"), std::string::npos);
  EXPECT_EQ(gen.source.find("hm_shapes("), std::string::npos);
}

// Reshape to a shape computed from the input's (Shape → Gather → Concat), a size the model
// cannot take (a -1 that does not divide) failing at run time with a message.
TEST(CCodegen, ShapeGlueOverFreeDims) {
  Model m;
  m.opset_imports[""] = 17;
  Graph& g = m.graph;
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape{Dim::sym("n"), Dim::sym("k")}), ""});
  g.set_initializer("zero", i64s({0}));
  g.set_initializer("minus", i64s({-1}));
  g.set_initializer("four", i64s({4}));
  g.nodes.push_back(node("Shape", {"x"}, {"s"}));
  g.nodes.push_back(node("Gather", {"s", "zero"}, {"n"}, {Attribute::make_int("axis", 0)}));
  g.nodes.push_back(node("Concat", {"n", "minus", "four"}, {"shape"}, {Attribute::make_int("axis", 0)}));
  g.nodes.push_back(node("Reshape", {"x", "shape"}, {"r"}));
  g.nodes.push_back(node("Relu", {"r"}, {"y"}));
  g.outputs.push_back({"y", {}, ""});
  auto gen = generate_c(m, {});
  EXPECT_NE(gen.source.find("cannot reshape"), std::string::npos) << "a run-time check of the -1";
  Tensor x = ramp({3, 8}, 0.3f, -0.2f);
  auto got = run_built(m, {}, x, "glue");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].value.tensor.shape(), (std::vector<int64_t>{3, 2, 4}));
  EXPECT_LT(max_diff(got[0].value.tensor, run(m, "interp", x)[0].value.tensor), 1e-6);
  try {
    run_built(m, {}, ramp({3, 6}, 0.3f, 0.f), "glue_bad");
    FAIL() << "18 elements do not reshape to [3, -1, 4]";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot reshape"), std::string::npos) << e.what();
  }
}

TEST(CCodegen, UnsupportedOpNamesOpNodeAndList) {
  Model m;
  m.opset_imports[""] = 21;
  m.graph.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape{4}), ""});
  m.graph.nodes.push_back(node("Hardmax", {"x"}, {"y"}));
  m.graph.nodes.back().domain = "com.example";
  m.graph.nodes.back().op_type = "Frobnicate";
  m.graph.outputs.push_back({"y", {}, ""});
  try {
    generate_c(m, {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_NE(msg.find("Frobnicate"), std::string::npos) << msg;
    EXPECT_NE(msg.find("com.example"), std::string::npos) << msg;
    EXPECT_NE(msg.find("y_node"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Conv"), std::string::npos) << "lists the supported ops: " << msg;
  }
}

// An If on data: both branches compiled as nested libraries in the model's source (one
// info tag, the model's), the one the condition picks run; both ways match the interpreter.
TEST(CCodegen, IfOnDataRunsTheBranchItPicks) {
  Model m;
  m.opset_imports[""] = 21;
  Graph& g = m.graph;
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape{4}), ""});
  g.set_initializer("zero", Tensor::scalar(DType::F32, 0.f));
  auto then_g = std::make_shared<Graph>();
  then_g->set_initializer("two", Tensor::scalar(DType::F32, 2.f));
  then_g->nodes.push_back(node("Mul", {"x", "two"}, {"t"}));
  then_g->outputs.push_back({"t", {}, ""});
  auto else_g = std::make_shared<Graph>();
  else_g->nodes.push_back(node("Neg", {"x"}, {"e"}));
  else_g->outputs.push_back({"e", {}, ""});
  Attribute ta, ea;
  ta.name = "then_branch";
  ta.kind = Attribute::Kind::Graph;
  ta.g = then_g;
  ea.name = "else_branch";
  ea.kind = Attribute::Kind::Graph;
  ea.g = else_g;
  g.nodes.push_back(node("ReduceSum", {"x"}, {"sx"}, {Attribute::make_int("keepdims", 0)}));
  g.nodes.push_back(node("Greater", {"sx", "zero"}, {"cond"}));
  g.nodes.push_back(node("If", {"cond"}, {"y"}, {ta, ea}));
  g.outputs.push_back({"y", {}, ""});
  auto gen = generate_c(m, {});
  EXPECT_NE(gen.source.find("model_cf0_run(m->cf0"), std::string::npos);
  EXPECT_NE(gen.source.find("model_cf1_run(m->cf1"), std::string::npos);
  size_t tags = 0;
  for (size_t at = gen.source.find("HODU_AOT_MODEL_NAME="); at != std::string::npos;
       at = gen.source.find("HODU_AOT_MODEL_NAME=", at + 1))
    ++tags;
  EXPECT_EQ(tags, 1u) << "a loader finds the model's tag only";
  for (float shift : {1.f, -1.f}) {
    Tensor x = ramp({4}, 0.3f, shift);
    auto want = run(m, "interp", x);
    auto got = run(m, "native", x);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_LT(max_diff(got[0].value.tensor, want[0].value.tensor), 1e-6) << shift;
  }
}

TEST(CCodegen, GatherIndexOutOfRangeIsARunError) {
  Model m;
  m.opset_imports[""] = 21;
  m.graph.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape{4, 2}), ""});
  m.graph.inputs.push_back({"i", ValueType::tensor(DType::I64, Shape{3}), ""});
  m.graph.nodes.push_back(node("Gather", {"x", "i"}, {"y"}));
  m.graph.outputs.push_back({"y", {}, ""});
  SessionOptions o;
  o.engine = "native";
  auto s = Session::from_model(m, o);
  Tensor x = ramp({4, 2}, 1.f, 0.f);
  auto ok = s->run({{"x", x}, {"i", Tensor::from_vector<int64_t>(DType::I64, {3}, {3, -1, 0})}});
  EXPECT_EQ(ok[0].value.tensor.to_doubles()[0], x.to_doubles()[6]);
  EXPECT_EQ(ok[0].value.tensor.to_doubles()[2], x.to_doubles()[6]);
  try {
    s->run({{"x", x}, {"i", Tensor::from_vector<int64_t>(DType::I64, {3}, {0, 4, 1})}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index out of range"), std::string::npos) << e.what();
  }
}

// Resize with constant scales (the conformance cases feed scales at run time,
// which compiled code refuses), against the interpreter.
TEST(CCodegen, ResizeNearestAndLinearMatchTheInterpreter) {
  struct Case {
    std::string mode, ctm;
    std::vector<float> scales;
  };
  for (const auto& c : std::vector<Case>{{"nearest", "asymmetric", {1, 1, 2, 2}},
                                         {"nearest", "half_pixel", {1, 1, 0.6f, 1.7f}},
                                         {"linear", "half_pixel", {1, 1, 2, 2}},
                                         {"linear", "align_corners", {1, 1, 0.6f, 1.5f}},
                                         {"linear", "pytorch_half_pixel", {1, 1, 3, 0.5f}}}) {
    Model m;
    m.opset_imports[""] = 21;
    m.graph.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape{1, 2, 5, 6}), ""});
    m.graph.set_initializer("scales", Tensor::from_vector(DType::F32, {4}, c.scales));
    m.graph.nodes.push_back(node("Resize", {"x", "", "scales"}, {"y"},
                                 {Attribute::make_string("mode", c.mode),
                                  Attribute::make_string("coordinate_transformation_mode", c.ctm)}));
    m.graph.outputs.push_back({"y", {}, ""});
    Tensor x = ramp({1, 2, 5, 6}, 0.7f, 0.f);
    auto want = run(m, "interp", x);
    auto got = run(m, "native", x);
    EXPECT_LT(max_diff(got[0].value.tensor, want[0].value.tensor), 1e-5) << c.mode << " " << c.ctm;
  }
}

// Default mode: Conv (with SiLU and Sigmoid epilogues, two chained in oneDNN's
// layout), pooling and MatMul run
// in libhodu_kernels, a large elementwise loop on its threads; --kernels
// portable makes none of those calls; both match the interpreter.
TEST(CCodegen, KernelLibraryOpsMatchTheInterpreter) {
  Model m;
  m.opset_imports[""] = 21;
  Graph& g = m.graph;
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape{1, 3, 96, 96}), ""});
  g.set_initializer("w1", ramp({4, 3, 3, 3}, 0.37f, 0.f));
  g.set_initializer("b1", ramp({4}, 1.1f, 0.1f));
  g.set_initializer("w2", ramp({4, 4, 1, 1}, 0.53f, 0.f));
  g.set_initializer("cb", ramp({1, 4, 1, 1}, 0.7f, 0.f));
  g.set_initializer("w3", ramp({4, 4, 3, 3}, 0.29f, 0.f));
  g.set_initializer("mw", ramp({47, 5}, 0.11f, 0.f));
  g.nodes.push_back(node("Conv", {"x", "w1", "b1"}, {"c1"}, {Attribute::make_ints("pads", {1, 1, 1, 1})}));
  g.nodes.push_back(node("Sigmoid", {"c1"}, {"s1"}));
  g.nodes.push_back(node("Mul", {"c1", "s1"}, {"silu"}));
  g.nodes.push_back(node("Add", {"silu", "cb"}, {"a"}));
  g.nodes.push_back(node("Conv", {"a", "w2"}, {"c2"}));
  g.nodes.push_back(node("Sigmoid", {"c2"}, {"s2"}));
  g.nodes.push_back(node("Conv", {"s2", "w3"}, {"c3"}, {Attribute::make_ints("pads", {1, 1, 1, 1})}));
  g.nodes.push_back(node("AveragePool", {"c3"}, {"p"},
                         {Attribute::make_ints("kernel_shape", {3, 3}), Attribute::make_ints("strides", {2, 2}),
                          Attribute::make_int("ceil_mode", 1)}));
  g.nodes.push_back(node("MaxPool", {"p"}, {"q"}, {Attribute::make_ints("kernel_shape", {2, 2})}));
  g.nodes.push_back(node("MatMul", {"q", "mw"}, {"y"}));
  g.outputs.push_back({"y", {}, ""});
  Tensor x = ramp({1, 3, 96, 96}, 0.21f, 0.f);
  auto want = run(m, "interp", x);
  auto gen = generate_c(m, {});
  EXPECT_EQ(gen.library_ops, 6);
  EXPECT_NE(gen.source.find("m->ops[1], NULL, NULL, &m->ops[2]"), std::string::npos) << "conv 3 reads conv 2's native layout";
  EXPECT_NE(gen.source.find("HODU_ACTIVATION_SILU"), std::string::npos);
  EXPECT_NE(gen.source.find("HODU_ACTIVATION_SIGMOID"), std::string::npos);
  EXPECT_NE(gen.source.find("hodu_kernels_parallel_for"), std::string::npos);
  CodegenOptions portable;
  portable.kernel_library = false;
  auto plain = generate_c(m, portable);
  EXPECT_EQ(plain.library_ops, 0);
  EXPECT_EQ(plain.source.find("hodu_conv2d_run"), std::string::npos);
  EXPECT_EQ(plain.source.find("hodu_kernels_parallel_for"), std::string::npos);
  auto got = run(m, "native", x);
  EXPECT_LT(max_diff(got[0].value.tensor, want[0].value.tensor), 1e-4);
}

// Default mode: residual Adds (+ Relu) become the convs' sum post-op, with the
// residual plain (a graph input), in a conv's own layout (a block output read
// by two convs), or a conv run earlier (the downsample branch order).
TEST(CCodegen, ResidualAddsRunAsConvSumPostOps) {
  Model m;
  m.opset_imports[""] = 21;
  Graph& g = m.graph;
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape{1, 8, 20, 20}), ""});
  g.set_initializer("w1", ramp({8, 8, 3, 3}, 0.031f, -0.1f));
  g.set_initializer("b1", ramp({8}, 0.05f, -0.2f));
  g.set_initializer("w2", ramp({8, 8, 3, 3}, 0.027f, -0.09f));
  g.set_initializer("w3", ramp({8, 8, 3, 3}, 0.023f, -0.1f));
  g.set_initializer("w4", ramp({16, 8, 1, 1}, 0.041f, -0.2f));
  g.set_initializer("w5", ramp({16, 8, 1, 1}, 0.037f, -0.15f));
  auto pad1 = Attribute::make_ints("pads", {1, 1, 1, 1});
  g.nodes.push_back(node("Conv", {"x", "w1", "b1"}, {"c1"}, {pad1}));
  g.nodes.push_back(node("Relu", {"c1"}, {"r1"}));
  g.nodes.push_back(node("Conv", {"r1", "w2"}, {"c2"}, {pad1}));
  g.nodes.push_back(node("Add", {"c2", "x"}, {"a1"}));
  g.nodes.push_back(node("Relu", {"a1"}, {"s1"}));
  g.nodes.push_back(node("Conv", {"s1", "w3"}, {"c3"}, {pad1}));
  g.nodes.push_back(node("Add", {"s1", "c3"}, {"a2"}));
  g.nodes.push_back(node("Relu", {"a2"}, {"s2"}));
  g.nodes.push_back(node("Conv", {"s2", "w4"}, {"c4"}));
  g.nodes.push_back(node("Conv", {"s2", "w5"}, {"c5"}));
  g.nodes.push_back(node("Add", {"c4", "c5"}, {"y"}));
  g.outputs.push_back({"y", {}, ""});
  Tensor x = ramp({1, 8, 20, 20}, 0.013f, -1.f);
  auto want = run(m, "interp", x);
  auto gen = generate_c(m, {});
  EXPECT_EQ(gen.library_ops, 5);
  EXPECT_NE(gen.source.find("m->ops[1], m->ops[1], NULL, &m->ops[2]"), std::string::npos)
      << "conv 3 reads conv 2's output as src and residual";
  EXPECT_NE(gen.source.find("m->ops[2], m->ops[3], NULL, &m->ops[4]"), std::string::npos)
      << "conv 5 sums conv 4's output, in its layout";
  auto got = run(m, "native", x);
  double scale = 0;
  for (double v : want[0].value.tensor.to_doubles()) scale = std::max(scale, std::abs(v));
  EXPECT_LT(max_diff(got[0].value.tensor, want[0].value.tensor), 1e-5 * scale) << "outputs reach " << scale;
}

// Runs `m` built with `o` to a .so (through Session::load and the native engine).
std::vector<NamedValue> run_built(const Model& m, const CodegenOptions& o, const Tensor& x, const std::string& tag) {
  auto dir = std::filesystem::temp_directory_path() / ("hodu-codegen-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string so = (dir / (tag + ".so")).string();
  BuildOptions b;
  b.codegen = o;
  build_model(m, so, b);
  SessionOptions so_opts;
  so_opts.engine = "native";
  so_opts.threads = 1;
  // A node-less model naming the library: the native engine runs it (as `hodu run lib.so`).
  Model lib;
  lib.producer_name = "hodu build";
  lib.graph.inputs = m.graph.inputs;
  lib.metadata.push_back({"hodu.native.library", so});
  for (const auto& o : m.graph.outputs) lib.graph.outputs.push_back(Value{o.name, {}, {}});
  struct Cleanup {
    std::filesystem::path dir;
    ~Cleanup() { std::filesystem::remove_all(dir); }
  } cleanup{dir};
  return Session::from_model(lib, so_opts)->run({{"x", x}});
}

// run_built with the kernel library refusing `kinds` (HODU_KERNELS_REFUSE): the default
// mode's portable fallbacks run instead of the library ops.
std::vector<NamedValue> run_built_refusing(const Model& m, const CodegenOptions& o, const Tensor& x,
                                           const std::string& tag, const char* kinds) {
  struct Refusal {
    explicit Refusal(const char* k) { ::setenv("HODU_KERNELS_REFUSE", k, 1); }
    ~Refusal() { ::unsetenv("HODU_KERNELS_REFUSE"); }
  } refusal(kinds);
  return run_built(m, o, x, tag);
}

// Squeeze-excite (a depthwise conv's result averaged, two 1x1 convs on 1x1
// pixels, the result scaling the conv's channels) and a fire module (two convs
// concatenated on channels, read by a pool and a conv): default mode keeps the
// convs' layouts (per-channel Mul, in-place Concat, pools on the native layout)
// and runs the 1x1-pixel convs as vector products; at every level, with and
// without the kernel library, against the interpreter.
Model se_fire_model(int64_t channels) {
  Model m;
  m.opset_imports[""] = 21;
  Graph& g = m.graph;
  int64_t C = channels;
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape{1, 3, 18, 18}), ""});
  g.set_initializer("w0", ramp({C, 3, 3, 3}, 0.37f, 0.f));
  g.set_initializer("b0", ramp({C}, 1.1f, 0.1f));
  g.set_initializer("wd", ramp({C, 1, 3, 3}, 0.23f, 0.05f));
  g.set_initializer("w1", ramp({8, C, 1, 1}, 0.19f, 0.f));
  g.set_initializer("b1", ramp({8}, 0.7f, 0.f));
  g.set_initializer("w2", ramp({C, 8, 1, 1}, 0.29f, 0.f));
  g.set_initializer("b2", ramp({C}, 0.3f, 0.1f));
  g.set_initializer("we1", ramp({16, C, 1, 1}, 0.11f, 0.f));
  g.set_initializer("we3", ramp({32, C, 3, 3}, 0.07f, 0.f));
  g.set_initializer("wq", ramp({16, 48, 1, 1}, 0.13f, 0.f));
  auto pad1 = Attribute::make_ints("pads", {1, 1, 1, 1});
  g.nodes.push_back(node("Conv", {"x", "w0", "b0"}, {"c0"}, {pad1}));
  g.nodes.push_back(node("Relu", {"c0"}, {"r0"}));
  g.nodes.push_back(node("Conv", {"r0", "wd"}, {"cd"}, {pad1, Attribute::make_int("group", C)}));
  g.nodes.push_back(node("Sigmoid", {"cd"}, {"sd"}));
  g.nodes.push_back(node("Mul", {"cd", "sd"}, {"d"}));
  g.nodes.push_back(node("GlobalAveragePool", {"d"}, {"gap"}));
  g.nodes.push_back(node("Conv", {"gap", "w1", "b1"}, {"f1"}));
  g.nodes.push_back(node("Sigmoid", {"f1"}, {"sf1"}));
  g.nodes.push_back(node("Mul", {"f1", "sf1"}, {"h"}));
  g.nodes.push_back(node("Conv", {"h", "w2", "b2"}, {"f2"}));
  g.nodes.push_back(node("Sigmoid", {"f2"}, {"s"}));
  g.nodes.push_back(node("Mul", {"s", "d"}, {"se"}));
  g.nodes.push_back(node("Conv", {"se", "we1"}, {"e1"}));
  g.nodes.push_back(node("Relu", {"e1"}, {"re1"}));
  g.nodes.push_back(node("Conv", {"se", "we3"}, {"e3"}, {pad1}));
  g.nodes.push_back(node("Relu", {"e3"}, {"re3"}));
  g.nodes.push_back(node("Concat", {"re1", "re3"}, {"cat"}, {Attribute::make_int("axis", 1)}));
  g.nodes.push_back(node("MaxPool", {"cat"}, {"p"},
                         {Attribute::make_ints("kernel_shape", {3, 3}), Attribute::make_ints("strides", {2, 2}),
                          Attribute::make_int("ceil_mode", 1)}));
  g.nodes.push_back(node("Conv", {"p", "wq"}, {"y"}));
  g.outputs.push_back({"y", {}, ""});
  return m;
}

TEST(CCodegen, SqueezeExciteAndConcatKeepTheConvLayouts) {
  for (int64_t C : {32, 24}) {  // 24: the last 16-channel block padded
    Model m = se_fire_model(C);
    Tensor x = ramp({1, 3, 18, 18}, 0.21f, 0.f);
    auto want = run(m, "interp", x);
    double scale = 0;
    for (double v : want[0].value.tensor.to_doubles()) scale = std::max(scale, std::abs(v));
    auto gen = generate_c(m, {});
    EXPECT_NE(gen.source.find("hk_fc("), std::string::npos) << "1x1-pixel convs as vector products";
    EXPECT_NE(gen.source.find("hk_scale_range"), std::string::npos) << "per-channel Mul on the conv's layout";
    EXPECT_NE(gen.source.find("HODU_DST_SIMPLE"), std::string::npos);
    EXPECT_NE(gen.source.find("hodu_concat_prepare"), std::string::npos) << "Concat written in place";
    EXPECT_NE(gen.source.find("HODU_DST_CONCAT"), std::string::npos);
    EXPECT_EQ(gen.source.find("hk_copy_rows(("), std::string::npos) << "no concat copy";
    for (int level = 0; level <= 3; ++level)
      for (bool library : {true, false}) {
        CodegenOptions o;
        o.opt_level = level;
        o.kernel_library = library;
        auto got = run_built(m, o, x, fmt::format("c{}o{}k{}", C, level, library));
        EXPECT_LT(max_diff(got[0].value.tensor, want[0].value.tensor), 1e-5 * scale)
            << "C " << C << " -O" << level << (library ? " default" : " portable") << ", outputs reach " << scale;
      }
  }
}

// Default mode below AVX-512: 3x3 stride-1 convs on hodu's AVX2 Winograd in libhodu_kernels, as
// in the cpu engine (forced here by HODU_CPU_WINOGRAD, so an AVX-512 host runs it too): from a
// plain input, with bias, Relu and a residual, read by a conv after it, and as a fire module's
// concatenated part. Against the interpreter, and not bit for bit oneDNN's direct convs (the
// transforms round differently): the kernel did run.
TEST(CCodegen, WinogradConvsInTheKernelLibrary) {
  if (!winograd::available()) GTEST_SKIP() << "no AVX2+FMA here (or HODU_MAX_ISA below avx2)";
  Model res;
  res.opset_imports[""] = 21;
  Graph& g = res.graph;
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape{1, 16, 20, 20}), ""});
  g.set_initializer("w1", ramp({16, 16, 3, 3}, 0.031f, -0.05f));
  g.set_initializer("b1", ramp({16}, 0.05f, -0.2f));
  g.set_initializer("w2", ramp({24, 16, 3, 3}, 0.027f, -0.04f));
  g.set_initializer("w3", ramp({24, 24, 3, 3}, 0.023f, -0.05f));
  auto pad1 = Attribute::make_ints("pads", {1, 1, 1, 1});
  g.nodes.push_back(node("Conv", {"x", "w1", "b1"}, {"c1"}, {pad1}));
  g.nodes.push_back(node("Add", {"c1", "x"}, {"a1"}));
  g.nodes.push_back(node("Relu", {"a1"}, {"r1"}));
  g.nodes.push_back(node("Conv", {"r1", "w2"}, {"c2"}, {pad1}));
  g.nodes.push_back(node("Relu", {"c2"}, {"r2"}));
  g.nodes.push_back(node("Conv", {"r2", "w3"}, {"y"}));
  g.outputs.push_back({"y", {}, ""});
  struct Case {
    Model m;
    std::vector<int64_t> shape;
  };
  std::vector<Case> cases;
  cases.push_back({res, {1, 16, 20, 20}});
  cases.push_back({se_fire_model(32), {1, 3, 18, 18}});
  struct Policy {
    explicit Policy(const char* p) { ::setenv("HODU_CPU_WINOGRAD", p, 1); }
    ~Policy() { ::unsetenv("HODU_CPU_WINOGRAD"); }
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Model& m = cases[i].m;
    Tensor x = ramp(cases[i].shape, 0.013f, -0.3f);
    auto want = run(m, "interp", x);
    double scale = 0;
    for (double v : want[0].value.tensor.to_doubles()) scale = std::max(scale, std::abs(v));
    std::vector<NamedValue> direct;
    {
      Policy off("off");
      direct = run_built(m, {}, x, fmt::format("w{}off", i));
    }
    for (const char* tile : {"hodu-f2", "hodu-f4"}) {
      Policy p(tile);
      auto got = run_built(m, {}, x, fmt::format("w{}{}", i, tile));
      EXPECT_LT(max_diff(got[0].value.tensor, want[0].value.tensor), 1e-5 * scale)
          << "model " << i << " " << tile << ", outputs reach " << scale;
      EXPECT_GT(max_diff(got[0].value.tensor, direct[0].value.tensor), 0) << "model " << i << " " << tile
                                                                          << ": the Winograd kernel did not run";
    }
  }
}

// Default mode: an image conv (3 channels, read through an nhwc copy by oneDNN's
// brgemm kernel when it takes it) and a residual that dies at its conv (the conv
// accumulates onto the residual's buffer, and the portable fallback keeps a copy):
// at every level, with and without the library, against the interpreter.
TEST(CCodegen, StemConvAndInPlaceResidual) {
  Model m;
  m.opset_imports[""] = 21;
  Graph& g = m.graph;
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape{1, 3, 32, 32}), ""});
  g.set_initializer("w0", ramp({16, 3, 3, 3}, 0.37f, 0.f));
  g.set_initializer("b0", ramp({16}, 1.1f, 0.1f));
  g.set_initializer("wa", ramp({16, 16, 1, 1}, 0.13f, 0.f));
  g.set_initializer("wb", ramp({16, 16, 3, 3}, 0.07f, 0.f));
  g.set_initializer("wy", ramp({8, 16, 1, 1}, 0.11f, 0.f));
  auto pad1 = Attribute::make_ints("pads", {1, 1, 1, 1});
  g.nodes.push_back(node("Conv", {"x", "w0", "b0"}, {"c0"}, {pad1}));
  g.nodes.push_back(node("Relu", {"c0"}, {"r0"}));
  g.nodes.push_back(node("Conv", {"r0", "wa"}, {"ca"}));
  g.nodes.push_back(node("Conv", {"r0", "wb"}, {"cb"}, {pad1}));
  g.nodes.push_back(node("Add", {"cb", "ca"}, {"s"}));
  g.nodes.push_back(node("Relu", {"s"}, {"rs"}));
  g.nodes.push_back(node("Conv", {"rs", "wy"}, {"y"}));
  g.outputs.push_back({"y", {}, ""});
  Tensor x = ramp({1, 3, 32, 32}, 0.21f, 0.f);
  auto want = run(m, "interp", x);
  double scale = 0;
  for (double v : want[0].value.tensor.to_doubles()) scale = std::max(scale, std::abs(v));
  auto gen = generate_c(m, {});
  EXPECT_EQ(gen.library_ops, 4);
  EXPECT_NE(gen.source.find("memcpy(((float*)(A + "), std::string::npos) << "the fallback keeps the residual";
  for (int level = 0; level <= 3; ++level)
    for (bool library : {true, false}) {
      CodegenOptions o;
      o.opt_level = level;
      o.kernel_library = library;
      auto got = run_built(m, o, x, fmt::format("s{}k{}", level, library));
      EXPECT_LT(max_diff(got[0].value.tensor, want[0].value.tensor), 1e-5 * scale)
          << "-O" << level << (library ? " default" : " portable") << ", outputs reach " << scale;
    }
}

// A transformer block: LayerNormalization, Q/K/V projections with bias, heads
// split by Reshape/Transpose, scores scaled (Div) and masked (Add) before the
// Softmax, the output projection with a residual, a feed-forward layer with the
// erf-form GELU chain; and a 7-D MatMul (beyond the library's rank) with bias and
// Relu. Default mode fuses the biases and the GELU into the matmuls and the scale
// and mask into hodu_softmax; at every level, with and without the library,
// against the interpreter.
Model transformer_block() {
  Model m;
  m.opset_imports[""] = 21;
  Graph& g = m.graph;
  const int64_t S = 6, D = 16, H = 2, F = 32;
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape{1, S, D}), ""});
  g.set_initializer("ls", ramp({D}, 0.3f, 1.f));
  g.set_initializer("lb", ramp({D}, 0.7f, 0.f));
  for (const char* p : {"q", "k", "v", "o"}) {
    g.set_initializer(std::string("w") + p, ramp({D, D}, 0.17f + 0.01f * static_cast<float>(*p - 'k'), 0.f));
    g.set_initializer(std::string("b") + p, ramp({D}, 0.41f + 0.02f * static_cast<float>(*p - 'k'), 0.f));
  }
  g.set_initializer("w1", ramp({D, F}, 0.13f, 0.f));
  g.set_initializer("b1", ramp({F}, 0.23f, 0.f));
  g.set_initializer("w2", ramp({F, D}, 0.11f, 0.f));
  g.set_initializer("b2", ramp({1, D}, 0.31f, 0.f));
  g.set_initializer("w7", ramp({D, 4}, 0.19f, 0.f));
  g.set_initializer("b7", ramp({4}, 0.37f, 0.f));
  std::vector<float> mask(S * S);
  for (int64_t i = 0; i < S; ++i)
    for (int64_t j = 0; j < S; ++j) mask[i * S + j] = j > i ? -10000.f : 0.f;
  g.set_initializer("mask", Tensor::from_vector(DType::F32, {1, 1, S, S}, mask));
  g.set_initializer("heads", Tensor::from_vector(DType::I64, {4}, std::vector<int64_t>{1, S, H, D / H}));
  g.set_initializer("merged", Tensor::from_vector(DType::I64, {3}, std::vector<int64_t>{1, S, D}));
  g.set_initializer("seven", Tensor::from_vector(DType::I64, {7}, std::vector<int64_t>{1, 1, 1, 1, 1, S, D}));
  g.set_initializer("scale", Tensor::from_vector(DType::F32, {}, std::vector<float>{std::sqrt(8.f)}));
  g.set_initializer("sqrt2", Tensor::from_vector(DType::F32, {}, std::vector<float>{1.41421354f}));
  g.set_initializer("one", Tensor::from_vector(DType::F32, {}, std::vector<float>{1.f}));
  g.set_initializer("half", Tensor::from_vector(DType::F32, {}, std::vector<float>{0.5f}));
  g.nodes.push_back(node("LayerNormalization", {"x", "ls", "lb"}, {"ln"}));
  for (const char* p : {"q", "k", "v"}) {
    std::string s = p;
    g.nodes.push_back(node("MatMul", {"ln", "w" + s}, {s + "m"}));
    g.nodes.push_back(node("Add", {"b" + s, s + "m"}, {s + "a"}));
    g.nodes.push_back(node("Reshape", {s + "a", "heads"}, {s + "r"}));
    g.nodes.push_back(node("Transpose", {s + "r"}, {s + "t"},
                           {Attribute::make_ints("perm", s == "k" ? std::vector<int64_t>{0, 2, 3, 1}
                                                                  : std::vector<int64_t>{0, 2, 1, 3})}));
  }
  g.nodes.push_back(node("MatMul", {"qt", "kt"}, {"sc"}));
  g.nodes.push_back(node("Div", {"sc", "scale"}, {"scd"}));
  g.nodes.push_back(node("Add", {"scd", "mask"}, {"scm"}));
  g.nodes.push_back(node("Softmax", {"scm"}, {"p"}, {Attribute::make_int("axis", -1)}));
  g.nodes.push_back(node("MatMul", {"p", "vt"}, {"ctx"}));
  g.nodes.push_back(node("Transpose", {"ctx"}, {"ctxt"}, {Attribute::make_ints("perm", {0, 2, 1, 3})}));
  g.nodes.push_back(node("Reshape", {"ctxt", "merged"}, {"ctxm"}));
  g.nodes.push_back(node("MatMul", {"ctxm", "wo"}, {"om"}));
  g.nodes.push_back(node("Add", {"om", "bo"}, {"oa"}));
  g.nodes.push_back(node("Add", {"x", "oa"}, {"h"}));
  g.nodes.push_back(node("MatMul", {"h", "w1"}, {"f1"}));
  g.nodes.push_back(node("Add", {"b1", "f1"}, {"f1b"}));
  g.nodes.push_back(node("Div", {"f1b", "sqrt2"}, {"gd"}));
  g.nodes.push_back(node("Erf", {"gd"}, {"ge"}));
  g.nodes.push_back(node("Add", {"ge", "one"}, {"ga"}));
  g.nodes.push_back(node("Mul", {"f1b", "ga"}, {"gm"}));
  g.nodes.push_back(node("Mul", {"gm", "half"}, {"gelu"}));
  g.nodes.push_back(node("MatMul", {"gelu", "w2"}, {"f2"}));
  g.nodes.push_back(node("Add", {"f2", "b2"}, {"f2b"}));
  g.nodes.push_back(node("Add", {"h", "f2b"}, {"y"}));
  g.nodes.push_back(node("Reshape", {"y", "seven"}, {"y7"}));
  g.nodes.push_back(node("MatMul", {"y7", "w7"}, {"z7"}));
  g.nodes.push_back(node("Add", {"z7", "b7"}, {"z7b"}));
  g.nodes.push_back(node("Relu", {"z7b"}, {"z"}));
  g.outputs.push_back({"y", {}, ""});
  g.outputs.push_back({"z", {}, ""});
  return m;
}

// The run body as it goes when every library op was prepared: the portable fallbacks
// ("} else { ... }" after each library call) cut out.
std::string library_path(const std::string& source) {
  std::string out;
  size_t at = 0;
  for (size_t e; (e = source.find("  } else {\n", at)) != std::string::npos;) {
    out += source.substr(at, e - at);
    size_t close = source.find("\n  }\n", e + 11);
    if (close == std::string::npos) return out;
    at = close + 5;
  }
  return out + source.substr(at);
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

TEST(CCodegen, TransformerBlockFusesBiasGeluAndSoftmax) {
  Model m = transformer_block();
  Tensor x = ramp({1, 6, 16}, 0.21f, 0.f);
  auto want = run(m, "interp", x);
  auto gen = generate_c(m, {});
  EXPECT_NE(gen.source.find("HODU_ACTIVATION_GELU"), std::string::npos) << "GELU chain in the matmul";
  EXPECT_EQ(gen.source.find("/* Div + Erf"), std::string::npos) << "no GELU loop";
  EXPECT_NE(gen.source.find("hodu_softmax(m->kernels"), std::string::npos);
  EXPECT_NE(gen.source.find("hodu_layer_norm(m->kernels"), std::string::npos);
  EXPECT_EQ(gen.source.find("/* Div */"), std::string::npos) << "the scale is the softmax's";
  EXPECT_EQ(gen.library_ops, 8) << "7-D MatMul runs portable code";
  // Heads split and merged through strides, residuals in the products, y written where the
  // caller wants it: no copy and no Add loop on the library path.
  std::string body = library_path(gen.source.substr(gen.source.find("model_run(")));
  EXPECT_EQ(count_of(body, "hk_strided_copy("), 0u) << body;
  EXPECT_EQ(count_of(body, "/* Add */"), 0u) << body;
  EXPECT_EQ(count_of(body, "hodu_matmul_run("), 8u) << body;
  // (the products' calls only: the DLPack glue passes NULLs too)
  EXPECT_EQ(count_of(body, ", NULL, NULL, ((float*)"), 4u)
      << "q, k, v and ff1 have a constant B and no residual; o and ff2 have one";
  EXPECT_NE(body.find("((float*)(o0)))) return"), std::string::npos) << "the last product writes output y directly";
  EXPECT_EQ(count_of(gen.source, ") hm_release(W + "), 12u) << "weights and biases of the 6 projections given back";
  for (int level = 0; level <= 3; ++level)
    for (bool library : {true, false}) {
      CodegenOptions o;
      o.opt_level = level;
      o.kernel_library = library;
      auto got = run_built(m, o, x, fmt::format("t{}k{}", level, library));
      ASSERT_EQ(got.size(), 2u);
      for (size_t k = 0; k < 2; ++k) {
        double scale = 0;
        for (double v : want[k].value.tensor.to_doubles()) scale = std::max(scale, std::abs(v));
        EXPECT_LT(max_diff(got[k].value.tensor, want[k].value.tensor), 1e-5 * scale)
            << "output " << k << " -O" << level << (library ? " default" : " portable") << ", outputs reach " << scale;
      }
    }
}

// The default mode's portable fallbacks of the products (strided operands copied, the
// residual kept aside, the head merge scattered), run by refusing every library matmul.
TEST(CCodegen, TransformerBlockFallbacksMatchInterpreter) {
  Model m = transformer_block();
  Tensor x = ramp({1, 6, 16}, 0.21f, 0.f);
  auto want = run(m, "interp", x);
  auto got = run_built_refusing(m, {}, x, "refused", "matmul");
  ASSERT_EQ(got.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    double scale = 0;
    for (double v : want[k].value.tensor.to_doubles()) scale = std::max(scale, std::abs(v));
    EXPECT_LT(max_diff(got[k].value.tensor, want[k].value.tensor), 1e-5 * scale) << "output " << k;
  }
}

// Attention as torch's MultiheadAttention exports it (ViT): the sequence made the batch
// dim by a Transpose of a size-1 dim, one packed QKV projection sliced three ways, heads
// split by Reshape + Transpose on [seq, heads, dim], q scaled before Q·Kᵀ, the output
// projection a Gemm. Default mode reads q, k and v in place from the packed projection
// (the scale is the product's alpha); v, also read by a Relu, is copied once, straight
// from the projection. At every level, with and without the library, refused matmuls
// (the portable fallbacks) too, against the interpreter.
Model packed_qkv_attention() {
  Model m;
  m.opset_imports[""] = 17;
  Graph& g = m.graph;
  const int64_t S = 5, D = 8, H = 2;
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape{1, S, D}), ""});
  g.set_initializer("win", ramp({D, 3 * D}, 0.23f, 0.f));
  g.set_initializer("bin", ramp({3 * D}, 0.31f, 0.1f));
  g.set_initializer("wo", ramp({D, D}, 0.17f, 0.f));
  g.set_initializer("bo", ramp({D}, 0.43f, 0.f));
  g.set_initializer("heads", i64s({S, H, D / H}));
  g.set_initializer("merged", i64s({S, D}));
  g.set_initializer("seq1", i64s({S, 1, D}));
  g.set_initializer("last", i64s({-1}));
  g.set_initializer("root_d", Tensor::from_vector(DType::F32, {}, std::vector<float>{2.f}));
  for (int k = 0; k <= 3; ++k) g.set_initializer("at" + std::to_string(k), i64s({k * D}));
  g.nodes.push_back(node("Transpose", {"x"}, {"xt"}, {Attribute::make_ints("perm", {1, 0, 2})}));
  g.nodes.push_back(node("MatMul", {"xt", "win"}, {"pm"}));
  g.nodes.push_back(node("Add", {"bin", "pm"}, {"pa"}));
  const char* names[] = {"q", "k", "v"};
  for (int k = 0; k < 3; ++k) {
    std::string p = names[k];
    g.nodes.push_back(node("Slice", {"pa", "at" + std::to_string(k), "at" + std::to_string(k + 1), "last"}, {p + "s"}));
    g.nodes.push_back(node("Reshape", {p + "s", "heads"}, {p + "r"}));
    g.nodes.push_back(node("Transpose", {p + "r"}, {p + "t"},
                           {Attribute::make_ints("perm", p == "k" ? std::vector<int64_t>{1, 2, 0}
                                                                  : std::vector<int64_t>{1, 0, 2})}));
  }
  g.nodes.push_back(node("Div", {"qt", "root_d"}, {"qd"}));
  g.nodes.push_back(node("MatMul", {"qd", "kt"}, {"sc"}));
  g.nodes.push_back(node("Softmax", {"sc"}, {"pr"}, {Attribute::make_int("axis", -1)}));
  g.nodes.push_back(node("MatMul", {"pr", "vt"}, {"c"}));
  g.nodes.push_back(node("Relu", {"vt"}, {"vrelu"}));
  g.nodes.push_back(node("Transpose", {"c"}, {"ct"}, {Attribute::make_ints("perm", {1, 0, 2})}));
  g.nodes.push_back(node("Reshape", {"ct", "merged"}, {"cm"}));
  g.nodes.push_back(node("Gemm", {"cm", "wo", "bo"}, {"o"}, {Attribute::make_int("transB", 1)}));
  g.nodes.push_back(node("Reshape", {"o", "seq1"}, {"o3"}));
  g.nodes.push_back(node("Transpose", {"o3"}, {"ot"}, {Attribute::make_ints("perm", {1, 0, 2})}));
  g.nodes.push_back(node("Add", {"ot", "x"}, {"y"}));
  g.outputs.push_back({"y", {}, ""});
  g.outputs.push_back({"vrelu", {}, ""});
  return m;
}

TEST(CCodegen, PackedQkvAttentionReadsHeadsInPlace) {
  Model m = packed_qkv_attention();
  Tensor x = ramp({1, 5, 8}, 0.29f, 0.f);
  auto want = run(m, "interp", x);
  auto gen = generate_c(m, {});
  std::string body = library_path(gen.source.substr(gen.source.find("model_run(")));
  EXPECT_EQ(count_of(body, "hk_strided_copy("), 1u) << "only v, for the Relu:\n" << body;
  EXPECT_EQ(count_of(body, "/* Div */"), 0u) << "q's scale is the product's alpha";
  EXPECT_EQ(count_of(body, "hodu_matmul_run("), 4u) << body;
  auto check = [&](const std::vector<NamedValue>& got, const std::string& what) {
    ASSERT_EQ(got.size(), 2u);
    for (size_t k = 0; k < 2; ++k) {
      double scale = 0;
      for (double v : want[k].value.tensor.to_doubles()) scale = std::max(scale, std::abs(v));
      EXPECT_LT(max_diff(got[k].value.tensor, want[k].value.tensor), 1e-5 * scale) << "output " << k << " " << what;
    }
  };
  for (int level = 0; level <= 3; ++level)
    for (bool library : {true, false}) {
      CodegenOptions o;
      o.opt_level = level;
      o.kernel_library = library;
      check(run_built(m, o, x, fmt::format("mha{}k{}", level, library)), fmt::format("-O{} library {}", level, library));
    }
  auto refused = run_built_refusing(m, {}, x, "mha-refused", "matmul");
  check(refused, "refused matmuls");
}

// View chains the products cannot read in place: a Reshape merging dims a Transpose
// swapped (one copy, from the root), a Slice with a negative step (its own copy, which
// the Transpose after it then views), and one with step 2 that can (a strided view).
// Against the interpreter, library and refused.
TEST(CCodegen, ViewChainsCopiedWhereStridesCannotDescribeThem) {
  Model m;
  m.opset_imports[""] = 17;
  Graph& g = m.graph;
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape{2, 3, 4}), ""});
  g.set_initializer("w", ramp({8, 5}, 0.37f, 0.f));
  g.set_initializer("w2", ramp({2, 5}, 0.41f, 0.f));
  g.set_initializer("rows", i64s({3, 8}));
  g.set_initializer("s0", i64s({3}));
  g.set_initializer("e0", i64s({-5}));
  g.set_initializer("ax", i64s({2}));
  g.set_initializer("neg", i64s({-1}));
  g.set_initializer("s1", i64s({0}));
  g.set_initializer("e1", i64s({4}));
  g.set_initializer("two", i64s({2}));
  g.nodes.push_back(node("Transpose", {"x"}, {"xt"}, {Attribute::make_ints("perm", {1, 0, 2})}));
  g.nodes.push_back(node("Reshape", {"xt", "rows"}, {"xr"}));
  g.nodes.push_back(node("MatMul", {"xr", "w"}, {"y"}));
  g.nodes.push_back(node("Slice", {"x", "s0", "e0", "ax", "neg"}, {"xn"}));  // x[:, :, ::-1]
  g.nodes.push_back(node("Transpose", {"xn"}, {"xnt"}, {Attribute::make_ints("perm", {0, 2, 1})}));
  g.nodes.push_back(node("MatMul", {"xnt", "x"}, {"z"}));
  g.nodes.push_back(node("Slice", {"x", "s1", "e1", "ax", "two"}, {"xs"}));  // x[:, :, ::2]
  g.nodes.push_back(node("MatMul", {"xs", "w2"}, {"u"}));
  g.outputs.push_back({"y", {}, ""});
  g.outputs.push_back({"z", {}, ""});
  g.outputs.push_back({"u", {}, ""});
  Tensor x = ramp({2, 3, 4}, 0.53f, 0.f);
  auto want = run(m, "interp", x);
  auto gen = generate_c(m, {});
  std::string body = library_path(gen.source.substr(gen.source.find("model_run(")));
  EXPECT_EQ(count_of(body, "hk_strided_copy("), 2u) << "xr from x and xn; xnt is read in place from xn:\n" << body;
  auto check = [&](const std::vector<NamedValue>& got, const std::string& what) {
    ASSERT_EQ(got.size(), 3u);
    for (size_t k = 0; k < 3; ++k) EXPECT_LT(max_diff(got[k].value.tensor, want[k].value.tensor), 1e-5) << k << " " << what;
  };
  check(run_built(m, {}, x, "views"), "library");
  auto refused = run_built_refusing(m, {}, x, "views-refused", "matmul");
  check(refused, "refused");
}

// Dropout at inference, or in training mode with ratio 0 (as torch exports Swin-T's
// attention dropout): the identity, its mask all true where something reads it.
TEST(CCodegen, DropoutWithRatioZeroAndMask) {
  Model m;
  m.opset_imports[""] = 17;
  Graph& g = m.graph;
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape{2, 3, 4}), ""});
  g.set_initializer("zero", Tensor::from_vector(DType::F32, {}, std::vector<float>{0.f}));
  g.set_initializer("train", Tensor::from_vector(DType::Bool, {}, std::vector<uint8_t>{1}));
  g.nodes.push_back(node("Dropout", {"x", "zero", "train"}, {"d", "mask"}));
  g.nodes.push_back(node("Cast", {"mask"}, {"mf"}, {Attribute::make_int("to", 1)}));
  g.nodes.push_back(node("Mul", {"d", "mf"}, {"y"}));
  g.nodes.push_back(node("Dropout", {"y", "zero", "train"}, {"z", "unread"}));
  g.outputs.push_back({"z", {}, ""});
  Tensor x = ramp({2, 3, 4}, 0.7f, 0.f);
  auto gen = generate_c(m, {});
  EXPECT_EQ(count_of(gen.source, ", 1, 24);"), 1u) << "one mask written, the unread one not";
  for (bool library : {true, false}) {
    CodegenOptions o;
    o.kernel_library = library;
    auto got = run_built(m, o, x, fmt::format("dropout{}", library));
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(max_diff(got[0].value.tensor, x), 0.0);
  }
  // A random dropout draws numpy's mask from the interpreter's seed: the same outputs.
  g.set_initializer("half", Tensor::from_vector(DType::F32, {}, std::vector<float>{0.5f}));
  g.nodes[0].inputs[1] = "half";
  auto want = run(m, "interp", x);
  double kept = 0;
  for (double v : want[0].value.tensor.to_doubles()) kept += v != 0;
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, 24) << "some elements dropped, some kept";
  for (bool library : {true, false}) {
    CodegenOptions o;
    o.kernel_library = library;
    auto got = run_built(m, o, x, fmt::format("dropout_random{}", library));
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(max_diff(got[0].value.tensor, want[0].value.tensor), 0.0);
  }
}

// MobileNetV3's HardSwish after convs (a oneDNN post-op: the convs keep their layout), and
// after a 1x1 conv over 1x1 pixels (a vector product in generated code): every level, with
// and without the library, and with the library's convs refused.
TEST(CCodegen, ConvHardSwishMatchesInterpreter) {
  Model m;
  m.opset_imports[""] = 17;
  Graph& g = m.graph;
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape{1, 3, 12, 12}), ""});
  g.set_initializer("w1", ramp({16, 3, 3, 3}, 0.31f, 0.f));
  g.set_initializer("w2", ramp({16, 16, 3, 3}, 0.17f, 0.f));
  g.set_initializer("w3", ramp({8, 16, 1, 1}, 0.23f, 0.f));
  g.set_initializer("b3", ramp({8}, 0.5f, 0.f));
  auto conv = [&](const std::string& x, const std::string& w, const std::string& y, std::vector<std::string> extra = {}) {
    std::vector<std::string> in = {x, w};
    in.insert(in.end(), extra.begin(), extra.end());
    g.nodes.push_back(node("Conv", in, {y}, {Attribute::make_ints("pads", w == "w3" ? std::vector<int64_t>{0, 0, 0, 0}
                                                                                     : std::vector<int64_t>{1, 1, 1, 1})}));
  };
  conv("x", "w1", "c1");
  g.nodes.push_back(node("HardSwish", {"c1"}, {"h1"}));
  conv("h1", "w2", "c2");
  g.nodes.push_back(node("HardSwish", {"c2"}, {"h2"}));
  g.nodes.push_back(node("GlobalAveragePool", {"h2"}, {"p"}));
  conv("p", "w3", "c3", {"b3"});
  g.nodes.push_back(node("HardSwish", {"c3"}, {"y"}));
  g.outputs.push_back({"y", {}, ""});
  Tensor x = ramp({1, 3, 12, 12}, 0.13f, 0.f);
  auto want = run(m, "interp", x);
  auto gen = generate_c(m, {});
  EXPECT_EQ(count_of(gen.source, "HODU_ACTIVATION_HARDSWISH, 0.f, 0.f"), 2u) << "both 3x3 convs";
  EXPECT_EQ(count_of(gen.source, "/* HardSwish */"), 0u) << "no HardSwish loop";
  double scale = 0;
  for (double v : want[0].value.tensor.to_doubles()) scale = std::max(scale, std::abs(v));
  for (int level = 0; level <= 3; ++level)
    for (bool library : {true, false}) {
      CodegenOptions o;
      o.opt_level = level;
      o.kernel_library = library;
      auto got = run_built(m, o, x, fmt::format("hs{}k{}", level, library));
      EXPECT_LT(max_diff(got[0].value.tensor, want[0].value.tensor), 1e-5 * scale) << "-O" << level << " " << library;
    }
  auto refused = run_built_refusing(m, {}, x, "hs-refused", "conv2d,pool2d");
  EXPECT_LT(max_diff(refused[0].value.tensor, want[0].value.tensor), 1e-5 * scale) << "refused convs";
}

// An output that is a prefix view of a larger buffer (a Slice of the first rows, an alias):
// not written straight into the caller's memory, which holds only the output (the
// producer writes the whole buffer). One the size of its buffer is.
TEST(CCodegen, OnlyWholeBufferOutputsGoToCallerMemory) {
  Model m;
  m.opset_imports[""] = 17;
  Graph& g = m.graph;
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape{4, 6}), ""});
  g.set_initializer("s", i64s({0}));
  g.set_initializer("e", i64s({1}));
  g.set_initializer("ax", i64s({0}));
  g.nodes.push_back(node("Relu", {"x"}, {"r"}));
  g.nodes.push_back(node("Slice", {"r", "s", "e", "ax"}, {"y"}));
  g.nodes.push_back(node("Neg", {"x"}, {"z"}));
  g.outputs.push_back({"y", {}, ""});
  g.outputs.push_back({"z", {}, ""});
  auto gen = generate_c(m, {});
  EXPECT_EQ(gen.source.find("  o0 = "), std::string::npos) << "y is the first row of r's buffer";
  EXPECT_NE(gen.source.find("  o1 = "), std::string::npos) << "z is a buffer of its own";
  Tensor x = ramp({4, 6}, 0.9f, 0.f);
  auto want = run(m, "interp", x);
  auto got = run_built(m, {}, x, "prefix");
  ASSERT_EQ(got.size(), 2u);
  for (size_t k = 0; k < 2; ++k) EXPECT_EQ(max_diff(got[k].value.tensor, want[k].value.tensor), 0.0) << k;
}

TEST(CCodegen, ArtifactFormatsFromExtension) {
  EXPECT_EQ(artifact_format("m.so", ""), ArtifactFormat::SharedLibrary);
  EXPECT_EQ(artifact_format("m", ""), ArtifactFormat::Executable);
  EXPECT_EQ(artifact_format("m.bin", "ll"), ArtifactFormat::LlvmIr);
  EXPECT_THROW(artifact_format("m.zip", ""), Error);
  CodegenOptions bad;
  bad.name = "bad name";
  EXPECT_THROW(generate_c(small_cnn(Shape{1, 3, 8, 8}), bad), Error);
}

// A float16 model computes in float32 between its half inputs and outputs, as the cpu engine and
// ONNX Runtime's CPU provider do: 16 Adds of 3e-4 (under half an f16 ulp of x in [1, 2)), then a
// product. Rounded after every op, each Add gave x back and the library was 5 ulps off both (and
// ran its products and norms on the portable loops: a half transformer 100x slower).
TEST(CCodegen, HalfModelsComputeInFloat32LikeTheCpuEngine) {
  Model m;
  m.opset_imports[""] = 17;
  Graph& g = m.graph;
  g.inputs.push_back({"x", ValueType::tensor(DType::F16, Shape{Dim::sym("n"), 8}), ""});
  g.set_initializer("c", Tensor::scalar(DType::F32, 3e-4f).cast(DType::F16));
  g.set_initializer("w", ramp({8, 4}, 0.61f, 0.f).cast(DType::F16));
  std::string v = "x";
  for (int i = 0; i < 16; ++i) {
    char name[16];  // not "a" + std::to_string(i): GCC 12's -Wrestrict false positive there
    std::snprintf(name, sizeof name, "a%d", i);
    std::string out = name;
    g.nodes.push_back(node("Add", {v, "c"}, {out}));
    v = out;
  }
  g.nodes.push_back(node("MatMul", {v, "w"}, {"y"}));
  g.outputs.push_back({"y", ValueType::tensor(DType::F16, Shape{Dim::sym("n"), 4}), ""});
  g.outputs.push_back({v, ValueType::tensor(DType::F16, Shape{Dim::sym("n"), 8}), ""});
  Tensor x = ramp({3, 8}, 0.37f, 1.5f);  // in [0.5, 2.5)
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 1.f + std::abs(x.data<float>()[i] - 1.5f) * 0.9f;
  x = x.cast(DType::F16);
  auto want = run(m, "cpu", x);
  auto got = run_built(m, CodegenOptions{}, x, "half_f32");
  ASSERT_EQ(got.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(got[k].value.tensor.dtype(), DType::F16);
    // Both round once, at the output: equal, but for a sum order in the product (an ulp at 16).
    EXPECT_LT(max_diff(got[k].value.tensor, want[k].value.tensor), k == 0 ? 1.6e-2 : 1e-9) << got[k].name;
  }
  // The sum moved x by 16 * 3e-4 = 4.8e-3: about 5 ulps (9.8e-4 in [1, 2)), not 0.
  EXPECT_GT(max_diff(got[1].value.tensor, x), 3e-3);
}

}  // namespace
}  // namespace hodu::compilers::c
