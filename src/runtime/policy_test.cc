#include "runtime/policy.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace hodu {
namespace {

using nlohmann::json;

// Runs fn, expects a hodu::Error of `code` whose message contains `needle`.
template <typename Fn>
void expect_error(Fn fn, ErrorCode code, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Policy, PrecisionNames) {
  for (Precision p : {Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16})
    EXPECT_EQ(parse_precision(precision_name(p)), p);
  EXPECT_EQ(parse_precision("BF16"), Precision::BF16);
  expect_error([] { parse_precision("fp8"); }, ErrorCode::InvalidArgument, "unknown precision 'fp8'");
}

TEST(Policy, ExecutionRoundTrip) {
  ExecutionPolicy p;
  p.precision = Precision::BF16;
  p.cuda_graphs = true;
  p.threads = 3;
  p.deterministic = true;
  p.engine = "cuda";
  p.device = Device::cuda(1);
  json j = p.to_json();
  EXPECT_EQ(j["precision"], "bf16");
  EXPECT_EQ(j["device"], "cuda:1");
  ExecutionPolicy back = ExecutionPolicy::from_json(j);
  EXPECT_EQ(back, p);
  // Through text too.
  EXPECT_EQ(ExecutionPolicy::from_json(json::parse(j.dump())), p);
  EXPECT_NE(back, ExecutionPolicy{});
}

TEST(Policy, ExecutionDefaultsFromEmptyObject) {
  ExecutionPolicy p = ExecutionPolicy::from_json(json::object());
  EXPECT_EQ(p, ExecutionPolicy{});
  EXPECT_EQ(p.precision, Precision::FP32);
  EXPECT_EQ(p.device, Device::cpu());
}

TEST(Policy, ExecutionValidationErrors) {
  expect_error([] { ExecutionPolicy::from_json(json{{"precision", "fp7"}}); }, ErrorCode::InvalidArgument,
               "unknown precision 'fp7'");
  expect_error([] { ExecutionPolicy::from_json(json{{"precision", 16}}); }, ErrorCode::InvalidArgument,
               "'precision' must be a string");
  expect_error([] { ExecutionPolicy::from_json(json{{"threads", -2}}); }, ErrorCode::InvalidArgument, "'threads'");
  expect_error([] { ExecutionPolicy::from_json(json{{"threads", "four"}}); }, ErrorCode::InvalidArgument,
               "'threads' must be an integer");
  expect_error([] { ExecutionPolicy::from_json(json{{"cuda_graphs", true}}); }, ErrorCode::InvalidArgument,
               "'cuda_graphs' needs a cuda device");
  expect_error([] { ExecutionPolicy::from_json(json{{"precision", "tf32"}}); }, ErrorCode::Unsupported, "tf32");
  expect_error([] { ExecutionPolicy::from_json(json{{"device", "tpu"}}); }, ErrorCode::InvalidArgument, "'device'");
  expect_error([] { ExecutionPolicy::from_json(json{{"thread", 2}}); }, ErrorCode::InvalidArgument,
               "unknown field 'thread'");
  expect_error([] { ExecutionPolicy::from_json(json::array()); }, ErrorCode::InvalidArgument, "expected an object");
  ExecutionPolicy p;
  p.threads = -1;
  expect_error([&] { p.validate(); }, ErrorCode::InvalidArgument, "'threads'");
}

TEST(Policy, KernelRoundTripAndLookup) {
  KernelPolicy k = KernelPolicy::from_json(json::parse(R"({"Conv": ["onednn", "reference"], "matmul": "cublasLt"})"));
  ASSERT_EQ(k.preferred.size(), 2u);
  ASSERT_NE(k.find("conv"), nullptr);
  EXPECT_EQ(*k.find("CONV"), (std::vector<std::string>{"onednn", "reference"}));
  ASSERT_NE(k.find("MatMul"), nullptr);
  EXPECT_EQ(*k.find("MatMul"), std::vector<std::string>{"cublasLt"});
  EXPECT_EQ(k.find("Relu"), nullptr);
  EXPECT_EQ(KernelPolicy::from_json(k.to_json()), k);
}

TEST(Policy, KernelFamiliesAndPrecision) {
  KernelPolicy k =
      KernelPolicy::from_json(json::parse(R"({"matmul": "reference", "Gemm": "onednn", "precision": "FP32"})"));
  bool from_family = true;
  ASSERT_NE(k.find("MatMul", &from_family), nullptr);  // the family's key is also MatMul's own (case-insensitive)
  EXPECT_FALSE(from_family);
  ASSERT_NE(k.find("FusedMatMul", &from_family), nullptr);  // a family member: the family's list
  EXPECT_TRUE(from_family);
  EXPECT_EQ(*k.find("FusedMatMul"), std::vector<std::string>{"reference"});
  EXPECT_EQ(*k.find("gemm", &from_family), std::vector<std::string>{"onednn"});  // an op's own key wins
  EXPECT_FALSE(from_family);
  EXPECT_EQ(k.find("Conv"), nullptr);
  EXPECT_EQ(k.precision, "FP32");
  EXPECT_EQ(KernelPolicy::from_json(k.to_json()), k);
  EXPECT_EQ(k.to_json()["precision"], "FP32");
  ASSERT_NE(kernel_family_ops("Layer_Norm"), nullptr);
  EXPECT_EQ(kernel_family_of("LayerNormGrad"), "layer_norm");
  EXPECT_EQ(kernel_family_of("Relu"), "");
  expect_error([] { KernelPolicy::from_json(json::parse(R"({"precision": "fp64"})")); }, ErrorCode::InvalidArgument,
               "'precision'");
  expect_error([] { KernelPolicy::from_json(json::parse(R"({"precision": 16})")); }, ErrorCode::InvalidArgument,
               "'precision' must be a string");
}

TEST(Policy, KernelValidationErrors) {
  expect_error([] { KernelPolicy::from_json(json::parse(R"({"Conv": 3})")); }, ErrorCode::InvalidArgument,
               "'Conv' must be a kernel name");
  expect_error([] { KernelPolicy::from_json(json::parse(R"({"Conv": ["a", 1]})")); }, ErrorCode::InvalidArgument,
               "'Conv' lists a number");
  expect_error([] { KernelPolicy::from_json(json::parse(R"({"Conv": []})")); }, ErrorCode::InvalidArgument,
               "lists no kernel");
  expect_error([] { KernelPolicy::from_json(json::parse(R"({"Conv": "a", "conv": "b"})")); },
               ErrorCode::InvalidArgument, "listed twice");
  expect_error([] { KernelPolicy::from_json(json::parse(R"({"Conv": ""})")); }, ErrorCode::InvalidArgument,
               "empty kernel name");
  expect_error([] { KernelPolicy::from_json(json::parse(R"(["Conv"])")); }, ErrorCode::InvalidArgument,
               "expected an object");
}

TEST(Policy, FileRoundTrip) {
  Policy p;
  p.execution.threads = 2;
  p.execution.deterministic = true;
  p.kernels.preferred["Conv"] = {"reference"};
  std::string path = ::testing::TempDir() + "/hodu_policy_test.json";
  p.save(path);
  EXPECT_EQ(Policy::load(path), p);
  std::remove(path.c_str());
  expect_error([&] { Policy::load(path); }, ErrorCode::Io, "cannot read policy file");
  {
    std::ofstream f(path);
    f << "{\"execution\": {\"threads\": 2,}";
  }
  expect_error([&] { Policy::load(path); }, ErrorCode::InvalidArgument, "not valid JSON");
  {
    std::ofstream f(path);
    f << R"({"execution": {"precision": "fp64"}})";
  }
  expect_error([&] { Policy::load(path); }, ErrorCode::InvalidArgument, path + ": execution policy");
  expect_error([] { Policy::from_json(json{{"kernel", json::object()}}); }, ErrorCode::InvalidArgument,
               "unknown field 'kernel'");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace hodu
