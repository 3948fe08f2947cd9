// The cpu engine's tensor kernels (broadcast_ops, unary_ops, tensor_ops, resize, dnnl_deconv,
// reduce_ops, index_ops, norm_ops, einsum) against the interpreter: one node per model, many
// shapes, broadcast patterns, dtypes, modes and attributes; each case also asserts that the plan
// ran no interpreter kernel, and a second run (plan reused) gives the same result.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engines/cpu/cpu_engine.h"
#include "engines/cpu/plan.h"
#include "engines/interp/interpreter.h"
#include "ir/schema.h"
#include "kernels/cpu/vector_math.h"
#include "runtime/kernel_registry.h"

namespace hodu::cpu {
namespace {

Tensor rand_tensor(DType dt, std::vector<int64_t> shape, uint32_t seed, int lo = -5, int hi = 5) {
  std::mt19937 rng(seed);
  Tensor t = Tensor::empty(dt, shape);
  const int64_t n = t.numel();
  if (dt == DType::F32 || dt == DType::F64) {
    std::normal_distribution<double> d(0.0, 2.0);
    for (int64_t i = 0; i < n; ++i) t.set_double(i, d(rng));
  } else if (dt == DType::Bool) {
    for (int64_t i = 0; i < n; ++i) t.set_double(i, static_cast<double>(rng() & 1));
  } else {
    std::uniform_int_distribution<int> d(lo, hi);
    for (int64_t i = 0; i < n; ++i) t.set_double(i, d(rng));
  }
  return t;
}

Tensor i64s(std::vector<int64_t> v) { return Tensor::from_vector<int64_t>(DType::I64, {static_cast<int64_t>(v.size())}, v); }
Tensor f32s(std::vector<float> v) { return Tensor::from_vector<float>(DType::F32, {static_cast<int64_t>(v.size())}, v); }

struct Case {
  std::string op;
  std::vector<std::pair<std::string, Tensor>> inputs;  // fed at run time
  std::vector<std::pair<std::string, Tensor>> consts;  // initializers
  std::vector<std::string> order;                      // the node's inputs ("" for absent)
  std::vector<Attribute> attrs;
  int outputs = 1;
  double tol = 1e-6;  // relative, floats; integers and bools must be equal
};

Model build(const Case& c) {
  Model m;
  m.opset_imports[""] = 21;
  Graph& g = m.graph;
  for (const auto& [name, t] : c.inputs)
    g.inputs.push_back({name, ValueType::tensor(t.dtype(), Shape::from(t.shape())), ""});
  for (const auto& [name, t] : c.consts) g.set_initializer(name, t);
  Node n;
  n.name = "node";
  n.op_type = c.op;
  n.inputs = c.order;
  for (int i = 0; i < c.outputs; ++i) n.outputs.push_back("y" + std::to_string(i));
  n.attributes = c.attrs;
  g.nodes.push_back(n);
  for (const auto& o : n.outputs) g.outputs.push_back({o, {}, ""});
  infer_types(g);
  for (auto& o : g.outputs)
    if (auto t = g.type_of(o.name)) o.type = *t;
  return m;
}

void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const int64_t n = want.numel();
  if (!dtype_is_float(want.dtype())) {
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got.get_int64(i), want.get_int64(i)) << what << " at " << i;
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const double a = got.get_double(i), b = want.get_double(i);
    if (std::isnan(b)) {
      ASSERT_TRUE(std::isnan(a)) << what << " at " << i;
      continue;
    }
    ASSERT_NEAR(a, b, tol * std::max(1.0, std::fabs(b))) << what << " at " << i;
  }
}

// Runs the case on a cpu Plan (no graph passes, so the node is planned as written) and on the
// interpreter; outputs must match and no step may be the interpreter's kernel.
void check(const Case& c, const std::string& what) {
  SCOPED_TRACE(what);
  Model m = build(c);
  std::map<std::string, RuntimeValue> feeds;
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& [name, t] : c.inputs) {
    feeds[name] = RuntimeValue(t);
    shapes[name] = t.shape();
  }
  auto want = interp::Interpreter(m).run(feeds);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  for (int threads : {1, 2}) {
    PlanOptions o;
    o.threads = threads;
    Plan plan(m, shapes, o, eng);
    ASSERT_EQ(plan.fallback_count(), 0) << what << ": " << fmt::format("{}", fmt::join(plan.kernel_choices(), "; "));
    for (int run = 0; run < 2; ++run) {
      auto got = plan.run(feeds, stream);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i)
        expect_close(got[i].tensor, want[i].tensor, c.tol, what + " output " + std::to_string(i));
    }
  }
}

Case binary(const std::string& op, DType dt, std::vector<int64_t> a, std::vector<int64_t> b, uint32_t seed) {
  Case c;
  c.op = op;
  Tensor ta = rand_tensor(dt, a, seed), tb = rand_tensor(dt, b, seed + 1);
  if (op == "Div" || op == "Mod") {  // no zero divisors for floats (both engines give inf/nan alike anyway)
    for (int64_t i = 0; i < tb.numel(); ++i)
      if (tb.get_double(i) == 0) tb.set_double(i, 3);
  }
  if (op == "Pow") {
    for (int64_t i = 0; i < ta.numel(); ++i) ta.set_double(i, std::fabs(ta.get_double(i)) + 0.5);
  }
  c.inputs = {{"a", ta}, {"b", tb}};
  c.order = {"a", "b"};
  return c;
}

TEST(CpuTensorKernels, BinaryOpsEveryBroadcastPatternAndDtype) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {{2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, {4}},       {{2, 3, 4}, {3, 1}},    {{3, 1}, {2, 3, 4}},
      {{2, 1, 4}, {1, 3, 1}}, {{1}, {5, 6}},          {{5, 6}, {}},          {{}, {7}},
      {{2, 3, 1, 5}, {3, 4, 1}}, {{64, 65}, {64, 1}}, {{1, 4, 1, 70}, {3, 1, 50, 1}}};
  uint32_t seed = 1;
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min", "Mod", "Equal", "Less", "Greater",
                         "LessOrEqual", "GreaterOrEqual"})
    for (DType dt : {DType::F32, DType::I64, DType::I32, DType::U8})
      for (const auto& [a, b] : shapes)
        check(binary(op, dt, a, b, seed++), fmt::format("{} {} {} {}", op, dtype_name(dt), shape_to_string(a),
                                                         shape_to_string(b)));
  for (const auto& [a, b] : shapes) check(binary("Pow", DType::F32, a, b, seed++), "Pow " + shape_to_string(a));
  Case fmod = binary("Mod", DType::F32, {4, 5}, {5}, 9);
  fmod.attrs = {Attribute::make_int("fmod", 1)};
  check(fmod, "Mod fmod=1");
  for (const char* op : {"And", "Or", "Xor", "Equal"})
    for (const auto& [a, b] : shapes) check(binary(op, DType::Bool, a, b, seed++), std::string(op) + " bool");
  // Integer division by zero and by -1, as the interpreter defines them.
  Case div;
  div.op = "Div";
  div.inputs = {{"a", Tensor::from_vector<int64_t>(DType::I64, {4}, {7, -7, 5, INT64_MIN})},
                {"b", Tensor::from_vector<int64_t>(DType::I64, {4}, {0, 2, -1, -1})}};
  div.order = {"a", "b"};
  check(div, "int64 Div edge cases");
}

TEST(CpuTensorKernels, VariadicPreluWhereExpandClip) {
  Case sum;
  sum.op = "Sum";
  sum.inputs = {{"a", rand_tensor(DType::F32, {3, 4}, 1)}, {"b", rand_tensor(DType::F32, {4}, 2)},
                {"c", rand_tensor(DType::F32, {3, 1}, 3)}};
  sum.order = {"a", "b", "c"};
  check(sum, "Sum of three");
  for (const char* op : {"Max", "Min", "Mean"}) {
    Case v = sum;
    v.op = op;
    check(v, op);
  }
  Case one = sum;
  one.op = "Max";
  one.inputs.resize(1);
  one.order = {"a"};
  check(one, "Max of one");
  Case prelu = binary("PRelu", DType::F32, {2, 3, 4, 5}, {3, 1, 1}, 4);
  check(prelu, "PRelu");

  uint32_t seed = 10;
  const std::vector<std::vector<std::vector<int64_t>>> where_shapes = {
      {{2, 3}, {2, 3}, {2, 3}}, {{1, 1, 5, 5}, {2, 4, 5, 5}, {}}, {{5, 5}, {}, {3, 5, 5}},
      {{3, 1}, {1, 4}, {3, 4}}, {{4}, {4}, {1}}, {{1, 1, 6, 6}, {2, 3, 6, 6}, {1}}};
  for (DType dt : {DType::F32, DType::I64, DType::Bool, DType::F16})
    for (const auto& s : where_shapes) {
      Case w;
      w.op = "Where";
      w.inputs = {{"c", rand_tensor(DType::Bool, s[0], seed++)},
                  {"x", rand_tensor(dt, s[1], seed++)},
                  {"y", rand_tensor(dt, s[2], seed++)}};
      w.order = {"c", "x", "y"};
      check(w, "Where " + std::string(dtype_name(dt)) + " " + shape_to_string(s[0]));
    }
  for (const auto& [x, shape] : std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>{
           {{3, 1}, {2, 3, 4}}, {{1}, {5}}, {{2, 1, 3}, {2, 4, 1}}, {{4}, {1}}}) {
    Case e;
    e.op = "Expand";
    e.inputs = {{"x", rand_tensor(DType::I64, x, seed++)}};
    e.consts = {{"s", i64s(shape)}};
    e.order = {"x", "s"};
    check(e, "Expand " + shape_to_string(x) + " to " + shape_to_string(shape));
  }
  // Clip with bounds fed at run time (paddle2onnx's CastLike → Clip) and integer Clip.
  Case clip;
  clip.op = "Clip";
  clip.inputs = {{"x", rand_tensor(DType::F32, {4, 50}, 3)}, {"lo", Tensor::scalar<float>(DType::F32, -1.0f)},
                 {"hi", Tensor::scalar<float>(DType::F32, 2.5f)}};
  clip.order = {"x", "lo", "hi"};
  check(clip, "Clip tensor bounds");
  clip.order = {"x", "", "hi"};
  check(clip, "Clip upper only");
  Case iclip;
  iclip.op = "Clip";
  iclip.inputs = {{"x", rand_tensor(DType::I64, {30}, 4)}};
  iclip.consts = {{"lo", Tensor::scalar<int64_t>(DType::I64, -2)}, {"hi", Tensor::scalar<int64_t>(DType::I64, 3)}};
  iclip.order = {"x", "lo", "hi"};
  check(iclip, "Clip int64");
}

