// Trains a small CNN on scikit-learn's handwritten digits with hodu's C++
// frontend, prints the loss curve and the test accuracy, and exports the
// trained model to ONNX for `hodu build`.
//
//   python3 make_digits.py digits.npz          # once (Debian's python3-sklearn)
//   ./train_digits digits.npz --out out/       # out/digits.onnx, out/x_test.npy, out/pred.npy
//   hodu build out/digits.onnx -o out/digits --dim batch=360
//   out/digits -i input=out/x_test.npy -o out/built   # out/built/output.npy: the same predictions
#include <hodu/hodu.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "models.h"

namespace nn = hodu::nn;
using examples::DigitsNet;
using hodu::Tensor;

double accuracy(DigitsNet& net, const Tensor& x, const Tensor& y, Tensor* predictions = nullptr) {
  hodu::NoGradGuard no_grad;
  net.eval();
  Tensor pred = net(x).argmax(1);
  net.train();
  if (predictions) *predictions = pred;
  return pred.eq(y).to(hodu::kFloat64).mean().item();
}

int main(int argc, char** argv) {
  std::string data, out = ".";
  int epochs = 12;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--out" && i + 1 < argc) out = argv[++i];
    else if (a == "--epochs" && i + 1 < argc) epochs = std::atoi(argv[++i]);
    else if (a == "--threads" && i + 1 < argc) hodu::set_num_threads(std::atoi(argv[++i]));
    else if (a == "-h" || a == "--help") {
      std::printf("usage: %s DIGITS.npz [--epochs N] [--out DIR] [--threads N]\n"
                  "Trains a CNN on the digits (make_digits.py writes DIGITS.npz), prints the loss per epoch\n"
                  "and the test accuracy, and writes DIR/digits.onnx, DIR/digits.safetensors, DIR/x_test.npy\n"
                  "and DIR/pred.npy (the trained model's test predictions).\n", argv[0]);
      return 0;
    } else if (data.empty()) data = a;
    else {
      std::fprintf(stderr, "error: unexpected argument '%s' (see --help)\n", a.c_str());
      return 2;
    }
  }
  if (data.empty() || epochs < 1) {
    std::fprintf(stderr, "error: give the .npz file of make_digits.py (and --epochs >= 1); see --help\n");
    return 2;
  }
  try {
    const auto start = std::chrono::steady_clock::now();
    auto arrays = hodu::data::load_npz(data);
    for (const char* k : {"x_train", "y_train", "x_test", "y_test"})
      if (!arrays.count(k)) throw hodu::Error(hodu::ErrorCode::InvalidArgument, data + ": no array '" + k + "'");
    Tensor x_train = arrays["x_train"], y_train = arrays["y_train"], x_test = arrays["x_test"], y_test = arrays["y_test"];
    std::printf("digits: %lld training and %lld test images, %d threads\n", static_cast<long long>(x_train.size(0)),
                static_cast<long long>(x_test.size(0)), hodu::get_num_threads());

    hodu::manual_seed(0);  // initial weights and dropout masks
    DigitsNet net;
    hodu::data::TensorDataset train({x_train, y_train});
    hodu::data::DataLoader loader(train, {.batch_size = 32, .shuffle = true, .seed = 0});
    hodu::optim::Adam opt(net.parameters(), {.lr = 2e-3});
    hodu::optim::CosineAnnealingLR schedule(opt, epochs);
    for (int epoch = 1; epoch <= epochs; ++epoch) {
      double total = 0;
      int64_t batches = 0;
      for (const auto& batch : loader) {
        opt.zero_grad();
        Tensor loss = nn::cross_entropy(net(batch[0]), batch[1], "mean", 0.05);
        loss.backward();
        opt.step();
        total += loss.item();
        ++batches;
      }
      schedule.step();
      std::printf("epoch %2d  loss %.4f  test accuracy %.2f%%\n", epoch, total / batches,
                  100 * accuracy(net, x_test, y_test));
    }
    Tensor pred;
    const double acc = accuracy(net, x_test, y_test, &pred);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("test accuracy %.2f%% (%lld of %lld) after %d epochs in %.1f s\n", 100 * acc,
                static_cast<long long>(pred.eq(y_test).to(hodu::kInt64).sum().item()),
                static_cast<long long>(y_test.size(0)), epochs, seconds);

    // The trained model as ONNX (batch dim symbolic), and what its compiled form must reproduce.
    std::filesystem::create_directories(out);
    net.eval();
    hodu::CapturedGraph graph = hodu::capture(net, {x_test.slice(0, 0, 2)});
    graph.save(out + "/digits.onnx");
    net.save(out + "/digits.safetensors");
    hodu::save_npy(out + "/x_test.npy", x_test);
    hodu::save_npy(out + "/pred.npy", pred);
    std::printf("wrote %s/digits.onnx (%lld nodes), digits.safetensors, x_test.npy, pred.npy\n", out.c_str(),
                static_cast<long long>(graph.node_count()));
    return 0;
  } catch (const hodu::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
