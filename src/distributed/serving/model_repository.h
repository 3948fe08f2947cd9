// The models a server serves: each a name and version (`[NAME[:VERSION]=]PATH`
// on the command line), loaded from any form hodu loads (.onnx, .hdss, .hodu,
// a `hodu build` library .so) into one Session per worker, behind a Batcher.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "distributed/serving/batcher.h"
#include "runtime/session.h"

namespace hodu::serving {

struct ModelSpec {
  std::string name;     // default: the file name without its extension
  std::string version;  // default: "1"
  std::string path;
  std::string tail_from;  // serve only the part of the model after this value (edge/model_split.h)
};

// "PATH", "NAME=PATH" or "NAME:VERSION=PATH" (an argument that is an existing
// file is a PATH even when it holds '='). InvalidArgument for a bad name or version.
ModelSpec parse_model_spec(const std::string& arg);

struct ModelOptions {
  int workers = 1;     // model instances, each running one batch at a time
  int threads = 0;     // kernel threads per instance; 0 = physical cores / workers
  std::string engine;  // "" = best for the device
  std::string device = "cpu";
  BatchOptions batching;
};

// A model file as a Session, the way `hodu run` opens it: a library built by
// `hodu build` (.so) runs on the native engine, everything else goes through
// Session::load (formats::load_model picks the format).
std::unique_ptr<Session> open_session(const std::string& path, const SessionOptions& options = {});

class ServedModel {
 public:
  ServedModel(ModelSpec spec, const ModelOptions& options, Metrics* metrics);
  const std::string& name() const { return spec_.name; }
  const std::string& version() const { return spec_.version; }
  const std::string& path() const { return spec_.path; }
  const std::string& tail_from() const { return spec_.tail_from; }
  // "<project>_<format>" as the v2 protocol names platforms: hodu_onnx, hodu_hdss, hodu_library, ...
  std::string platform() const;
  const Session& session() const { return batcher_->session(); }
  Batcher& batcher() { return *batcher_; }

 private:
  ModelSpec spec_;
  std::unique_ptr<Batcher> batcher_;
};

class ModelRepository {
 public:
  // Loads the model; InvalidArgument when its name and version are taken.
  ServedModel& add(const ModelSpec& spec, const ModelOptions& options, Metrics* metrics);
  // `version` empty: the latest (highest) version. nullptr when there is none.
  ServedModel* find(const std::string& name, const std::string& version = "") const;
  // Every version of a model, oldest first.
  std::vector<std::string> versions(const std::string& name) const;
  std::vector<ServedModel*> models() const;
  // The v2 model metadata object of one version.
  std::string metadata_json(const ServedModel& model) const;
  // Drains every model's queue and ends its workers.
  void stop();

 private:
  std::vector<std::unique_ptr<ServedModel>> models_;
};

// Orders versions numerically when both are numbers ("2" < "10"), otherwise as text.
bool version_less(const std::string& a, const std::string& b);

}  // namespace hodu::serving
