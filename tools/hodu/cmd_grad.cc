// hodu grad MODEL --loss NAME (--wrt a,b | --all-params) -o OUT: writes the model's gradient graph
// (passes::build_gradient_graph: forward outputs, then "grad.<name>" per wrt value), or with
// --optimizer a whole training step (passes::build_training_step) and, with --state, its
// initial params and optimizer state as a tensor file.
#include <cstdio>
#include <sstream>

#include "commands.h"
#include "core/error.h"
#include "formats/model_io.h"
#include "formats/tensor_io.h"
#include "optimizer_options.h"
#include "passes/autodiff.h"

namespace hodu::cli {
namespace {

struct GradArgs {
  std::string in, out, loss, wrt, state;
  bool all_params = false, seed_input = false;
  OptimizerArgs opt;
};

std::vector<std::string> split_names(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, ',');)
    if (!part.empty()) out.push_back(part);
  return out;
}

int run_grad(const GradArgs& a) {
  HODU_CHECK(a.all_params != !a.wrt.empty(), ErrorCode::InvalidArgument,
             "name the values to differentiate with respect to: --wrt a,b,... or --all-params");
  Model m = load_model(a.in);
  std::vector<std::string> wrt = split_names(a.wrt);
  if (a.all_params) {
    wrt = passes::trainable_initializers(m.graph);
    HODU_CHECK(!wrt.empty(), ErrorCode::InvalidArgument, "{} has no float initializer to train", a.in);
  }
  Model out = m;
  if (a.opt.optimizer.empty()) {
    out.graph = passes::build_gradient_graph(m.graph, {a.loss, wrt, a.seed_input});
  } else {
    HODU_CHECK(!a.seed_input, ErrorCode::InvalidArgument, "--seed-input is for gradient graphs, not training steps");
    passes::OptimizerSpec o = optimizer_spec(a.opt);
    out.graph = passes::build_training_step(m.graph, a.loss, wrt, o);
    if (!a.state.empty()) {
      NamedTensors state;
      for (auto& [name, t] : passes::initial_training_state(m.graph, out.graph)) state.emplace_back(name, t);
      write_tensor_file(a.state, state);
      std::fprintf(stderr, "wrote %s (%zu tensors: the params and optimizer state to feed the first step)\n",
                   a.state.c_str(), state.size());
    }
  }
  save_model(out, a.out);
  std::fprintf(stderr, "wrote %s (%zu inputs, %zu outputs, %zu nodes)\n", a.out.c_str(), out.graph.inputs.size(),
               out.graph.outputs.size(), out.graph.nodes.size());
  return 0;
}

}  // namespace

CommandFn add_grad_command(CLI::App& app) {
  auto a = std::make_shared<GradArgs>();
  app.footer(
      "Without --optimizer: the gradient graph. Its outputs are the model's, then grad.<w> for each wrt value;\n"
      "the loss is seeded with ones (the gradient of sum(loss)), or with --seed-input by a new input grad.<loss>.\n"
      "With --optimizer: one training step (forward, backward, PyTorch's update). Its inputs are the model's,\n"
      "lr (f32 scalar), the params, the optimizer state; its outputs the model's, then <x>.next per param and\n"
      "state x. --state writes their first values. See docs/passes.md, \"Autodiff and training steps\".");
  app.add_option("model", a->in, "forward model (.onnx .hdss .hodu)")->required();
  app.add_option("--loss", a->loss, "the value to differentiate (a float tensor of the model)")->required();
  app.add_option("--wrt", a->wrt, "inputs or initializers to differentiate with respect to (comma-separated)");
  app.add_flag("--all-params", a->all_params,
               "every float initializer of rank >= 1 but BatchNormalization statistics and exporter constants ('::')");
  app.add_flag("--seed-input", a->seed_input, "dL/dloss comes from a new input grad.<loss> instead of ones");
  app.add_option("-o,--output", a->out, "output model; its extension picks the format")->required();
  add_optimizer_options(app, a->opt, "build a training step with sgd, adam or adamw");
  app.add_option("--state", a->state, "with --optimizer: write the initial params and state here (.npz, ...)");
  return [a] { return run_grad(*a); };
}

}  // namespace hodu::cli
