// Datasets, the DataLoader (batches, seeded shuffling, workers), files, checkpoints.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "frontend/test_util.h"
#include "hodu/hodu.h"

namespace {

using hodu::Tensor;
using hodu::test::error_of;
using hodu::test::expect_close;
namespace data = hodu::data;

std::vector<std::vector<int64_t>> epoch_labels(data::DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& batch : loader) out.push_back(batch[1].to_vector<int64_t>());
  return out;
}

TEST(Data, BatchesAndShuffling) {
  Tensor x = hodu::arange(0, 20, 1, hodu::kFloat32).reshape({10, 2});
  Tensor y = hodu::arange(10);
  data::TensorDataset ds({x, y});
  EXPECT_EQ(ds.size(), 10);
  data::DataLoader plain(ds, {.batch_size = 4});
  EXPECT_EQ(plain.num_batches(), 3);
  auto e = epoch_labels(plain);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[2], (std::vector<int64_t>{8, 9}));
  for (const auto& b : plain) {
    EXPECT_EQ(b[0].size(1), 2);
    EXPECT_EQ(b[0].to_vector<float>()[0], b[1].to_vector<int64_t>()[0] * 2.0f);  // rows stay together
    break;
  }
  data::DataLoader dropping(ds, {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(epoch_labels(dropping).size(), 2u);

  data::DataLoader a(ds, {.batch_size = 3, .shuffle = true, .seed = 7});
  data::DataLoader b(ds, {.batch_size = 3, .shuffle = true, .seed = 7});
  data::DataLoader c(ds, {.batch_size = 3, .shuffle = true, .seed = 8});
  auto a1 = epoch_labels(a), a2 = epoch_labels(a);
  EXPECT_EQ(a1, epoch_labels(b));   // same seed, same order
  EXPECT_NE(a1, a2);                // a new order every epoch
  EXPECT_NE(a1, epoch_labels(c));   // another seed, another order
  std::set<int64_t> seen;
  for (auto& batch : a1) seen.insert(batch.begin(), batch.end());
  EXPECT_EQ(seen.size(), 10u);      // a permutation
  // Workers hand out the same batches in the same order.
  data::DataLoader w(ds, {.batch_size = 3, .shuffle = true, .seed = 7, .num_workers = 3, .prefetch = 1});
  EXPECT_EQ(epoch_labels(w), a1);
  EXPECT_EQ(epoch_labels(w), a2);
  // Leaving an epoch early is fine; the next one starts cleanly.
  for (const auto& batch : w) {
    (void)batch;
    break;
  }
  EXPECT_EQ(epoch_labels(w).size(), 4u);
  EXPECT_EQ(w.epoch(), 4);
  EXPECT_NE(error_of([&] { data::TensorDataset({x, hodu::arange(3)}); }).find("3 rows"), std::string::npos);
}

struct Squares : data::Dataset {
  int64_t size() const override { return 5; }
  data::Example get(int64_t i) const override {
    if (i == 3) throw hodu::Error(hodu::ErrorCode::Io, "example 3 is unreadable");
    return {hodu::full({2}, static_cast<double>(i * i)), hodu::scalar_tensor(static_cast<double>(i), hodu::kInt64)};
  }
};

TEST(Data, CustomDatasetAndErrors) {
  Squares sq;
  data::DataLoader loader(sq, {.batch_size = 2});
  auto it = loader.begin();
  EXPECT_EQ((*it)[0].shape(), (hodu::Dims{2, 2}));
  EXPECT_EQ((*it)[1].to_vector<int64_t>(), (std::vector<int64_t>{0, 1}));
  EXPECT_NE(error_of([&] { ++it; }).find("example 3 is unreadable"), std::string::npos);
  data::DataLoader threaded(sq, {.batch_size = 2, .num_workers = 2});
  EXPECT_NE(error_of([&] { for (const auto& b : threaded) (void)b; }).find("example 3 is unreadable"), std::string::npos);
  auto base = std::make_shared<data::TensorDataset>(std::vector<Tensor>{hodu::arange(6)});
  data::Subset sub(base, {5, 1});
  EXPECT_EQ(sub.get_batch({0, 1})[0].to_vector<int64_t>(), (std::vector<int64_t>{5, 1}));
}

TEST(Data, Files) {
  const std::string dir = testing::TempDir();
  const std::string npz = dir + "/frontend_data.npz";
  data::save_npz(npz, {{"x", hodu::arange(0, 6, 1, hodu::kFloat32).reshape({2, 3})}, {"y", hodu::arange(2)}});
  auto arrays = data::load_npz(npz);
  ASSERT_EQ(arrays.count("x"), 1u);
  EXPECT_EQ(arrays["x"].shape(), (hodu::Dims{2, 3}));
  EXPECT_EQ(arrays["y"].to_vector<int64_t>(), (std::vector<int64_t>{0, 1}));
  std::remove(npz.c_str());

  const std::string csv = dir + "/frontend_data.csv";
  {
    std::ofstream f(csv);
    f << "a, b ,c\n1,2,3\n\n4.5,\"5\",-6e1\n";
  }
  Tensor t = data::read_csv(csv);
  EXPECT_EQ(t.shape(), (hodu::Dims{2, 3}));
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3, 4.5, 5, -60}));
  EXPECT_EQ(data::csv_columns(csv), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(data::read_csv(csv, {.columns = {"c", "a"}}).to_vector<float>(), (std::vector<float>{3, 1, -60, 4.5}));
  EXPECT_NE(error_of([&] { data::read_csv(csv, {.columns = {"d"}}); }).find("no column 'd'"), std::string::npos);
  {
    std::ofstream f(csv);
    f << "a,b\n1,2\n3,x\n";
  }
  EXPECT_NE(error_of([&] { data::read_csv(csv); }).find(":3: column 2 ('x') is not a number"), std::string::npos);
  {
    std::ofstream f(csv);
    f << "1,2\n3\n";
  }
  EXPECT_NE(error_of([&] { data::read_csv(csv, {.header = false}); }).find(":2: 1 values, expected 2"), std::string::npos);
  std::remove(csv.c_str());
  EXPECT_NE(error_of([&] { data::read_csv(dir + "/missing.csv"); }).find("cannot open"), std::string::npos);
}

