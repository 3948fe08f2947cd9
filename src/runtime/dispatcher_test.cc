#include "runtime/dispatcher.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace hodu {
namespace {

Node make_node(const std::string& name, const std::string& op, size_t inputs = 2) {
  Node n;
  n.name = name;
  n.op_type = op;
  for (size_t i = 0; i < inputs; ++i) n.inputs.push_back(name + "_in" + std::to_string(i));
  n.outputs = {name + "_out"};
  return n;
}

// A registry like the one a cpu engine would fill: reference for everything,
// onednn for f32 Conv (2-3 inputs only) and MatMul.
void fill_registry(KernelRegistry& r) {
  r.add({.op = "*", .device = Device::Kind::CPU, .name = "reference", .engine = "interp"});
  r.add({.op = "*", .device = Device::Kind::CPU, .name = "reference", .engine = "cpu"});
  r.add({.op = "Conv", .device = Device::Kind::CPU, .dtypes = {DType::F32}, .name = "onednn", .engine = "cpu",
         .priority = 10, .supports = [](const Node& n) { return n.inputs.size() <= 3; }});
  r.add({.op = "MatMul", .device = Device::Kind::CPU, .dtypes = {DType::F32, DType::BF16}, .name = "onednn",
         .engine = "cpu", .priority = 10});
  r.add({.op = "MatMul", .device = Device::Kind::CUDA, .name = "cublasLt", .engine = "cuda", .priority = 10});
}

template <typename Fn>
std::string error_of(Fn fn, ErrorCode code) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected an error";
  return "";
}

TEST(KernelRegistry, FindByOpDeviceDtype) {
  KernelRegistry r;
  fill_registry(r);
  auto conv = r.find("Conv", "", Device::Kind::CPU, DType::F32);
  ASSERT_EQ(conv.size(), 3u);
  EXPECT_EQ(conv[0].name, "onednn");  // highest priority first
  EXPECT_EQ(r.find("Conv", "", Device::Kind::CPU, DType::I64).size(), 2u);  // onednn is f32 only
  EXPECT_EQ(r.find("conv", "", Device::Kind::CPU, DType::Undefined).size(), 3u);  // unknown dtype: all
  EXPECT_EQ(r.names("MatMul", "", Device::Kind::CPU), (std::vector<std::string>{"onednn", "reference"}));
  EXPECT_EQ(r.names("MatMul", "", Device::Kind::CUDA), std::vector<std::string>{"cublasLt"});
  EXPECT_TRUE(r.find("Relu", "", Device::Kind::CUDA).empty());
  EXPECT_TRUE(r.has_op("Anything"));  // the "*" kernels
  // Same slot replaces.
  size_t before = r.all().size();
  r.add({.op = "Conv", .device = Device::Kind::CPU, .name = "onednn", .engine = "cpu", .priority = -1});
  EXPECT_EQ(r.all().size(), before);
  EXPECT_EQ(r.find("Conv", "", Device::Kind::CPU, DType::F32)[0].name, "reference");
}

TEST(KernelRegistry, BuiltinReferenceKernel) {
  auto ks = KernelRegistry::instance().find("Conv", "", Device::Kind::CPU, DType::F16);
  bool found = false;
  for (const auto& k : ks) found |= k.name == "reference" && k.engine == "interp";
  EXPECT_TRUE(found);
}

TEST(Dispatcher, PriorityWithoutPolicy) {
  KernelRegistry r;
  fill_registry(r);
  Dispatcher d(r, Policy{});
  Node conv = make_node("c", "Conv");
  auto c = d.choose(conv, DType::F32, "cpu");
  EXPECT_EQ(c.kernel, "onednn");
  EXPECT_EQ(c.engine, "cpu");
  EXPECT_EQ(c.reason, "priority");
  Node conv_i64 = make_node("ci", "Conv");
  EXPECT_EQ(d.choose(conv_i64, DType::I64, "cpu").kernel, "reference");
  // The node predicate: 4 inputs is not something the onednn kernel takes.
  Node conv4 = make_node("c4", "Conv", 4);
  EXPECT_EQ(d.choose(conv4, DType::F32, "cpu").kernel, "reference");
  // The interp engine only has reference.
  Node relu = make_node("r", "Relu", 1);
  auto rc = d.choose(relu, DType::F32, "interp");
  EXPECT_EQ(rc.kernel, "reference");
  EXPECT_EQ(rc.reason, "only candidate");
}

