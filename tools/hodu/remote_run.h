// `hodu run --remote URL [--remote-from VALUE]`: the edge half of edge-cloud.
// The model runs on a KServe v2 server (hodugaki serve), or only its part after
// VALUE does (the part before runs here, edge/model_split.h); when the server
// cannot be reached, times out, fails, or serves a model with other inputs or
// outputs, a warning says why and the caller runs its local session instead.
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
  // Run the model up to this value here and the rest on the server, which serves
  // that rest (`hodugaki serve --tail-from VALUE`); "" = all of it there.
  std::string from;
  bool verbose = false;
};

// True with `outputs` (in the local model's output order) when the server answered.
bool remote_run(const RemoteRun& r, const Session& local, const std::map<std::string, RuntimeValue>& feeds,
                std::vector<NamedValue>& outputs);

}  // namespace hodu::cli
