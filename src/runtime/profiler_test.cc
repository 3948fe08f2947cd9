#include "runtime/profiler.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "runtime/session.h"

namespace hodu {
namespace {

std::string source_dir() {
  const char* s = std::getenv("HODU_SOURCE_DIR");
  return s ? s : ".";
}

Node node(const std::string& name, const std::string& op) {
  Node n;
  n.name = name;
  n.op_type = op;
  return n;
}

TEST(Profiler, ActiveOnlyWhileStarted) {
  EXPECT_EQ(Profiler::active(), nullptr);
  {
    Profiler p;
    p.start();
    EXPECT_EQ(Profiler::active(), &p);
    p.stop();
    EXPECT_EQ(Profiler::active(), nullptr);
    p.start();
  }  // destruction stops it
  EXPECT_EQ(Profiler::active(), nullptr);
}

TEST(Profiler, NodeSpanIsInertWithoutProfiler) {
  Node n = node("a", "Relu");
  NodeSpan span(nullptr, n, {}, "interp", "reference");
  span.finish({});  // nothing to check but that it does not crash or record
  SUCCEED();
}

TEST(Profiler, TraceIsOrtStyleChromeJson) {
  Profiler p;
  Node n = node("conv1", "Conv");
  Tensor x = Tensor::empty(DType::F32, {1, 3, 4, 4});
  RuntimeValue xv(x);
  double start = p.now_us();
  {
    NodeSpan span(&p, n, {&xv, nullptr}, "interp", "reference");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    span.finish({RuntimeValue(Tensor::empty(DType::F32, {1, 8, 4, 4}))});
  }
  p.add_run(start, p.now_us());
  p.add_instant("dispatch", {{"choice", "reference"}});
  std::string path = ::testing::TempDir() + "/hodu_trace_test.json";
  p.write_chrome_trace(path);
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  auto trace = nlohmann::json::parse(ss.str());  // throws if not valid JSON
  ASSERT_TRUE(trace.is_array());
  ASSERT_EQ(trace.size(), 3u);
  const auto& e = trace[0];
  EXPECT_EQ(e["cat"], "Node");
  EXPECT_EQ(e["name"], "conv1_kernel_time");
  EXPECT_EQ(e["ph"], "X");
  EXPECT_GE(e["dur"].get<int64_t>(), 2000);
  EXPECT_TRUE(e["ts"].is_number());
  EXPECT_TRUE(e["pid"].is_number());
  EXPECT_TRUE(e["tid"].is_number());
  EXPECT_EQ(e["args"]["op_name"], "Conv");
  EXPECT_EQ(e["args"]["node_name"], "conv1");
  EXPECT_EQ(e["args"]["provider"], "interp");
  EXPECT_EQ(e["args"]["kernel"], "reference");
  EXPECT_EQ(e["args"]["input_type_shape"], nlohmann::json::parse(R"([{"float": [1, 3, 4, 4]}])"));
  EXPECT_EQ(e["args"]["output_size"], "512");  // 1*8*4*4 floats
  EXPECT_EQ(trace[1]["cat"], "Session");
  EXPECT_EQ(trace[1]["name"], "model_run");
  EXPECT_GE(trace[1]["dur"].get<int64_t>(), e["dur"].get<int64_t>());
  EXPECT_EQ(trace[2]["ph"], "i");
  EXPECT_EQ(trace[2]["args"]["choice"], "reference");
  std::remove(path.c_str());
}

TEST(Profiler, SummarySumsPerOpAndSkipsNestedSpans) {
  Profiler p;
  auto span = [&](const std::string& op, double ts, double dur, int depth) {
    ProfileEvent e;
    e.category = "Node";
    e.op = op;
    e.ts_us = ts;
    e.dur_us = dur;
    e.depth = depth;
    p.add(e);
  };
  span("Conv", 0, 3000, 0);
  span("Relu", 3000, 1000, 0);
  span("Conv", 4000, 3000, 0);
  span("If", 7000, 2000, 0);
  span("Add", 7500, 1000, 1);  // inside the If: not counted again
  p.add_run(0, 10000);
  auto rows = p.summary();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].op, "Conv");
  EXPECT_EQ(rows[0].count, 2);
  EXPECT_DOUBLE_EQ(rows[0].total_ms, 6.0);
  EXPECT_DOUBLE_EQ(rows[0].percent, 60.0);
  EXPECT_EQ(rows[1].op, "If");
  EXPECT_EQ(rows[2].op, "Relu");
  EXPECT_DOUBLE_EQ(p.run_ms(), 10.0);
  std::string table = p.summary_table();
  EXPECT_NE(table.find("Conv"), std::string::npos);
  EXPECT_NE(table.find("90.0%"), std::string::npos) << table;  // all ops: 9 of 10 ms
}

TEST(Profiler, ThreadSafe) {
  Profiler p;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      Node n = node("n", "Add");
      for (int i = 0; i < 250; ++i) {
        NodeSpan s(&p, n, {}, "interp", "reference");
        s.finish({});
      }
    });
  for (auto& t : threads) t.join();
  auto rows = p.summary();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].count, 1000);
  std::set<int> tids;
  for (const auto& e : p.events()) tids.insert(e.tid);
  EXPECT_EQ(tids.size(), 4u);
}

// The per-op totals of a real model account for the run's wall time (within 10%).
TEST(Profiler, OpTotalsMatchWallTimeOnRealModel) {
  Profiler p;
  p.start();
  SessionOptions so;
  so.engine = "interp";  // the engine whose kernels carry NodeSpans
  auto s = Session::load(source_dir() + "/examples/models/tiny_cnn.onnx", so);
  // A batch big enough that kernels, not bookkeeping, dominate.
  Tensor x = Tensor::empty(DType::F32, {256, 1, 8, 8});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 17) / 17.0f;
  for (int r = 0; r < 3; ++r) s->run({{s->inputs()[0].name, x}});
  p.stop();
  double ops = 0;
  int64_t count = 0;
  for (const auto& row : p.summary()) {
    ops += row.total_ms;
    count += row.count;
  }
  EXPECT_EQ(count, 3 * static_cast<int64_t>(s->model().graph.nodes.size()));
  double run = p.run_ms();
  ASSERT_GT(run, 0);
  EXPECT_LE(ops, run);
  EXPECT_GE(ops, 0.9 * run) << "ops " << ops << " ms of run " << run << " ms\n" << p.summary_table();
  // Dispatch decisions are in the trace too.
  int dispatch = 0;
  for (const auto& e : p.events()) dispatch += e.name == "dispatch";
  EXPECT_EQ(dispatch, 1 + static_cast<int>(s->model().graph.nodes.size()));
}

}  // namespace
}  // namespace hodu