TEST(CpuTensorKernels, CastCastLikeAndUnaryOps) {
  const DType types[] = {DType::F32, DType::F64, DType::F16, DType::I64, DType::I32, DType::I8, DType::U8, DType::Bool};
  uint32_t seed = 20;
  for (DType from : types)
    for (DType to : types) {
      if (from == DType::F64 && to == DType::F16) continue;  // rounds once from double: the interpreter's
      Case c;
      c.op = "Cast";
      Tensor x = rand_tensor(from, {3, 17}, seed++, -300, 300);
      if (from == DType::F32) x.set_double(0, std::nan(""));
      c.inputs = {{"x", x}};
      c.order = {"x"};
      c.attrs = {Attribute::make_int("to", dtype_to_onnx(to))};
      check(c, fmt::format("Cast {} -> {}", dtype_name(from), dtype_name(to)));
    }
  Case like;
  like.op = "CastLike";
  like.inputs = {{"x", rand_tensor(DType::F32, {10}, 3)}, {"t", rand_tensor(DType::I32, {1}, 4)}};
  like.order = {"x", "t"};
  check(like, "CastLike");
  for (const char* op : {"Softplus", "Erf", "HardSigmoid", "Sign", "Floor", "Ceil", "Round", "Reciprocal", "Sin",
                         "Cos", "Softsign", "Mish", "Selu", "Celu", "ThresholdedRelu", "HardSwish", "Elu", "Neg",
                         "Abs", "Atan", "Tanh", "Sigmoid"}) {
    Case u;
    u.op = op;
    Tensor x = rand_tensor(DType::F32, {5, 33}, seed++);
    x.set_double(1, 2.5);  // Round half to even
    x.set_double(2, -0.5);
    u.inputs = {{"x", x}};
    u.order = {"x"};
    u.tol = 1e-6;
    check(u, op);
  }
  for (const char* op : {"Neg", "Abs", "Sign", "Relu"})
    for (DType dt : {DType::I64, DType::I32}) {
      Case u;
      u.op = op;
      u.inputs = {{"x", rand_tensor(dt, {40}, seed++)}};
      u.order = {"x"};
      check(u, std::string(op) + " int");
    }
  Case nt;
  nt.op = "Not";
  nt.inputs = {{"x", rand_tensor(DType::Bool, {3, 9}, 5)}};
  nt.order = {"x"};
  check(nt, "Not");
  Case nan;
  nan.op = "IsNaN";
  Tensor v = f32s({1.0f, std::nanf(""), INFINITY, -INFINITY});
  nan.inputs = {{"x", v}};
  nan.order = {"x"};
  check(nan, "IsNaN");
  nan.op = "IsInf";
  nan.attrs = {Attribute::make_int("detect_negative", 0)};
  check(nan, "IsInf positive only");
}

TEST(CpuTensorKernels, SplitPadTileDepthToSpaceTrilu) {
  uint32_t seed = 40;
  for (int64_t axis : {0, 1, 2, -1}) {
    Case s;
    s.op = "Split";
    s.inputs = {{"x", rand_tensor(DType::F32, {6, 7, 8}, seed++)}};
    s.order = {"x"};
    s.outputs = 3;
    s.attrs = {Attribute::make_int("axis", axis), Attribute::make_int("num_outputs", 3)};
    check(s, "Split num_outputs axis " + std::to_string(axis));
  }
  Case sp;
  sp.op = "Split";
  sp.inputs = {{"x", rand_tensor(DType::I64, {4, 10}, seed++)}};
  sp.consts = {{"sizes", i64s({2, 5, 3})}};
  sp.order = {"x", "sizes"};
  sp.outputs = 3;
  sp.attrs = {Attribute::make_int("axis", 1)};
  check(sp, "Split sizes");
  for (const char* mode : {"constant", "reflect", "edge", "wrap"})
    for (const auto& pads : std::vector<std::vector<int64_t>>{{0, 1, 2, 3, 0, 2, 1, 1}, {1, 0, 0, 2, 0, 3, 2, 0},
                                                              {0, 0, -1, 2, 0, 0, 1, -2}}) {
      Case p;
      p.op = "Pad";
      p.inputs = {{"x", rand_tensor(DType::F32, {2, 3, 5, 6}, seed++)}};
      p.consts = {{"pads", i64s(pads)}, {"v", Tensor::scalar<float>(DType::F32, 1.5f)}};
      p.order = {"x", "pads", "v"};
      p.attrs = {Attribute::make_string("mode", mode)};
      check(p, std::string("Pad ") + mode + " " + shape_to_string(pads));
    }
  Case pa;
  pa.op = "Pad";
  pa.inputs = {{"x", rand_tensor(DType::I64, {3, 4, 5}, seed++)}};
  pa.consts = {{"pads", i64s({2, 1, 1, 3})}, {"axes", i64s({-1, 1})}};
  pa.order = {"x", "pads", "", "axes"};
  check(pa, "Pad axes int64");
  Case t;
  t.op = "Tile";
  t.inputs = {{"x", rand_tensor(DType::F32, {2, 3, 4}, seed++)}};
  t.consts = {{"r", i64s({2, 1, 3})}};
  t.order = {"x", "r"};
  check(t, "Tile");
  for (const char* mode : {"DCR", "CRD"}) {
    Case d;
    d.op = "DepthToSpace";
    d.inputs = {{"x", rand_tensor(DType::F32, {2, 8, 3, 5}, seed++)}};
    d.order = {"x"};
    d.attrs = {Attribute::make_int("blocksize", 2), Attribute::make_string("mode", mode)};
    check(d, std::string("DepthToSpace ") + mode);
    // Block 3, two output channels, rows over threads (a pixel shuffle's shape).
    d.inputs = {{"x", rand_tensor(DType::F32, {2, 18, 40, 25}, seed++)}};
    d.attrs = {Attribute::make_int("blocksize", 3), Attribute::make_string("mode", mode)};
    check(d, std::string("DepthToSpace block 3 ") + mode);
  }
  Case s2d;
  s2d.op = "SpaceToDepth";
  s2d.inputs = {{"x", rand_tensor(DType::F32, {1, 3, 6, 4}, seed++)}};
  s2d.order = {"x"};
  s2d.attrs = {Attribute::make_int("blocksize", 2)};
  check(s2d, "SpaceToDepth");
  for (int64_t upper : {0, 1})
    for (int64_t k : {-2, 0, 1, 7}) {
      Case tr;
      tr.op = "Trilu";
      tr.inputs = {{"x", rand_tensor(DType::F32, {2, 5, 6}, seed++)}};
      tr.consts = {{"k", Tensor::scalar<int64_t>(DType::I64, k)}};
      tr.order = {"x", "k"};
      tr.attrs = {Attribute::make_int("upper", upper)};
      check(tr, fmt::format("Trilu upper {} k {}", upper, k));
    }
}

// Products whose operand shapes the plan cannot know (a Slice with run-time starts, as a
// Loop's outputs are): sgemm per run, not the interpreter.
TEST(CpuTensorKernels, ProductsOverShapesKnownWhileRunning) {
  uint32_t seed = 90;
  struct P {
    std::string op;
    std::vector<int64_t> x, w;
    bool ta, tb, bias;
  };
  const std::vector<P> cases = {{"Gemm", {7, 8}, {3, 8}, false, true, true},  {"Gemm", {7, 8}, {8, 3}, false, false, false},
                                {"Gemm", {8, 7}, {3, 8}, true, true, true},   {"MatMul", {2, 7, 8}, {8, 5}, false, false, false},
                                {"MatMul", {3, 7, 8}, {1, 8, 4}, false, false, false}, {"MatMul", {7, 8}, {8}, false, false, false}};
  for (const auto& p : cases) {
    Model m;
    m.opset_imports[""] = 21;
    Graph& g = m.graph;
    g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape::from(p.x)), ""});
    g.inputs.push_back({"start", ValueType::tensor(DType::I64, Shape::from(std::vector<int64_t>{1})), ""});
    g.set_initializer("end", i64s({100}));
    // The rows (axis 0 of Gemm's A, the row axis of MatMul's) are sliced; with transA axis 0 is
    // K, which must stay whole: the slice starts at 0 there, its size still unknown to the plan.
    const int64_t axis = p.op == "Gemm" ? 0 : static_cast<int64_t>(p.x.size()) - 2;
    g.set_initializer("axis", i64s({axis}));
    g.set_initializer("w", rand_tensor(DType::F32, p.w, seed++));
    g.set_initializer("c", rand_tensor(DType::F32, {p.tb ? p.w[0] : p.w.back()}, seed++));
    Node s;
    s.name = "slice";
    s.op_type = "Slice";
    s.inputs = {"x", "start", "end", "axis"};
    s.outputs = {"xs"};
    g.nodes.push_back(s);
    Node n;
    n.name = "product";
    n.op_type = p.op;
    n.inputs = {"xs", "w"};
    if (p.bias) n.inputs.push_back("c");
    n.outputs = {"y"};
    if (p.op == "Gemm") n.attributes = {Attribute::make_int("transA", p.ta), Attribute::make_int("transB", p.tb),
                                        Attribute::make_float("alpha", 0.75f), Attribute::make_float("beta", 1.5f)};
    g.nodes.push_back(n);
    g.outputs.push_back({"y", {}, ""});
    infer_types(g);
    std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(rand_tensor(DType::F32, p.x, seed++))},
                                                 {"start", RuntimeValue(i64s({p.ta ? 0 : 2}))}};
    auto want = interp::Interpreter(m).run(feeds);
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream stream(eng);
    for (int threads : {1, 2}) {
      PlanOptions o;
      o.threads = threads;
      Plan plan(m, {{"x", p.x}, {"start", {1}}}, o, eng);
      const std::string choices = fmt::format("{}", fmt::join(plan.kernel_choices(), "; "));
      EXPECT_NE(choices.find("'product' (" + p.op + "): cpu sgemm"), std::string::npos) << choices;
      auto got = plan.run(feeds, stream);
      expect_close(got[0].tensor, want[0].tensor, 1e-5, p.op);
      EXPECT_EQ(got[0].tensor.shape(), want[0].tensor.shape());
    }
  }
}

