// DataParallel::from_module (module_data_parallel.h): a frontend module trained over the ranks
// steps as one process's TrainingStep on the ranks' rows together. Part of training_test, so it
// runs as one process and as 2 ranks (training_test_mpi2), every rank making the same calls.
#include "distributed/training/module_data_parallel.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "hodu/nn.h"
#include "hodu/optim.h"
#include "hodu/random.h"

namespace hodu::distributed {
namespace {

namespace E = hodu::eager;
namespace enn = hodu::eager::nn;
namespace optim = hodu::eager::optim;

constexpr int64_t kRows = 4;  // per rank

std::shared_ptr<enn::Sequential> mlp() {
  E::manual_seed(11);  // the same initial params for every copy, on every rank
  return std::make_shared<enn::Sequential>(enn::Linear(6, 16), enn::Tanh(), enn::Linear(16, 4));
}

E::Tensor loss_fn(const std::vector<E::Tensor>& out, const std::vector<E::Tensor>& t) {
  return enn::cross_entropy(out[0], t[0]);
}

// `steps` global batches of world x kRows rows, the same on every rank.
std::vector<std::pair<E::Tensor, E::Tensor>> batches(int64_t steps, int64_t world) {
  E::Generator g(5);
  std::vector<std::pair<E::Tensor, E::Tensor>> out;
  for (int64_t s = 0; s < steps; ++s)
    out.emplace_back(E::randn({world * kRows, 6}, &g), E::randint(0, 4, {world * kRows}, &g));
  return out;
}

bool close(double a, double b) { return std::abs(a - b) <= 1e-5 * std::max(1.0, std::abs(b)); }

void expect_params_close(enn::Module& got, enn::Module& want, const std::string& what) {
  auto g = got.state_dict(), w = want.state_dict();
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i) {
    E::Tensor a = g[i].second.to(E::kFloat64).contiguous(), b = w[i].second.to(E::kFloat64).contiguous();
    ASSERT_EQ(a.sizes(), b.sizes()) << g[i].first;
    const double* pa = a.data<double>();
    const double* pb = b.data<double>();
    for (int64_t k = 0; k < a.numel(); ++k)
      ASSERT_TRUE(close(pa[k], pb[k])) << what << ": " << g[i].first << "[" << k << "] " << pa[k] << " vs " << pb[k];
  }
}

template <class Make>
void check_matches_one_process(const std::string& what, Make make_optimizer) {
  const Communicator comm = Communicator::world();
  const int64_t world = comm.size(), rank = comm.rank();
  auto data = batches(30, world);
  auto shard = [&](const E::Tensor& t) { return t.slice(0, rank * kRows, (rank + 1) * kRows); };

  auto dp_net = mlp(), ref_net = mlp();
  auto dp_opt = make_optimizer(*dp_net), ref_opt = make_optimizer(*ref_net);
  // Steps [from, to) by from_module on this rank's rows and by TrainingStep on the global batch,
  // then both synced back into their module and optimizer.
  auto train = [&](size_t from, size_t to, const std::string& phase) {
    auto dp = DataParallel::from_module(*dp_net, loss_fn, *dp_opt, {shard(data[0].first)}, {shard(data[0].second)});
    E::TrainingStep ref(*ref_net, loss_fn, *ref_opt, {data[0].first}, {data[0].second});
    for (size_t s = from; s < to; ++s) {
      const double got = dp.step({shard(data[s].first)}, {shard(data[s].second)});
      const double want = ref.step({data[s].first}, {data[s].second});
      ASSERT_TRUE(close(got, want)) << what << " " << phase << " step " << s << ": loss " << got << " vs " << want;
      if (s == 9) dp_opt->set_lr(dp_opt->lr() * 0.5), ref_opt->set_lr(ref_opt->lr() * 0.5);  // read at each step
    }
    EXPECT_EQ(dp.steps_taken(), static_cast<int64_t>(to - from));
    dp.sync();
    ref.sync();
    expect_params_close(*dp_net, *ref_net, what + " after the " + phase + " steps and sync");
  };
  train(0, 20, "first");
  // The optimizer state came back too: a new training from the synced module and optimizer
  // continues alike (momentum, moments and Adam's step count carried over).
  train(20, 30, "resumed");
}

TEST(ModuleDataParallel, MatchesOneProcessTrainingStepSGD) {
  check_matches_one_process("SGD", [](enn::Module& m) {
    return std::make_unique<optim::SGD>(m.parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3});
  });
}

