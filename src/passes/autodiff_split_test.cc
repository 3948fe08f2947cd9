// Tests of split_gradient_graph: run apart on the interpreter, the forward and the backward give
// what the joint gradient graph gives; the backward reads the forward's Dropout mask; only what
// the backward needs crosses the cut (no tensor kept for its shape); several outputs; errors.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "engines/interp/interpreter.h"
#include "ir/verifier.h"
#include "passes/autodiff.h"
#include "passes/autodiff_split.h"
#include "passes/autodiff_test_util.h"

namespace hodu::passes {
namespace {

using autodiff_test::Net;
using autodiff_test::rnd;

std::map<std::string, RuntimeValue> run(const Model& like, const Graph& g, const std::map<std::string, RuntimeValue>& feeds) {
  Model m = like;
  m.graph = g;
  std::map<std::string, RuntimeValue> in;
  for (const auto& v : g.inputs) in[v.name] = feeds.at(v.name);
  auto outs = interp::Interpreter(m).run(in);
  std::map<std::string, RuntimeValue> named;
  for (size_t i = 0; i < outs.size(); ++i) named[g.outputs[i].name] = outs[i];
  return named;
}

// Runs the split forward, then the backward fed its saved values and `seeds`.
std::map<std::string, RuntimeValue> run_split(const Net& net, const ForwardBackward& fb,
                                              const std::map<std::string, RuntimeValue>& seeds) {
  EXPECT_NO_THROW(verify_graph(fb.forward));
  EXPECT_NO_THROW(verify_graph(fb.backward));
  auto fwd = run(net.m, fb.forward, net.feeds);
  std::map<std::string, RuntimeValue> feeds = net.feeds;
  for (const auto& [k, v] : seeds) feeds[k] = v;
  for (const auto& s : fb.saved) feeds[s] = fwd.at(s);
  auto bwd = run(net.m, fb.backward, feeds);
  for (const auto& [k, v] : fwd) bwd.emplace(k, v);
  return bwd;
}

void expect_near(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  auto x = a.to_doubles(), y = b.to_doubles();
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], tol) << what << " [" << i << "]";
}

// y = relu(flatten(x) · w1) · w2, x f64[batch, 2, 3] with a symbolic batch.
Net mlp() {
  Net n;
  n.input("x", rnd({4, 2, 3}, 1), Shape({Dim::sym("batch"), Dim(2), Dim(3)}))
      .input("w1", rnd({6, 5}, 2))
      .input("w2", rnd({5, 3}, 3))
      .node("Flatten", {"x"}, {"f"}, {Attribute::make_int("axis", 1)})
      .node("MatMul", {"f", "w1"}, {"h"})
      .node("Relu", {"h"}, {"r"})
      .node("MatMul", {"r", "w2"}, {"y"})
      .output("y");
  return n;
}

TEST(AutodiffSplit, ForwardAndBackwardApartEqualTheJointGraph) {
  Net n = mlp();
  ForwardBackward fb = split_gradient_graph(n.g, {{"y"}, {"x", "w1", "w2"}});
  EXPECT_EQ(fb.seeds, std::vector<std::string>{"grad.y"});
  Tensor seed = rnd({4, 3}, 9);
  auto got = run_split(n, fb, {{"grad.y", seed}});

  Graph joint = build_gradient_graph(n.g, {"y", {"x", "w1", "w2"}, true});
  auto feeds = n.feeds;
  feeds["grad.y"] = seed;
  auto want = run(n.m, joint, feeds);
  for (const char* v : {"y", "grad.x", "grad.w1", "grad.w2"}) expect_near(got.at(v).tensor, want.at(v).tensor, 1e-12, v);

  // The forward's outputs are y, then what the backward reads; the backward's inputs are the
  // seed, the saved values and the forward inputs it reads; its outputs the gradients.
  EXPECT_EQ(fb.forward.outputs[0].name, "y");
  EXPECT_EQ(fb.forward.outputs.size(), 1 + fb.saved.size());
  EXPECT_EQ(fb.backward.inputs.size(), 1 + fb.saved.size() + fb.reused_inputs.size());
  EXPECT_EQ(fb.backward.outputs.size(), 3u);
  for (const auto& v : fb.backward.inputs) EXPECT_FALSE(fb.backward.initializer(v.name)) << v.name;
  // Nothing but the ReLU's output (or its input) and the flattened x is kept; x itself is read
  // from the caller (no copy), and the shape of x the Reshape of grad.x needs comes from x's type.
  for (const auto& s : fb.saved) {
    auto t = fb.forward.type_of(s);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->dtype, DType::F64) << s << ": no shape tensor crosses the cut";
  }
  EXPECT_LE(fb.saved.size(), 2u);
}