// Slice with bounds fed while running (starts/ends/axes/steps computed from data): a strided
// gather that reads them each run, equal to the interpreter for every clamping rule and dtype.
TEST(CpuTensorKernels, SliceWithBoundsKnownWhileRunning) {
  uint32_t seed = 120;
  struct S {
    std::vector<int64_t> starts, ends, axes, steps;  // axes/steps empty: input left out
  };
  const std::vector<S> cases = {{{1}, {3}, {1}, {}},
                                {{-3, 0}, {100, -1}, {2, 0}, {1, 2}},
                                {{4, 5}, {-100, 0}, {1, 2}, {-1, -2}},
                                {{0, 2, 1}, {2, 5, 6}, {}, {}},
                                {{3}, {1}, {0}, {1}},  // empty result
                                {{-1}, {-7}, {-1}, {-3}}};
  for (DType dt : {DType::F32, DType::I64, DType::U8, DType::F16}) {
    for (const auto& c : cases) {
      const std::vector<int64_t> xs = {4, 5, 6};
      Model m;
      m.opset_imports[""] = 21;
      Graph& g = m.graph;
      g.inputs.push_back({"x", ValueType::tensor(dt, Shape::from(xs)), ""});
      const int64_t k = static_cast<int64_t>(c.starts.size());
      Node s;
      s.name = "slice";
      s.op_type = "Slice";
      s.inputs = {"x", "starts", "ends"};
      std::map<std::string, RuntimeValue> feeds = {{"x", RuntimeValue(rand_tensor(dt, xs, seed++))},
                                                   {"starts", RuntimeValue(i64s(c.starts))},
                                                   {"ends", RuntimeValue(i64s(c.ends))}};
      std::map<std::string, std::vector<int64_t>> shapes = {{"x", xs}, {"starts", {k}}, {"ends", {k}}};
      for (const char* name : {"starts", "ends"})
        g.inputs.push_back({name, ValueType::tensor(DType::I64, Shape::from(std::vector<int64_t>{k})), ""});
      if (!c.axes.empty()) {
        g.inputs.push_back({"axes", ValueType::tensor(DType::I64, Shape::from(std::vector<int64_t>{k})), ""});
        s.inputs.push_back("axes");
        feeds["axes"] = RuntimeValue(i64s(c.axes));
        shapes["axes"] = {k};
      }
      if (!c.steps.empty()) {
        g.inputs.push_back({"steps", ValueType::tensor(DType::I64, Shape::from(std::vector<int64_t>{k})), ""});
        s.inputs.push_back("steps");
        feeds["steps"] = RuntimeValue(i64s(c.steps));
        shapes["steps"] = {k};
      }
      s.outputs = {"y"};
      g.nodes.push_back(s);
      g.outputs.push_back({"y", {}, ""});
      infer_types(g);
      const std::string what = fmt::format("{} starts {} ends {} axes {} steps {}", dtype_name(dt),
                                           shape_to_string(c.starts), shape_to_string(c.ends), shape_to_string(c.axes),
                                           shape_to_string(c.steps));
      auto want = interp::Interpreter(m).run(feeds);
      dnnl::engine eng(dnnl::engine::kind::cpu, 0);
      dnnl::stream stream(eng);
      PlanOptions o;
      o.threads = 2;
      Plan plan(m, shapes, o, eng);
      const std::string choices = fmt::format("{}", fmt::join(plan.kernel_choices(), "; "));
      EXPECT_NE(choices.find("'slice' (Slice): cpu strided gather"), std::string::npos) << choices;
      for (int run = 0; run < 2; ++run) {  // the second run reuses the step
        auto got = plan.run(feeds, stream);
        expect_close(got[0].tensor, want[0].tensor, 0, what);
      }
    }
  }
}

TEST(CpuTensorKernels, ResizeModes) {
  uint32_t seed = 60;
  struct R {
    std::string mode, ctm, nearest;
    bool antialias, exclude;
  };
  const std::vector<R> modes = {
      {"nearest", "asymmetric", "floor", false, false},     {"nearest", "half_pixel", "round_prefer_floor", false, false},
      {"nearest", "align_corners", "round_prefer_ceil", false, false}, {"nearest", "half_pixel", "ceil", false, false},
      {"linear", "half_pixel", "", false, false},           {"linear", "align_corners", "", false, false},
      {"linear", "pytorch_half_pixel", "", false, false},   {"linear", "asymmetric", "", false, false},
      {"linear", "half_pixel_symmetric", "", false, false}, {"cubic", "half_pixel", "", false, false},
      {"cubic", "align_corners", "", false, true},          {"linear", "half_pixel", "", true, false},
      {"cubic", "half_pixel", "", true, false}};
  for (const auto& r : modes)
    for (const auto& scales : std::vector<std::vector<float>>{{1, 1, 2, 2}, {1, 1, 0.5f, 0.75f}, {1, 1, 1.7f, 3}}) {
      Case c;
      c.op = "Resize";
      c.inputs = {{"x", rand_tensor(DType::F32, {2, 3, 7, 9}, seed++)}};
      c.consts = {{"scales", f32s(scales)}};
      c.order = {"x", "", "scales"};
      c.attrs = {Attribute::make_string("mode", r.mode), Attribute::make_string("coordinate_transformation_mode", r.ctm),
                 Attribute::make_int("antialias", r.antialias), Attribute::make_int("exclude_outside", r.exclude)};
      if (!r.nearest.empty()) c.attrs.push_back(Attribute::make_string("nearest_mode", r.nearest));
      c.tol = 1e-5;
      check(c, fmt::format("Resize {} {} {} aa {} scales {}", r.mode, r.ctm, r.nearest, r.antialias, scales[2]));
    }
  // sizes, axes, a 3-D input, an integer image with nearest, tf_crop_and_resize with extrapolation.
  Case sz;
  sz.op = "Resize";
  sz.inputs = {{"x", rand_tensor(DType::F32, {2, 5, 8}, seed++)}};
  sz.consts = {{"sizes", i64s({11, 3})}};
  sz.order = {"x", "", "", "sizes"};
  sz.attrs = {Attribute::make_string("mode", "linear"), Attribute::make_ints("axes", {1, 2})};
  sz.tol = 1e-5;
  check(sz, "Resize sizes axes");
  Case u8 = sz;
  u8.inputs = {{"x", rand_tensor(DType::U8, {1, 3, 4, 5}, seed++, 0, 255)}};
  u8.consts = {{"scales", f32s({1, 1, 3, 2})}};
  u8.order = {"x", "", "scales"};
  u8.attrs = {Attribute::make_string("mode", "nearest")};
  check(u8, "Resize nearest u8");
  // paddle2onnx and tf2onnx give the unused roi (and scales, when sizes are given) as empty
  // 1-D constants: still the resize kernel, not the interpreter's (PaddleOCR det ran its six
  // Resizes there, a quarter of its run).
  Case p2o;
  p2o.op = "Resize";
  p2o.inputs = {{"x", rand_tensor(DType::F32, {1, 4, 5, 6}, seed++)}};
  p2o.consts = {{"roi", f32s({})}, {"scales", f32s({1, 1, 2, 2})}};
  p2o.order = {"x", "roi", "scales"};
  p2o.attrs = {Attribute::make_string("mode", "nearest"), Attribute::make_string("coordinate_transformation_mode", "asymmetric"),
               Attribute::make_string("nearest_mode", "floor")};
  check(p2o, "Resize with an empty roi");
  Case p2o_sizes = p2o;
  p2o_sizes.consts = {{"roi", f32s({})}, {"scales", f32s({})}, {"sizes", i64s({1, 4, 9, 13})}};
  p2o_sizes.order = {"x", "roi", "scales", "sizes"};
  check(p2o_sizes, "Resize with empty roi and scales");
  Case crop;
  crop.op = "Resize";
  crop.inputs = {{"x", rand_tensor(DType::F32, {1, 1, 6, 6}, seed++)}};
  crop.consts = {{"roi", f32s({0, 0, 0.4f, 0.6f, 1, 1, 1.2f, 1.7f})}, {"sizes", i64s({1, 1, 5, 4})}};
  crop.order = {"x", "roi", "", "sizes"};
  crop.attrs = {Attribute::make_string("mode", "linear"),
                Attribute::make_string("coordinate_transformation_mode", "tf_crop_and_resize"),
                Attribute::make_float("extrapolation_value", 10.0f)};
  crop.tol = 1e-5;
  check(crop, "Resize tf_crop_and_resize");
}

