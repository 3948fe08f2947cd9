#include "runtime/session.h"

#include <gtest/gtest.h>

#include "formats/model_io.h"

namespace hodu {
namespace {

// y = x + b with x: f32[batch, 3], b: f32[batch, 3]
Model add_model() {
  Model m;
  m.opset_imports[""] = 17;
  Graph& g = m.graph;
  g.name = "add";
  Shape s{Dim::sym("batch"), 3};
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, s), ""});
  g.inputs.push_back({"b", ValueType::tensor(DType::F32, s), ""});
  g.outputs.push_back({"y", ValueType::tensor(DType::F32, s), ""});
  Node n;
  n.name = "add";
  n.op_type = "Add";
  n.inputs = {"x", "b"};
  n.outputs = {"y"};
  g.nodes.push_back(n);
  return m;
}

Tensor f32(std::vector<int64_t> shape, float start) {
  Tensor t = Tensor::empty(DType::F32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = start + static_cast<float>(i);
  return t;
}

std::string error_of(Session& s, const std::map<std::string, RuntimeValue>& feeds) {
  try {
    s.run(feeds);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    return e.what();
  }
  return "";
}

TEST(Session, RunsAndBindsSymbolicDims) {
  auto s = Session::from_model(add_model(), {});
  EXPECT_EQ(s->engine_name(), EngineRegistry::instance().pick(Device::cpu())->name());  // best for cpu
  auto out = s->run({{"x", f32({2, 3}, 0)}, {"b", f32({2, 3}, 10)}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].name, "y");
  EXPECT_EQ(out[0].value.tensor.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_FLOAT_EQ(out[0].value.tensor.data<float>()[5], 5 + 15);
  // A new batch size re-binds, it does not fail.
  auto out4 = s->run({{"x", f32({4, 3}, 0)}, {"b", f32({4, 3}, 0)}});
  EXPECT_EQ(out4[0].value.tensor.shape()[0], 4);
}

TEST(Session, ChecksInputsWithClearMessages) {
  auto s = Session::from_model(add_model(), {});
  EXPECT_NE(error_of(*s, {{"x", f32({2, 3}, 0)}}).find("missing input 'b'"), std::string::npos);
  EXPECT_NE(error_of(*s, {{"x", f32({2, 3}, 0)}, {"b", f32({2, 3}, 0)}, {"z", f32({1}, 0)}})
                .find("'z' is not an input"),
            std::string::npos);
  EXPECT_NE(error_of(*s, {{"x", Tensor::zeros(DType::F64, {2, 3})}, {"b", f32({2, 3}, 0)}}).find("dtype double"),
            std::string::npos);
  EXPECT_NE(error_of(*s, {{"x", f32({2, 3, 1}, 0)}, {"b", f32({2, 3}, 0)}}).find("rank 3"), std::string::npos);
  EXPECT_NE(error_of(*s, {{"x", f32({2, 4}, 0)}, {"b", f32({2, 4}, 0)}}).find("dim 1 is 4"), std::string::npos);
  // batch bound to 2 by x, 3 by b
  EXPECT_NE(error_of(*s, {{"x", f32({2, 3}, 0)}, {"b", f32({3, 3}, 0)}}).find("binds 'batch' to 2"),
            std::string::npos);
}

// A model the session loads itself drops the initializers nothing reads (a quantized export's
// float weights) before the engine prepares; one that is an overridable input stays, and a
// caller's Model (from_model) is left as it is.
TEST(Session, LoadedModelDropsInitializersNothingReads) {
  Model m = add_model();
  m.graph.inputs.erase(m.graph.inputs.begin() + 1);  // b: an initializer
  m.graph.initializers.emplace_back("b", f32({2, 3}, 10));
  m.graph.initializers.emplace_back("unread", f32({4, 4}, 0));
  m.graph.inputs.push_back({"dflt", ValueType::tensor(DType::F32, Shape{2}), ""});
  m.graph.initializers.emplace_back("dflt", f32({2}, 0));
  m.graph.inputs[0].type = ValueType::tensor(DType::F32, Shape{2, 3});
  m.graph.outputs[0].type = ValueType::tensor(DType::F32, Shape{2, 3});
  auto loaded = Session::from_bytes(export_onnx(m, 0), {});
  EXPECT_NE(loaded->model().graph.initializer("b"), nullptr);
  EXPECT_NE(loaded->model().graph.initializer("dflt"), nullptr);
  EXPECT_EQ(loaded->model().graph.initializer("unread"), nullptr);
  auto out = loaded->run({{"x", f32({2, 3}, 1)}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].value.tensor.to_doubles(), (std::vector<double>{11, 13, 15, 17, 19, 21}));
  auto given = Session::from_model(m, {});
  EXPECT_NE(given->model().graph.initializer("unread"), nullptr);
}

TEST(Session, UnknownEngineIsAnError) {
  SessionOptions o;
  o.engine = "warp";
  try {
    Session::from_model(add_model(), o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown engine 'warp'"), std::string::npos);
  }
}

TEST(Session, OptimizationLevelOutOfRangeIsAnError) {
  SessionOptions o;
  o.opt_level = 4;
  try {
    Session::from_model(add_model(), o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("optimization level 4 is out of range"), std::string::npos);
  }
  o.opt_level = 1;
  auto s = Session::from_model(add_model(), o);
  auto out = s->run({{"x", f32({2, 3}, 0)}, {"b", f32({2, 3}, 10)}});
  EXPECT_FLOAT_EQ(out[0].value.tensor.data<float>()[5], 5 + 15);
}

}  // namespace
}  // namespace hodu

namespace hodu {
namespace {

// x.next = x + b: with update_state_in_place, every engine leaves x.next in the tensor fed as x.
TEST(Session, UpdatesStateInPlace) {
  Model m = add_model();
  m.graph.outputs[0].name = "x.next";
  m.graph.nodes[0].outputs = {"x.next"};
  for (const char* engine : {"interp", "cpu"}) {
    SCOPED_TRACE(engine);
    SessionOptions o;
    o.engine = engine;
    o.threads = 1;
    o.update_state_in_place = true;
    auto s = Session::from_model(m, o);
    Tensor x = f32({2, 3}, 1), b = f32({2, 3}, 10);
    for (int step = 1; step <= 3; ++step) {
      auto out = s->run({{"x", x}, {"b", b}});
      EXPECT_EQ(out[0].value.tensor.raw_data(), x.raw_data()) << "the output is the fed tensor";
      EXPECT_FLOAT_EQ(x.data<float>()[4], 5 + step * 14.0f) << "step " << step;
    }
    // Off: the fed tensor is left alone.
    o.update_state_in_place = false;
    auto plain = Session::from_model(m, o);
    plain->run({{"x", x}, {"b", b}});
    EXPECT_FLOAT_EQ(x.data<float>()[4], 5 + 3 * 14.0f);
  }
}

}  // namespace
}  // namespace hodu

namespace hodu {
namespace {

TEST(Session, ReseedEachRunOnTheInterpreter) {
  Model m;
  m.opset_imports[""] = 21;
  Graph& g = m.graph;
  g.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape{64}), ""});
  g.outputs.push_back({"y", ValueType::tensor(DType::F32, Shape{64}), ""});
  g.set_initializer("ratio", Tensor::scalar<float>(DType::F32, 0.5f));
  g.set_initializer("train", Tensor::scalar<bool>(DType::Bool, true));
  Node n;
  n.name = "drop";
  n.op_type = "Dropout";
  n.inputs = {"x", "ratio", "train"};
  n.outputs = {"y"};
  g.nodes.push_back(n);
  auto draws = [&](bool reseed) {
    SessionOptions o;
    o.engine = "interp";
    o.reseed_each_run = reseed;
    auto s = Session::from_model(m, o);
    std::vector<std::vector<double>> out;
    for (int k = 0; k < 3; ++k) out.push_back(s->run({{"x", f32({64}, 1)}})[0].value.tensor.to_doubles());
    return out;
  };
  auto fixed = draws(false), fresh = draws(true), again = draws(true);
  EXPECT_EQ(fixed[0], fixed[1]);
  EXPECT_EQ(fresh[0], fixed[0]);
  EXPECT_NE(fresh[0], fresh[1]);
  EXPECT_EQ(fresh, again);
}

}  // namespace
}  // namespace hodu
