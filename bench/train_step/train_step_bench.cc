// train_step_bench: times a training step (forward + backward + optimizer update built by
// passes::build_training_step) of a model on a hodu engine. Driven by bench/train_step/run.py,
// which runs PyTorch 1.13 on the same model, weights and batches interleaved with it.
//
//   train_step_bench MODEL.onnx --loss NAME --data BATCHES.npz [--params all|a,b,...]
//       [--optimizer sgd|adam|adamw] [--lr 0.01] [--momentum 0.9] [--weight-decay 0]
//       [--steps 20] [--warmup 3] [--threads 2] [--engine cpu] [--copy-state] [--json]
//
// BATCHES.npz holds each graph input x either as "x" (every step) or as "x.0", "x.1", ...
// (step k reads "x.<k mod count>"). Prints the loss of every step and the step times; --json
// prints one object (losses, median_ms, min_ms, ...).
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <sstream>

#include "core/error.h"
#include "formats/model_io.h"
#include "formats/tensor_io.h"
#include "passes/autodiff.h"
#include "runtime/profiler.h"
#include "runtime/session.h"

using namespace hodu;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, ',');)
    if (!part.empty()) out.push_back(part);
  return out;
}

int run(int argc, char** argv) {
  CLI::App app{"Times a training step (forward + backward + update) of a model on a hodu engine"};
  std::string model_path, loss, data_path, params_arg = "all", optimizer = "sgd", engine = "cpu";
  float lr = 0.01f, momentum = 0, weight_decay = 0;
  int steps = 20, warmup = 3, threads = 2;
  bool json = false, copy_state = false, profile = false;
  std::string gradients_path;
  app.add_option("model", model_path, "forward model (.onnx, .hdss, .hodu) computing the loss")->required();
  app.add_option("--loss", loss, "the loss value")->required();
  app.add_option("--data", data_path, "batches (.npz): 'x' or 'x.0', 'x.1', ... per graph input")->required();
  app.add_option("--params", params_arg, "params to train: 'all' (passes::trainable_initializers) or a,b,...");
  app.add_option("--optimizer", optimizer, "sgd, adam or adamw")->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  app.add_option("--lr", lr, "learning rate");
  app.add_option("--momentum", momentum, "SGD momentum");
  app.add_option("--weight-decay", weight_decay, "weight decay");
  app.add_option("--steps", steps, "timed steps")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
  app.add_option("--threads", threads, "threads")->check(CLI::PositiveNumber);
  app.add_option("--engine", engine, "hodu engine");
  app.add_flag("--copy-state", copy_state, "feed each step the previous step's outputs (no in-place update)");
  app.add_flag("--json", json, "print one JSON object");
  app.add_flag("--profile", profile, "print the time per op over the timed steps (stderr)");
  app.add_option("--gradients", gradients_path,
                 "instead: write dloss/dparam of the first batch (build_gradient_graph on the engine) to this .npz");
  CLI11_PARSE(app, argc, argv);

  Model forward = load_model(model_path);
  std::vector<std::string> params = params_arg == "all" ? passes::trainable_initializers(forward.graph) : split(params_arg);
  passes::OptimizerSpec spec = optimizer == "sgd"    ? passes::OptimizerSpec::sgd(momentum, 0, false, weight_decay)
                               : optimizer == "adam" ? passes::OptimizerSpec::adam(0.9f, 0.999f, 1e-8f, weight_decay)
                                                     : passes::OptimizerSpec::adamw(0.9f, 0.999f, 1e-8f, weight_decay);
  Model step = forward;
  step.graph = passes::build_training_step(forward.graph, loss, params, spec);
  std::map<std::string, Tensor> state = passes::initial_training_state(forward.graph, step.graph);

  std::map<std::string, std::vector<Tensor>> batches;
  for (auto& [name, t] : read_tensor_file(data_path)) {
    auto dot = name.rfind('.');
    bool indexed = dot != std::string::npos && dot + 1 < name.size() &&
                   std::all_of(name.begin() + static_cast<long>(dot) + 1, name.end(), ::isdigit);
    std::string input = indexed ? name.substr(0, dot) : name;
    size_t k = indexed ? std::stoul(name.substr(dot + 1)) : 0;
    auto& v = batches[input];
    if (v.size() <= k) v.resize(k + 1);
    v[k] = t;
  }
  for (const auto& in : forward.graph.inputs)
    if (!forward.graph.initializer(in.name) && !batches.count(in.name))
      fail(ErrorCode::InvalidArgument, "{} has no batch for input '{}'", data_path, in.name);

  SessionOptions so;
  so.engine = engine;
  so.threads = threads;
  if (!gradients_path.empty()) {
    Model grads = forward;
    grads.graph = passes::build_gradient_graph(forward.graph, {loss, params});
    auto session = Session::from_model(grads, so);
    std::map<std::string, RuntimeValue> feeds;
    for (const auto& [name, v] : batches) feeds[name] = v[0];
    NamedTensors out;
    for (auto& o : session->run(feeds))
      if (o.name.rfind("grad.", 0) == 0) out.emplace_back(o.name.substr(5), o.value.tensor);
    write_tensor_file(gradients_path, out);
    return 0;
  }
  so.update_state_in_place = !copy_state;
  auto session = Session::from_model(step, so);
  const auto names = passes::training_state_names(session->model().graph);
  std::vector<double> losses, times, cpu_times;
  // Process CPU time beside wall time: on a machine others load, it is what a step cost this process.
  auto cpu_ms = [] {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
  };
  Profiler profiler;
  for (int k = 0; k < warmup + steps; ++k) {
    if (profile && k == warmup) profiler.start();
    std::map<std::string, RuntimeValue> feeds;
    for (const auto& [name, v] : batches) feeds[name] = v[static_cast<size_t>(k) % v.size()];
    feeds[passes::kLearningRateInput] = Tensor::scalar<float>(DType::F32, lr);
    for (const auto& [name, t] : state) feeds[name] = t;
    const double c0 = cpu_ms();
    auto t0 = std::chrono::steady_clock::now();
    auto outs = session->run(feeds);
    auto t1 = std::chrono::steady_clock::now();
    const double c1 = cpu_ms();
    if (copy_state)
      for (const auto& o : outs)
        if (o.name.size() > 5 && o.name.compare(o.name.size() - 5, 5, ".next") == 0)
          state[o.name.substr(0, o.name.size() - 5)] = o.value.tensor;
    for (const auto& o : outs)
      if (o.name == loss) losses.push_back(o.value.tensor.get_double(0));
    if (k >= warmup) {
      times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      cpu_times.push_back(c1 - c0);
    }
  }
  if (profile) {
    profiler.stop();
    std::fprintf(stderr, "%s", profiler.summary_table().c_str());
  }
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  double median = sorted[sorted.size() / 2], mn = sorted.front();
  std::sort(cpu_times.begin(), cpu_times.end());
  double cpu_median = cpu_times[cpu_times.size() / 2];
  if (json) {
    std::string ls;
    for (double l : losses) ls += (ls.empty() ? "" : ", ") + fmt::format("{:.9g}", l);
    std::printf("{\"engine\": \"%s\", \"threads\": %d, \"params\": %zu, \"state\": %zu, \"steps\": %d, "
                "\"median_ms\": %.4f, \"min_ms\": %.4f, \"cpu_ms\": %.4f, \"losses\": [%s]}\n",
                session->engine_name().c_str(), threads, params.size(), names.size(), steps, median, mn, cpu_median,
                ls.c_str());
  } else {
    for (size_t k = 0; k < losses.size(); ++k) std::printf("step %zu: loss %.6g\n", k, losses[k]);
    std::printf("%s, %d threads, %zu params: median %.3f ms, min %.3f ms, process CPU %.3f ms per step\n",
                session->engine_name().c_str(), threads, params.size(), median, mn, cpu_median);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // OpenMP's wait policy as the hodu CLI sets it (tools/hodu/main.cc): a short spin, then sleep.
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT") && setenv("GOMP_SPINCOUNT", "20000", 1) == 0)
    execv("/proc/self/exe", argv);
  try {
    return run(argc, argv);
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
