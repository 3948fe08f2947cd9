// `hodu run --remote URL`: the edge half of edge-cloud. The model runs on a
// KServe v2 server (hodugaki serve); when the server cannot be reached, times
// out, fails, or serves a model with other outputs, a warning says why and the
// caller runs its local session instead.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "runtime/session.h"

namespace hodu::cli {

struct RemoteRun {
  std::string url;
  std::string model;  // name on the server
  int64_t timeout_ms = 10000;
};

// True with `outputs` (in the local model's output order) when the server answered.
bool remote_run(const RemoteRun& r, const Session& local, const std::map<std::string, RuntimeValue>& feeds,
                std::vector<NamedValue>& outputs);

}  // namespace hodu::cli
