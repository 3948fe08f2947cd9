#include "runtime/stream_manager.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/error.h"
#include "runtime/device_manager.h"

namespace hodu {
namespace {

using namespace std::chrono_literals;

TEST(CpuStream, RunsTasksInOrder) {
  CpuStream s;
  std::vector<int> order;
  for (int i = 0; i < 100; ++i) s.submit([&order, i] { order.push_back(i); });
  s.synchronize();
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
  EXPECT_TRUE(s.query());
}

TEST(CpuStream, ErrorsSurfaceAtSynchronize) {
  CpuStream s;
  std::atomic<int> ran{0};
  s.submit([&] { ran++; });
  s.submit([] { fail(ErrorCode::Internal, "task failed"); });
  s.submit([&] { ran++; });  // skipped: the stream failed before it
  try {
    s.synchronize();
    ADD_FAILURE() << "expected the task's error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("task failed"), std::string::npos);
  }
  EXPECT_EQ(ran.load(), 1);
  // Reported once; the stream works again afterwards.
  s.submit([&] { ran++; });
  s.synchronize();
  EXPECT_EQ(ran.load(), 2);
}

TEST(CpuStream, EventsOrderWorkAcrossStreams) {
  CpuStream producer, consumer;
  std::atomic<int> value{0};
  auto ready = producer.create_event();
  auto start = producer.create_event();
  producer.record(*start);
  producer.submit([&] {
    std::this_thread::sleep_for(20ms);
    value = 42;
  });
  producer.record(*ready);
  int seen = -1;
  consumer.wait(*ready);
  consumer.submit([&] { seen = value.load(); });
  consumer.synchronize();
  EXPECT_EQ(seen, 42);
  EXPECT_TRUE(ready->query());
  producer.synchronize();
  EXPECT_GE(ready->elapsed_ms(*start), 15.0);
  EXPECT_THROW(start->elapsed_ms(*producer.create_event()), Error);  // never recorded
}

TEST(CpuStream, GraphCaptureLaunchAndUpdate) {
  CpuStream s;
  std::vector<int> log;
  s.begin_capture();
  EXPECT_TRUE(s.capturing());
  s.submit([&] { log.push_back(1); });
  s.submit([&] { log.push_back(2); });
  auto graph = s.end_capture();
  EXPECT_EQ(graph->size(), 2u);
  s.synchronize();
  EXPECT_TRUE(log.empty());  // captured, not run
  graph->launch();
  graph->launch();
  s.synchronize();
  EXPECT_EQ(log, (std::vector<int>{1, 2, 1, 2}));
  s.begin_capture();
  s.submit([&] { log.push_back(3); });
  auto other = s.end_capture();
  graph->update(*other);
  log.clear();
  graph->launch();
  s.synchronize();
  EXPECT_EQ(log, std::vector<int>{3});
  EXPECT_THROW(s.end_capture(), Error);
  s.begin_capture();
  EXPECT_THROW(s.begin_capture(), Error);
  EXPECT_THROW(s.synchronize(), Error);
  s.end_capture();
}

TEST(StreamManager, DefaultAndCreatedStreams) {
  auto& m = StreamManager::instance();
  Stream& d = m.default_stream(Device::cpu());
  EXPECT_EQ(&d, &m.default_stream(Device::cpu()));
  auto s1 = m.create_stream(Device::cpu());
  auto s2 = m.create_stream(Device::cpu());
  EXPECT_NE(s1->id(), s2->id());
  std::atomic<int> n{0};
  for (auto* s : {static_cast<CpuStream*>(s1.get()), static_cast<CpuStream*>(s2.get())})
    s->submit([&] {
      std::this_thread::sleep_for(5ms);
      n++;
    });
  m.synchronize(Device::cpu());
  EXPECT_EQ(n.load(), 2);
  if (DeviceManager::instance().cuda_devices().empty()) {
    try {
      m.create_stream(Device::cuda(0));
      ADD_FAILURE() << "expected a Device error without a GPU";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Device);
    }
  }
}

}  // namespace
}  // namespace hodu
