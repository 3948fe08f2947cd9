#include "remote_run.h"

#include <cstdio>

#include "core/error.h"
#include "distributed/serving/client.h"

namespace hodu::cli {

bool remote_run(const RemoteRun& r, const Session& local, const std::map<std::string, RuntimeValue>& feeds,
                std::vector<NamedValue>& outputs) {
  try {
    std::vector<serving::NamedTensor> inputs;
    for (const auto& [name, v] : feeds) {
      HODU_CHECK(v.is_tensor(), ErrorCode::Unsupported, "input '{}' is not a tensor; the v2 protocol carries tensors only",
                 name);
      inputs.emplace_back(name, v.tensor);
    }
    serving::InferenceClient client(r.url, r.timeout_ms);
    serving::InferResponse res = client.infer(r.model, inputs);
    std::vector<NamedValue> ordered;
    for (const auto& want : local.outputs()) {
      const Tensor* found = nullptr;
      for (const auto& [name, t] : res.outputs)
        if (name == want.name) found = &t;
      HODU_CHECK(found, ErrorCode::InvalidModel, "model '{}' on the server has no output '{}' (another model?)",
                 r.model, want.name);
      ordered.push_back({want.name, RuntimeValue(*found)});
    }
    outputs = std::move(ordered);
    return true;
  } catch (const Error& e) {
    std::fprintf(stderr, "warning: remote run failed, running locally: %s\n", e.what());
    return false;
  }
}

}  // namespace hodu::cli