TEST(AutodiffSplit, SymbolicShapesStayPlannable) {
  Net n = mlp();
  ForwardBackward fb = split_gradient_graph(n.g, {{"y"}, {"w1", "w2"}});
  // Only weights are wanted: x is not read by the backward, and the Reshape of the flattened
  // gradient is not needed either; no saved value is an integer tensor.
  for (const auto& s : fb.saved) EXPECT_NE(s, "x");
  for (const auto& v : fb.backward.inputs) {
    if (auto t = fb.backward.type_of(v.name)) {
      EXPECT_NE(t->dtype, DType::I64) << v.name;
    }
  }
  auto got = run_split(n, fb, {{"grad.y", rnd({4, 3}, 9)}});
  EXPECT_EQ(got.at("grad.w1").tensor.shape(), (std::vector<int64_t>{6, 5}));
}

TEST(AutodiffSplit, BackwardReadsTheForwardsDropoutMask) {
  Net n;
  n.input("x", rnd({8, 16}, 1, 0.5, 1.5))
      .constant("ratio", Tensor::scalar<double>(DType::F64, 0.5))
      .constant("train", Tensor::scalar<bool>(DType::Bool, true))
      .node("Dropout", {"x", "ratio", "train"}, {"y"})
      .output("y");
  ForwardBackward fb = split_gradient_graph(n.g, {{"y"}, {"x"}});
  Tensor seed = rnd({8, 16}, 3);
  auto got = run_split(n, fb, {{"grad.y", seed}});
  auto y = got.at("y").tensor.to_doubles(), dx = got.at("grad.x").tensor.to_doubles(), s = seed.to_doubles();
  int dropped = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const bool kept = y[i] != 0;
    dropped += !kept;
    EXPECT_DOUBLE_EQ(dx[i], kept ? s[i] * 2 : 0.0) << i;
  }
  EXPECT_GT(dropped, 0);
  EXPECT_LT(dropped, 128);
}

TEST(AutodiffSplit, SeveralOutputsEachGetTheirSeed) {
  Net n;
  n.input("x", rnd({3, 4}, 1))
      .input("w", rnd({4, 4}, 2))
      .node("MatMul", {"x", "w"}, {"h"})
      .node("Tanh", {"h"}, {"a"})
      .node("Mul", {"h", "h"}, {"b"})
      .node("ArgMax", {"h"}, {"idx"})
      .output("a")
      .output("idx")
      .output("b");
  ForwardBackward fb = split_gradient_graph(n.g, {{}, {"x", "w"}});  // every float output
  EXPECT_EQ(fb.seeds, (std::vector<std::string>{"grad.a", "grad.b"}));
  Tensor sa = rnd({3, 4}, 5), sb = rnd({3, 4}, 6);
  auto got = run_split(n, fb, {{"grad.a", sa}, {"grad.b", sb}});
  // dL/dh = sa·(1 − a²) + sb·2h.
  auto h = run(n.m, [&] {
    Graph g = n.g;
    g.outputs = {Value{"h", {}, ""}};
    return g;
  }(), n.feeds).at("h").tensor;
  auto hv = h.to_doubles(), av = sa.to_doubles(), bv = sb.to_doubles();
  std::vector<double> dh(hv.size());
  for (size_t i = 0; i < hv.size(); ++i) dh[i] = av[i] * (1 - std::tanh(hv[i]) * std::tanh(hv[i])) + bv[i] * 2 * hv[i];
  // dL/dw = xᵀ·dh
  auto x = n.feeds.at("x").tensor.to_doubles();
  auto dw = got.at("grad.w").tensor.to_doubles();
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) {
      double want = 0;
      for (int b = 0; b < 3; ++b) want += x[b * 4 + r] * dh[b * 4 + c];
      EXPECT_NEAR(dw[r * 4 + c], want, 1e-12);
    }
  EXPECT_EQ(got.at("idx").tensor.dtype(), DType::I64);
}

TEST(AutodiffSplit, Errors) {
  Net n = mlp();
  try {
    split_gradient_graph(n.g, {{"h"}, {"w1"}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'h' is not an output"), std::string::npos) << e.what();
  }
  Net c;
  c.input("x", rnd({2, 3}, 1))
      .node("CumSum", {"x", "axis"}, {"y"})
      .constant("axis", Tensor::scalar<int64_t>(DType::I64, 1))
      .node("ArgMax", {"x"}, {"i"})
      .output("y")
      .output("i");
  try {
    split_gradient_graph(c.g, {{"i"}, {"x"}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("dtype i64"), std::string::npos) << e.what();
  }
  try {
    split_gradient_graph(c.g, {{"y"}, {"x"}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_NE(std::string(e.what()).find("CumSum"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hodu::passes
