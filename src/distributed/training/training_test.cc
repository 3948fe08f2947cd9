// Tests of data-parallel training (src/distributed/training). They run as one
// process (ctest training_test) and as two ranks under mpirun (ctest
// training_test_mpi2, tests/distributed/mpirun_test.sh): every test makes the
// same collective calls in the same order on every rank, and its expectations
// hold for any number of ranks: N ranks each taking B rows of a global batch
// give the losses and params of one process taking the N x B rows.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "distributed/training/array_data.h"
#include "distributed/training/checkpoint.h"
#include "distributed/training/communicator.h"
#include "distributed/training/data_parallel.h"
#include "distributed/training/gradient_reducer.h"
#include "distributed/training/shard_sampler.h"
#include "distributed/training/step_partition.h"
#include "distributed/training/trainer.h"
#include "passes/autodiff_test_util.h"
#include "runtime/session.h"

namespace hodu::distributed {
namespace {

namespace fs = std::filesystem;
using autodiff_test::Net;
using autodiff_test::rnd;

class MpiEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { env_ = std::make_unique<distributed::Environment>(); }
  void TearDown() override { env_.reset(); }

 private:
  std::unique_ptr<distributed::Environment> env_;  // not the injected ::testing::Environment
};
[[maybe_unused]] ::testing::Environment* const kMpi = ::testing::AddGlobalTestEnvironment(new MpiEnvironment);

Communicator world() { return Communicator::world(); }

// relu(x·W1ᵀ + b1)·W2ᵀ + b2 into the mean softmax cross entropy against labels; with
// `batch_norm` a BatchNormalization in training mode after the first layer (running statistics).
Model mlp(bool batch_norm = false) {
  Net n;
  n.g.name = "mlp";
  n.g.inputs = {{"x", ValueType::tensor(DType::F32, Shape({Dim::sym("batch"), Dim(6)})), ""},
                {"labels", ValueType::tensor(DType::I64, Shape({Dim::sym("batch")})), ""}};
  n.constant("w1", rnd({16, 6}, 1, -0.5, 0.5, DType::F32)).constant("b1", rnd({16}, 2, -0.1, 0.1, DType::F32));
  n.constant("w2", rnd({4, 16}, 3, -0.5, 0.5, DType::F32)).constant("b2", rnd({4}, 4, -0.1, 0.1, DType::F32));
  n.node("Gemm", {"x", "w1", "b1"}, {"h"}, {Attribute::make_int("transB", 1)});
  std::string h = "h";
  if (batch_norm) {
    n.constant("scale", rnd({16}, 5, 0.5, 1.5, DType::F32)).constant("bias", rnd({16}, 6, -0.1, 0.1, DType::F32));
    n.constant("mean", Tensor::zeros(DType::F32, {16}));
    n.constant("var", Tensor::from_vector(DType::F32, {16}, std::vector<float>(16, 1.f)));
    n.node("BatchNormalization", {"h", "scale", "bias", "mean", "var"}, {"hn"},
           {Attribute::make_int("training_mode", 1)});
    h = "hn";
  }
  n.node("Relu", {h}, {"r"});
  n.node("Gemm", {"r", "w2", "b2"}, {"y"}, {Attribute::make_int("transB", 1)});
  n.node("SoftmaxCrossEntropyLoss", {"y", "labels"}, {"loss"}, {Attribute::make_string("reduction", "mean")});
  n.output("loss");
  return n.m;
}

// 96 rows: x uniform, labels from a fixed linear rule (learnable).
ArrayData dataset(int64_t rows = 96) {
  Tensor x = rnd({rows, 6}, 7, -1, 1, DType::F32);
  std::vector<int64_t> labels(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const float* v = x.data<float>() + r * 6;
    labels[static_cast<size_t>(r)] = (v[0] + v[1] > 0 ? 1 : 0) + (v[2] - v[3] > 0 ? 2 : 0);
  }
  return ArrayData({{"x", x}, {"labels", Tensor::from_vector(DType::I64, {rows}, labels)}}, "data");
}

double rel_diff(const Tensor& a, const Tensor& b) {
  auto x = a.to_doubles(), y = b.to_doubles();
  EXPECT_EQ(x.size(), y.size());
  double m = 0, scale = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    m = std::max(m, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return m / std::max(scale, 1e-30);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// One process's reference: build_training_step's whole step as one Session over the global
// batches (the rows every rank's slices add up to).
struct Reference {
  std::vector<double> losses;
  std::map<std::string, Tensor> state;
};
Reference reference_run(const Model& forward, const ArrayData& data, const ShardSampler& sampler, int64_t steps,
                        const passes::OptimizerSpec& opt, float lr, const std::string& engine) {
  Model step = forward;
  step.graph = passes::build_training_step(forward.graph, "loss", passes::trainable_initializers(forward.graph), opt);
  Reference r;
  r.state = passes::initial_training_state(forward.graph, step.graph);
  SessionOptions so;
  so.engine = engine;
  so.threads = 1;
  so.update_state_in_place = true;
  auto s = Session::from_model(step, so);
  for (int64_t k = 0; k < steps; ++k) {
    std::map<std::string, RuntimeValue> feeds;
    for (auto& [name, t] : data.batch(sampler.global_rows(k))) feeds[name] = t;
    feeds["lr"] = Tensor::scalar<float>(DType::F32, lr);
    for (auto& [name, t] : r.state) feeds[name] = t;
    for (auto& o : s->run(feeds))
      if (o.name == "loss") r.losses.push_back(o.value.tensor.get_double(0));
  }
  return r;
}

// A folder every rank names alike (rank 0's process id), removed at the end.
struct SharedDir {
  fs::path path;
  explicit SharedDir(const Communicator& c) {
    int64_t pid = c.rank() == 0 ? ::getpid() : 0;
    c.broadcast(&pid, sizeof(pid));
    path = fs::temp_directory_path() / ("hodu_training_test_" + std::to_string(pid));
    c.barrier();
    if (c.rank() == 0) fs::remove_all(path);
    c.barrier();
  }
  ~SharedDir() {
    Communicator c = world();
    c.barrier();
    if (c.rank() == 0) fs::remove_all(path);
  }
};

// ---- sharding ----

TEST(ShardSampler, PermutationIsSeededAndComplete) {
  auto p = ShardSampler::permutation(1000, 42);
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) EXPECT_EQ(sorted[static_cast<size_t>(i)], i);
  EXPECT_EQ(p, ShardSampler::permutation(1000, 42));
  EXPECT_NE(p, ShardSampler::permutation(1000, 43));
  // Fixed values: the order may not change between builds (resumed runs, other hosts).
  EXPECT_EQ(ShardSampler::permutation(5, 0), (std::vector<int64_t>{2, 1, 4, 3, 0}));
}

TEST(ShardSampler, RanksSliceTheGlobalBatchOfOneBigProcess) {
  // 4 ranks of 5 rows and 1 process of 20 rows read the same rows at every step, across epochs.
  ShardSampler one(103, 20, 1, 0, 7, true);
  EXPECT_EQ(one.steps_per_epoch(), 5);  // the last 3 rows of each epoch are dropped
  for (int64_t step : {0, 1, 4, 5, 11}) {
    std::vector<int64_t> joined;
    for (int r = 0; r < 4; ++r) {
      auto rows = ShardSampler(103, 5, 4, r, 7, true).rows(step);
      EXPECT_EQ(rows.size(), 5u);
      joined.insert(joined.end(), rows.begin(), rows.end());
    }
    EXPECT_EQ(joined, one.rows(step)) << "step " << step;
  }
  // A new permutation each epoch; each epoch visits distinct rows.
  EXPECT_NE(one.rows(0), one.rows(5));
  std::set<int64_t> epoch;
  for (int64_t s = 0; s < 5; ++s)
    for (int64_t r : one.rows(s)) epoch.insert(r);
  EXPECT_EQ(epoch.size(), 100u);
  // Without shuffling: file order.
  ShardSampler plain(10, 2, 2, 1, 0, false);
  EXPECT_EQ(plain.rows(0), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(plain.rows(3), (std::vector<int64_t>{6, 7}));  // epoch 1, step 1 (2 steps per epoch)
}

TEST(ShardSampler, TooFewRows) {
  try {
    ShardSampler(10, 4, 3, 0, 0, true);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fewer than one global batch (4 per rank x 3 ranks = 12)"), std::string::npos)
        << e.what();
  }
}

// ---- the cut of a training step ----

TEST(PartitionTrainingStep, BucketsInBackwardOrder) {
  PartitionedStep p = partition_training_step(mlp(), "loss", {"w1", "b1", "w2", "b2"}, passes::OptimizerSpec::sgd(0.9f),
                                              /*bucket_bytes=*/68 * 4);
  // w2 (64 floats) and b2 (4) are ready first and fill 68 floats, then w1 (96 floats, over the
  // size: a bucket of its own), then b1 with the loss.
  ASSERT_EQ(p.buckets.size(), 3u);
  EXPECT_EQ(p.buckets[0].values, (std::vector<std::string>{"grad.w2", "grad.b2"}));
  EXPECT_EQ(p.buckets[1].values, (std::vector<std::string>{"grad.w1"}));
  EXPECT_EQ(p.buckets[2].values, (std::vector<std::string>{"grad.b1", "loss"}));
  EXPECT_EQ(p.stages.size(), 3u);
  EXPECT_GT(p.stages[0].graph.nodes.size(), 0u);
  // The update reads the averaged values, lr and the state; nothing else a rank computed.
  std::set<std::string> update_inputs;
  for (const auto& in : p.update.graph.inputs) update_inputs.insert(in.name);
  for (const char* name : {"grad.w1", "grad.b2", "lr", "w1", "w1.momentum_buffer", "optimizer.step"})
    EXPECT_TRUE(update_inputs.count(name)) << name;
  EXPECT_FALSE(update_inputs.count("x"));
  // One bucket for everything when the size is 0.
  EXPECT_EQ(partition_training_step(mlp(), "loss", {"w1", "b1", "w2", "b2"}, passes::OptimizerSpec::sgd(), 0)
                .buckets.size(),
            1u);
}

TEST(PartitionTrainingStep, ClearErrors) {
  auto message = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto opt = passes::OptimizerSpec::sgd();
  EXPECT_NE(message([&] { partition_training_step(mlp(), "los", {"w1"}, opt, 0); })
                .find("--loss 'los': the model has no value of that name (its outputs: 'loss')"),
            std::string::npos);
  EXPECT_NE(message([&] { partition_training_step(mlp(), "y", {"w1"}, opt, 0); }).find("not one number"),
            std::string::npos);
  EXPECT_NE(message([&] { partition_training_step(mlp(), "x", {"w1"}, opt, 0); }).find("is a graph input"),
            std::string::npos);
  EXPECT_NE(message([&] { partition_training_step(mlp(), "loss", {"w9"}, opt, 0); })
                .find("param 'w9' is not an initializer"),
            std::string::npos);
}

// Stages + update on one rank compute what the one-graph step computes.
TEST(PartitionTrainingStep, StagesThenUpdateEqualTheWholeStep) {
  for (bool bn : {false, true}) {
    Model forward = mlp(bn);
    ArrayData data = dataset();
    data.bind({forward.graph.inputs[0], forward.graph.inputs[1]}, {}, 16);
    ShardSampler sampler(data.rows(), 16, 1, 0, 3, true);
    auto opt = passes::OptimizerSpec::adam();
    Reference ref = reference_run(forward, data, sampler, 4, opt, 0.01f, "interp");
    PartitionedStep p = partition_training_step(forward, "loss", passes::trainable_initializers(forward.graph), opt, 100);
    EXPECT_GE(p.buckets.size(), 3u);
    EXPECT_EQ(p.statistics.size(), bn ? 2u : 0u);
    auto state = passes::initial_training_state(forward.graph, p.step.graph);
    SessionOptions so;
    so.engine = "interp";
    std::vector<std::unique_ptr<Session>> stages;
    for (const auto& s : p.stages) stages.push_back(s.graph.nodes.empty() ? nullptr : Session::from_model(s, so));
    so.update_state_in_place = true;
    auto update = Session::from_model(p.update, so);
    for (int64_t k = 0; k < 4; ++k) {
      std::map<std::string, Tensor> values = state;
      for (auto& [name, t] : data.batch(sampler.rows(k))) values[name] = t;
      for (size_t s = 0; s < stages.size(); ++s) {
        if (!stages[s]) continue;
        std::map<std::string, RuntimeValue> in;
        for (const auto& v : p.stages[s].graph.inputs) in[v.name] = values.at(v.name);
        for (auto& o : stages[s]->run(in)) values[o.name] = o.value.tensor;
      }
      EXPECT_EQ(values.at("loss").get_double(0), ref.losses[static_cast<size_t>(k)]) << "step " << k;
      std::map<std::string, RuntimeValue> in;
      for (const auto& v : p.averaged) in[v] = values.at(v);
      in["lr"] = Tensor::scalar<float>(DType::F32, 0.01f);
      for (auto& [name, t] : state) in[name] = t;
      update->run(in);
    }
    for (const auto& [name, t] : ref.state) EXPECT_TRUE(same_bits(state.at(name), t)) << name << (bn ? " (bn)" : "");
  }
}

// ---- all-reduce ----

TEST(GradientReducer, AveragesOverTheRanks) {
  Communicator c = world();
  for (bool overlap : {false, true}) {
    GradientBucket a, b;
    a.dtype = DType::F32;
    a.values = {"g1", "g2"};
    a.shapes = {{2, 2}, {3}};
    a.elements = {4, 3};
    a.total_elements = 7;
    b.dtype = DType::F64;
    b.values = {"g3"};
    b.shapes = {{}};
    b.elements = {1};
    b.total_elements = 1;
    GradientReducer r(c, {a, b}, overlap);
    for (int step = 0; step < 3; ++step) {
      const float v = static_cast<float>(c.rank() + 1 + step);
      std::map<std::string, Tensor> values = {
          {"g1", Tensor::from_vector(DType::F32, {2, 2}, std::vector<float>{v, 2 * v, 3 * v, 4 * v})},
          {"g2", Tensor::from_vector(DType::F32, {3}, std::vector<float>{-v, 0, v})},
          {"g3", Tensor::scalar<double>(DType::F64, 10.0 * v)}};
      r.submit(0, values);
      r.submit(1, values);
      r.wait();
      const double mean = (c.size() + 1) / 2.0 + step;  // of rank + 1 + step over the ranks
      EXPECT_EQ(r.averaged("g1").shape(), (std::vector<int64_t>{2, 2}));
      EXPECT_DOUBLE_EQ(r.averaged("g1").get_double(3), 4 * mean);
      EXPECT_DOUBLE_EQ(r.averaged("g2").get_double(0), -mean);
      EXPECT_DOUBLE_EQ(r.averaged("g3").get_double(0), 10 * mean);
    }
    EXPECT_EQ(r.stats().steps, 3);
    EXPECT_EQ(r.stats().bytes, 7 * 4 + 8);
  }
}

TEST(GradientReducer, RefusesAValueOfAnotherSize) {
  GradientBucket a;
  a.values = {"loss"};
  a.shapes = {{}};
  a.elements = {1};
  a.total_elements = 1;
  GradientReducer r(world(), {a}, false);
  try {
    r.submit(0, {{"loss", Tensor::zeros(DType::F32, {4})}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the loss must be one number"), std::string::npos) << e.what();
  }
}

// ---- data-parallel steps ----

// N ranks of 8 rows equal one process of 8·N rows: losses and params to 1e-5 (the sums' order
// differs), for SGD with momentum and AdamW, several buckets overlapped or not.
TEST(DataParallel, MatchesOneProcessWithTheGlobalBatch) {
  Communicator c = world();
  struct Case {
    passes::OptimizerSpec opt;
    double bucket_mb;
    bool overlap;
  };
  for (const Case& k : {Case{passes::OptimizerSpec::sgd(0.9f), 0.0002, true},
                        Case{passes::OptimizerSpec::adamw(), 25, true}, Case{passes::OptimizerSpec::sgd(), 0.0003, false}}) {
    Model forward = mlp();
    ArrayData data = dataset();
    data.bind({forward.graph.inputs[0], forward.graph.inputs[1]}, {}, 8);
    ShardSampler sampler(data.rows(), 8, c.size(), c.rank(), 11, true);
    const float lr = 0.05f;
    Reference ref = reference_run(forward, data, sampler, 12, k.opt, lr, "cpu");
    DataParallelOptions o;
    o.loss = "loss";
    o.optimizer = k.opt;
    o.bucket_mb = k.bucket_mb;
    o.overlap = k.overlap;
    o.threads = 1;
    DataParallel dp(forward, o, c);
    EXPECT_EQ(dp.partition().buckets.size() > 1, k.bucket_mb < 1);
    for (int64_t s = 0; s < 12; ++s) {
      double loss = dp.step(data.batch(sampler.rows(s)), lr);
      EXPECT_NEAR(loss, ref.losses[static_cast<size_t>(s)], 1e-5 * std::abs(ref.losses[static_cast<size_t>(s)]))
          << "step " << s;
    }
    for (const auto& [name, t] : ref.state) EXPECT_LT(rel_diff(dp.state().at(name), t), 1e-5) << name;
    // Every rank holds the same bits.
    const auto fp = static_cast<int64_t>(dp.state_fingerprint());
    EXPECT_EQ(c.min(fp), c.max(fp));
    EXPECT_EQ(dp.steps_taken(), 12);
    EXPECT_EQ(dp.reduce_stats().steps, 12);
    // The trained model carries the params.
    Model trained = dp.trained_model();
    EXPECT_TRUE(same_bits(*trained.graph.initializer("w1"), dp.state().at("w1")));
  }
}

TEST(DataParallel, BatchNormStatisticsAreAveraged) {
  Communicator c = world();
  Model forward = mlp(true);
  ArrayData data = dataset();
  data.bind({forward.graph.inputs[0], forward.graph.inputs[1]}, {}, 8);
  ShardSampler sampler(data.rows(), 8, c.size(), c.rank(), 1, true);
  DataParallelOptions o;
  o.loss = "loss";
  o.threads = 1;
  DataParallel dp(forward, o, c);
  EXPECT_EQ(dp.statistics(), (std::vector<std::string>{"mean", "var"}));
  for (int64_t s = 0; s < 3; ++s) dp.step(data.batch(sampler.rows(s)), 0.1f);
  // The running mean moved (momentum 0.9 of 0, plus 0.1 of the batch means) and is the same bits on
  // every rank.
  EXPECT_NE(dp.state().at("mean").get_double(0), 0.0);
  const auto fp = static_cast<int64_t>(dp.state_fingerprint());
  EXPECT_EQ(c.min(fp), c.max(fp));
  EXPECT_TRUE(same_bits(*dp.trained_model().graph.initializer("mean"), dp.state().at("mean")));
}

TEST(DataParallel, ClearErrors) {
  DataParallelOptions o;
  o.loss = "loss";
  o.threads = 1;
  DataParallel dp(mlp(), o, world());
  ArrayData data = dataset();
  data.bind({mlp().graph.inputs[0], mlp().graph.inputs[1]}, {}, 8);
  auto feeds = data.batch({0, 1, 2, 3});
  feeds.erase("labels");
  try {
    dp.step(feeds, 0.1f);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no feed for the model input 'labels' (inputs: 'x', 'labels')"),
              std::string::npos)
        << e.what();
  }
  std::map<std::string, Tensor> state;
  state["w1"] = Tensor::zeros(DType::F32, {3});
  try {
    dp.load_state(state, 0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'w1' is f32[3] where this training has f32[16, 6]"), std::string::npos)
        << e.what();
  }
}

// ---- data ----

TEST(ArrayData, BindErrorsNameTheInputAndArray) {
  Model m = mlp();
  auto message = [&](ArrayData d, std::map<std::string, std::string> names, int64_t batch = 8) {
    try {
      d.bind({m.graph.inputs[0], m.graph.inputs[1]}, names, batch);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  Tensor x = Tensor::zeros(DType::F32, {10, 6});
  Tensor y = Tensor::zeros(DType::I64, {10});
  EXPECT_EQ(message(ArrayData({{"x", x}, {"labels", y}}, "d.npz"), {}), "no error");
  EXPECT_NE(message(ArrayData({{"x", x}, {"y", y}}, "d.npz"), {})
                .find("d.npz has no array 'labels' for the model input 'labels' (its arrays: 'x', 'y')"),
            std::string::npos);
  EXPECT_EQ(message(ArrayData({{"x", x}, {"y", y}}, "d.npz"), {{"labels", "y"}}), "no error");
  EXPECT_NE(message(ArrayData({{"x", x}, {"labels", Tensor::zeros(DType::I32, {10})}}, "d.npz"), {})
                .find("d.npz's 'labels' (for the model input 'labels') is i32[10], the input is i64[batch]"),
            std::string::npos);
  EXPECT_NE(message(ArrayData({{"x", Tensor::zeros(DType::F32, {10, 5})}, {"labels", y}}, "d.npz"), {})
                .find("dim 1 is 5, the input f32[batch, 6] wants 6"),
            std::string::npos);
  EXPECT_NE(message(ArrayData({{"x", x}, {"labels", Tensor::zeros(DType::I64, {9})}}, "d.npz"), {})
                .find("'x' and 'labels' have 10 and 9 rows"),
            std::string::npos);
  EXPECT_NE(message(ArrayData({{"x", x}, {"labels", y}}, "d.npz"), {{"z", "x"}}).find("the model has no input 'z'"),
            std::string::npos);
  Model fixed = mlp();
  fixed.graph.inputs[0].type.shape[0] = Dim(4);
  try {
    ArrayData({{"x", x}, {"labels", y}}, "d.npz").bind({fixed.graph.inputs[0], fixed.graph.inputs[1]}, {}, 8);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("its batch dim is fixed to 4, but --batch is 8"), std::string::npos)
        << e.what();
  }
  // Gathered rows.
  Tensor seq = Tensor::from_vector(DType::F32, {3, 6}, std::vector<float>{0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2});
  ArrayData d({{"x", seq}, {"labels", Tensor::from_vector(DType::I64, {3}, std::vector<int64_t>{5, 6, 7})}}, "d");
  d.bind({m.graph.inputs[0], m.graph.inputs[1]}, {}, 2);
  auto b = d.batch({2, 0});
  EXPECT_EQ(b.at("x").shape(), (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(b.at("x").get_double(0), 2.0);
  EXPECT_EQ(b.at("x").get_double(6), 0.0);
  EXPECT_EQ(b.at("labels").to_int64s(), (std::vector<int64_t>{7, 5}));
}

// ---- checkpoints ----

TEST(Checkpoint, WrittenWholeOrNotAtAll) {
  Communicator c = world();
  SharedDir dir(c);
  if (c.rank() == 0) {
    const std::string root = dir.path.string();
    EXPECT_FALSE(latest_checkpoint(root));
    CheckpointData d;
    d.model = {{"w", Tensor::from_vector(DType::F32, {2}, std::vector<float>{1.5f, -2})}};
    d.optimizer = {{"w.momentum_buffer", Tensor::zeros(DType::F32, {2})}};
    d.info["note"] = "x";
    for (int64_t s : {5, 10, 15}) {
      d.step = s;
      write_checkpoint(root, d, 2);
    }
    EXPECT_FALSE(fs::exists(dir.path / "step-00000005"));  // keep 2
    EXPECT_EQ(latest_checkpoint(root), (dir.path / "step-00000015").string());
    // A run killed while writing leaves a temporary folder and perhaps a folder without its
    // training.json: neither counts.
    fs::create_directories(dir.path / ".step-00000020.tmp-1");
    fs::create_directories(dir.path / "step-00000025");
    EXPECT_EQ(latest_checkpoint(root), (dir.path / "step-00000015").string());
    CheckpointData r = read_checkpoint(*latest_checkpoint(root));
    EXPECT_EQ(r.step, 15);
    EXPECT_EQ(r.info["note"], "x");
    ASSERT_EQ(r.model.size(), 1u);
    EXPECT_TRUE(same_bits(r.model[0].second, d.model[0].second));
    EXPECT_EQ(r.optimizer[0].first, "w.momentum_buffer");
    { std::ofstream(dir.path / "step-00000025" / "training.json") << "{not json"; }
    try {
      read_checkpoint((dir.path / "step-00000025").string());
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("is not JSON"), std::string::npos) << e.what();
    }
  }
}

// A run stopped after a checkpoint and resumed reaches the uninterrupted run's params bit for bit.
TEST(Trainer, ResumeReachesTheSameBits) {
  Communicator c = world();
  SharedDir dir(c);
  Model forward = mlp();
  ArrayData data = dataset();
  data.bind({forward.graph.inputs[0], forward.graph.inputs[1]}, {}, 8);
  TrainOptions o;
  o.model.loss = "loss";
  o.model.optimizer = passes::OptimizerSpec::adam();
  o.model.threads = 1;
  o.model.bucket_mb = 0.0002;
  o.batch = 8;
  o.steps = 14;
  o.lr = 0.02f;
  o.data_seed = 5;
  o.every = 4;
  o.keep = 0;
  o.checkpoint_dir = (dir.path / "full").string();
  Trainer full(forward, data, o, c);
  EXPECT_EQ(full.restore(), 0);
  full.run();
  EXPECT_EQ(full.losses().size(), 14u);
  if (c.rank() == 0) {
    EXPECT_EQ(full.checkpoints_written().size(), 4u);  // steps 4, 8, 12, 14
  }

  // Stopped after step 8: its checkpoints 4 and 8 only.
  o.checkpoint_dir = (dir.path / "cut").string();
  if (c.rank() == 0) {
    fs::create_directories(dir.path / "cut");
    for (const char* s : {"step-00000004", "step-00000008"})
      fs::copy(dir.path / "full" / s, dir.path / "cut" / s, fs::copy_options::recursive);
  }
  c.barrier();
  {
    Trainer again(forward, data, o, c);
    EXPECT_THROW(again.restore(), Error);  // the folder holds checkpoints and --resume was not given
  }
  o.resume = true;
  Trainer resumed(forward, data, o, c);
  EXPECT_EQ(resumed.restore(), 8);
  resumed.run();
  for (const auto& [name, t] : full.model().state()) EXPECT_TRUE(same_bits(resumed.model().state().at(name), t)) << name;
  if (c.rank() == 0) {
    EXPECT_EQ(resumed.losses(), full.losses());  // the earlier ones come from the checkpoint
  }

  // A resume with another global batch or optimizer is refused, naming the field.
  TrainOptions other = o;
  other.model.optimizer = passes::OptimizerSpec::sgd();
  Trainer wrong(forward, data, other, c);
  try {
    wrong.restore();
    ADD_FAILURE() << "no error";
  } catch (const FailedElsewhere&) {
    EXPECT_NE(c.rank(), 0);
  } catch (const Error& e) {
    EXPECT_EQ(c.rank(), 0);
    EXPECT_NE(std::string(e.what()).find("it was written by a run with optimizer"), std::string::npos) << e.what();
  }
}

TEST(RunAgreed, OneRankFailingStopsEveryRank) {
  Communicator c = world();
  const int failing = c.size() - 1;
  try {
    run_agreed(c, [&] {
      if (c.rank() == failing) fail(ErrorCode::Io, "disk full");
    });
    FAIL() << "no error";
  } catch (const FailedElsewhere& e) {
    EXPECT_NE(c.rank(), failing);
    EXPECT_EQ(e.failed_rank(), failing);
  } catch (const Error& e) {
    EXPECT_EQ(c.rank(), failing);
    EXPECT_NE(std::string(e.what()).find("disk full"), std::string::npos);
    if (failing != 0) {
      EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(failing) + " ("), std::string::npos);
    }
  }
  run_agreed(c, [] {});  // nothing failed: nothing thrown
}

}  // namespace
}  // namespace hodu::distributed
