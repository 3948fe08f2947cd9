// Trains a small transformer encoder on a synthetic sequence task — reverse a
// sequence of 12 digits — with hodu's C++ frontend, prints the loss curve and
// the token accuracy on held-out sequences, and exports the model to ONNX.
//
//   ./train_transformer --out out/    # out/transformer.onnx, out/tokens.npy, out/pred.npy
//   hodu build out/transformer.onnx -o out/transformer --dim batch=256
//   out/transformer -i tokens=out/tokens.npy -o out/built   # out/built/logits.npy
#include <hodu/hodu.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "models.h"

namespace nn = hodu::nn;
using examples::Reverser;
using examples::kLength;
using examples::kVocab;
using hodu::Tensor;

int main(int argc, char** argv) {
  std::string out = ".";
  int steps = 800;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--out" && i + 1 < argc) out = argv[++i];
    else if (a == "--steps" && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (a == "--threads" && i + 1 < argc) hodu::set_num_threads(std::atoi(argv[++i]));
    else if (a == "-h" || a == "--help") {
      std::printf("usage: %s [--steps N] [--out DIR] [--threads N]\n"
                  "Trains a 2-block transformer to reverse sequences of 12 digits (fresh random batches of 64),\n"
                  "prints the loss every 50 steps and the token accuracy on 256 held-out sequences, and writes\n"
                  "DIR/transformer.onnx, DIR/tokens.npy and DIR/pred.npy.\n", argv[0]);
      return 0;
    } else {
      std::fprintf(stderr, "error: unexpected argument '%s' (see --help)\n", a.c_str());
      return 2;
    }
  }
  if (steps < 1) {
    std::fprintf(stderr, "error: --steps must be at least 1\n");
    return 2;
  }
  try {
    const auto start = std::chrono::steady_clock::now();
    hodu::manual_seed(0);
    Reverser model;
    hodu::Generator data_gen(1);
    auto batch = [&](int64_t n) { return hodu::randint(0, kVocab, {n, kLength}, &data_gen); };
    const Tensor test_tokens = batch(256), test_target = test_tokens.flip({1});
    hodu::optim::AdamW opt(model.parameters(), {.lr = 3e-3, .weight_decay = 1e-2});
    hodu::optim::WarmupCosineLR schedule(opt, 20, steps);
    std::printf("transformer: %lld parameters, %d threads\n", static_cast<long long>(model.parameter_count()),
                hodu::get_num_threads());
    for (int step = 1; step <= steps; ++step) {
      Tensor tokens = batch(64);
      opt.zero_grad();
      Tensor logits = model(tokens);
      Tensor loss = nn::cross_entropy(logits.reshape({-1, kVocab}), tokens.flip({1}).reshape({-1}));
      loss.backward();
      hodu::optim::clip_grad_norm_(model.parameters(), 1.0);
      opt.step();
      schedule.step();
      if (step % 50 == 0 || step == 1) std::printf("step %4d  loss %.4f\n", step, loss.item());
    }
    hodu::NoGradGuard no_grad;
    model.eval();
    Tensor pred = model(test_tokens).argmax(-1);
    const double acc = pred.eq(test_target).to(hodu::kFloat64).mean().item();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("token accuracy %.2f%% on 256 held-out sequences after %d steps in %.1f s\n", 100 * acc, steps, seconds);

    std::filesystem::create_directories(out);
    hodu::CaptureOptions options;
    options.input_names = {"tokens"};
    options.output_names = {"logits"};
    hodu::CapturedGraph graph = hodu::capture(model, {test_tokens.slice(0, 0, 2)}, options);
    graph.save(out + "/transformer.onnx");
    hodu::save_npy(out + "/tokens.npy", test_tokens);
    hodu::save_npy(out + "/pred.npy", pred);
    std::printf("wrote %s/transformer.onnx (%lld nodes), tokens.npy, pred.npy\n", out.c_str(),
                static_cast<long long>(graph.node_count()));
    return 0;
  } catch (const hodu::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