// align_corners (and pytorch_half_pixel at an output length of 1) divide by the integer output
// length, as ONNX Runtime 1.30 and torch do: torch's F.interpolate(scale_factor=1.5,
// align_corners=True) exports a Resize by 1.5 whose 7 -> 10 rows hodu sampled at x * 6 / 9.5
// (rel error 0.46 against ORT and torch). Values are ONNX Runtime's, on both engines.
TEST(CpuTensorKernels, ResizeAlignCornersUsesTheIntegerOutputLength) {
  struct R {
    std::string mode, ctm;
    int64_t h, w;  // input 1x1xHxW of 1, 2, 3...
    float sh, sw;
    std::vector<int64_t> out;
    std::vector<float> want;
  };
  const std::vector<R> cases = {
      // 2x4 by 0.6: 1x2 (2.4 -> 2), sampled at columns 0 and 3 (ONNX's node case expects 3.14).
      {"linear", "align_corners", 2, 4, 0.6f, 0.6f, {1, 2}, {1, 4}},
      // 1x5 by 1.5: 7 (7.5 -> 7), columns k * 4 / 6.
      {"linear", "align_corners", 1, 5, 1, 1.5f, {1, 7}, {1, 1.6666666f, 2.3333333f, 3, 3.6666666f, 4.3333333f, 5}},
      // cubic, 2x4 by 0.6: the sample points are pixels 0 and 3 exactly.
      {"cubic", "align_corners", 2, 4, 0.6f, 0.6f, {1, 2}, {1, 4}},
      // pytorch_half_pixel to one column: column 0 (-0.5 moved the cubic taps).
      {"cubic", "pytorch_half_pixel", 1, 4, 1, 0.3f, {1, 1}, {1}},
  };
  for (const auto& r : cases) {
    std::vector<float> x;
    for (int64_t i = 0; i < r.h * r.w; ++i) x.push_back(static_cast<float>(i + 1));
    Case c;
    c.op = "Resize";
    c.inputs = {{"x", Tensor::from_vector<float>(DType::F32, {1, 1, r.h, r.w}, x)}};
    c.consts = {{"scales", f32s({1, 1, r.sh, r.sw})}};
    c.order = {"x", "", "scales"};
    c.attrs = {Attribute::make_string("mode", r.mode), Attribute::make_string("coordinate_transformation_mode", r.ctm)};
    c.tol = 1e-6;
    const std::string what = fmt::format("Resize {} {} {}x{} by {}x{}", r.mode, r.ctm, r.h, r.w, r.sh, r.sw);
    Tensor want = Tensor::from_vector<float>(DType::F32, {1, 1, r.out[0], r.out[1]}, r.want);
    Model m = build(c);
    std::map<std::string, RuntimeValue> feeds{{"x", RuntimeValue(c.inputs[0].second)}};
    expect_close(interp::Interpreter(m).run(feeds)[0].tensor, want, 1e-6, what + " interpreter");
    check(c, what);  // the cpu engine against the interpreter, no fallback
  }
}

// MaxPool with its Indices output (torch's max_pool2d(return_indices=True)) ran on the
// interpreter's kernel: a plain loop now, equal to the interpreter's values and indices, with
// ties (the first wins), NaN entries (skipped), padding, dilation, ceil_mode, 1-D to 3-D.
TEST(CpuTensorKernels, MaxPoolWithIndices) {
  struct P {
    std::vector<int64_t> x, kernel, strides, pads, dil;
    int64_t ceil;
  };
  const std::vector<P> cases = {
      {{2, 3, 8, 10}, {2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}, 0},
      {{1, 2, 10, 12}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {2, 2}, 1},
      {{2, 2, 9, 7}, {3, 2}, {2, 3}, {1, 0, 1, 1}, {1, 1}, 1},
      {{2, 3, 11}, {3}, {2}, {1, 1}, {1}, 0},
      {{1, 2, 4, 5, 6}, {2, 2, 3}, {2, 2, 2}, {0, 1, 1, 0, 1, 1}, {1, 1, 1}, 0}};
  uint32_t seed = 500;
  for (const auto& p : cases) {
    Tensor x = rand_tensor(DType::F32, p.x, seed++);
    for (int64_t i = 0; i < x.numel(); ++i) x.set_double(i, std::round(x.get_double(i)));  // ties
    x.set_double(3, std::nan(""));
    Case c;
    c.op = "MaxPool";
    c.inputs = {{"x", x}};
    c.order = {"x"};
    c.outputs = 2;
    c.attrs = {Attribute::make_ints("kernel_shape", p.kernel), Attribute::make_ints("strides", p.strides),
               Attribute::make_ints("pads", p.pads), Attribute::make_ints("dilations", p.dil),
               Attribute::make_int("ceil_mode", p.ceil)};
    check(c, fmt::format("MaxPool with indices x {} kernel {}", fmt::join(p.x, "x"), fmt::join(p.kernel, "x")));
  }
}

// torch.nonzero exports NonZero -> Transpose: the Transpose's input shape is known only at
// run time, and the plan ran it on the interpreter's kernel. Now a cpu step, also when the
// count is 0 (an empty result).
TEST(CpuTensorKernels, TransposeOfAShapeKnownAtRunTime) {
  Model m;
  m.opset_imports[""] = 13;
  Graph& g = m.graph;
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape::from(std::vector<int64_t>{3, 4})), ""});
  Node nz;
  nz.name = "nz";
  nz.op_type = "NonZero";
  nz.inputs = {"x"};
  nz.outputs = {"idx"};
  Node tr;
  tr.name = "tr";
  tr.op_type = "Transpose";
  tr.inputs = {"idx"};
  tr.outputs = {"y"};
  tr.attributes = {Attribute::make_ints("perm", {1, 0})};
  g.nodes = {nz, tr};
  g.outputs.push_back({"y", {}, ""});
  infer_types(g);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  Plan plan(m, {{"x", {3, 4}}}, PlanOptions{}, eng);
  ASSERT_EQ(plan.fallback_count(), 0) << fmt::format("{}", fmt::join(plan.kernel_choices(), "; "));
  for (uint32_t seed : {1u, 2u}) {
    Tensor x = rand_tensor(DType::F32, {3, 4}, seed, -1, 1);
    for (int64_t i = 0; i < x.numel(); ++i) x.set_double(i, x.get_double(i) > 0 ? 1.0 : 0.0);
    if (seed == 2)
      for (int64_t i = 0; i < x.numel(); ++i) x.set_double(i, 0.0);  // no nonzero: [0, 2]
    std::map<std::string, RuntimeValue> feeds{{"x", RuntimeValue(x)}};
    auto want = interp::Interpreter(m).run(feeds);
    auto got = plan.run(feeds, stream);
    expect_close(got[0].tensor, want[0].tensor, 0, "NonZero -> Transpose, seed " + std::to_string(seed));
  }
}

// GridSample (torch's F.grid_sample, STN and flow warps) ran on the interpreter's kernel: the
// engine now runs the same sampling loop (grid_sample.h) split over its threads. Every mode,
// padding mode and align_corners, 2-D and 3-D, grid points inside and outside [-1, 1].
TEST(CpuTensorKernels, GridSampleEveryMode) {
  uint32_t seed = 700;
  for (const char* mode : {"linear", "nearest", "cubic"})
    for (const char* pad : {"zeros", "border", "reflection"})
      for (int64_t ac : {0, 1})
        for (const auto& [xs, gs] : std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>{
                 {{2, 3, 5, 6}, {2, 4, 7, 2}}, {{1, 2, 3, 4, 5}, {1, 2, 3, 4, 3}}}) {
          if (std::string(mode) == "cubic" && xs.size() == 5) continue;  // ONNX: cubic is 2-D only
          Tensor grid = rand_tensor(DType::F32, gs, seed++);
          for (int64_t i = 0; i < grid.numel(); ++i) grid.set_double(i, grid.get_double(i) * 0.4);
          Case c;
          c.op = "GridSample";
          c.inputs = {{"x", rand_tensor(DType::F32, xs, seed++)}, {"grid", grid}};
          c.order = {"x", "grid"};
          c.attrs = {Attribute::make_string("mode", mode), Attribute::make_string("padding_mode", pad),
                     Attribute::make_int("align_corners", ac)};
          c.tol = 0;  // the same loop: the same bits
          check(c, fmt::format("GridSample {} {} align_corners {} x {}", mode, pad, ac, fmt::join(xs, "x")));
        }
}

