// The batcher and the HTTP server on the loopback interface: batches really
// stack requests (and split the answers back right), different shapes are not
// mixed, a failing request fails alone, and the server answers health,
// metadata and infer (JSON and binary) from concurrent clients, gives 4xx with
// {"error"} to malformed requests while it keeps serving, drains requests in
// flight on shutdown, and starts again on the same port.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <fstream>
#include <thread>

#include "core/scratch_dir.h"
#include "distributed/serving/batcher.h"
#include "distributed/serving/client.h"
#include "distributed/serving/metrics.h"
#include "distributed/serving/model_repository.h"
#include "distributed/serving/server.h"

namespace hodu::serving {
namespace {

// y = x @ w (x: [batch, 4]), s = sum of x's rows.
constexpr const char* kMatMul = R"(hodu 1
model ir 8 opset 17
graph main(%x: f32[batch, 4]) -> (%y: f32[batch, 3], %s: f32[batch]) {
  init %w = f32[4, 3] [1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1]
  init %axes = i64[1] [1]
  %y = MatMul(%x, %w)
  %s = ReduceSum(%x, %axes) {keepdims: 0}
}
)";

// Dim 0 fixed: no batching.
constexpr const char* kFixed = R"(hodu 1
model ir 8 opset 17
graph main(%x: f32[1, 4]) -> (%y: f32[1, 4]) {
  %y = Relu(%x)
}
)";

// y = table[idx]: an index out of range fails at run time, after the input checks.
constexpr const char* kGather = R"(hodu 1
model ir 8 opset 17
graph main(%idx: i64[batch]) -> (%y: f32[batch]) {
  init %table = f32[4] [10, 20, 30, 40]
  %y = Gather(%table, %idx) {axis: 0}
}
)";

// s = sum over a dynamic dim 1: requests with different dim 1 must not share a run.
constexpr const char* kRowSum = R"(hodu 1
model ir 8 opset 17
graph main(%x: f32[batch, n]) -> (%s: f32[batch]) {
  init %axes = i64[1] [1]
  %s = ReduceSum(%x, %axes) {keepdims: 0}
}
)";

class Models {
 public:
  Models() : dir_("serving_test") {
    write("mm.hodu", kMatMul);
    write("fixed.hodu", kFixed);
    write("gather.hodu", kGather);
    write("rowsum.hodu", kRowSum);
  }
  std::string path(const std::string& name) const { return (dir_.path() / name).string(); }

 private:
  void write(const std::string& name, const char* text) { std::ofstream(dir_.path() / name) << text; }
  ScratchDir dir_;
};

const Models& models() {
  static Models m;
  return m;
}

std::vector<std::unique_ptr<Session>> instances(const std::string& path, int n = 1) {
  std::vector<std::unique_ptr<Session>> v;
  SessionOptions so;
  so.threads = 1;
  for (int i = 0; i < n; ++i) v.push_back(open_session(path, so));
  return v;
}

Tensor row(float base, int64_t rows = 1) {
  std::vector<float> v;
  for (int64_t r = 0; r < rows; ++r)
    for (int i = 0; i < 4; ++i) v.push_back(base + static_cast<float>(r * 4 + i));
  return Tensor::from_vector<float>(DType::F32, {rows, 4}, v);
}

TEST(Batcher, StacksConcurrentRequestsAndSplitsTheAnswers) {
  Metrics metrics;
  BatchOptions o{8, 5'000'000, 1024};  // the batch closes when 8 rows are in (the timeout is far)
  Batcher b("mm", "1", instances(models().path("mm.hodu")), o, &metrics);
  ASSERT_TRUE(b.batching()) << b.batching_note();
  auto reference = open_session(models().path("mm.hodu"));
  std::vector<std::vector<NamedValue>> results(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] { results[i] = b.infer({{"x", RuntimeValue(row(10.0f * i))}}); });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 8; ++i) {
    auto want = reference->run({{"x", RuntimeValue(row(10.0f * i))}});
    ASSERT_EQ(results[i].size(), 2u);
    for (size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(results[i][k].name, want[k].name);
      EXPECT_TRUE(tensors_bitwise_equal(results[i][k].value.tensor.contiguous(), want[k].value.tensor))
          << "request " << i << " output " << want[k].name;
    }
  }
  EXPECT_EQ(metrics.batches_with_requests_over("mm", "1", 4), 1u) << metrics.render();
  EXPECT_NE(metrics.render().find("hodugaki_batch_requests_bucket{model=\"mm\",version=\"1\",le=\"4\"} 0"),
            std::string::npos);
}

