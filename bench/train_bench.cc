// One training step (forward, loss, backward, optimizer update) of the example
// models, eager or captured (TrainingStep on the cpu engine), timed; called by
// bench/train_bench.py, which runs PyTorch beside it.
//
//   train_bench --model cnn|transformer --mode eager|captured [--steps N] [--warmup N] [--threads N]
// prints {"model": ..., "mode": ..., "ms_per_step": [...per step...], "loss": first, last}
#include <hodu/hodu.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../examples/train/models.h"

using hodu::Tensor;
namespace nn = hodu::nn;

int main(int argc, char** argv) {
  std::string model = "cnn", mode = "eager";
  int steps = 50, warmup = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--model") model = v;
    else if (a == "--mode") mode = v;
    else if (a == "--steps") steps = std::atoi(v.c_str());
    else if (a == "--warmup") warmup = std::atoi(v.c_str());
    else if (a == "--threads") hodu::set_num_threads(std::atoi(v.c_str()));
    else {
      std::fprintf(stderr, "error: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if ((model != "cnn" && model != "transformer") || (mode != "eager" && mode != "captured") || steps < 1) {
    std::fprintf(stderr, "error: --model cnn|transformer --mode eager|captured --steps N (>= 1)\n");
    return 2;
  }
  try {
    hodu::manual_seed(0);
    hodu::Generator gen(1);
    std::unique_ptr<nn::Module> net;
    std::vector<Tensor> xs, ys;  // one batch per step, made before timing
    const int total = steps + warmup;
    if (model == "cnn") {
      net = std::make_unique<examples::DigitsNet>();
      for (int i = 0; i < total; ++i) {
        xs.push_back(hodu::rand({32, 1, 8, 8}, &gen));
        ys.push_back(hodu::randint(0, 10, {32}, &gen));
      }
    } else {
      net = std::make_unique<examples::Reverser>();
      for (int i = 0; i < total; ++i) {
        Tensor t = hodu::randint(0, examples::kVocab, {64, examples::kLength}, &gen);
        xs.push_back(t);
        ys.push_back(t.flip({1}));
      }
    }
    net->train();
    hodu::optim::Adam opt(net->parameters(), {.lr = 1e-3});
    auto loss_fn = [&](const std::vector<Tensor>& out, const std::vector<Tensor>& target) {
      return nn::cross_entropy(out[0].reshape({-1, out[0].size(-1)}), target[0].reshape({-1}));
    };
    std::unique_ptr<hodu::TrainingStep> captured;
    if (mode == "captured") captured = std::make_unique<hodu::TrainingStep>(*net, loss_fn, opt, std::vector<Tensor>{xs[0]}, std::vector<Tensor>{ys[0]});
    std::vector<double> ms;
    double first = 0, last = 0;
    for (int i = 0; i < total; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      double loss;
      if (captured) {
        loss = captured->step({xs[i]}, {ys[i]});
      } else {
        opt.zero_grad();
        Tensor l = loss_fn({net->forward(xs[i])}, {ys[i]});
        l.backward();
        opt.step();
        loss = l.item();
      }
      const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (i >= warmup) ms.push_back(t);
      if (i == 0) first = loss;
      last = loss;
    }
    std::printf("{\"model\": \"%s\", \"mode\": \"%s\", \"threads\": %d, \"loss\": [%.6f, %.6f], \"ms_per_step\": [",
                model.c_str(), mode.c_str(), hodu::get_num_threads(), first, last);
    for (size_t i = 0; i < ms.size(); ++i) std::printf("%s%.4f", i ? ", " : "", ms[i]);
    std::printf("]}\n");
    return 0;
  } catch (const hodu::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