TEST(CpuTensorKernels, ConvTransposeOnOneDnn) {
  uint32_t seed = 80;
  struct D {
    std::vector<int64_t> x, w, strides, pads, opad, dil;
    int64_t group;
    std::string auto_pad;
    bool bias;
  };
  const std::vector<D> cases = {
      {{1, 8, 5, 5}, {8, 4, 2, 2}, {2, 2}, {0, 0, 0, 0}, {}, {}, 1, "", false},
      {{2, 6, 4, 7}, {6, 3, 3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, {}, 1, "", true},
      {{1, 8, 6, 6}, {8, 2, 3, 3}, {1, 1}, {1, 1, 1, 1}, {}, {}, 2, "", true},
      {{1, 4, 5, 5}, {4, 4, 4, 4}, {2, 2}, {}, {}, {}, 1, "SAME_UPPER", false},
      {{1, 3, 9}, {3, 5, 3}, {3}, {1, 0}, {2}, {}, 1, "", true},
      {{1, 4, 5, 5}, {4, 2, 3, 3}, {1, 1}, {0, 0, 0, 0}, {}, {2, 2}, 1, "", false}};
  for (const auto& d : cases) {
    Case c;
    c.op = "ConvTranspose";
    c.inputs = {{"x", rand_tensor(DType::F32, d.x, seed++)}};
    c.consts = {{"w", rand_tensor(DType::F32, d.w, seed++)}};
    c.order = {"x", "w"};
    if (d.bias) {
      c.consts.push_back({"b", rand_tensor(DType::F32, {d.w[1] * d.group}, seed++)});
      c.order.push_back("b");
    }
    c.attrs = {Attribute::make_ints("strides", d.strides), Attribute::make_int("group", d.group)};
    if (!d.pads.empty()) c.attrs.push_back(Attribute::make_ints("pads", d.pads));
    if (!d.opad.empty()) c.attrs.push_back(Attribute::make_ints("output_padding", d.opad));
    if (!d.dil.empty()) c.attrs.push_back(Attribute::make_ints("dilations", d.dil));
    if (!d.auto_pad.empty()) c.attrs.push_back(Attribute::make_string("auto_pad", d.auto_pad));
    c.tol = 1e-4;
    check(c, "ConvTranspose " + shape_to_string(d.x) + " w " + shape_to_string(d.w));
  }
}

TEST(CpuTensorKernels, ReductionsArgCumsumTopK) {
  uint32_t seed = 100;
  const char* ops[] = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                       "ReduceLogSumExp", "ReduceSumSquare"};
  const std::vector<std::vector<int64_t>> axes_list = {{}, {0}, {1}, {-1}, {0, 2}, {1, 2}, {0, 1, 2}};
  for (const char* op : ops)
    for (const auto& axes : axes_list)
      for (int64_t keep : {0, 1})
        for (DType dt : {DType::F32, DType::I64}) {
          if (dt == DType::I64 && (std::string(op) == "ReduceLogSumExp" || std::string(op) == "ReduceL2")) continue;
          Case c;
          c.op = op;
          c.inputs = {{"x", rand_tensor(dt, {3, 4, 5}, seed++, -3, 3)}};
          c.order = {"x"};
          if (!axes.empty()) {
            c.consts = {{"axes", i64s(axes)}};
            c.order.push_back("axes");
          }
          c.attrs = {Attribute::make_int("keepdims", keep)};
          c.tol = 1e-5;
          check(c, fmt::format("{} {} axes {} keep {}", op, dtype_name(dt), shape_to_string(axes), keep));
        }
  Case noop;
  noop.op = "ReduceSum";
  noop.inputs = {{"x", rand_tensor(DType::F32, {3, 4}, seed++)}};
  noop.order = {"x"};
  noop.attrs = {Attribute::make_int("noop_with_empty_axes", 1)};
  check(noop, "ReduceSum noop_with_empty_axes");
  for (const char* op : {"ArgMax", "ArgMin"})
    for (int64_t axis : {0, 1, -1})
      for (int64_t last : {0, 1}) {
        Case c;
        c.op = op;
        c.inputs = {{"x", rand_tensor(DType::I32, {4, 6, 5}, seed++, -2, 2)}};  // ties
        c.order = {"x"};
        c.attrs = {Attribute::make_int("axis", axis), Attribute::make_int("select_last_index", last),
                   Attribute::make_int("keepdims", axis == 1)};
        check(c, fmt::format("{} axis {} last {}", op, axis, last));
      }
  for (int64_t axis : {0, 1})
    for (int64_t excl : {0, 1})
      for (int64_t rev : {0, 1}) {
        Case c;
        c.op = "CumSum";
        c.inputs = {{"x", rand_tensor(DType::F32, {5, 7}, seed++)}};
        c.consts = {{"axis", Tensor::scalar<int64_t>(DType::I64, axis)}};
        c.order = {"x", "axis"};
        c.attrs = {Attribute::make_int("exclusive", excl), Attribute::make_int("reverse", rev)};
        c.tol = 1e-5;
        check(c, fmt::format("CumSum axis {} exclusive {} reverse {}", axis, excl, rev));
      }
  for (int64_t largest : {0, 1})
    for (int64_t axis : {0, -1}) {
      Case c;
      c.op = "TopK";
      c.inputs = {{"x", rand_tensor(DType::I64, {6, 9}, seed++, -3, 3)}};
      c.consts = {{"k", i64s({4})}};
      c.order = {"x", "k"};
      c.outputs = 2;
      c.attrs = {Attribute::make_int("largest", largest), Attribute::make_int("axis", axis)};
      check(c, fmt::format("TopK largest {} axis {}", largest, axis));
    }
}

TEST(CpuTensorKernels, GatherScatter) {
  uint32_t seed = 120;
  Case ge;
  ge.op = "GatherElements";
  ge.inputs = {{"x", rand_tensor(DType::F32, {3, 4, 5}, seed++)}, {"i", rand_tensor(DType::I64, {3, 2, 5}, seed++, -4, 3)}};
  ge.order = {"x", "i"};
  ge.attrs = {Attribute::make_int("axis", 1)};
  check(ge, "GatherElements");
  Case gn;
  gn.op = "GatherND";
  gn.inputs = {{"x", rand_tensor(DType::F32, {2, 3, 4}, seed++)},
               {"i", Tensor::from_vector<int64_t>(DType::I64, {2, 2, 1}, {0, 2, 1, -1})}};
  gn.order = {"x", "i"};
  gn.attrs = {Attribute::make_int("batch_dims", 1)};
  check(gn, "GatherND batch_dims 1");
  // A detector's score filter: single elements of a flat tensor by NonZero's [n, 1] indices,
  // enough of them to run on every thread; tuples of 2 with blocks of 3 elements.
  {
    std::vector<int64_t> idx(40000);
    for (size_t k = 0; k < idx.size(); ++k) idx[k] = static_cast<int64_t>((k * 7919) % 50000) - (k % 3 == 0 ? 50000 : 0);
    Case flat;
    flat.op = "GatherND";
    flat.inputs = {{"x", rand_tensor(DType::F32, {50000}, seed++)},
                   {"i", Tensor::from_vector<int64_t>(DType::I64, {40000, 1}, idx)}};
    flat.order = {"x", "i"};
    check(flat, "GatherND of single elements");
    std::vector<int64_t> tup;
    for (int k = 0; k < 300; ++k) tup.insert(tup.end(), {k % 5 - 2, (k * 3) % 7});
    Case pairs;
    pairs.op = "GatherND";
    pairs.inputs = {{"x", rand_tensor(DType::F32, {5, 7, 3}, seed++)},
                    {"i", Tensor::from_vector<int64_t>(DType::I64, {10, 30, 2}, tup)}};
    pairs.order = {"x", "i"};
    check(pairs, "GatherND pairs");
  }
  Case g;
  g.op = "Gather";
  g.inputs = {{"x", rand_tensor(DType::I64, {5, 6}, seed++)}, {"i", Tensor::from_vector<int32_t>(DType::I32, {2, 2}, {0, -1, 3, 2})}};
  g.order = {"x", "i"};
  g.attrs = {Attribute::make_int("axis", 1)};
  check(g, "Gather");
  for (const char* red : {"none", "add", "mul", "max", "min"}) {
    Case s;
    s.op = "ScatterND";
    s.inputs = {{"x", rand_tensor(DType::F32, {4, 3, 2}, seed++)},
                {"i", Tensor::from_vector<int64_t>(DType::I64, {3, 1}, {1, -1, 1})},
                {"u", rand_tensor(DType::F32, {3, 3, 2}, seed++)}};
    s.order = {"x", "i", "u"};
    s.attrs = {Attribute::make_string("reduction", red)};
    check(s, std::string("ScatterND ") + red);
    Case e;
    e.op = "ScatterElements";
    e.inputs = {{"x", rand_tensor(DType::F32, {3, 5}, seed++)},
                {"i", Tensor::from_vector<int64_t>(DType::I64, {2, 2}, {1, 4, 0, -1})},
                {"u", rand_tensor(DType::F32, {2, 2}, seed++)}};
    e.order = {"x", "i", "u"};
    e.attrs = {Attribute::make_string("reduction", red), Attribute::make_int("axis", 1)};
    check(e, std::string("ScatterElements ") + red);
  }
}

// Torch's slice assignment (`a[:, 1:, 1:] = u`, MViT's attention) as ScatterND: one tuple of
// every index per element, enough to run on every thread, targets increasing through the
// indices; the same tuples reversed and shuffled (no order to rely on: written again in order),
// and a tuple repeated at the ends of two threads' chunks (the last one in index order wins, as
// the interpreter's). Negative indices among them.
TEST(CpuTensorKernels, ScatterNDOfASliceAssignment) {
  const int64_t A = 4, B = 101, C = 113;  // 44800 tuples: enough bytes for two threads
  std::vector<int64_t> tuples;
  for (int64_t a = 0; a < A; ++a)
    for (int64_t b = 1; b < B; ++b)
      for (int64_t c = 1; c < C; ++c) tuples.insert(tuples.end(), {a, b == B - 1 ? -1 : b, c});
  const int64_t n = static_cast<int64_t>(tuples.size()) / 3;
  auto as_case = [&](const std::vector<int64_t>& t, uint32_t seed) {
    Case s;
    s.op = "ScatterND";
    s.inputs = {{"x", rand_tensor(DType::F32, {A, B, C}, seed)},
                {"i", Tensor::from_vector<int64_t>(DType::I64, {A, B - 1, C - 1, 3}, t)},
                {"u", rand_tensor(DType::F32, {A, B - 1, C - 1}, seed + 1)}};
    s.order = {"x", "i", "u"};
    return s;
  };
  check(as_case(tuples, 300), "ScatterND slice assignment");
  std::vector<int64_t> shuffled(tuples.size());
  for (int64_t j = 0; j < n; ++j) {
    const int64_t from = (j * 7919) % n;  // 7919 is prime, n is not a multiple of it: a permutation
    std::copy_n(tuples.begin() + from * 3, 3, shuffled.begin() + j * 3);
  }
  check(as_case(shuffled, 302), "ScatterND of shuffled tuples");
  // Chunks of 8192 tuples: the last tuple of the first chunk's target again as the first of the
  // fourth (written first in time by the thread that starts there; it must still win), and the
  // first target again as the last tuple.
  ASSERT_GT(n, 3 * 8192 + 1);
  std::vector<int64_t> repeated = tuples;
  std::copy_n(tuples.begin() + 8191 * 3, 3, repeated.begin() + 3 * 8192 * 3);
  std::copy_n(tuples.begin(), 3, repeated.begin() + (n - 1) * 3);
  check(as_case(repeated, 304), "ScatterND with repeated targets");
}