TEST(Batcher, MultiRowRequestsAndTheRowLimit) {
  Metrics metrics;
  BatchOptions o{4, 2'000'000, 1024};
  Batcher b("mm", "1", instances(models().path("mm.hodu")), o, &metrics);
  auto reference = open_session(models().path("mm.hodu"));
  // 3 + 1 rows fill a batch; 5 rows exceed the limit and run alone.
  std::vector<Tensor> in = {row(0, 3), row(100, 1), row(200, 5)};
  std::vector<std::vector<NamedValue>> out(3);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) threads.emplace_back([&, i] { out[i] = b.infer({{"x", RuntimeValue(in[i])}}); });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 3; ++i) {
    auto want = reference->run({{"x", RuntimeValue(in[i])}});
    EXPECT_TRUE(tensors_bitwise_equal(out[i][0].value.tensor.contiguous(), want[0].value.tensor)) << i;
  }
}

TEST(Batcher, DifferentShapesAreNotMixed) {
  Metrics metrics;
  BatchOptions o{8, 300'000, 1024};
  Batcher b("rowsum", "1", instances(models().path("rowsum.hodu")), o, &metrics);
  ASSERT_TRUE(b.batching()) << b.batching_note();
  std::vector<std::vector<NamedValue>> out(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      int64_t n = i % 2 ? 3 : 5;
      std::vector<float> v(n, static_cast<float>(i + 1));
      out[i] = b.infer({{"x", RuntimeValue(Tensor::from_vector<float>(DType::F32, {1, n}, v))}});
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i][0].value.tensor.contiguous().data<float>()[0], (i % 2 ? 3 : 5) * (i + 1.0f));
  // Two keys, so at most two requests per run.
  EXPECT_EQ(metrics.batches_with_requests_over("rowsum", "1", 2), 0u);
}