TEST(Dispatcher, PolicyPreferenceOrder) {
  KernelRegistry r;
  fill_registry(r);
  Policy p;
  p.kernels.preferred["conv"] = {"reference"};
  p.kernels.preferred["MatMul"] = {"onednn", "reference"};
  Dispatcher d(r, p);
  Node conv = make_node("c", "Conv"), mm = make_node("m", "MatMul"), mm_i8 = make_node("m8", "MatMul");
  EXPECT_EQ(d.choose(conv, DType::F32, "cpu").kernel, "reference");
  EXPECT_EQ(d.choose(conv, DType::F32, "cpu").reason, "policy");
  EXPECT_EQ(d.choose(mm, DType::F32, "cpu").kernel, "onednn");
  EXPECT_EQ(d.choose(mm_i8, DType::I8, "cpu").kernel, "reference");  // onednn has no i8: next listed
  // Every decision recorded once (the repeated Conv choice is remembered).
  auto ds = d.decisions();
  ASSERT_EQ(ds.size(), 3u);
  EXPECT_EQ(ds[0].node, "c");
  EXPECT_EQ(ds[0].choice, "reference");
  EXPECT_EQ(ds[1].choice, "onednn");
  EXPECT_EQ(ds[2].node, "m8");
}

TEST(Dispatcher, ImpossiblePolicies) {
  KernelRegistry r;
  fill_registry(r);
  {
    Policy p;
    p.kernels.preferred["Conv"] = {"cudnn"};
    std::string msg = error_of([&] { Dispatcher d(r, p); }, ErrorCode::InvalidArgument);
    EXPECT_NE(msg.find("no kernel 'cudnn' is registered for op 'Conv' on device cpu"), std::string::npos) << msg;
    EXPECT_NE(msg.find("onednn, reference"), std::string::npos) << msg;
  }
  {
    Policy p;
    p.kernels.preferred["Cnov"] = {"reference"};
    std::string msg = error_of([&] { Dispatcher d(r, p); }, ErrorCode::InvalidArgument);
    EXPECT_NE(msg.find("unknown op 'Cnov'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("matmul, conv, attention"), std::string::npos) << msg;  // the families are listed
  }
  {
    Policy p;
    p.kernels.preferred["softmax"] = {"cublasLt"};  // a family none of whose ops has that kernel here
    std::string msg = error_of([&] { Dispatcher d(r, p); }, ErrorCode::InvalidArgument);
    EXPECT_NE(msg.find("no kernel 'cublasLt' is registered for op family 'softmax'"), std::string::npos) << msg;
  }
  {
    // Registered, but not in the engine that runs the model: no silent fallback.
    Policy p;
    p.kernels.preferred["MatMul"] = {"onednn"};
    Dispatcher d(r, p);
    Node mm = make_node("mm", "MatMul");
    std::string msg = error_of([&] { d.choose(mm, DType::F32, "interp"); }, ErrorCode::Unsupported);
    EXPECT_NE(msg.find("asks for [onednn]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("interp"), std::string::npos) << msg;
    EXPECT_NE(msg.find("mm"), std::string::npos) << msg;
    // And not for a dtype it lacks.
    Node mm8 = make_node("mm8", "MatMul");
    msg = error_of([&] { d.choose(mm8, DType::I8, "cpu"); }, ErrorCode::Unsupported);
    EXPECT_NE(msg.find("for i8"), std::string::npos) << msg;
  }
  {
    // No kernel at all for the op on a device.
    Policy p;
    p.execution.device = Device::cuda(0);
    Dispatcher d(r, p);
    Node relu = make_node("r", "Relu", 1);
    std::string msg = error_of([&] { d.choose(relu, DType::F32, ""); }, ErrorCode::Unsupported);
    EXPECT_NE(msg.find("no kernel for op 'Relu' on device cuda:0"), std::string::npos) << msg;
  }
}

TEST(Dispatcher, FamiliesAutoAndHodu) {
  KernelRegistry r;
  fill_registry(r);
  r.add({.op = "Softmax", .device = Device::Kind::CPU, .dtypes = {DType::F32}, .name = "cpu", .engine = "cpu",
         .priority = 10});
  r.add({.op = "FusedConv", .domain = "hodu", .device = Device::Kind::CPU, .dtypes = {DType::F32}, .name = "onednn",
         .engine = "cpu", .priority = 10});
  Policy p;
  p.kernels.preferred["conv"] = {"reference"};  // the family: Conv and FusedConv
  p.kernels.preferred["softmax"] = {"hodu"};    // hodu's own kernel, registered as "cpu"
  p.kernels.preferred["MatMul"] = {"auto"};     // the registered default
  p.kernels.precision = "fp32";
  Dispatcher d(r, p);
  Node conv = make_node("c", "Conv"), fused = make_node("f", "FusedConv"), sm = make_node("s", "Softmax", 1),
       mm = make_node("m", "MatMul");
  EXPECT_EQ(d.choose(conv, DType::F32, "cpu").kernel, "reference");
  auto f = d.choose(fused, DType::F32, "cpu");
  EXPECT_EQ(f.kernel, "reference");
  EXPECT_EQ(f.reason, "policy: conv");
  auto s = d.choose(sm, DType::F32, "cpu");
  EXPECT_EQ(s.kernel, "cpu");
  auto m = d.choose(mm, DType::F32, "cpu");
  EXPECT_EQ(m.kernel, "onednn");
  EXPECT_NE(m.reason.find("auto"), std::string::npos) << m.reason;
  // A family's kernel that one member lacks: that member keeps its default, and says why.
  Policy q;
  q.kernels.preferred["softmax"] = {"hodu"};
  Dispatcher dq(r, q);
  Node lsm = make_node("l", "LogSoftmax", 1);
  auto l = dq.choose(lsm, DType::F32, "cpu");
  EXPECT_EQ(l.kernel, "reference");
  EXPECT_NE(l.reason.find("do not run it"), std::string::npos) << l.reason;
  // An op's own key is strict: no silent default.
  Policy strict;
  strict.kernels.preferred["LogSoftmax"] = {"reference"};
  strict.kernels.preferred["Softmax"] = {"hodu"};
  Dispatcher ds(r, strict);
  EXPECT_EQ(ds.choose(sm, DType::F32, "cpu").kernel, "cpu");
  std::string msg = error_of([&] { ds.choose(sm, DType::F32, "interp"); }, ErrorCode::Unsupported);
  EXPECT_NE(msg.find("asks for [hodu]"), std::string::npos) << msg;
}

class FakeEngine : public Engine {
 public:
  FakeEngine(std::string name, bool cuda, bool bf16) : name_(std::move(name)), cuda_(cuda), bf16_(bf16) {}
  std::string name() const override { return name_; }
  std::string description() const override { return "test"; }
  bool supports(const Device& d) const override { return (d.kind == Device::Kind::CUDA) == cuda_; }
  bool supports_precision(Precision p) const override {
    return p == Precision::FP32 || (bf16_ && p == Precision::BF16);
  }
  std::unique_ptr<Executable> prepare(const Model&, const EngineOptions&) override { return nullptr; }

 private:
  std::string name_;
  bool cuda_, bf16_;
};

TEST(Dispatcher, EngineChoice) {
  KernelRegistry r;
  fill_registry(r);
  EngineRegistry engines;
  engines.add(std::make_shared<FakeEngine>("interp", false, false));
  engines.add(std::make_shared<FakeEngine>("cpu", false, true));
  engines.add(std::make_shared<FakeEngine>("cuda", true, true));
  {
    Dispatcher d(r, Policy{});
    EXPECT_EQ(d.choose_engine(engines)->name(), "interp");  // first registered for cpu
    ASSERT_EQ(d.decisions().size(), 1u);
    EXPECT_EQ(d.decisions()[0].what, "engine");
  }
  {
    Policy p;
    p.execution.engine = "cpu";
    p.execution.precision = Precision::BF16;
    Dispatcher d(r, p);
    EXPECT_EQ(d.choose_engine(engines)->name(), "cpu");
  }
  {
    Policy p;
    p.execution.precision = Precision::FP16;
    p.execution.engine = "cpu";
    Dispatcher d(r, p);
    std::string msg = error_of([&] { d.choose_engine(engines); }, ErrorCode::Unsupported);
    EXPECT_NE(msg.find("precision fp16"), std::string::npos) << msg;
  }
  {
    Policy p;
    p.execution.engine = "tpu";
    Dispatcher d(r, p);
    std::string msg = error_of([&] { d.choose_engine(engines); }, ErrorCode::InvalidArgument);
    EXPECT_NE(msg.find("unknown engine 'tpu' (available: interp, cpu, cuda)"), std::string::npos) << msg;
  }
  {
    Policy p;
    p.execution.engine = "cuda";
    Dispatcher d(r, p);
    std::string msg = error_of([&] { d.choose_engine(engines); }, ErrorCode::Unsupported);
    EXPECT_NE(msg.find("does not run on device cpu"), std::string::npos) << msg;
  }
}

TEST(Dispatcher, DispatchDtype) {
  Graph g;
  g.inputs.push_back({"x", ValueType::tensor(DType::BF16, Shape{2}), ""});
  Node n = make_node("n", "Relu", 0);
  n.inputs = {"", "x"};
  EXPECT_EQ(dispatch_dtype(g, n), DType::BF16);
  n.inputs = {"unknown"};
  EXPECT_EQ(dispatch_dtype(g, n), DType::Undefined);
}

}  // namespace
}  // namespace hodu