TEST(CpuTensorKernels, IndexOutOfRangeIsAnErrorNamingTheNode) {
  {
    Case s;
    s.op = "ScatterND";
    std::vector<int64_t> t(2 * 20000);
    for (int64_t j = 0; j < 20000; ++j) t[static_cast<size_t>(2 * j)] = j % 4, t[static_cast<size_t>(2 * j + 1)] = j / 4;
    t[2 * 15000 + 1] = 5000;  // out of range, on the second thread's part
    s.inputs = {{"x", rand_tensor(DType::F32, {4, 5000}, 1)}, {"i", Tensor::from_vector<int64_t>(DType::I64, {20000, 2}, t)},
                {"u", rand_tensor(DType::F32, {20000}, 2)}};
    s.order = {"x", "i", "u"};
    Model m = build(s);
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream stream(eng);
    PlanOptions o;
    o.threads = 2;
    Plan plan(m, {{"x", {4, 5000}}, {"i", {20000, 2}}, {"u", {20000}}}, o, eng);
    EXPECT_EQ(plan.fallback_count(), 0);
    try {
      plan.run({{"x", RuntimeValue(s.inputs[0].second)}, {"i", RuntimeValue(s.inputs[1].second)},
                {"u", RuntimeValue(s.inputs[2].second)}},
               stream);
      ADD_FAILURE() << "ScatterND: no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find("index 5000 is out of range for a dim of size 5000"), std::string::npos)
          << e.what();
    }
  }
  for (const char* op : {"GatherElements", "GatherND"}) {
    Case g;
    g.op = op;
    g.inputs = {{"x", rand_tensor(DType::F32, {3, 4}, 1)}, {"i", Tensor::from_vector<int64_t>(DType::I64, {1, 1}, {9})}};
    g.order = {"x", "i"};
    Model m = build(g);
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream stream(eng);
    Plan plan(m, {{"x", {3, 4}}, {"i", {1, 1}}}, PlanOptions{}, eng);
    EXPECT_EQ(plan.fallback_count(), 0) << op;
    try {
      plan.run({{"x", RuntimeValue(g.inputs[0].second)}, {"i", RuntimeValue(g.inputs[1].second)}}, stream);
      ADD_FAILURE() << op << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << op;
      EXPECT_NE(std::string(e.what()).find("node"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
    }
  }
}

TEST(CpuTensorKernels, InstanceGroupNormAndLrn) {
  uint32_t seed = 140;
  for (const auto& shape : std::vector<std::vector<int64_t>>{{2, 6, 5, 7}, {1, 6, 33}, {3, 6, 1}}) {
    Case in;
    in.op = "InstanceNormalization";
    in.inputs = {{"x", rand_tensor(DType::F32, shape, seed++)}};
    in.consts = {{"s", rand_tensor(DType::F32, {6}, seed++)}, {"b", rand_tensor(DType::F32, {6}, seed++)}};
    in.order = {"x", "s", "b"};
    in.tol = 1e-5;
    check(in, "InstanceNormalization " + shape_to_string(shape));
    Case gn = in;
    gn.op = "GroupNormalization";
    gn.attrs = {Attribute::make_int("num_groups", 3), Attribute::make_float("epsilon", 1e-3f)};
    check(gn, "GroupNormalization " + shape_to_string(shape));
    for (int64_t size : {1, 3, 4, 9}) {
      Case l;
      l.op = "LRN";
      l.inputs = {{"x", rand_tensor(DType::F32, shape, seed++)}};
      l.order = {"x"};
      l.attrs = {Attribute::make_int("size", size), Attribute::make_float("alpha", 0.01f)};
      l.tol = 1e-5;
      check(l, "LRN size " + std::to_string(size) + " " + shape_to_string(shape));
    }
  }
}

TEST(CpuTensorKernels, EinsumPatterns) {
  uint32_t seed = 160;
  struct E {
    std::string eq;
    std::vector<std::vector<int64_t>> shapes;
  };
  const std::vector<E> cases = {{"ij,jk->ik", {{4, 5}, {5, 6}}},
                                {"bhid,bhjd->bhij", {{2, 3, 4, 8}, {2, 3, 5, 8}}},
                                {"bij,bjk->bik", {{3, 4, 5}, {3, 5, 2}}},
                                {"ij,kj->ik", {{4, 5}, {6, 5}}},
                                {"i,j->ij", {{4}, {6}}},
                                {"bn,anm->bam", {{2, 3}, {4, 3, 5}}},
                                {"ij->ji", {{3, 7}}},
                                {"ijk->ik", {{3, 4, 5}}},
                                {"ij,jk", {{2, 3}, {3, 4}}},
                                {"i,i->", {{9}, {9}}}};
  for (const auto& c : cases) {
    Case e;
    e.op = "Einsum";
    for (size_t i = 0; i < c.shapes.size(); ++i) {
      const std::string name = fmt::format("x{}", i);
      e.inputs.push_back({name, rand_tensor(DType::F32, c.shapes[i], seed++)});
      e.order.push_back(name);
    }
    e.attrs = {Attribute::make_string("equation", c.eq)};
    e.tol = 1e-5;
    check(e, "Einsum " + c.eq);
  }
}

// A graph output that is a Reshape of an arena value keeps its bytes to the end of the run: a
// later step's arena slot must not take them (ONNX's expanded LayerNormalization: Y was a view of
// bytes the InvStdDev Reciprocal then wrote).
TEST(CpuTensorKernels, OutputViewsKeepTheirBytesToTheEnd) {
  Model m;
  m.opset_imports[""] = 21;
  Graph& g = m.graph;
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape::from({4, 3})), ""});
  g.set_initializer("flat", i64s({12}));
  auto node = [&](std::string op, std::vector<std::string> in, std::string out) {
    Node n;
    n.name = out;
    n.op_type = std::move(op);
    n.inputs = std::move(in);
    n.outputs = {out};
    g.nodes.push_back(n);
  };
  node("Relu", {"x"}, "a");
  node("Reshape", {"a", "flat"}, "y1");
  node("Neg", {"x"}, "b");
  node("Reciprocal", {"b"}, "c");
  node("Reshape", {"c", "flat"}, "y2");
  g.outputs.push_back({"y1", {}, ""});
  g.outputs.push_back({"y2", {}, ""});
  infer_types(g);
  for (auto& o : g.outputs) o.type = *g.type_of(o.name);
  Tensor x = rand_tensor(DType::F32, {4, 3}, 7);
  auto want = interp::Interpreter(m).run({{"x", RuntimeValue(x)}});
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  Plan plan(m, {{"x", {4, 3}}}, PlanOptions{}, eng);
  auto got = plan.run({{"x", RuntimeValue(x)}}, stream);
  for (size_t i = 0; i < 2; ++i) expect_close(got[i].tensor, want[i].tensor, 1e-6, "output " + std::to_string(i));
}

// A Session's dispatcher picks the highest-priority registered kernel; an op and dtype with only
// the "reference" entry run on the interpreter. The tensor kernels take every dtype.
TEST(CpuTensorKernels, RegistryOffersACpuKernelForEveryDtype) {
  KernelRegistry r;
  register_cpu_kernels(r);
  for (const char* op : {"Add", "Equal", "Where", "Concat", "Slice", "Transpose", "Gather", "Cast", "CastLike",
                         "Resize", "ReduceSum", "Split", "Expand", "Range", "NonZero", "Pad", "ConvTranspose"})
    for (DType dt : {DType::F32, DType::I64, DType::Bool}) {
      if (std::string(op) == "ConvTranspose" && dt != DType::F32) continue;
      auto ks = r.find(op, "", Device::Kind::CPU, dt);
      ASSERT_FALSE(ks.empty()) << op;
      EXPECT_NE(ks.front().name, "reference") << op << " " << dtype_name(dt);
    }
}

// Shapes known only at run time: NonZero's output flows through Transpose-free kernels that
// allocate their outputs (Gather, Shape, Range, ConstantOfShape, Cast, Add) with no fallback.
TEST(CpuTensorKernels, DataDependentShapesRunWithoutFallback) {
  Model m;
  m.opset_imports[""] = 21;
  Graph& g = m.graph;
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape::from({4, 6})), ""});
  g.set_initializer("zero", Tensor::scalar<float>(DType::F32, 0.0f));
  g.set_initializer("one", Tensor::scalar<int64_t>(DType::I64, 1));
  g.set_initializer("start", Tensor::scalar<int64_t>(DType::I64, 0));
  g.set_initializer("axes0", i64s({0}));
  auto node = [&](std::string op, std::vector<std::string> in, std::vector<std::string> out,
                  std::vector<Attribute> attrs = {}) {
    Node n;
    n.name = out[0];
    n.op_type = std::move(op);
    n.inputs = std::move(in);
    n.outputs = std::move(out);
    n.attributes = std::move(attrs);
    g.nodes.push_back(n);
  };
  node("Greater", {"x", "zero"}, {"pos"});
  node("NonZero", {"pos"}, {"nz"});                                         // [2, ?]
  node("Gather", {"nz", "one"}, {"cols"}, {Attribute::make_int("axis", 0)});  // [?]
  node("Shape", {"cols"}, {"len"});
  node("Squeeze", {"len", "axes0"}, {"n"});
  node("Range", {"start", "n", "one"}, {"r"});
  node("Add", {"r", "cols"}, {"sum"});
  node("Cast", {"sum"}, {"y"}, {Attribute::make_int("to", dtype_to_onnx(DType::F32))});
  node("ConstantOfShape", {"len"}, {"fill"}, {Attribute::make_tensor("value", Tensor::scalar<float>(DType::F32, 2.0f))});
  node("Mul", {"y", "fill"}, {"out"});
  g.outputs.push_back({"out", {}, ""});
  infer_types(g);
  g.outputs[0].type = *g.type_of("out");
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  Plan plan(m, {{"x", {4, 6}}}, PlanOptions{}, eng);
  EXPECT_EQ(plan.fallback_count(), 0) << fmt::format("{}", fmt::join(plan.kernel_choices(), "; "));
  for (uint32_t seed : {1u, 2u, 3u}) {  // a different count of positives each run
    Tensor x = rand_tensor(DType::F32, {4, 6}, seed);
    auto want = interp::Interpreter(m).run({{"x", RuntimeValue(x)}});
    auto got = plan.run({{"x", RuntimeValue(x)}}, stream);
    expect_close(got[0].tensor, want[0].tensor, 0, "seed " + std::to_string(seed));
  }
}

