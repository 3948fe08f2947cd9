// hodugaki infer URL MODEL [-i NAME=PATH]... [-o DIR] [-f pretty|json|npy|hdt]
//                [--binary] [--version V] [--output NAME]... [--timeout-ms N] [--id ID]
// Sends the inputs to a KServe v2 server and prints or writes the outputs the
// way `hodu run` does (-f npy -o DIR: DIR/<output>.npy).
#include <nlohmann/json.hpp>

#include <cstdio>

#include "commands.h"
#include "core/error.h"
#include "distributed/serving/client.h"
#include "input_files.h"
#include "output_writer.h"

namespace hodu::gaki {
namespace {

struct InferArgs {
  std::string url, model, version, id;
  std::vector<std::string> inputs, outputs;
  std::string out_dir, format = "pretty";
  bool binary = false;
  int64_t timeout_ms = 60000;
};

// The names of the model's inputs, from the server's metadata.
std::vector<std::string> remote_inputs(serving::InferenceClient& client, const InferArgs& a) {
  auto j = nlohmann::json::parse(client.model_metadata(a.model, a.version), nullptr, false);
  std::vector<std::string> names;
  if (j.is_object() && j.contains("inputs") && j["inputs"].is_array())
    for (const auto& in : j["inputs"])
      if (in.is_object() && in.contains("name") && in["name"].is_string()) names.push_back(in["name"]);
  return names;
}

std::vector<serving::NamedTensor> load_inputs(serving::InferenceClient& client, const InferArgs& a) {
  std::vector<serving::NamedTensor> inputs;
  for (const auto& spec : a.inputs) {
    auto [name, path, tensors] = cli::read_input_spec(spec);
    if (!name.empty()) {
      const Tensor* chosen = tensors.size() == 1 ? &tensors[0].second : nullptr;
      for (const auto& [n, t] : tensors)
        if (n == name) chosen = &t;
      HODU_CHECK(chosen, ErrorCode::InvalidArgument, "-i {}: '{}' holds {} tensors and none is named '{}'", spec, path,
                 tensors.size(), name);
      inputs.emplace_back(name, *chosen);
    } else if (tensors.size() == 1 && tensors[0].first.empty()) {
      auto names = remote_inputs(client, a);
      HODU_CHECK(names.size() == 1, ErrorCode::InvalidArgument,
                 "-i {}: model '{}' has {} inputs; say which one with NAME={}", spec, a.model, names.size(), path);
      inputs.emplace_back(names[0], tensors[0].second);
    } else {
      for (auto& [n, t] : tensors) inputs.emplace_back(n, t);
    }
  }
  return inputs;
}

int run_infer(const InferArgs& a) {
  cli::check_output_format(a.format, a.out_dir);
  serving::InferenceClient client(a.url, a.timeout_ms);
  auto inputs = load_inputs(client, a);
  serving::InferOptions o;
  o.version = a.version;
  o.outputs = a.outputs;
  o.binary = a.binary;
  if (!a.id.empty()) o.id = a.id;
  serving::InferResponse res = client.infer(a.model, inputs, o);
  std::vector<NamedValue> outputs;
  for (auto& [name, t] : res.outputs) outputs.push_back({name, RuntimeValue(t)});
  cli::emit_outputs(outputs, a.format, a.out_dir);
  return 0;
}

}  // namespace

CommandFn add_infer_command(CLI::App& app) {
  auto a = std::make_shared<InferArgs>();
  app.add_option("url", a->url, "server, e.g. http://localhost:8000")->required();
  app.add_option("model", a->model, "model name on the server")->required();
  app.add_option("-i,--input", a->inputs,
                 "input NAME=PATH (.npy .npz .hdt .json .pb .safetensors); a PATH alone feeds the model's only input "
                 "or, for a file of named tensors, the inputs of those names; repeatable");
  app.add_option("-o,--output-dir", a->out_dir, "write each output to DIR/<name>.<format> (npy unless -f says)");
  app.add_option("-f,--format", a->format, "output format: pretty, json, npy, hdt")->capture_default_str();
  app.add_flag("--binary", a->binary, "send and receive tensors as binary data (the binary tensor data extension) "
               "instead of JSON");
  app.add_option("--version", a->version, "model version (default: the server's latest)");
  app.add_option("--output", a->outputs, "ask for this output only; repeatable (default: every output)");
  app.add_option("--timeout-ms", a->timeout_ms, "connection, send and answer time limit")->capture_default_str();
  app.add_option("--id", a->id, "request id, echoed by the server");
  return [a] { return run_infer(*a); };
}

}  // namespace hodu::gaki
