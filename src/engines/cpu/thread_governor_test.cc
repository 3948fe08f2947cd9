// Tests of the cpu engine's ThreadGovernor: what each policy gives a run, OpenMP's team inside a
// run on one thread and after it, the switch to one thread when other busy threads leave the
// team's threads waiting for a core, and forward plans left free to switch.
#include "engines/cpu/thread_governor.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "engines/cpu/plan.h"
#include "ir/graph.h"

namespace hodu::cpu {
namespace {

// Whether a parallel region started on this thread now may have more than one thread (the
// governor's one-thread runs set OpenMP's active levels to 0). The test is built without
// -fopenmp: the OpenMP API only.
bool parallel_allowed() { return omp_get_max_active_levels() > 0; }

TEST(ThreadGovernor, PoliciesGiveTheirThreads) {
  ThreadGovernor fixed(2, ThreadGovernor::Policy::Fixed);
  {
    ThreadGovernor::Run run(fixed);
    EXPECT_EQ(run.threads(), 2);
    EXPECT_TRUE(parallel_allowed());
  }
  ThreadGovernor one(2, ThreadGovernor::Policy::One);
  {
    ThreadGovernor::Run run(one);
    EXPECT_EQ(run.threads(), 1);
    EXPECT_FALSE(parallel_allowed()) << "a parallel region inside a run on one thread";
  }
  EXPECT_TRUE(parallel_allowed()) << "OpenMP's active levels not restored after the run";
  ThreadGovernor single(1, ThreadGovernor::Policy::Adaptive);
  ThreadGovernor::Run run(single);
  EXPECT_EQ(run.threads(), 1);
}

TEST(ThreadGovernor, PinKeepsAllThreads) {
  ThreadGovernor g(2, ThreadGovernor::Policy::One);
  EXPECT_FALSE(g.pinned());
  g.pin();
  EXPECT_TRUE(g.pinned());
  ThreadGovernor::Run run(g);
  EXPECT_EQ(run.threads(), 2);
}

// Busy threads, twice as many as the cores this process may use, keep the team's threads waiting
// for a core: within a few hundred runs the governor runs the next ones on one thread.
TEST(ThreadGovernor, OneThreadOnBusyCores) {
  if (access("/proc/self/schedstat", R_OK) != 0) GTEST_SKIP() << "no /proc/<pid>/schedstat: the governor keeps all threads";
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  const int busy = 2 * CPU_COUNT(&set);
  std::atomic<bool> stop{false};
  std::vector<std::thread> spinners;
  for (int i = 0; i < busy; ++i)
    spinners.emplace_back([&] {
      volatile double x = 1;
      while (!stop.load(std::memory_order_relaxed)) x = x * 1.0000001 + 1e-9;
    });
  ThreadGovernor g(2, ThreadGovernor::Policy::Adaptive);
  bool switched = false;
  const auto t0 = std::chrono::steady_clock::now();
  while (!switched && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20)) {
    ThreadGovernor::Run run(g);
    switched = run.threads() == 1;
    volatile double sink = 0;  // about a millisecond of work (the calling thread is one of the team)
    for (int i = 0; i < 1000000; ++i) sink = sink + i * 1e-9;
  }
  stop = true;
  for (auto& t : spinners) t.join();
  EXPECT_TRUE(switched) << busy << " busy threads: the governor kept both threads for 20 s";
}

// Runs whose time depends on the threads they get (a hypervisor taking one vCPU: no wait the
// guest sees): when all threads turn slower than one, the governor moves to one thread within a
// few runs, and back to all when they are faster again.
TEST(ThreadGovernor, TimedRunsFollowTheFasterThreadCount) {
  if (ThreadGovernor::policy() != ThreadGovernor::Policy::Adaptive) GTEST_SKIP() << "HODU_THREAD_POLICY is set";
  ThreadGovernor g(2, ThreadGovernor::Policy::Adaptive);
  auto run = [&](int all_ms, int one_ms) {
    ThreadGovernor::Run r(g);
    std::this_thread::sleep_for(std::chrono::milliseconds(r.threads() == 1 ? one_ms : all_ms));
    return r.threads();
  };
  int threads = 0;
  for (int i = 0; i < 10; ++i) threads = run(4, 8);  // all threads twice as fast
  EXPECT_EQ(threads, 2);
  int slow_runs = 0;
  for (int i = 0; i < 20 && run(20, 8) == 2; ++i) ++slow_runs;  // all threads turn slow
  EXPECT_LT(slow_runs, 6) << "still on all threads after " << slow_runs << " slow runs";
  int on_one = 0;
  for (int i = 0; i < 20; ++i) on_one += run(20, 8) == 1;
  EXPECT_GE(on_one, 14) << "one thread stays while it is faster (all threads tried now and then)";
  int back = 0;
  for (int i = 0; i < 60 && run(4, 8) == 1; ++i) ++back;  // all threads fast again
  EXPECT_LT(back, 60) << "never went back to all threads";
  for (int i = 0; i < 5; ++i) threads = run(4, 8);
  EXPECT_EQ(threads, 2);
}

TEST(ThreadGovernor, ForwardPlanIsNotPinned) {
  Model m;
  m.opset_imports[""] = 17;
  m.graph.inputs.push_back({"x", ValueType::tensor(DType::F32, Shape({Dim(2), Dim(3)})), ""});
  Node relu;
  relu.op_type = "Relu";
  relu.name = "relu";
  relu.inputs = {"x"};
  relu.outputs = {"y"};
  m.graph.nodes.push_back(relu);
  m.graph.outputs.push_back({"y", ValueType::tensor(DType::F32, Shape({Dim(2), Dim(3)})), ""});
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  PlanOptions o;
  o.threads = 2;
  Plan plan(m, {{"x", {2, 3}}}, o, eng);
  EXPECT_FALSE(plan.threads_pinned());
}

}  // namespace
}  // namespace hodu::cpu