// NonMaxSuppression ran on the interpreter's kernel (every detector's postprocess). Random
// boxes in both corner orders and center form, scores on a few levels so that many tie (ties
// go to the lower box index), batches and classes, thresholds as initializers or as run-time
// scalars, max_output_boxes_per_class absent (nothing kept), small and larger than the boxes;
// a NaN coordinate (the engine's x-sorted window then gives way to the plain scan).
TEST(CpuTensorKernels, NonMaxSuppressionRandomBoxesAndTies) {
  uint32_t seed = 900;
  for (int64_t cpb : {0, 1})
    for (const auto& [B, K, S] : std::vector<std::array<int64_t, 3>>{{1, 1, 40}, {2, 3, 25}, {1, 2, 300}})
      for (int variant = 0; variant < 4; ++variant) {
        std::mt19937 rng(seed++);
        std::uniform_real_distribution<float> pos(0.0f, 20.0f), size(0.5f, 8.0f);
        Tensor boxes = Tensor::empty(DType::F32, {B, S, 4}), scores = Tensor::empty(DType::F32, {B, K, S});
        for (int64_t i = 0; i < B * S; ++i) {
          float* p = boxes.data<float>() + i * 4;
          const float y = pos(rng), x = pos(rng), h = size(rng), w = size(rng);
          if (cpb) {
            p[0] = x, p[1] = y, p[2] = w, p[3] = h;
          } else if (rng() & 1) {  // corners in either order
            p[0] = y, p[1] = x, p[2] = y + h, p[3] = x + w;
          } else {
            p[0] = y + h, p[1] = x + w, p[2] = y, p[3] = x;
          }
        }
        for (int64_t i = 0; i < B * K * S; ++i) scores.data<float>()[i] = static_cast<float>(rng() % 6) / 5.0f;
        if (variant == 1) boxes.data<float>()[4 * (S / 2) + 1] = NAN;  // suppresses nothing, is never suppressed
        const float iou = variant == 3 ? 0.0f : 0.25f + 0.2f * variant;
        Case c;
        c.op = "NonMaxSuppression";
        c.attrs = {Attribute::make_int("center_point_box", cpb)};
        c.inputs = {{"boxes", boxes}, {"scores", scores}};
        c.order = {"boxes", "scores"};
        std::vector<std::pair<std::string, Tensor>>& scalars = variant % 2 ? c.inputs : c.consts;
        const int64_t max_out = variant == 0 ? 3 : variant == 1 ? 1000 : S / 2;
        if (variant != 2 || cpb == 0) {  // cpb 1, variant 2: max_output_boxes_per_class absent
          scalars.push_back({"max", Tensor::from_vector<int64_t>(DType::I64, {1}, {max_out})});
          c.order.push_back("max");
        } else {
          c.order.push_back("");
        }
        scalars.push_back({"iou", Tensor::from_vector<float>(DType::F32, {}, {iou})});
        c.order.push_back("iou");
        if (variant >= 2) {
          scalars.push_back({"score", Tensor::from_vector<float>(DType::F32, {1}, {0.3f})});
          c.order.push_back("score");
        }
        c.tol = 0;
        check(c, fmt::format("NonMaxSuppression cpb {} B {} K {} S {} variant {}", cpb, B, K, S, variant));
      }
}

// The spec's order, independent of the interpreter: per batch, per class, by score (ties: the
// lower index first); box 2 overlaps box 0 (IoU 0.81) and goes, box 3 overlaps nothing.
TEST(CpuTensorKernels, NonMaxSuppressionOrder) {
  Case c;
  c.op = "NonMaxSuppression";
  c.inputs = {{"boxes", Tensor::from_vector<float>(DType::F32, {1, 4, 4},
                                                   {0, 0, 10, 10, 20, 20, 30, 30, 0, 0, 9, 9, 50, 50, 51, 51})},
              {"scores", Tensor::from_vector<float>(DType::F32, {1, 2, 4}, {0.5f, 0.9f, 0.5f, 0.5f,  // class 0
                                                                             0.1f, 0.1f, 0.7f, 0.2f})}};
  c.consts = {{"max", i64s({10})}, {"iou", f32s({0.5f})}};
  c.order = {"boxes", "scores", "max", "iou"};
  Model m = build(c);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  Plan plan(m, {{"boxes", {1, 4, 4}}, {"scores", {1, 2, 4}}}, PlanOptions{}, eng);
  ASSERT_EQ(plan.fallback_count(), 0);
  auto got = plan.run({{"boxes", RuntimeValue(c.inputs[0].second)}, {"scores", RuntimeValue(c.inputs[1].second)}},
                      stream);
  EXPECT_EQ(got[0].tensor.shape(), (std::vector<int64_t>{6, 3}));
  EXPECT_EQ(got[0].tensor.to_int64s(),
            (std::vector<int64_t>{0, 0, 1, 0, 0, 0, 0, 0, 3,    // class 0: 0.9, then 0.5 at 0 and 3 (2 suppressed)
                                  0, 1, 2, 0, 1, 3, 0, 1, 1}));  // class 1: 0.7, 0.2, 0.1 at 1 (0 suppressed by 2)
}

// RoiAlign ran on the interpreter's kernel (Faster/Mask R-CNN's box and mask heads): both
// modes, both coordinate modes, adaptive (0) and fixed sampling, regions inside, across and
// outside the map, several images. The engine samples in float as ONNX Runtime does; the
// interpreter in double: close, not equal.
TEST(CpuTensorKernels, RoiAlignEveryMode) {
  uint32_t seed = 950;
  for (const char* mode : {"avg", "max"})
    for (const char* ctm : {"half_pixel", "output_half_pixel"})
      for (int64_t sr : {0, 2})
        for (float scale : {1.0f, 0.25f}) {
          std::mt19937 rng(seed++);
          std::uniform_real_distribution<float> pos(-6.0f, 40.0f), size(0.2f, 30.0f);
          const int64_t R = 9;
          Tensor rois = Tensor::empty(DType::F32, {R, 4});
          for (int64_t r = 0; r < R; ++r) {
            float* p = rois.data<float>() + r * 4;
            p[0] = pos(rng), p[1] = pos(rng);
            p[2] = p[0] + size(rng), p[3] = p[1] + size(rng);
          }
          Tensor bi = Tensor::empty(DType::I64, {R});
          for (int64_t r = 0; r < R; ++r) bi.data<int64_t>()[r] = static_cast<int64_t>(rng() % 2);
          Case c;
          c.op = "RoiAlign";
          const std::vector<int64_t> xs = scale == 1.0f ? std::vector<int64_t>{2, 3, 11, 13} : std::vector<int64_t>{2, 5, 6, 7};
          c.inputs = {{"x", rand_tensor(DType::F32, xs, seed++)}, {"rois", rois}, {"bi", bi}};
          c.order = {"x", "rois", "bi"};
          c.attrs = {Attribute::make_string("mode", mode), Attribute::make_string("coordinate_transformation_mode", ctm),
                     Attribute::make_int("sampling_ratio", sr), Attribute::make_float("spatial_scale", scale),
                     Attribute::make_int("output_height", 3), Attribute::make_int("output_width", 2)};
          c.tol = 1e-5;
          check(c, fmt::format("RoiAlign {} {} sampling_ratio {} spatial_scale {}", mode, ctm, sr, scale));
        }
}

