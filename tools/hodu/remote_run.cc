#include "remote_run.h"

#include <cstdio>

#include "core/error.h"
#include "distributed/edge/model_split.h"
#include "distributed/serving/client.h"

namespace hodu::cli {
namespace {

const Tensor& tensor_feed(const std::string& name, const RuntimeValue& v) {
  HODU_CHECK(v.is_tensor(), ErrorCode::Unsupported, "input '{}' is not a tensor; the v2 protocol carries tensors only",
             name);
  return v.tensor;
}

}  // namespace

bool remote_run(const RemoteRun& r, const Session& local, const std::map<std::string, RuntimeValue>& feeds,
                std::vector<NamedValue>& outputs) {
  try {
    // Values available here by name: the feeds, then what the local head computes.
    std::map<std::string, RuntimeValue> here = feeds;
    std::vector<serving::NamedTensor> sent;
    if (r.from.empty()) {
      for (const auto& [name, v] : feeds) sent.emplace_back(name, tensor_feed(name, v));
    } else {
      edge::ModelSplit split = edge::split_model(local.model(), r.from);
      SessionOptions so;
      so.threads = local.threads();
      auto head = Session::from_model(split.head, so);
      std::map<std::string, RuntimeValue> head_feeds;
      for (const auto& in : head->inputs())
        if (auto it = feeds.find(in.name); it != feeds.end()) head_feeds[in.name] = it->second;
      for (auto& o : head->run(head_feeds)) here[o.name] = std::move(o.value);
      for (const auto& in : split.tail.graph.inputs) {
        auto it = here.find(in.name);
        HODU_CHECK(it != here.end(), ErrorCode::InvalidArgument, "the remote part needs '{}', which is not fed",
                   in.name);
        sent.emplace_back(in.name, tensor_feed(in.name, it->second));
      }
      if (r.verbose)
        std::fprintf(stderr, "hodu: ran %zu of %zu nodes here; sending %zu tensors to %s\n",
                     split.head.graph.nodes.size(), local.model().graph.nodes.size(), sent.size(), r.url.c_str());
    }
    serving::InferenceClient client(r.url, r.timeout_ms);
    serving::InferResponse res = client.infer(r.model, sent);
    for (auto& [name, t] : res.outputs) here[name] = RuntimeValue(std::move(t));
    std::vector<NamedValue> ordered;
    for (const auto& want : local.outputs()) {
      auto it = here.find(want.name);
      HODU_CHECK(it != here.end(), ErrorCode::InvalidModel, "model '{}' on the server has no output '{}' (another model?)",
                 r.model, want.name);
      ordered.push_back({want.name, it->second});
    }
    outputs = std::move(ordered);
    return true;
  } catch (const Error& e) {
    std::fprintf(stderr, "warning: remote run failed, running locally: %s\n", e.what());
    return false;
  }
}

}  // namespace hodu::cli