TEST(Batcher, AFailingRequestFailsAlone) {
  Metrics metrics;
  BatchOptions o{4, 2'000'000, 1024};
  Batcher b("gather", "1", instances(models().path("gather.hodu")), o, &metrics);
  std::vector<int64_t> idx = {0, 99, 3, 1};
  std::vector<std::string> errors(4);
  std::vector<float> got(4, -1);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      try {
        auto r = b.infer({{"idx", RuntimeValue(Tensor::from_vector<int64_t>(DType::I64, {1}, {idx[i]}))}});
        got[i] = r[0].value.tensor.contiguous().data<float>()[0];
      } catch (const Error& e) {
        errors[i] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(got[0], 10);
  EXPECT_EQ(got[2], 40);
  EXPECT_EQ(got[3], 20);
  EXPECT_FALSE(errors[1].empty());
  EXPECT_TRUE(errors[0].empty() && errors[2].empty() && errors[3].empty()) << errors[0] << errors[2] << errors[3];
}

TEST(Batcher, FixedBatchDimRunsRequestsAlone) {
  Batcher b("fixed", "1", instances(models().path("fixed.hodu")), {8, 1000, 1024}, nullptr);
  EXPECT_FALSE(b.batching());
  EXPECT_NE(b.batching_note().find("dim 0 of input 'x' is fixed"), std::string::npos) << b.batching_note();
  auto r = b.infer({{"x", RuntimeValue(Tensor::from_vector<float>(DType::F32, {1, 4}, {-1, 2, -3, 4}))}});
  EXPECT_EQ(r[0].value.tensor.to_doubles(), (std::vector<double>{0, 2, 0, 4}));
}

TEST(Batcher, StopRunsWhatIsQueuedThenRefuses) {
  Batcher b("mm", "1", instances(models().path("mm.hodu")), {8, 200'000, 1024}, nullptr);
  std::vector<NamedValue> r;
  std::thread t([&] { r = b.infer({{"x", RuntimeValue(row(1))}}); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // queued, waiting for company
  b.stop();
  t.join();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_THROW(b.infer({{"x", RuntimeValue(row(1))}}), Unavailable);
}

TEST(ModelSpec, Parses) {
  std::string p = models().path("mm.hodu");
  auto a = parse_model_spec(p);
  EXPECT_EQ(a.name, "mm");
  EXPECT_EQ(a.version, "1");
  auto b = parse_model_spec("net:7=" + p);
  EXPECT_EQ(b.name, "net");
  EXPECT_EQ(b.version, "7");
  EXPECT_THROW(parse_model_spec("bad/name=" + p), Error);
  EXPECT_THROW(parse_model_spec("x=/no/such/file.onnx"), Error);
  EXPECT_TRUE(version_less("2", "10"));
  EXPECT_FALSE(version_less("10", "2"));
}

// A server on a free loopback port, serving from a thread.
class TestServer {
 public:
  explicit TestServer(int max_batch = 8, int64_t timeout_us = 2000, size_t max_body = 1 << 20, int port = 0) {
    ModelOptions mo;
    mo.threads = 1;
    mo.batching = {max_batch, timeout_us, 1024};
    repo.add(parse_model_spec(models().path("mm.hodu")), mo, &metrics);
    repo.add(parse_model_spec("mm:2=" + models().path("mm.hodu")), mo, &metrics);
    repo.add(parse_model_spec(models().path("gather.hodu")), mo, &metrics);
    ServerOptions so;
    so.host = "127.0.0.1";
    so.port = port;
    so.max_body_bytes = max_body;
    so.http_threads = 32;
    server = std::make_unique<InferenceServer>(repo, metrics, so);
    this->port = server->bind();
    thread = std::thread([this] { server->serve(); });
  }
  ~TestServer() { stop(); }
  void stop() {
    if (!thread.joinable()) return;
    server->shutdown();
    thread.join();
    repo.stop();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }

  Metrics metrics;
  ModelRepository repo;
  std::unique_ptr<InferenceServer> server;
  int port = 0;
  std::thread thread;
};

TEST(Server, HealthAndMetadata) {
  TestServer s;
  InferenceClient c(s.url(), 5000);
  EXPECT_TRUE(c.live());
  EXPECT_TRUE(c.ready());
  EXPECT_TRUE(c.model_ready("mm"));
  EXPECT_TRUE(c.model_ready("mm", "2"));
  EXPECT_FALSE(c.model_ready("nope"));  // 404: false, as the protocol says
  auto server = nlohmann::json::parse(c.server_metadata());
  EXPECT_EQ(server["name"], "hodugaki");
  EXPECT_EQ(server["extensions"][0], "binary_tensor_data");
  auto m = nlohmann::json::parse(c.model_metadata("mm"));
  EXPECT_EQ(m["name"], "mm");
  EXPECT_EQ(m["versions"], nlohmann::json::parse(R"(["1","2"])"));
  EXPECT_EQ(m["platform"], "hodu_hoduscript");
  EXPECT_EQ(m["inputs"][0]["name"], "x");
  EXPECT_EQ(m["inputs"][0]["datatype"], "FP32");
  EXPECT_EQ(m["inputs"][0]["shape"], nlohmann::json::parse("[-1, 4]"));
  EXPECT_EQ(m["outputs"][1]["shape"], nlohmann::json::parse("[-1]"));
  httplib::Client raw(s.url());
  auto r = raw.Get("/v2/health/live");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, R"({"live":true})");  // KServe's client reads the body
  r = raw.Get("/v2/health/ready");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, R"({"ready":true})");
  r = raw.Get("/v2/models/mm/versions/1/ready");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, R"({"name":"mm","ready":true})");
}

TEST(Server, InferJsonAndBinaryFromConcurrentClients) {
  TestServer s;
  auto reference = open_session(models().path("mm.hodu"));
  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c)
    clients.emplace_back([&, c] {
      InferenceClient client(s.url(), 10000);
      for (int i = 0; i < 10; ++i) {
        Tensor x = row(static_cast<float>(c * 100 + i), 1 + (i % 3));
        InferOptions o;
        o.binary = (c + i) % 2 == 0;
        o.id = fmt::format("c{}-{}", c, i);
        if (i % 4 == 0) o.version = "2";  // else the latest, which is 2 as well
        try {
          InferResponse r = client.infer("mm", {{"x", x}}, o);
          auto want = reference->run({{"x", RuntimeValue(x)}});
          bool ok = r.id == o.id && r.outputs.size() == 2 && r.model_version == (o.version.empty() ? "2" : o.version);
          for (size_t k = 0; ok && k < 2; ++k)
            ok = r.outputs[k].first == want[k].name && tensors_bitwise_equal(r.outputs[k].second, want[k].value.tensor);
          if (!ok) ++wrong;
        } catch (const Error& e) {
          ADD_FAILURE() << e.what();
          ++failed;
        }
      }
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(s.metrics.request_count("mm", "1", 200) + s.metrics.request_count("mm", "2", 200), 80u);
  // Selecting one output, by name.
  InferenceClient client(s.url(), 5000);
  InferOptions o;
  o.outputs = {"s"};
  auto r = client.infer("mm", {{"x", row(1)}}, o);
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_EQ(r.outputs[0].first, "s");
  EXPECT_EQ(r.outputs[0].second.to_doubles(), (std::vector<double>{1 + 2 + 3 + 4}));
}

TEST(Server, MalformedRequestsGet4xxAndTheServerKeepsServing) {
  TestServer s(8, 2000, 4096);
  httplib::Client raw(s.url());
  struct Case {
    std::string path, body;
    httplib::Headers headers;
    int status;
    std::string message;
  };
  std::string ok_input = R"({"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]})";
  std::vector<Case> cases = {
      {"/v2/models/nope/infer", "{}", {}, 404, "unknown model 'nope'"},
      {"/v2/models/mm/versions/9/infer", "{}", {}, 404, "has no version '9'"},
      {"/v2/models/mm/infer", "{\"inputs\": [", {}, 400, "not valid JSON"},
      {"/v2/models/mm/infer", "", {}, 400, "not valid JSON"},
      {"/v2/models/mm/infer", R"({"inputs":[{"name":"z","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]})", {}, 400,
       "has no input 'z'"},
      {"/v2/models/mm/infer", R"({"inputs":[{"name":"x","shape":[1,4],"datatype":"INT64","data":[1,2,3,4]}]})", {},
       400, "datatype INT64 does not match the model's FP32"},
      {"/v2/models/mm/infer", R"({"inputs":[{"name":"x","shape":[1,5],"datatype":"FP32","data":[1,2,3,4,5]}]})", {},
       400, "dim 1 is 5 but the model expects 4"},
      {"/v2/models/mm/infer", R"({"inputs":[{"name":"x","shape":[4],"datatype":"FP32","data":[1,2,3,4]}]})", {}, 400,
       "rank 1"},
      {"/v2/models/mm/infer", R"({"inputs":[]})", {}, 400, "missing input 'x'"},
      {"/v2/models/mm/infer", R"({"inputs":[{"name":"x","shape":[0,4],"datatype":"FP32","data":[]}]})", {}, 400,
       "has no elements"},
      {"/v2/models/mm/infer", "{\"inputs\":[" + ok_input + "],\"outputs\":[{\"name\":\"q\"}]}", {}, 400,
       "has no output 'q'"},
      {"/v2/models/mm/infer", "{\"inputs\":[" + ok_input + "]}", {{"Inference-Header-Content-Length", "abc"}}, 400,
       "is not a non-negative integer"},
      {"/v2/models/mm/infer", "{\"inputs\":[" + ok_input + "]}", {{"Inference-Header-Content-Length", "100000"}}, 400,
       "body has"},
      {"/v2/models/mm/infer", std::string(5000, ' '), {}, 413, "larger than the server's limit"},
      {"/v2/models/gather/infer", R"({"inputs":[{"name":"idx","shape":[1],"datatype":"INT64","data":[7]}]})", {}, 400,
       ""},
  };
  for (const auto& c : cases) {
    auto r = raw.Post(c.path, c.headers, c.body, "application/json");
    ASSERT_TRUE(r) << c.path << " " << c.body;
    EXPECT_EQ(r->status, c.status) << c.body << " -> " << r->body;
    auto j = nlohmann::json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r->body;
    EXPECT_NE(j["error"].get<std::string>().find(c.message), std::string::npos) << j["error"];
    // The server still answers a good request after each bad one.
    InferenceClient client(s.url(), 5000);
    EXPECT_EQ(client.infer("mm", {{"x", row(1)}}).outputs.size(), 2u);
  }
  // A gzip body small on the wire but over the limit once decompressed: 413 too.
  httplib::Client zip(s.url());
  zip.set_compress(true);
  auto z = zip.Post("/v2/models/mm/infer", std::string(200000, ' '), "application/json");
  ASSERT_TRUE(z);
  EXPECT_EQ(z->status, 413) << z->body;
  // A compressed request within the limit is served.
  z = zip.Post("/v2/models/mm/infer", "{\"inputs\":[" + ok_input + "]}", "application/json");
  ASSERT_TRUE(z);
  EXPECT_EQ(z->status, 200) << z->body;
  auto r = raw.Get("/v2/no/such/endpoint");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_NE(r->body.find("\"error\""), std::string::npos);
  r = raw.Get("/v2/models/mm/infer");  // wrong method
  ASSERT_TRUE(r);
  EXPECT_GE(r->status, 400);
  EXPECT_LT(r->status, 500);
  // Errors are counted by model and status.
  EXPECT_GE(s.metrics.request_count("mm", "2", 400), 9u);
  EXPECT_EQ(s.metrics.request_count("", "", 404), 2u);  // unknown model, unknown version
  std::string text = s.metrics.render();
  EXPECT_NE(text.find("hodugaki_errors_total{model=\"mm\",version=\"2\",kind=\"client\"}"), std::string::npos);
}