// Faster R-CNN's postprocess concatenates tensors of as many rows as proposals survived, and
// its box head is Flatten -> Gemm -> Relu (hodu.FusedGemm after fusion) over them: with the
// rows known only while running both ran on the interpreter's kernels (the Gemm was 35 % of
// the model). Planned here with symbolic rows; several row counts, 0 included.
TEST(CpuTensorKernels, ConcatAndFusedGemmOfRunTimeRows) {
  Model m;
  m.opset_imports[""] = 17;
  m.opset_imports["hodu"] = 1;
  Graph& g = m.graph;
  auto rows = [](int64_t cols) { return ValueType::tensor(DType::F32, Shape{Dim::sym("n"), Dim(cols)}); };
  g.inputs.push_back({"a", rows(5), ""});
  g.inputs.push_back({"b", rows(3), ""});
  g.inputs.push_back({"z", rows(4), ""});
  g.inputs.push_back({"wrt", ValueType::tensor(DType::F32, Shape{Dim(8), Dim(4)}), ""});
  g.set_initializer("w", rand_tensor(DType::F32, {4, 8}, 31));
  g.set_initializer("c", rand_tensor(DType::F32, {4}, 32));
  auto node = [&](const char* op, const char* domain, std::vector<std::string> in, std::string out,
                  std::vector<Attribute> attrs) {
    Node n;
    n.name = out;
    n.op_type = op;
    n.domain = domain;
    n.inputs = std::move(in);
    n.outputs = {out};
    n.attributes = std::move(attrs);
    g.nodes.push_back(n);
    g.outputs.push_back({out, {}, ""});
  };
  node("Concat", "", {"a", "b"}, "cat1", {Attribute::make_int("axis", -1)});
  node("Concat", "", {"a", "a", "a"}, "cat0", {Attribute::make_int("axis", 0)});
  node("FusedGemm", "hodu", {"cat1", "w", "c"}, "fc", {Attribute::make_int("transB", 1),
                                                         Attribute::make_string("activation", "Relu")});
  node("FusedGemm", "hodu", {"cat1", "w", "c", "z"}, "fcz",
       {Attribute::make_int("transB", 1), Attribute::make_float("alpha", 0.5f),
        Attribute::make_string("activation", "LeakyRelu"), Attribute::make_floats("activation_params", {0.2f})});
  // A run-time C; a fed B.
  node("Gemm", "", {"cat1", "w", "z"}, "gc", {Attribute::make_int("transB", 1), Attribute::make_float("beta", 0.5f)});
  node("FusedGemm", "hodu", {"cat1", "wrt", "c"}, "fcrt", {Attribute::make_string("activation", "Sigmoid")});
  infer_types(g);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  for (int threads : {1, 2}) {
    PlanOptions o;
    o.threads = threads;
    Plan plan(m, {}, o, eng);
    ASSERT_EQ(plan.fallback_count(), 0) << fmt::format("{}", fmt::join(plan.kernel_choices(), "; "));
    for (int64_t n : {3, 0, 70}) {
      std::map<std::string, RuntimeValue> feeds{{"a", RuntimeValue(rand_tensor(DType::F32, {n, 5}, 40 + n))},
                                                {"b", RuntimeValue(rand_tensor(DType::F32, {n, 3}, 50 + n))},
                                                {"z", RuntimeValue(rand_tensor(DType::F32, {n, 4}, 60 + n))},
                                                {"wrt", RuntimeValue(rand_tensor(DType::F32, {8, 4}, 70))}};
      auto want = interp::Interpreter(m).run(feeds);
      auto got = plan.run(feeds, stream);
      ASSERT_EQ(got.size(), 6u);
      for (size_t i = 0; i < 6; ++i)
        expect_close(got[i].tensor, want[i].tensor, i < 2 ? 0 : 1e-5, fmt::format("rows {} output {}", n, i));
    }
    // On AVX-512 the FusedGemms of constant weights planned per row count (their weights packed
    // once), the fed one on sgemm (below AVX-512 all three); nothing on the interpreter at any depth.
    const auto steps = plan.kernel_choices();
    const std::string all = fmt::format("{}", fmt::join(steps, "\n"));
    int per_shape = 0, sgemm = 0;
    for (const auto& k : steps) {
      EXPECT_EQ(k.find(": interp"), std::string::npos) << all;
      per_shape += k.find("(hodu.FusedGemm): cpu, planned for its shapes while running") != std::string::npos;
      sgemm += k.find("'fcrt' (hodu.FusedGemm): cpu sgemm") != std::string::npos;
    }
    EXPECT_EQ(per_shape, vector_math::cpu_isa() == vector_math::Isa::Avx512 ? 2 : 0) << all;
    EXPECT_EQ(sgemm, 1) << all;
  }
}

// Torch's index tuples (MViT's slice assignment): int64 columns of one value a row stacked on
// the last axis, rows known only while running, enough of them for many blocks on two threads;
// and parts of 1, 2 and 6 bytes a row. Equal to the interpreter's, byte for byte.
TEST(CpuTensorKernels, ConcatOfNarrowRunTimeColumns) {
  Model m;
  m.opset_imports[""] = 17;
  Graph& g = m.graph;
  auto col = [](DType dt, int64_t w) { return ValueType::tensor(dt, Shape{Dim::sym("n"), Dim(w)}); };
  for (const char* name : {"i0", "i1", "i2", "i3"}) g.inputs.push_back({name, col(DType::I64, 1), ""});
  g.inputs.push_back({"b1", col(DType::U8, 1), ""});
  g.inputs.push_back({"b2", col(DType::U8, 2), ""});
  g.inputs.push_back({"b6", col(DType::U8, 6), ""});
  auto concat = [&](std::vector<std::string> in, std::string out) {
    Node n;
    n.name = out;
    n.op_type = "Concat";
    n.inputs = std::move(in);
    n.outputs = {out};
    n.attributes = {Attribute::make_int("axis", -1)};
    g.nodes.push_back(n);
    g.outputs.push_back({out, {}, ""});
  };
  concat({"i0", "i1", "i2", "i3"}, "tuples");
  concat({"b1", "b2", "b6", "b1"}, "bytes");
  infer_types(g);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  for (int threads : {1, 2}) {
    PlanOptions o;
    o.threads = threads;
    Plan plan(m, {}, o, eng);
    ASSERT_EQ(plan.fallback_count(), 0);
    for (int64_t n : {5, 40001}) {
      std::map<std::string, RuntimeValue> feeds;
      uint32_t seed = 90;
      for (const char* name : {"i0", "i1", "i2", "i3"})
        feeds[name] = RuntimeValue(rand_tensor(DType::I64, {n, 1}, seed++, -1000, 1000));
      feeds["b1"] = RuntimeValue(rand_tensor(DType::U8, {n, 1}, seed++));
      feeds["b2"] = RuntimeValue(rand_tensor(DType::U8, {n, 2}, seed++));
      feeds["b6"] = RuntimeValue(rand_tensor(DType::U8, {n, 6}, seed++));
      auto want = interp::Interpreter(m).run(feeds);
      auto got = plan.run(feeds, stream);
      for (size_t i = 0; i < 2; ++i) expect_close(got[i].tensor, want[i].tensor, 0, fmt::format("rows {} output {}", n, i));
    }
  }
}

// A detector's head runs the same convs on every pyramid level: nodes that read one weight in
// the same view and layout share one packed copy (RetinaNet held 50 Winograd copies of its head
// weights, 4x the originals each). Three 5x5 convs of one weight on the same shape (oneDNN's
// direct kernel at every ISA; hodu's own AVX2 Winograd keeps its transformed copies) pack it once.
TEST(CpuTensorKernels, ConvsOfOneWeightShareItsPackedCopy) {
  auto model = [](int convs) {
    Model m;
    m.opset_imports[""] = 17;
    Graph& g = m.graph;
    g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape{1, 32, 40, 40}), ""});
    Tensor w = rand_tensor(DType::F32, {32, 32, 5, 5}, 81);
    for (int64_t i = 0; i < w.numel(); ++i) w.set_double(i, w.get_double(i) * 0.02);  // outputs stay near 1
    g.set_initializer("w", w);
    for (int i = 0; i < convs; ++i) {
      Node n;
      n.name = "conv" + std::to_string(i);
      n.op_type = "Conv";
      n.inputs = {i == 0 ? "x" : "y" + std::to_string(i - 1), "w"};
      n.outputs = {"y" + std::to_string(i)};
      n.attributes = {Attribute::make_ints("pads", {2, 2, 2, 2})};
      g.nodes.push_back(n);
    }
    g.outputs.push_back({"y" + std::to_string(convs - 1), {}, ""});
    infer_types(g);
    return m;
  };
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  Model one = model(1), three = model(3);
  Plan p1(one, {{"x", {1, 32, 40, 40}}}, PlanOptions{}, eng), p3(three, {{"x", {1, 32, 40, 40}}}, PlanOptions{}, eng);
  ASSERT_GT(p1.packed_bytes(), 0u);
  EXPECT_EQ(p3.packed_bytes(), p1.packed_bytes());
  Tensor x = rand_tensor(DType::F32, {1, 32, 40, 40}, 82);
  auto want = interp::Interpreter(three).run({{"x", RuntimeValue(x)}});
  auto got = p3.run({{"x", RuntimeValue(x)}}, stream);
  expect_close(got[0].tensor, want[0].tensor, 1e-3, "three convs of one weight");
}

// Under HODU_MAX_ISA (ctest cpu_engine_test_avx2 runs this whole program so), hodu's vector loops
// and oneDNN's kernels stay at or below the cap.
TEST(CpuTensorKernels, MaxIsaCapsHoduLoopsAndOneDnn) {
  const char* cap = std::getenv("HODU_MAX_ISA");
  const std::string c = cap ? cap : "";
  if (c != "avx2" && c != "avx2_vnni")
    GTEST_SKIP() << "run with HODU_MAX_ISA=avx2 or avx2_vnni (ctest cpu_engine_test_avx2, cpu_int8_test_avx2_vnni)";
  apply_isa_cap();
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  EXPECT_NE(vector_math::cpu_isa(), vector_math::Isa::Avx512);
  const auto most = c == "avx2" ? dnnl::cpu_isa::avx2 : dnnl::cpu_isa::avx2_vnni;
  // oneDNN's ISAs are bit sets (avx2_vnni is avx2 and one bit more, avx512_core others): a subset.
  const auto got = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  EXPECT_EQ(got & ~static_cast<unsigned>(most), 0u) << std::hex << got;
}

TEST(CpuTensorKernels, UnknownMaxIsaIsAnError) {
  EXPECT_EQ(isa_cap::level_of("avx2"), 1);
  EXPECT_EQ(isa_cap::level_of("avx2_vnni"), 2);
  EXPECT_EQ(isa_cap::level_of("avx512"), 3);
  EXPECT_EQ(isa_cap::level_of(""), 99);
  EXPECT_EQ(isa_cap::level_of("avx3"), -1);
}

}  // namespace
}  // namespace hodu::cpu