TEST(ModuleDataParallel, MatchesOneProcessTrainingStepAdam) {
  check_matches_one_process("Adam", [](enn::Module& m) {
    return std::make_unique<optim::Adam>(m.parameters(), optim::AdamOptions{.lr = 0.01});
  });
}

// A CNN with a BatchNorm: sync writes the statistics the step computed (averaged over the ranks)
// and counts the steps in num_batches_tracked, as TrainingStep does.
TEST(ModuleDataParallel, SyncWritesBatchNormStatistics) {
  E::manual_seed(12);
  auto bn = std::make_shared<enn::BatchNorm2d>(4);
  enn::Sequential net({std::make_shared<enn::Conv2d>(1, 4, E::Dims{3, 3}), bn, std::make_shared<enn::ReLU>(),
                       std::make_shared<enn::Flatten>(), std::make_shared<enn::Linear>(4 * 6 * 6, 3)});
  optim::SGD sgd(net.parameters(), {.lr = 0.05});
  E::Generator g(9);
  E::Tensor x = E::randn({kRows, 1, 8, 8}, &g) * 2 + 1, y = E::randint(0, 3, {kRows}, &g);
  auto dp = DataParallel::from_module(net, loss_fn, sgd, {x}, {y});
  for (int i = 0; i < 5; ++i) dp.step({x}, {y});
  dp.sync();
  EXPECT_EQ(bn->num_batches_tracked.item(), 5);
  const Tensor& mean = dp.data_parallel().state().at("1.running_mean");
  E::Tensor got = bn->running_mean.contiguous();
  double moved = 0;
  for (int64_t c = 0; c < 4; ++c) {
    EXPECT_FLOAT_EQ(got.data<float>()[c], static_cast<float>(mean.get_double(c))) << "channel " << c;
    moved += std::abs(got.data<float>()[c]);
  }
  EXPECT_GT(moved, 0.1) << "the running mean stayed at its initial zeros";
}

// The message of the hodu::Error f throws. (frontend/test_util.h has one, but its hodu.h
// makes hodu::Tensor ambiguous beside the core headers.)
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ModuleDataParallel, ClearErrors) {
  auto net = mlp();
  E::Tensor x = E::randn({kRows, 6}), y = E::randint(0, 4, {kRows});
  auto params = net->parameters();
  optim::SGD two({optim::ParamGroup<optim::SGDOptions>{{params[0], params[1]}, {}},
                  optim::ParamGroup<optim::SGDOptions>{{params[2], params[3]}, {}}});
  std::string e = error_of([&] { DataParallel::from_module(*net, loss_fn, two, {x}, {y}); });
  EXPECT_NE(e.find("DataParallel::from_module: an optimizer with 2 parameter groups"), std::string::npos) << e;
  optim::SGD sgd(net->parameters());
  auto not_one = [](const std::vector<E::Tensor>& out, const std::vector<E::Tensor>&) { return out[0]; };
  e = error_of([&] { DataParallel::from_module(*net, not_one, sgd, {x}, {y}); });
  EXPECT_NE(e.find("the loss function must give a one-element float tensor, not"), std::string::npos) << e;
  DataParallelOptions named;
  named.loss = "l";
  e = error_of([&] { DataParallel::from_module(*net, loss_fn, sgd, {x}, {y}, named); });
  EXPECT_NE(e.find("leave DataParallelOptions' loss and params empty"), std::string::npos) << e;
  auto dp = DataParallel::from_module(*net, loss_fn, sgd, {x}, {y});
  e = error_of([&] { dp.step({x}, {}); });
  EXPECT_NE(e.find("captured with 2 in all"), std::string::npos) << e;
}

}  // namespace
}  // namespace hodu::distributed
