// Tests of the IR verifier.
#include <gtest/gtest.h>

#include "ir/schema.h"
#include "ir/verifier.h"

namespace hodu {
namespace {

Node make(const std::string& name, const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
          std::vector<Attribute> attrs = {}) {
  Node n;
  n.name = name;
  n.op_type = op;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.attributes = std::move(attrs);
  return n;
}

Graph base() {
  Graph g;
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape{2, 3}), ""});
  g.set_initializer("w", Tensor::zeros(DType::F32, {3}));
  g.nodes.push_back(make("add", "Add", {"x", "w"}, {"y"}));
  g.nodes.push_back(make("relu", "Relu", {"y"}, {"z"}));
  g.outputs.push_back({"z", ValueType(), ""});
  return g;
}

std::string error_of(const Graph& g, const std::set<std::string>& outer = {}) {
  try {
    verify_graph(g, outer);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidModel);
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(Verifier, AcceptsAWellFormedGraph) {
  EXPECT_EQ(error_of(base()), "");
  Model m;
  m.graph = base();
  m.opset_imports[""] = 17;
  EXPECT_NO_THROW(verify_model(m));
}

TEST(Verifier, UseBeforeDefinition) {
  Graph g = base();
  std::swap(g.nodes[0], g.nodes[1]);
  std::string e = error_of(g);
  EXPECT_TRUE(has(e, "node 'relu' (Relu)") && has(e, "'y'") && has(e, "before")) << e;
}

TEST(Verifier, Cycle) {
  Graph g = base();
  g.nodes[0].inputs[1] = "z";  // add reads relu's output, relu reads add's
  std::string e = error_of(g);
  EXPECT_TRUE(has(e, "cycle") && has(e, "'add'") && has(e, "'relu'")) << e;
}

TEST(Verifier, DanglingInputAndOutput) {
  Graph g = base();
  g.nodes[1].inputs[0] = "nowhere";
  std::string e = error_of(g);
  EXPECT_TRUE(has(e, "node 'relu' (Relu)") && has(e, "'nowhere'") && has(e, "dangling")) << e;
  Graph h = base();
  h.outputs.push_back({"ghost", ValueType(), ""});
  e = error_of(h);
  EXPECT_TRUE(has(e, "'ghost'") && has(e, "dangling")) << e;
}

TEST(Verifier, DuplicateOutputs) {
  Graph g = base();
  g.nodes[1].outputs[0] = "y";
  std::string e = error_of(g);
  EXPECT_TRUE(has(e, "'y'") && has(e, "node 'add' (Add)")) << e;
  Graph h = base();
  h.nodes[1].outputs[0] = "x";
  EXPECT_TRUE(has(error_of(h), "graph input"));
}

TEST(Verifier, UnknownOp) {
  Graph g = base();
  g.nodes[1].op_type = "Frobnicate";
  std::string e = error_of(g);
  EXPECT_TRUE(has(e, "unknown op 'Frobnicate'") && has(e, "ai.onnx") && has(e, "node 'relu'")) << e;
  g.nodes[1].op_type = "Relu";
  g.nodes[1].domain = "com.example";
  EXPECT_TRUE(has(error_of(g), "com.example"));
}

TEST(Verifier, Arity) {
  Graph g = base();
  g.nodes[0].inputs.push_back("x");
  std::string e = error_of(g);
  EXPECT_TRUE(has(e, "node 'add' (Add)") && has(e, "3 inputs")) << e;
  Graph h = base();
  h.nodes[1].inputs.clear();
  EXPECT_TRUE(has(error_of(h), "0 inputs"));
  // Trailing omitted optional inputs are fine.
  Graph c = base();
  c.nodes.push_back(make("clip", "Clip", {"z", "", ""}, {"cl"}));
  EXPECT_EQ(error_of(c), "");
  // An omitted required input is not.
  Graph d = base();
  d.nodes[0].inputs[0] = "";
  EXPECT_TRUE(has(error_of(d), "required input 0"));
}

TEST(Verifier, AttributeKindsAndRequired) {
  Graph g = base();
  g.nodes.push_back(make("cat", "Concat", {"z", "z"}, {"c"}, {Attribute::make_string("axis", "0")}));
  std::string e = error_of(g);
  EXPECT_TRUE(has(e, "node 'cat' (Concat)") && has(e, "attribute 'axis'")) << e;
  g.nodes.back().attributes.clear();
  e = error_of(g);
  EXPECT_TRUE(has(e, "required attribute 'axis'")) << e;
  g.nodes.back().attributes = {Attribute::make_int("axis", 0), Attribute::make_int("bogus", 1)};
  e = error_of(g);
  EXPECT_TRUE(has(e, "unknown attribute 'bogus'")) << e;
  g.nodes.back().attributes = {Attribute::make_int("axis", 0)};
  EXPECT_EQ(error_of(g), "");
}

TEST(Verifier, SubgraphsSeeOuterScope) {
  Graph g = base();
  auto branch = std::make_shared<Graph>();
  branch->nodes.push_back(make("inner", "Neg", {"y"}, {"o"}));  // y: outer value
  branch->outputs.push_back({"o", ValueType(), ""});
  g.inputs.push_back({"cond", ValueType::tensor(DType::Bool, Shape::scalar()), ""});
  g.nodes.push_back(make("if", "If", {"cond"}, {"r"},
                         {Attribute::make_graph("then_branch", branch), Attribute::make_graph("else_branch", branch)}));
  EXPECT_EQ(error_of(g), "");
  // A subgraph may not read a value produced later in the outer graph.
  auto bad = std::make_shared<Graph>(*branch);
  bad->nodes[0].inputs[0] = "later";
  g.nodes.back().attributes[1] = Attribute::make_graph("else_branch", bad);
  g.nodes.push_back(make("late", "Relu", {"z"}, {"later"}));
  std::string e = error_of(g);
  EXPECT_TRUE(has(e, "node 'if' (If)") && has(e, "else_branch") && has(e, "node 'inner' (Neg)") && has(e, "'later'"))
      << e;
  // verify_graph's outer_scope argument.
  Graph sub;
  sub.nodes.push_back(make("n", "Neg", {"outer_v"}, {"o"}));
  sub.outputs.push_back({"o", ValueType(), ""});
  EXPECT_TRUE(has(error_of(sub), "outer_v"));
  EXPECT_EQ(error_of(sub, {"outer_v"}), "");
}

TEST(Verifier, HoduFusedOps) {
  Graph g = base();
  Node n = make("f", "Gelu", {"z"}, {"g"});
  n.domain = "hodu";
  g.nodes.push_back(n);
  EXPECT_EQ(error_of(g), "");
}

}  // namespace
}  // namespace hodu