TEST(Server, BatchingIsVisibleInMetrics) {
  TestServer s(8, 3'000'000);  // a batch closes when full: 8 one-row requests make one run
  std::vector<std::thread> clients;
  std::atomic<int> failed{0};
  for (int c = 0; c < 8; ++c)
    clients.emplace_back([&, c] {
      InferenceClient client(s.url(), 10000);
      try {
        InferOptions o;
        o.version = "1";
        auto r = client.infer("mm", {{"x", row(static_cast<float>(c))}}, o);
        if (r.outputs[1].second.to_doubles() != std::vector<double>{4.0 * c + 6}) ++failed;
      } catch (const Error&) {
        ++failed;
      }
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(failed, 0);
  httplib::Client raw(s.url());
  auto r = raw.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("hodugaki_batch_requests_bucket{model=\"mm\",version=\"1\",le=\"8\"} 1"), std::string::npos)
      << r->body;
  EXPECT_NE(r->body.find("hodugaki_batch_size_sum{model=\"mm\",version=\"1\"} 8"), std::string::npos);
  EXPECT_NE(r->body.find("hodugaki_requests_total{model=\"mm\",version=\"1\",code=\"200\"} 8"), std::string::npos);
  EXPECT_NE(r->body.find("process_resident_memory_bytes "), std::string::npos);
}

TEST(Server, ShutdownDrainsRequestsInFlight) {
  auto s = std::make_unique<TestServer>(8, 400'000);  // a lone request waits 0.4 s for company
  std::atomic<int> status{0};
  std::thread in_flight([&] {
    InferenceClient client(s->url(), 10000);
    try {
      InferOptions o;
      o.version = "1";
      status = client.infer("mm", {{"x", row(1)}}, o).outputs.size() == 2 ? 200 : 1;
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
      status = -1;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto t0 = std::chrono::steady_clock::now();
  s->server->shutdown();
  EXPECT_TRUE(s->server->draining());
  in_flight.join();
  EXPECT_EQ(status, 200);
  s->thread.join();
  s->repo.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(8));
  // Nothing listens any more.
  InferenceClient late(s->url(), 2000);
  EXPECT_THROW(late.live(), Error);
  // A new server takes the same port.
  int port = s->port;
  s.reset();
  TestServer again(8, 2000, 1 << 20, port);
  EXPECT_EQ(again.port, port);
  InferenceClient client(again.url(), 5000);
  EXPECT_TRUE(client.live());
  EXPECT_EQ(client.infer("mm", {{"x", row(1)}}).outputs.size(), 2u);
}

TEST(Server, APortInUseIsAnError) {
  TestServer s;
  Metrics m;
  ModelRepository repo;
  ServerOptions so;
  so.host = "127.0.0.1";
  so.port = s.port;
  InferenceServer second(repo, m, so);
  try {
    second.bind();
    FAIL() << "bound a port in use";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Io);
    EXPECT_NE(std::string(e.what()).find("cannot listen"), std::string::npos);
  }
}

TEST(Client, UnreachableServerIsAnIoError) {
  EXPECT_THROW(InferenceClient("localhost:8000"), Error);
  InferenceClient c("http://127.0.0.1:1", 1000);
  try {
    c.infer("m", {{"x", row(1)}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Io);
    EXPECT_NE(std::string(e.what()).find("cannot reach"), std::string::npos);
  }
}

}  // namespace
}  // namespace hodu::serving