TEST(Data, CheckpointResumesExactly) {
  hodu::manual_seed(2);
  hodu::Generator g(3);
  Tensor x = hodu::randn({40, 4}, &g);
  Tensor y = hodu::randint(0, 3, {40}, &g);
  data::TensorDataset ds({x, y});
  auto train = [&](hodu::nn::Linear& m, hodu::optim::Optimizer& opt, hodu::optim::LRScheduler& sched,
                   data::DataLoader& loader, int epochs) {
    for (int e = 0; e < epochs; ++e) {
      for (const auto& b : loader) {
        opt.zero_grad();
        hodu::nn::cross_entropy(m(b[0]), b[1]).backward();
        opt.step();
      }
      sched.step();
    }
  };
  hodu::nn::Linear m(4, 3);
  hodu::optim::Adam opt(m.parameters(), {.lr = 0.01});
  hodu::optim::StepLR sched(opt, 1, 0.9);
  data::DataLoader loader(ds, {.batch_size = 8, .shuffle = true, .seed = 1});
  train(m, opt, sched, loader, 2);
  const std::string dir = testing::TempDir() + "/frontend_ckpt";
  hodu::save_checkpoint(dir, {&m, &opt, &sched, &loader, {{"epoch", 2}}});
  train(m, opt, sched, loader, 2);

  hodu::nn::Linear m2(4, 3);
  hodu::optim::Adam opt2(m2.parameters(), {.lr = 0.5});
  hodu::optim::StepLR sched2(opt2, 1, 0.9);
  data::DataLoader loader2(ds, {.batch_size = 8, .shuffle = true, .seed = 99});
  hodu::Checkpoint c{&m2, &opt2, &sched2, &loader2, {}};
  hodu::load_checkpoint(dir, c);
  EXPECT_EQ(c.counters.at("epoch"), 2);
  train(m2, opt2, sched2, loader2, 2);
  EXPECT_TRUE(hodu::equal(m.weight, m2.weight));
  EXPECT_TRUE(hodu::equal(m.bias, m2.bias));
  EXPECT_EQ(opt.lr(), opt2.lr());
  std::filesystem::remove_all(dir);
  EXPECT_NE(error_of([&] { hodu::load_checkpoint(dir, c); }).find("cannot read"), std::string::npos);
}

}  // namespace
